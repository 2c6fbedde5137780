package release_test

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/theupdateframework/go-tuf/v2/metadata"

	"idlepool/release"
)

// trustedRootVersion is the version of the root a client trusts now.
func trustedRootVersion(t *testing.T, src *release.Source) int64 {
	t.Helper()
	r, err := metadata.Root().FromFile(filepath.Join(src.Dir, "metadata", "root.json"))
	if err != nil {
		t.Fatal(err)
	}
	return r.Signed.Version
}

// TestRotateRootMovesClientsToTheNewKeys: a client that trusts root 1
// (keys1) follows the repository to root 2 (keys2, signed by both
// thresholds) and accepts release 2.0.0 signed with keys2 alone, as does
// a client installed with root 1 only now; the old keys can no longer
// publish; a release server whose roots are signed by keys outside the
// chain is refused and the client keeps root 2. Too few old root keys
// rotate nothing.
func TestRotateRootMovesClientsToTheNewKeys(t *testing.T) {
	f := newFixture(t)
	if r, err := f.latest(t); err != nil || r.Version.String() != "1.0.0" {
		t.Fatalf("before the rotation: %v, %v; want 1.0.0", r.Version, err)
	}
	keys2, err := release.GenerateKeys(3, 2)
	if err != nil {
		t.Fatal(err)
	}
	opt := release.PublishOptions{Now: func() time.Time { return t0 }}

	// One of the two root keys the root needs: refused, nothing written.
	err = release.RotateRoot(f.repo, release.Keys{Root: f.keys.Root[:1], RootThreshold: 1}, keys2, opt)
	if !errors.Is(err, release.ErrBadKeys) {
		t.Fatalf("rotation with 1 of 2 root keys: %v, want ErrBadKeys", err)
	}
	if _, err := os.Stat(filepath.Join(f.repo, "metadata", "2.root.json")); err == nil {
		t.Fatal("a refused rotation wrote 2.root.json")
	}

	if err := release.RotateRoot(f.repo, f.keys, keys2, opt); err != nil {
		t.Fatal(err)
	}
	// The release on offer stays valid under the new root.
	if r, err := f.latest(t); err != nil || r.Version.String() != "1.0.0" {
		t.Fatalf("right after the rotation: %v, %v; want 1.0.0", r.Version, err)
	}
	if v := trustedRootVersion(t, f.src); v != 2 {
		t.Errorf("the client trusts root %d after the rotation, want 2", v)
	}
	// The old online keys cannot publish any more.
	err = release.Publish(f.repo, f.keys, []release.File{writeFile(t, "idlepool-2.0.0.tar.gz", "x")}, release.PublishOptions{Version: "2.0.0", Now: func() time.Time { return t0 }})
	if !errors.Is(err, release.ErrBadKeys) {
		t.Errorf("publishing with the old keys after the rotation: %v, want ErrBadKeys", err)
	}
	old := f.keys
	f.keys = keys2
	f.publish(t, "2.0.0", "version two")
	if p, err := f.download(t); err != nil {
		t.Fatalf("release 2.0.0 under root 2: %v", err)
	} else if b, _ := os.ReadFile(p); string(b) != "version two" {
		t.Errorf("downloaded %q, want version two", b)
	}
	// A program installed with root 1 only walks the chain.
	fresh := &release.Source{URL: f.srv.URL, Root: f.src.Root, Dir: t.TempDir(), Now: f.src.Now, StallTimeout: 5 * time.Second}
	if r, err := fresh.Latest(t.Context(), runtime.GOOS, runtime.GOARCH, release.KindTarball); err != nil || r.Version.String() != "2.0.0" {
		t.Errorf("a client with root 1 only: %v, %v; want 2.0.0", r.Version, err)
	}

	// A server whose roots 1..3 are signed by keys3, in no chain from
	// root 2, with a release 3.0.0: refused, root 2 kept.
	keys3, err := release.GenerateKeys(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	evil := t.TempDir()
	if err := release.Init(evil, keys3, opt); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := release.RotateRoot(evil, keys3, keys3, opt); err != nil {
			t.Fatal(err)
		}
	}
	if err := release.Publish(evil, keys3, []release.File{writeFile(t, "idlepool-3.0.0.tar.gz", "evil")}, release.PublishOptions{Version: "3.0.0", Now: func() time.Time { return t0 }}); err != nil {
		t.Fatal(err)
	}
	f.src.URL = newRepoServer(t, evil).URL
	if _, err := f.latest(t); !errors.Is(err, release.ErrBadSignature) {
		t.Errorf("roots signed outside the chain: %v, want ErrBadSignature", err)
	}
	if v := trustedRootVersion(t, f.src); v != 2 {
		t.Errorf("the client trusts root %d after the refused server, want 2", v)
	}
	// Nor may the old keys rotate the root any more.
	if err := release.RotateRoot(f.repo, old, old, opt); !errors.Is(err, release.ErrBadKeys) {
		t.Errorf("rotation by the replaced root keys: %v, want ErrBadKeys", err)
	}
}
