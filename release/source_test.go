package release_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"idlepool/release"
)

// t0 is the fixed instant the tests publish and check at.
var t0 = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

// repoServer serves a release directory on 127.0.0.1; override, when set
// for a path, answers it instead.
type repoServer struct {
	dir string
	URL string

	mu       sync.Mutex
	override map[string]http.HandlerFunc
}

func newRepoServer(t *testing.T, dir string) *repoServer {
	t.Helper()
	rs := &repoServer{dir: dir, override: map[string]http.HandlerFunc{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	files := http.FileServer(http.Dir(dir))
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rs.mu.Lock()
		h := rs.override[r.URL.Path]
		rs.mu.Unlock()
		if h != nil {
			h(w, r)
			return
		}
		files.ServeHTTP(w, r)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	rs.URL = "http://" + ln.Addr().String()
	return rs
}

func (rs *repoServer) set(path string, h http.HandlerFunc) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.override[path] = h
}

// fixture is a repository with release 1.0.0 published, and a client's
// Source over it.
type fixture struct {
	keys release.Keys
	repo string
	srv  *repoServer
	src  *release.Source
	now  time.Time
}

// writeFile writes a release file of content and returns it as a File
// of kind tarball for this platform.
func writeFile(t *testing.T, name, content string) release.File {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return release.File{Path: p, Kind: release.KindTarball, OS: runtime.GOOS, Arch: runtime.GOARCH}
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	keys, err := release.GenerateKeys(2, 2)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{keys: keys, repo: t.TempDir(), now: t0}
	f.publish(t, "1.0.0", "version one")
	f.srv = newRepoServer(t, f.repo)
	root, err := os.ReadFile(filepath.Join(f.repo, "metadata", "1.root.json"))
	if err != nil {
		t.Fatal(err)
	}
	f.src = &release.Source{URL: f.srv.URL, Root: root, Dir: t.TempDir(), Now: func() time.Time { return f.now }, StallTimeout: 5 * time.Second}
	return f
}

func (f *fixture) publish(t *testing.T, v, content string) {
	t.Helper()
	err := release.Publish(f.repo, f.keys, []release.File{writeFile(t, "idlepool-"+v+".tar.gz", content)},
		release.PublishOptions{Version: v, Notes: "notes of " + v, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) latest(t *testing.T) (release.Release, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return f.src.Latest(ctx, runtime.GOOS, runtime.GOARCH, release.KindTarball)
}

func (f *fixture) download(t *testing.T) (string, error) {
	t.Helper()
	r, err := f.latest(t)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return f.src.Download(ctx, r)
}

func TestSourceOffersTheNewestRelease(t *testing.T) {
	f := newFixture(t)
	r, err := f.latest(t)
	if err != nil {
		t.Fatal(err)
	}
	if r.Version.String() != "1.0.0" || r.Notes != "notes of 1.0.0" {
		t.Errorf("release = %s %q, want 1.0.0", r.Version, r.Notes)
	}
	f.publish(t, "2.0.0", "version two")
	p, err := f.download(t)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "version two" {
		t.Errorf("downloaded %q, want version two", b)
	}
	// An older or the same version is not published.
	err = release.Publish(f.repo, f.keys, []release.File{writeFile(t, "old.tar.gz", "x")}, release.PublishOptions{Version: "1.5.0", Now: func() time.Time { return t0 }})
	if err == nil || !strings.Contains(err.Error(), "not newer") {
		t.Errorf("publishing 1.5.0 after 2.0.0: %v", err)
	}
	// Another platform has no release.
	_, err = f.src.Latest(context.Background(), "plan9", "mips", release.KindTarball)
	if !errors.Is(err, release.ErrNoRelease) {
		t.Errorf("plan9: %v, want ErrNoRelease", err)
	}
}

// TestSourceRefusesAttacks: each attack is refused with its sentinel and
// a sentence, and nothing is left at the side path.
func TestSourceRefusesAttacks(t *testing.T) {
	for _, tc := range []struct {
		name   string
		attack func(t *testing.T, f *fixture)
		want   error
	}{{
		name: "tampered file",
		attack: func(t *testing.T, f *fixture) {
			f.publish(t, "2.0.0", "version two")
			ps, _ := filepath.Glob(filepath.Join(f.repo, "targets", "*.idlepool-2.0.0.tar.gz"))
			if len(ps) != 1 {
				t.Fatalf("targets: %v", ps)
			}
			os.WriteFile(ps[0], []byte("version TWO"), 0o644) // same length, other bytes
		},
		want: release.ErrTampered,
	}, {
		name: "metadata signed by the wrong key",
		attack: func(t *testing.T, f *fixture) {
			// The server's files are replaced by a repository of other keys.
			other, err := release.GenerateKeys(1, 1)
			if err != nil {
				t.Fatal(err)
			}
			os.RemoveAll(filepath.Join(f.repo, "metadata"))
			err = release.Publish(f.repo, other, []release.File{writeFile(t, "evil.tar.gz", "evil")}, release.PublishOptions{Version: "9.0.0", Now: func() time.Time { return t0 }})
			if err != nil {
				t.Fatal(err)
			}
		},
		want: release.ErrBadSignature,
	}, {
		name: "expired metadata",
		attack: func(t *testing.T, f *fixture) {
			f.now = t0.Add(15 * 24 * time.Hour) // the timestamp lasts 14 days
		},
		want: release.ErrExpired,
	}, {
		name: "rolled-back metadata",
		attack: func(t *testing.T, f *fixture) {
			old := filepath.Join(t.TempDir(), "old")
			if err := os.CopyFS(old, os.DirFS(filepath.Join(f.repo, "metadata"))); err != nil {
				t.Fatal(err)
			}
			f.publish(t, "2.0.0", "version two")
			if _, err := f.latest(t); err != nil { // the client trusts version 2 now
				t.Fatal(err)
			}
			os.RemoveAll(filepath.Join(f.repo, "metadata"))
			if err := os.CopyFS(filepath.Join(f.repo, "metadata"), os.DirFS(old)); err != nil {
				t.Fatal(err)
			}
		},
		want: release.ErrRollback,
	}, {
		name: "endless download",
		attack: func(t *testing.T, f *fixture) {
			f.publish(t, "2.0.0", "version two")
			ps, _ := filepath.Glob(filepath.Join(f.repo, "targets", "*.idlepool-2.0.0.tar.gz"))
			f.srv.set("/targets/"+filepath.Base(ps[0]), func(w http.ResponseWriter, r *http.Request) {
				chunk := []byte(strings.Repeat("x", 4096))
				for r.Context().Err() == nil {
					if _, err := w.Write(chunk); err != nil {
						return
					}
				}
			})
		},
		want: release.ErrTooLarge,
	}, {
		name: "file larger than allowed",
		attack: func(t *testing.T, f *fixture) {
			f.publish(t, "2.0.0", strings.Repeat("y", 2000))
			f.src.MaxBytes = 1000
		},
		want: release.ErrTooLarge,
	}, {
		name: "stalled server",
		attack: func(t *testing.T, f *fixture) {
			f.publish(t, "2.0.0", "version two")
			ps, _ := filepath.Glob(filepath.Join(f.repo, "targets", "*.idlepool-2.0.0.tar.gz"))
			f.srv.set("/targets/"+filepath.Base(ps[0]), func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", "11")
				w.WriteHeader(http.StatusOK)
				w.Write([]byte("ver"))
				w.(http.Flusher).Flush()
				<-r.Context().Done() // and nothing more, ever
			})
			// The stall bound is short: the server never sends more, so
			// any bound gives the same verdict.
			f.src.StallTimeout = 100 * time.Millisecond
		},
		want: release.ErrStalled,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			if _, err := f.latest(t); err != nil { // the client trusts version 1
				t.Fatal(err)
			}
			tc.attack(t, f)
			p, err := f.download(t)
			if !errors.Is(err, tc.want) {
				t.Fatalf("download = %q, %v; want %v", p, err, tc.want)
			}
			if w := release.Words(err); !strings.Contains(w, "keeps the version installed") {
				t.Errorf("words = %q", w)
			}
			left, _ := filepath.Glob(filepath.Join(f.src.Dir, "download", "*"))
			if len(left) != 0 {
				t.Errorf("left at the side path: %v", left)
			}
		})
	}
}
