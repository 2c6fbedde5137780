package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// The test binary doubles as a worker process and as a parent process that
// owns a pool (for the killed-parent test), chosen by these variables.
const (
	childEnv  = "IDLEPOOL_WORKER_TEST_CHILD"  // "1": run Serve; "exit": exit without a hello
	parentEnv = "IDLEPOOL_WORKER_TEST_PARENT" // JSON parentConfig: run a pool with one endless task
)

// testModule is a module file and its hash.
type testModule struct {
	path string
	sha  string
	// warm says that a worker finds the module compiled in its cache
	// (warm_test.go), or the race detector is off: a worker compiles it
	// in seconds.
	warm bool
}

var (
	testDir  string     // removed after the tests
	cacheDir string     // wazero's compilation cache, shared by all workers of the run
	hostile  testModule // testdata/hostile built for wasip1
	buildErr error      // why hostile could not be built
	reactor  testModule // testdata/reactor built for wasip1 as a reactor
	reactErr error      // why reactor could not be built
)

// testChildren are more roles of the test binary, by the value of
// childEnv, registered by the test files that need them.
var testChildren = map[string]func() int{}

func TestMain(m *testing.M) {
	if run, ok := testChildren[os.Getenv(childEnv)]; ok {
		os.Exit(run())
	}
	switch os.Getenv(childEnv) {
	case "1":
		setupFakeCUDA()
		if err := Serve(context.Background(), os.Stdin, os.Stdout, os.Getenv(CacheDirEnv)); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	case "exit":
		os.Exit(3)
	}
	if cfg := os.Getenv(parentEnv); cfg != "" {
		os.Exit(parentMain(cfg))
	}

	var err error
	testDir, err = os.MkdirTemp("", "idlepool-worker-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cacheDir = filepath.Join(testDir, "cache")
	hostile, buildErr = buildWasm(filepath.Join(testDir, "hostile.wasm"), "./testdata/hostile")
	reactor, reactErr = buildWasm(filepath.Join(testDir, "reactor.wasm"), "./testdata/reactor", "-buildmode=c-shared")
	code := m.Run()
	_ = os.RemoveAll(testDir)
	os.Exit(code)
}

// buildWasm builds a Go main package as a WASI preview 1 command, or with
// -buildmode=c-shared as a reactor, and compiles it into the workers'
// cache under the race detector (warm_test.go). Go's build cache makes
// this fast after the first time.
func buildWasm(out, pkg string, flags ...string) (testModule, error) {
	gotool, err := exec.LookPath("go")
	if err != nil {
		return testModule{}, fmt.Errorf("%w: %w", errNoGoTool, err)
	}
	args := append(append([]string{"build", "-trimpath"}, flags...), "-o", out, pkg)
	cmd := exec.Command(gotool, args...)
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return testModule{}, fmt.Errorf("build %s: %w\n%s", pkg, err, b)
	}
	m, err := hashModule(out)
	if err != nil {
		return testModule{}, err
	}
	if err := warmCache(warmModule{Path: m.path, SHA256: m.sha}); err != nil {
		fmt.Fprintf(os.Stderr, "worker tests: %s is compiled by the workers themselves: %v\n", pkg, err)
	} else {
		m.warm = true
	}
	return m, nil
}

func hashModule(path string) (testModule, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return testModule{}, err
	}
	sum := sha256.Sum256(b)
	return testModule{path: path, sha: hex.EncodeToString(sum[:])}, nil
}

// errNoGoTool means there is no go command to build test modules with,
// as when a test binary runs away from its source tree.
var errNoGoTool = errors.New("no go tool to build test modules")

// needHostile skips the test when there is no go tool to build the hostile
// module, and fails it when the build failed.
func needHostile(t testing.TB) {
	t.Helper()
	switch {
	case errors.Is(buildErr, errNoGoTool):
		t.Skipf("hostile test module unavailable: %v", buildErr)
	case buildErr != nil:
		t.Fatal(buildErr)
	}
}

// childConfig is the pool configuration that runs this test binary as the
// worker, at normal priority so that busy shared machines do not starve it.
func childConfig(t testing.TB, slots int) Config {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return Config{
		Command:  []string{exe},
		Env:      append(os.Environ(), childEnv+"=1", PriorityEnv+"=normal"),
		Slots:    slots,
		CacheDir: cacheDir,
	}
}

// newTestPool returns a pool of test-binary workers, closed at the end of
// the test, after which no goroutine and no child process may remain.
func newTestPool(t *testing.T, slots int) *Pool {
	t.Helper()
	checkClean(t)
	cfg := childConfig(t, slots)
	cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	p, err := NewPool(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// checkClean registers a check, run after every later cleanup, that no
// goroutine leaked and no child process is left.
func checkClean(t *testing.T) {
	t.Cleanup(func() {
		goleak.VerifyNone(t)
		if left := childProcesses(t); len(left) > 0 {
			t.Errorf("child processes left: %v", left)
		}
	})
}

// task returns a request for the hostile module.
func task(mode string, n int) Request {
	stdin, _ := json.Marshal(map[string]any{"mode": mode, "n": n, "data": "payload-" + mode})
	return Request{
		ModulePath:   hostile.path,
		ModuleSHA256: hostile.sha,
		Stdin:        stdin,
		Timeout:      time.Minute,
	}
}

// mustRun runs req and fails the test on an error.
func mustRun(t *testing.T, p *Pool, req Request) Result {
	t.Helper()
	res, err := p.Run(context.Background(), req)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res
}

// mustSucceed runs req and fails the test unless the task succeeded.
func mustSucceed(t *testing.T, p *Pool, req Request) Result {
	t.Helper()
	res := mustRun(t, p, req)
	if res.Failure != nil {
		t.Fatalf("task failed: %v\nstderr:\n%s", res.Failure, res.Stderr)
	}
	return res
}

// parentConfig is what the killed-parent test passes to its parent process.
type parentConfig struct {
	Module   string `json:"module"`
	SHA256   string `json:"sha256"`
	CacheDir string `json:"cacheDir"`
}

// parentMain runs in a process the test then kills with SIGKILL: it runs an
// endless task and prints its worker's PID once the task has started.
func parentMain(cfgJSON string) int {
	var pc parentConfig
	if err := json.Unmarshal([]byte(cfgJSON), &pc); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, parentEnv+"=") {
			env = append(env, kv)
		}
	}
	p, err := NewPool(Config{
		Command:  []string{exe},
		Env:      append(env, childEnv+"=1", PriorityEnv+"=normal"),
		CacheDir: pc.CacheDir,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	p.onStarted = func(pid int) { fmt.Println(pid) }
	stdin, _ := json.Marshal(map[string]string{"mode": "loop"})
	_, err = p.Run(context.Background(), Request{ModulePath: pc.Module, ModuleSHA256: pc.SHA256, Stdin: stdin, Timeout: time.Hour})
	fmt.Fprintln(os.Stderr, "Run returned:", err)
	return 1
}
