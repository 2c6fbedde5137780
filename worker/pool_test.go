package worker

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// echoReport is what the hostile module prints in echo mode.
type echoReport struct {
	Data     string   `json:"data"`
	Rand     string   `json:"rand"`
	MathRand uint64   `json:"mathRand"`
	MapOrder []int    `json:"mapOrder"`
	Now      int64    `json:"now"`
	Slept    string   `json:"slept"`
	Args     []string `json:"args"`
	Env      []string `json:"env"`
	Input    string   `json:"input"`
}

func parseEcho(t *testing.T, stdout []byte) echoReport {
	t.Helper()
	var r echoReport
	if err := json.Unmarshal(stdout, &r); err != nil {
		t.Fatalf("echo output %q: %v", stdout, err)
	}
	return r
}

func TestEchoDeterministic(t *testing.T) {
	needHostile(t)
	p := newTestPool(t, 1)
	input := t.TempDir()
	if err := os.WriteFile(filepath.Join(input, "hello.txt"), []byte("hello input"), 0o644); err != nil {
		t.Fatal(err)
	}
	req := task("echo", 0)
	req.InputDir = input
	req.Seed = [32]byte{1, 2, 3}

	first := mustSucceed(t, p, req)
	second := mustSucceed(t, p, req)
	if diff := cmp.Diff(first.Stdout, second.Stdout); diff != "" {
		t.Errorf("same task, different stdout (-first +second):\n%s", diff)
	}
	if first.PID != second.PID {
		t.Errorf("second task ran on worker %d, want the idle worker %d", second.PID, first.PID)
	}

	r := parseEcho(t, first.Stdout)
	want := echoReport{
		Data: "payload-echo", Rand: r.Rand, MathRand: r.MathRand, MapOrder: r.MapOrder,
		Now: r.Now, Slept: r.Slept, Args: []string{ProgramName}, Env: []string{}, Input: "hello input",
	}
	if diff := cmp.Diff(want, r); diff != "" {
		t.Errorf("echo report (-want +got):\n%s", diff)
	}
	if len(r.Rand) != 64 {
		t.Errorf("rand = %q, want 32 random bytes in hex", r.Rand)
	}

	// The replica check: same task on another worker, same bytes.
	req.AvoidPID = first.PID
	replica := mustSucceed(t, p, req)
	if replica.PID == first.PID {
		t.Errorf("AvoidPID %d: ran on the same worker", first.PID)
	}
	if diff := cmp.Diff(first.Stdout, replica.Stdout); diff != "" {
		t.Errorf("replica on another worker, different stdout (-first +replica):\n%s", diff)
	}

	// Another seed: other random bytes, the rest the same.
	req.AvoidPID = 0
	req.Seed = [32]byte{9}
	other := parseEcho(t, mustSucceed(t, p, req).Stdout)
	if other.Rand == r.Rand || other.MathRand == r.MathRand {
		t.Errorf("seeds %x and %x gave the same random values", [32]byte{1, 2, 3}, req.Seed)
	}
	if other.Now != r.Now {
		t.Errorf("time.Now differs between runs: %d and %d", r.Now, other.Now)
	}

	// No input directory: no file system at all.
	req.InputDir = ""
	none := parseEcho(t, mustSucceed(t, p, req).Stdout)
	if !strings.HasPrefix(none.Input, "error:") {
		t.Errorf("without InputDir, reading /input/hello.txt gave %q, want an error", none.Input)
	}

	// The workers write what they compile into the cache directory. The
	// tests' shared one is filled beforehand under the race detector
	// (warm_test.go), so a pool with a cache of its own runs a module
	// nothing else compiled.
	own := childConfig(t, 1)
	own.CacheDir = t.TempDir()
	cold, err := NewPool(own)
	if err != nil {
		t.Fatal(err)
	}
	defer cold.Close()
	empty := writeModule(t, "empty.wasm", emptyModule())
	mustSucceed(t, cold, Request{ModulePath: empty.path, ModuleSHA256: empty.sha, Timeout: time.Minute})
	if entries, err := os.ReadDir(own.CacheDir); err != nil || len(entries) == 0 {
		t.Errorf("compilation cache %s is empty after a task (%v)", own.CacheDir, err)
	}
}

func TestFailures(t *testing.T) {
	needHostile(t)
	p := newTestPool(t, 1)
	hostileWith := func(mode string, edit func(*Request)) Request {
		r := task(mode, 0)
		if edit != nil {
			edit(&r)
		}
		return r
	}
	module := func(name string, bin []byte) Request {
		m := writeModule(t, name, bin)
		return Request{ModulePath: m.path, ModuleSHA256: m.sha, Timeout: time.Minute}
	}
	tests := []struct {
		name    string
		req     Request
		kind    FailureKind
		message string // substring of Failure.Message
		stderr  string // if set, the whole of Result.Stderr
	}{
		{name: "panic", req: hostileWith("panic", nil), kind: FailureTrap, message: "panic: boom"},
		{name: "nil dereference", req: hostileWith("nil", nil), kind: FailureTrap, message: "nil pointer dereference"},
		{name: "unreachable", req: module("trap.wasm", wasmModule(typeVoid, funcType0, exportStart0, codeTrap)), kind: FailureTrap, message: "unreachable"},
		{name: "exit status", req: hostileWith("exit", nil), kind: FailureExitStatus, message: "exit status 3", stderr: "exiting with status 3\n"},
		{name: "memory bomb", req: hostileWith("membomb", func(r *Request) { r.MemoryLimitMiB = 64 }), kind: FailureOutOfMemory, message: "out of memory"},
		{name: "stdout flood", req: hostileWith("flood", nil), kind: FailureOutputTooLarge, message: "16777216"}, // cut at the limit: a flood never cut ends as a timeout
		{name: "small stdout limit", req: hostileWith("echo", func(r *Request) { r.MaxStdoutBytes = 10 }), kind: FailureOutputTooLarge, message: "stdout exceeded 10 bytes"},
		{name: "hash mismatch", req: hostileWith("echo", func(r *Request) { r.ModuleSHA256 = strings.Repeat("ab", 32) }), kind: FailureBadModule, message: "SHA-256"},
		{name: "not wasm", req: module("text.wasm", []byte("hello, world")), kind: FailureBadModule, message: "not a WebAssembly module"},
		{name: "no _start", req: module("reactor.wasm", wasmModule(typeVoid, funcType0, exportMain0, codeEmpty)), kind: FailureBadModule, message: "_start"},
		{name: "GOOS=js: imports gojs", req: module("js.wasm", wasmModule(typeVoid, importGoJS, funcType0, exportStart1, codeEmpty)), kind: FailureBadModule, message: "GOOS=wasip1 GOARCH=wasm go build"},
		{name: "GOOS=js: run and resume", req: module("js.wasm", wasmModule(typeVoid, funcType0, exportRunResume0, codeEmpty)), kind: FailureBadModule, message: "built for GOOS=js"},
		{name: "imports env", req: module("env.wasm", wasmModule(typeVoid, importEnvF, funcType0, exportStart1, codeEmpty)), kind: FailureBadModule, message: "env.f"},
		{name: "memory minimum over limit", req: func() Request {
			r := module("bigmem.wasm", wasmModule(typeVoid, funcType0, memoryMin32, exportStart0, codeEmpty))
			r.MemoryLimitMiB = 1
			return r
		}(), kind: FailureOutOfMemory, message: "over limit"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := mustRun(t, p, tc.req)
			if res.Failure == nil {
				t.Fatalf("task succeeded, want %s; stdout %q", tc.kind, res.Stdout)
			}
			if res.Failure.Kind != tc.kind || !strings.Contains(res.Failure.Message, tc.message) {
				t.Errorf("failure %v, want kind %s with message containing %q\nstderr:\n%s", res.Failure, tc.kind, tc.message, res.Stderr)
			}
			if res.PID == 0 {
				t.Errorf("PID = 0")
			}
			if tc.stderr != "" && string(res.Stderr) != tc.stderr {
				t.Errorf("stderr %q, want %q", res.Stderr, tc.stderr)
			}
			if res.Stdout != nil {
				t.Errorf("failed task has %d bytes of stdout, want none", len(res.Stdout))
			}
		})
	}
	// Failures do not harm the worker: a good task still runs.
	mustSucceed(t, p, task("echo", 0))
}

func TestFloodBoundsParentMemory(t *testing.T) {
	needHostile(t)
	p := newTestPool(t, 1)
	mustSucceed(t, p, task("echo", 0)) // warm worker and module
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	res := mustRun(t, p, task("flood", 0))
	runtime.ReadMemStats(&after)
	if res.Failure == nil || res.Failure.Kind != FailureOutputTooLarge {
		t.Fatalf("failure %v, want output-too-large", res.Failure)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8<<20 {
		t.Errorf("parent allocated %d bytes for a flooding task, want under 8 MiB", alloc)
	}
}

func TestStderrTruncated(t *testing.T) {
	needHostile(t)
	p := newTestPool(t, 1)
	req := task("stderr", 1<<20)
	req.MaxStderrBytes = 4096
	res := mustSucceed(t, p, req)
	if len(res.Stderr) > 4096 {
		t.Errorf("stderr has %d bytes, want at most 4096", len(res.Stderr))
	}
	s := string(res.Stderr)
	if !strings.HasPrefix(s, "log log ") || !strings.HasSuffix(s, "log \n") || !strings.Contains(s, " bytes omitted ...]\n") {
		t.Errorf("stderr = %q..., want head, omission marker and tail", s[:min(len(s), 200)])
	}
	if string(res.Stdout) != "{\"ok\":true}\n" {
		t.Errorf("stdout = %q", res.Stdout)
	}
}

func TestTimeoutKillsWorker(t *testing.T) {
	needHostile(t)
	p := newTestPool(t, 1)
	warm := mustSucceed(t, p, task("echo", 0))

	req := task("loop", 0)
	req.Timeout = 2 * time.Second
	start := time.Now()
	res := mustRun(t, p, req)
	elapsed := time.Since(start)
	if res.Failure == nil || res.Failure.Kind != FailureTimeout {
		t.Fatalf("failure %v, want timeout", res.Failure)
	}
	// Not before its limit; how long after it a busy machine takes to
	// kill the worker is no verdict (the worker is gone: checked below).
	if elapsed < req.Timeout {
		t.Errorf("timed out after %s, before its limit of %s", elapsed, req.Timeout)
	}
	if res.PID != warm.PID {
		t.Errorf("loop ran on worker %d, want the warm worker %d", res.PID, warm.PID)
	}
	if err := signalZero(res.PID); err == nil {
		t.Errorf("worker %d still exists after the timeout", res.PID)
	}
	next := mustSucceed(t, p, task("echo", 0))
	if next.PID == res.PID {
		t.Errorf("next task ran on the killed worker %d", res.PID)
	}
}

func TestWorkerDied(t *testing.T) {
	needHostile(t)
	p := newTestPool(t, 1)
	p.onStarted = func(pid int) {
		if proc, err := os.FindProcess(pid); err == nil {
			_ = proc.Kill()
		}
	}
	res := mustRun(t, p, task("loop", 0))
	if res.Failure == nil || res.Failure.Kind != FailureWorkerDied {
		t.Fatalf("failure %v, want worker-died", res.Failure)
	}
	p.onStarted = nil
	mustSucceed(t, p, task("echo", 0))
}

func TestContextCancelKillsWorker(t *testing.T) {
	needHostile(t)
	p := newTestPool(t, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p.onStarted = func(int) { cancel() }
	res, err := p.Run(ctx, task("loop", 0))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run error %v, want context.Canceled", err)
	}
	if res.PID == 0 || signalZero(res.PID) == nil {
		t.Errorf("worker %d still exists after cancel", res.PID)
	}
}

func TestCloseDuringRun(t *testing.T) {
	needHostile(t)
	p := newTestPool(t, 1)
	var closed sync.WaitGroup
	p.onStarted = func(int) {
		closed.Go(func() { _ = p.Close() })
	}
	_, err := p.Run(context.Background(), task("loop", 0))
	closed.Wait()
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("Run error %v, want ErrClosed", err)
	}
	if _, err := p.Run(context.Background(), task("echo", 0)); !errors.Is(err, ErrClosed) {
		t.Errorf("Run after Close: %v, want ErrClosed", err)
	}
}

func TestConcurrentRuns(t *testing.T) {
	needHostile(t)
	p := newTestPool(t, 2)
	const n = 4
	results := make([]Result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			req := task("echo", 0)
			req.Seed[0] = byte(i)
			results[i], errs[i] = p.Run(context.Background(), req)
		})
	}
	wg.Wait()
	pids := map[int]bool{}
	for i := range n {
		if errs[i] != nil || results[i].Failure != nil {
			t.Fatalf("task %d: %v %v", i, errs[i], results[i].Failure)
		}
		pids[results[i].PID] = true
	}
	if len(pids) > 2 {
		t.Errorf("%d workers for 2 slots", len(pids))
	}
}

func TestRunErrors(t *testing.T) {
	needHostile(t)
	p := newTestPool(t, 1)
	missing := task("echo", 0)
	missing.ModulePath = filepath.Join(t.TempDir(), "missing.wasm")
	noInput := task("echo", 0)
	noInput.InputDir = filepath.Join(t.TempDir(), "missing")
	tests := []struct {
		name string
		edit func(*Request)
		want error
	}{
		{"bad hash", func(r *Request) { r.ModuleSHA256 = "abc" }, ErrInvalidRequest},
		{"negative memory", func(r *Request) { r.MemoryLimitMiB = -1 }, ErrInvalidRequest},
		{"memory over 4 GiB", func(r *Request) { r.MemoryLimitMiB = MaxMemoryLimitMiB + 1 }, ErrInvalidRequest},
		{"negative timeout", func(r *Request) { r.Timeout = -time.Second }, ErrInvalidRequest},
		{"stdout limit too big", func(r *Request) { r.MaxStdoutBytes = MaxStdoutLimitBytes + 1 }, ErrInvalidRequest},
		{"missing module file", func(r *Request) { *r = missing }, ErrSetup},
		{"missing input dir", func(r *Request) { *r = noInput }, ErrSetup},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := task("echo", 0)
			tc.edit(&req)
			if _, err := p.Run(context.Background(), req); !errors.Is(err, tc.want) {
				t.Errorf("Run error %v, want %v", err, tc.want)
			}
		})
	}
}

func TestStartErrors(t *testing.T) {
	checkClean(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	empty := writeModule(t, "empty.wasm", emptyModule())
	tests := []struct {
		name string
		cfg  Config
	}{
		{"no such command", Config{Command: []string{filepath.Join(t.TempDir(), "no-such-worker")}}},
		{"exits without hello", Config{Command: []string{exe}, Env: append(os.Environ(), childEnv+"=exit")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewPool(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			_, err = p.Run(context.Background(), Request{ModulePath: empty.path, ModuleSHA256: empty.sha})
			if !errors.Is(err, ErrStart) {
				t.Errorf("Run error %v, want ErrStart", err)
			}
		})
	}
	if _, err := NewPool(Config{}); err == nil {
		t.Error("NewPool accepted an empty Command")
	}
}

// sandboxReport is what the hostile module prints in escape and net modes:
// attempt -> "ok" or "error: ...".
type sandboxReport map[string]string

func TestSandbox(t *testing.T) {
	needHostile(t)
	p := newTestPool(t, 1)
	input := t.TempDir()
	hello := filepath.Join(input, "hello.txt")
	if err := os.WriteFile(hello, []byte("hello input"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(input, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(input, "dirlink")); err != nil {
		t.Fatal(err)
	}
	// Go implements os.Chmod on wasip1 as a Stat (WASI has no chmod), so
	// it "succeeds" without touching the file; the mode is checked below.
	allowed := map[string]bool{"read /input/hello.txt": true, "path_open hello.txt": true, "chmod /input/hello.txt": true}

	t.Run("file system", func(t *testing.T) {
		req := task("escape", 0)
		req.InputDir = input
		res := mustSucceed(t, p, req)
		var report sandboxReport
		if err := json.Unmarshal(res.Stdout, &report); err != nil {
			t.Fatalf("report %q: %v", res.Stdout, err)
		}
		t.Logf("guest's view: %v", report)
		if len(report) < 20 {
			t.Errorf("only %d attempts reported: %v", len(report), report)
		}
		for attempt, outcome := range report {
			if ok := outcome == "ok"; ok != allowed[attempt] {
				t.Errorf("%s: %s", attempt, outcome)
			}
		}
		entries, _ := os.ReadDir(input)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		if diff := cmp.Diff([]string{"dirlink", "hello.txt", "link"}, names); diff != "" {
			t.Errorf("input directory changed (-want +got):\n%s", diff)
		}
		if b, _ := os.ReadFile(hello); string(b) != "hello input" {
			t.Errorf("hello.txt now holds %q", b)
		}
		if fi, err := os.Stat(hello); err != nil || fi.Mode().Perm() != 0o644 {
			t.Errorf("hello.txt mode %v (%v), want 0644", fi.Mode(), err)
		}
	})
	t.Run("network", func(t *testing.T) {
		tcp, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer tcp.Close()
		udp, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer udp.Close()
		req := task("net", 0)
		req.Stdin, _ = json.Marshal(map[string]string{"mode": "net", "data": tcp.Addr().String() + " " + udp.LocalAddr().String()})
		res := mustSucceed(t, p, req)
		var report sandboxReport
		if err := json.Unmarshal(res.Stdout, &report); err != nil {
			t.Fatalf("report %q: %v", res.Stdout, err)
		}
		t.Logf("guest's view: %v", report)
		if !strings.HasPrefix(report["dial tcp"], "error") {
			t.Errorf("dial tcp %s from the guest: %s", tcp.Addr(), report["dial tcp"])
		}
		if !strings.HasPrefix(report["lookup"], "error") {
			t.Errorf("DNS lookup from the guest: %s", report["lookup"])
		}
		// Nothing may have arrived on the host.
		_ = tcp.(*net.TCPListener).SetDeadline(time.Now().Add(100 * time.Millisecond))
		if c, err := tcp.Accept(); err == nil {
			c.Close()
			t.Errorf("the guest connected to %s", tcp.Addr())
		}
		_ = udp.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if n, from, err := udp.ReadFrom(make([]byte, 100)); err == nil {
			t.Errorf("a %d-byte UDP packet from %s arrived", n, from)
		}
	})
}

// signalZero probes whether a process exists.
func signalZero(pid int) error {
	proc, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return proc.Signal(signal0)
}
