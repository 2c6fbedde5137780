package main

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"idlepool/home"
)

// freeAddr returns a loopback address where nothing listens (a port the
// system handed out and that was closed again).
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// waitFile waits (patiently) until the file at path contains want, and
// fails the test if d ends first.
func waitFile(t *testing.T, d *daemon, path, want string) {
	t.Helper()
	deadline := patient(t)
	for {
		b, _ := os.ReadFile(path)
		if strings.Contains(string(b), want) {
			return
		}
		select {
		case <-d.done:
			t.Fatalf("%s ended before writing %q:\n%s", d.name, want, b)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not write %q:\n%s", d.name, want, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var jobIDLine = regexp.MustCompile(`^[0-9a-f]{64}\n$`)

// submit started while the coordinator is down waits for it, saying so,
// and submits once it is up.
func TestSubmitWaitsForCoordinator(t *testing.T) {
	m := writeManifest(t, "pi", piManifest(2, 1000))
	addr := freeAddr(t)
	url := "http://" + addr
	sub := startDaemon(t, "submit", t.TempDir(), "submit", m, "--pool", url)
	waitFile(t, sub, sub.stderr, "idlepool: coordinator at "+url+" not answering (connection refused); retrying in 2s…\n")
	startServe(t, t.TempDir(), addr)
	select {
	case <-sub.done:
	case <-time.After(time.Until(patient(t))):
		t.Fatal("submit did not end once the coordinator was up")
	}
	stdout, _ := os.ReadFile(sub.stdout)
	stderr, _ := os.ReadFile(sub.stderr)
	if code := sub.cmd.ProcessState.ExitCode(); code != 0 || !jobIDLine.Match(stdout) || !strings.Contains(string(stderr), "submitted to pool lab-a") {
		t.Errorf("submit: exit %d, stdout %q, stderr:\n%s", code, stdout, stderr)
	}
}

// --wait bounds the wait, and --wait 0 fails at once, each with a message
// that says what happened.
func TestSubmitWaitBounded(t *testing.T) {
	m := writeManifest(t, "pi", piManifest(2, 1000))
	url := "http://" + freeAddr(t)
	home := t.TempDir()
	tests := []struct {
		name   string
		args   []string
		stderr []string
	}{
		{"submit --wait 1s", []string{"submit", m, "--pool", url, "--wait", "1s"}, []string{
			"idlepool: the coordinator at " + url + " did not answer within 1s (connection refused)\n",
			"hint: check the URL, and that `idlepool serve` runs there; --wait D waits longer\n",
		}},
		{"result --wait 1s", []string{"result", strings.Repeat("0", 64), "--pool", url, "--wait", "1s"}, []string{
			"idlepool: the coordinator at " + url + " did not answer within 1s (connection refused)\n",
		}},
		{"submit --wait 0", []string{"submit", m, "--pool", url, "--wait", "0"}, []string{
			"idlepool: cannot reach the pool at " + url + ": ",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := idlepool(t, home, tc.args...)
			if out.code != 1 {
				t.Errorf("exit %d, want 1\n%s", out.code, out.stderr)
			}
			for _, want := range tc.stderr {
				if !strings.Contains(out.stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, out.stderr)
				}
			}
			if strings.HasSuffix(tc.name, "--wait 0") && strings.Contains(out.stderr, "retrying") {
				t.Errorf("--wait 0 retried:\n%s", out.stderr)
			}
		})
	}
}

// A pool that answers 503 for a moment after submit connected (a node
// of a cluster died, and its shard is being taken over) does not end
// the submit: it sends the job again until the pool takes it, saying
// so, and the pool holds the job once.
func TestSubmitRetriesAMomentaryRefusal(t *testing.T) {
	m := writeManifest(t, "pi", piManifest(2, 1000))
	_, url := startServe(t, t.TempDir(), freeAddr(t))
	target, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	var refused atomic.Int32
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/jobs" && refused.Load() < 2 {
			refused.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":"the coordinator of shard 0 of the pool did not answer; try again shortly","code":"no_leader"}`))
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	defer front.Close()
	home := t.TempDir()
	out := idlepool(t, home, "submit", m, "--pool", front.URL)
	if out.code != 0 || !jobIDLine.MatchString(out.stdout) || !strings.Contains(out.stderr, "submitted to pool lab-a") {
		t.Fatalf("submit: exit %d, stdout %q, stderr:\n%s", out.code, out.stdout, out.stderr)
	}
	if n := refused.Load(); n != 2 {
		t.Errorf("the front refused %d submissions, want 2", n)
	}
	// A node's no_leader (a take-over under way) is asked again every
	// second (agent.TakeOverPoll), said once, not after a doubling wait.
	if got := strings.Count(out.stderr, "has no node in charge of part of its work right now"); got != 1 || strings.Contains(out.stderr, "retrying in 2s") {
		t.Errorf("submit said it waited for a take-over %d times, want once, and no doubling wait:\n%s", got, out.stderr)
	}
	// The pool holds the job once: its list shows one job named pi (a
	// row's second column; an owner's ID may hold "pi" too).
	jobs := idlepool(t, home, "jobs", "--pool", url)
	if jobs.code != 0 || len(regexp.MustCompile(`(?m)^\S+\s+pi\s`).FindAllString(jobs.stdout, -1)) != 1 {
		t.Errorf("jobs after the retried submit: exit %d\n%s\n%s", jobs.code, jobs.stdout, jobs.stderr)
	}
}

// A job that a process of this device merges already (submit --follow,
// or result, holding its merge lock) is not merged by a second one: it
// would append to the same journal, and the pool would answer one of
// them 409. The second says who merges it and what to do, and leaves
// the journal alone.
func TestResultRefusesASecondMerge(t *testing.T) {
	m := writeManifest(t, "pi", piManifest(2, 1000))
	_, url := startServe(t, t.TempDir(), "127.0.0.1:0")
	owner := t.TempDir()
	sub := idlepool(t, owner, "submit", m, "--pool", url)
	if sub.code != 0 || !jobIDLine.MatchString(sub.stdout) {
		t.Fatalf("submit: exit %d, stdout %q, stderr:\n%s", sub.code, sub.stdout, sub.stderr)
	}
	id := strings.TrimSpace(sub.stdout)
	locks := filepath.Join(owner, "data", "merge-locks")
	if err := os.MkdirAll(locks, 0o700); err != nil {
		t.Fatal(err)
	}
	lock, err := home.Acquire(filepath.Join(locks, id+".lock"), "idlepool submit --follow")
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	out := idlepool(t, owner, "result", id[:12], "--pool", url)
	if out.code != 1 || !strings.Contains(out.stderr, "is being merged on this device already") ||
		!strings.Contains(out.stderr, "idlepool submit --follow, PID") || !strings.Contains(out.stderr, "idlepool result "+id[:12]) {
		t.Fatalf("result while another process merges the job: exit %d\n%s", out.code, out.stderr)
	}
	if _, err := os.Stat(filepath.Join(owner, "data", "merges", id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused result touched the job's merge directory: %v", err)
	}
}
