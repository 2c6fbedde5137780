package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"idlepool/agent"
	"idlepool/home"
	"idlepool/worker"
)

// The end-to-end tests build the real idlepool binary and the example
// programs (as WebAssembly), then run jobs as a person would: as
// subprocesses, reading stdout, stderr and the exit status.

var (
	binPath string            // the idlepool binary under test
	wasm    map[string]string // example or test program name -> .wasm path
	testDir string            // where TestMain builds them; removed when the tests end
	// compiled is the workers' compilation cache that the homes of the
	// tests' commands share (shareCompiled).
	compiled string
)

// liar is testdata/liar, built once for the tests that start it
// (liarBinary).
var liar struct {
	once sync.Once
	path string
	err  error
}

// liarDir returns a new directory for a liar's files (its -dir), whose
// compilation cache (DIR/wazero) is the one the honest devices' homes
// share (shareCompiled), so that a liar starts as fast as they do.
func liarDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Symlink(compiled, filepath.Join(dir, "wazero")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// liarBinary builds testdata/liar, a donor that returns wrong results, on
// its first call, and returns its path.
func liarBinary(t *testing.T) string {
	t.Helper()
	liar.once.Do(func() {
		liar.path = filepath.Join(testDir, "liar")
		if out, err := exec.Command("go", "build", "-o", liar.path, "./testdata/liar").CombinedOutput(); err != nil {
			liar.err = fmt.Errorf("build the liar: %w\n%s", err, out)
		}
	})
	if liar.err != nil {
		t.Fatal(liar.err)
	}
	return liar.path
}

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "idlepool-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	testDir = dir
	compiled = filepath.Join(dir, "wazero")
	if err := os.Mkdir(compiled, 0o700); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// Workers lower themselves to SCHED_IDLE, where a busy machine gives
	// them no CPU at all: the commands these tests start run their workers
	// at normal priority (the worker package tests the lowering).
	os.Setenv(worker.PriorityEnv, "normal")
	binPath = filepath.Join(dir, "idlepool")
	// The binary and the programs build at once: each link runs on a
	// core of its own, and the go command shares its build cache safely.
	builds := map[string]*exec.Cmd{"idlepool": exec.Command("go", "build", "-o", binPath, ".")}
	wasm = map[string]string{}
	for name, pkg := range map[string]string{
		"pi": "../../examples/pi", "ising": "../../examples/ising", "kfold": "../../examples/kfold",
		"csvstats": "../../examples/csvstats", "sweep": "../../examples/sweep", "fail": "./testdata/fail", "loop": "./testdata/loop", "big": "./testdata/big",
		"params": "./testdata/params", "chatty": "./testdata/chatty",
		"fashion": "../../examples/fashion", "badapply": "./testdata/badapply",
	} {
		out := filepath.Join(dir, name+".wasm")
		cmd := exec.Command("go", "build", "-o", out, pkg)
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
		builds[name+" for wasip1"] = cmd
		wasm[name] = out
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed []string
	)
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for what, cmd := range builds {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if b, err := cmd.CombinedOutput(); err != nil {
				mu.Lock()
				failed = append(failed, fmt.Sprintf("build %s: %v\n%s", what, err, b))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(failed) > 0 {
		fmt.Fprint(os.Stderr, strings.Join(failed, ""))
		return 1
	}
	return m.Run()
}

// result is the part of `run --json` the tests read.
type result struct {
	Job   string `json:"job"`
	Tasks struct {
		Total, OK, Failed int64
	} `json:"tasks"`
	Result   map[string]json.RawMessage `json:"result"`
	Derived  map[string]float64         `json:"derived"`
	Outputs  map[string]struct{ SHA256, Path string }
	Failures []struct {
		Task   int64
		Reason string
	}
}

type runOut struct {
	stdout, stderr string
	code           int
}

// shareCompiled links the workers' compilation cache of the home at h
// (agent.WorkerCache) to the one the package's tests share, as the docs'
// runnable blocks share theirs: a program is compiled once for all the
// tests instead of once in every device's home, where most of a short
// test's CPU went. What the tests check never depends on whether a
// program was compiled before (the compile is outside a task's time
// limit, and the cache holds nothing else); the job caches and
// everything else of the home stay its own. A home that already has a
// compilation cache, or that cannot have one (not a directory, not
// writable), is left as it is.
func shareCompiled(t *testing.T, h string) {
	t.Helper()
	if h == "" {
		return
	}
	dirs, err := home.Resolve(h)
	if err != nil {
		return
	}
	link := agent.WorkerCache(dirs)
	if _, err := os.Lstat(link); !errors.Is(err, os.ErrNotExist) {
		return
	}
	if fi, err := os.Stat(h); err == nil && !fi.IsDir() {
		return
	}
	if os.MkdirAll(dirs.Cache, 0o700) != nil {
		return
	}
	if err := os.Symlink(compiled, link); err != nil && !errors.Is(err, os.ErrExist) {
		t.Fatalf("share the compilation cache: %v", err)
	}
}

// ownCompiled gives the home at h a compilation cache of its own, empty,
// before any command runs there (shareCompiled then leaves it): for a
// donor whose slowness a test counts on (cpu_time=5%), a part of which
// is compiling the program at that pace.
func ownCompiled(t *testing.T, h string) {
	t.Helper()
	dirs, err := home.Resolve(h)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(agent.WorkerCache(dirs), 0o700); err != nil {
		t.Fatal(err)
	}
}

// idlepool runs the binary with args under home and returns its output.
func idlepool(t *testing.T, home string, args ...string) runOut {
	t.Helper()
	shareCompiled(t, home)
	cmd := exec.CommandContext(t.Context(), binPath, append([]string{"--home", home}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("idlepool %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return runOut{stdout.String(), stderr.String(), code}
}

func runJSON(t *testing.T, home, manifest string, extra ...string) (result, string) {
	t.Helper()
	out := idlepool(t, home, append([]string{"run", manifest, "--json", "--workers", "2"}, extra...)...)
	if out.code != 0 {
		t.Fatalf("run %s: exit %d\nstderr:\n%s", manifest, out.code, out.stderr)
	}
	var r result
	if err := json.Unmarshal([]byte(out.stdout), &r); err != nil {
		t.Fatalf("run --json printed something that is not one JSON document: %v\n%s", err, out.stdout)
	}
	return r, out.stdout
}

// writeManifest writes a manifest into a new directory with the named
// program copied beside it as prog.wasm, and returns its path.
func writeManifest(t *testing.T, program, text string) string {
	t.Helper()
	dir := t.TempDir()
	b, err := os.ReadFile(wasm[program])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "prog.wasm"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "job.toml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func sharedDataset(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "..", "..", "shared", "datasets", name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Skipf("reference data set %s is not beside the checkout: %v", name, err)
	}
	return p
}

// patient returns how long a test waits for something that must happen:
// until a minute before the test binary's own deadline (go test -timeout),
// so that a busy machine makes a test slow, never wrong.
func patient(t *testing.T) time.Time {
	if d, ok := t.Deadline(); ok {
		return d.Add(-time.Minute)
	}
	return time.Now().Add(20 * time.Minute)
}

func noStrayWorkers(t *testing.T, home string) {
	t.Helper()
	if runtime.GOOS != "linux" {
		return
	}
	deadline := patient(t)
	for {
		stray := workersUnder(home)
		if len(stray) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker processes still running after the run ended: %v", stray)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// workersUnder lists the PIDs of idlepool worker processes whose command
// line names home's cache directory.
func workersUnder(home string) []string {
	var pids []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		cmd := string(bytes.ReplaceAll(b, []byte{0}, []byte{' '}))
		if strings.Contains(cmd, binPath) && strings.Contains(cmd, " worker ") && strings.Contains(cmd, home) {
			if st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil && strings.Contains(string(st), ") Z ") {
				continue // a zombie is already dead
			}
			pids = append(pids, e.Name())
		}
	}
	return pids
}
