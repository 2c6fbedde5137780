package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// needReactor skips the test when there is no go tool to build the
// reactor test module, and fails it when the build failed.
func needReactor(t testing.TB) {
	t.Helper()
	switch {
	case errors.Is(reactErr, errNoGoTool):
		t.Skipf("reactor test module unavailable: %v", reactErr)
	case reactErr != nil:
		t.Fatal(reactErr)
	}
}

// reactorBody is a task of the reactor test module.
func reactorBody(stdin string, seed byte, inputDir string) *runBody {
	return &runBody{
		ModulePath: reactor.path, ModuleSHA256: reactor.sha, Stdin: []byte(stdin), InputDir: inputDir,
		Seed: strings.Repeat(string("0123456789abcdef"[seed>>4])+string("0123456789abcdef"[seed&15]), 32), MemoryLimitPages: 4096,
		MaxStdoutBytes: 1 << 20, MaxStderrBytes: 1 << 16,
	}
}

// TestReactorSnapshotSameAsFresh runs tasks of a reactor twice: from the
// snapshot of its _initialize, as a worker does, and in fresh instances
// that each run _initialize first. Every task must give the same bytes
// (stdout, stderr, the failure, the work counted) both ways, whatever it
// does: read the clocks, draw random numbers, iterate a map, list /input,
// panic, exit, dirty its memory. Both hosts compile as a worker does;
// under the race detector from the cache that a build without it filled
// (warm_test.go), or, where it could not, in wazero's interpreter, which
// runs the Go runtime's initialisation slowly (seconds): then only the
// tasks marked race run.
func TestReactorSnapshotSameAsFresh(t *testing.T) {
	needReactor(t)
	snap, fresh := newTestHost(t, true), newTestHost(t, true)
	fresh.freshReactors = true
	snap.interpreter, fresh.interpreter = !reactor.warm, !reactor.warm
	input := t.TempDir()
	if err := os.WriteFile(filepath.Join(input, "data.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	tasks := []struct {
		name  string
		body  *runBody
		kind  FailureKind
		check func(t *testing.T, out map[string]any)
		race  bool
	}{
		{name: "echo", body: reactorBody(`{"mode":"echo"}`, 1, ""), race: true},
		{name: "echo, another seed", body: reactorBody(`{"mode":"echo"}`, 2, "")},
		{name: "echo with input", body: reactorBody(`{"mode":"echo"}`, 1, input), check: func(t *testing.T, out map[string]any) {
			if got, _ := json.Marshal(out["input"]); string(got) != `["data.txt"]` {
				t.Errorf("/input lists %s, want [\"data.txt\"]", got)
			}
		}},
		{name: "global then panic", body: reactorBody(`{"mode":"global","n":1}`, 1, ""), kind: FailureTrap, race: true},
		{name: "global", body: reactorBody(`{"mode":"global"}`, 1, ""), race: true},
		{name: "panic", body: reactorBody(`{"mode":"panic"}`, 3, ""), kind: FailureTrap},
		{name: "exit", body: reactorBody(`{"mode":"exit"}`, 3, ""), kind: FailureExitStatus},
		{name: "echo after the others", body: reactorBody(`{"mode":"echo"}`, 1, "")},
	}
	var first []byte // the first echo's stdout
	for _, tk := range tasks {
		t.Run(tk.name, func(t *testing.T) {
			if !reactor.warm && !tk.race {
				t.Skip("slow in wazero's interpreter, which the race detector needs")
			}
			want := runInHost(t, fresh, tk.body)
			got := runInHost(t, snap, tk.body)
			if !bytes.Equal(got.Stdout, want.Stdout) || !bytes.Equal(got.Stderr, want.Stderr) || got.Work != want.Work {
				t.Errorf("from the snapshot: stdout %s, stderr %q, work %d\nfresh: stdout %s, stderr %q, work %d",
					got.Stdout, got.Stderr, got.Work, want.Stdout, want.Stderr, want.Work)
			}
			if (got.Failure == nil) != (want.Failure == nil) || (got.Failure != nil && *got.Failure != *want.Failure) {
				t.Errorf("failure from the snapshot %v, fresh %v", got.Failure, want.Failure)
			}
			if kind := failureKind(got.Failure); kind != tk.kind {
				t.Fatalf("failure %v, want kind %q\n%s", got.Failure, tk.kind, got.Stderr)
			}
			if got.Work == 0 {
				t.Error("no work counted")
			}
			if again := runInHost(t, snap, tk.body); !bytes.Equal(again.Stdout, got.Stdout) || again.Work != got.Work {
				t.Errorf("a second run from the snapshot: stdout %s work %d, the first %s work %d", again.Stdout, again.Work, got.Stdout, got.Work)
			}
			if tk.kind != "" || !strings.Contains(string(tk.body.Stdin), "echo") {
				if strings.Contains(string(tk.body.Stdin), `"global"}`) && string(got.Stdout) != "{\"seen\":1,\"dirty\":0}\n" {
					t.Errorf("global: %s, want {\"seen\":1,\"dirty\":0}", got.Stdout)
				}
				return
			}
			var out map[string]any
			if err := json.Unmarshal(got.Stdout, &out); err != nil {
				t.Fatalf("stdout %q: %v", got.Stdout, err)
			}
			if out["seen"] != 1.0 || out["stdin"] != `{"mode":"echo"}` {
				t.Errorf("seen %v, stdin %v: want 1 and the task", out["seen"], out["stdin"])
			}
			if tk.check != nil {
				tk.check(t, out)
			}
			if first == nil {
				first = got.Stdout
				return
			}
			var o0 map[string]any
			_ = json.Unmarshal(first, &o0)
			// _initialize's random bytes do not depend on the task's
			// seed; the task's own do.
			if out["init_rand"] != o0["init_rand"] {
				t.Errorf("init_rand %v, the first task's %v", out["init_rand"], o0["init_rand"])
			}
			if tk.body.Seed != tasks[0].body.Seed && out["rand"] == o0["rand"] {
				t.Errorf("two seeds drew the same random bytes %v", out["rand"])
			}
			if tk.body.Seed == tasks[0].body.Seed && tk.body.InputDir == "" && !bytes.Equal(got.Stdout, first) {
				t.Errorf("the same task again: %s, first %s", got.Stdout, first)
			}
		})
	}
}

func failureKind(f *Failure) FailureKind {
	if f == nil {
		return ""
	}
	return f.Kind
}

// TestReactorTasksIndependent runs reactor tasks on a real worker
// process: a task that counts itself in a global and dirties memory its
// _initialize allocated sees {"seen":1,"dirty":0} every time, also after
// one that trapped. A worker process built with the race detector would
// compile the module for a minute, so without the module in its cache
// (warm_test.go) it is skipped: TestReactorSnapshotSameAsFresh runs the
// same sequence in this process.
func TestReactorTasksIndependent(t *testing.T) {
	needReactor(t)
	if !reactor.warm {
		t.Skip("a worker process built with the race detector compiles the module for a minute, and it is not in the cache; TestReactorSnapshotSameAsFresh covers this in-process")
	}
	p, err := NewPool(childConfig(t, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	run := func(req Request) (Result, error) { return p.Run(context.Background(), req) }
	for i, stdin := range []string{`{"mode":"global"}`, `{"mode":"global","n":1}`, `{"mode":"global"}`, `{"mode":"panic"}`, `{"mode":"global"}`} {
		res, err := run(Request{ModulePath: reactor.path, ModuleSHA256: reactor.sha, Stdin: []byte(stdin), Timeout: 10 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if string(res.Stdout) != "" && string(res.Stdout) != "{\"seen\":1,\"dirty\":0}\n" {
			t.Errorf("task %d (%s): %s, want {\"seen\":1,\"dirty\":0}", i, stdin, res.Stdout)
		}
		if wantFail := strings.Contains(stdin, "n\":1") || strings.Contains(stdin, "panic"); wantFail != (res.Failure != nil) {
			t.Errorf("task %d (%s): failure %v", i, stdin, res.Failure)
		}
	}
}

// TestReactorInitializeFails checks that a reactor whose _initialize
// traps fails every task the same way, with a message naming
// _initialize, and that a module exporting a name the worker reserves,
// or a reactor lacking its task function, is refused.
func TestReactorInitializeFails(t *testing.T) {
	types := wasmSection(1, 1, 0x60, 0, 0)
	funcs := wasmSection(3, 2, 0, 0)
	exports := wasmSection(7, 2,
		11, '_', 'i', 'n', 'i', 't', 'i', 'a', 'l', 'i', 'z', 'e', 0, 0,
		13, 'i', 'd', 'l', 'e', 'p', 'o', 'o', 'l', '_', 't', 'a', 's', 'k', 0, 1)
	code := wasmSection(10, 2, 3, 0, 0x00, 0x0b, 2, 0, 0x0b) // _initialize: unreachable; task: nothing
	h := newTestHost(t, true)
	trapping := writeModule(t, "trap.wasm", wasmModule(types, funcs, exports, code))
	for range 2 {
		res := runInHost(t, h, &runBody{ModulePath: trapping.path, ModuleSHA256: trapping.sha, Stdin: []byte(`{}`),
			Seed: strings.Repeat("00", 32), MemoryLimitPages: 16, MaxStdoutBytes: 1 << 10, MaxStderrBytes: 1 << 10})
		if res.Failure == nil || res.Failure.Kind != FailureTrap || !strings.HasPrefix(res.Failure.Message, "_initialize: ") {
			t.Fatalf("failure %v, want a trap in _initialize", res.Failure)
		}
	}
	// The same module with a mutable global exported under a reserved name.
	reserved := wasmModule(types, funcs,
		wasmSection(6, 1, 0x7F, 1, 0x41, 0, 0x0b),
		wasmSection(7, 3,
			11, '_', 'i', 'n', 'i', 't', 'i', 'a', 'l', 'i', 'z', 'e', 0, 0,
			13, 'i', 'd', 'l', 'e', 'p', 'o', 'o', 'l', '_', 't', 'a', 's', 'k', 0, 1,
			19, '_', '_', 'i', 'd', 'l', 'e', 'p', 'o', 'o', 'l', '_', 'g', 'l', 'o', 'b', 'a', 'l', '_', '0', 3, 0),
		wasmSection(10, 2, 2, 0, 0x0b, 2, 0, 0x0b))
	onlyInit := wasmModule(types, wasmSection(3, 1, 0), wasmSection(7, 1, 11, '_', 'i', 'n', 'i', 't', 'i', 'a', 'l', 'i', 'z', 'e', 0, 0), wasmSection(10, 1, 2, 0, 0x0b))
	for name, bin := range map[string][]byte{"reserved": reserved, "only _initialize": onlyInit} {
		m := writeModule(t, "bad.wasm", bin)
		res := runInHost(t, h, &runBody{ModulePath: m.path, ModuleSHA256: m.sha, Stdin: []byte(`{}`),
			Seed: strings.Repeat("00", 32), MemoryLimitPages: 16, MaxStdoutBytes: 1 << 10, MaxStderrBytes: 1 << 10})
		if res.Failure == nil || res.Failure.Kind != FailureBadModule {
			t.Errorf("%s: failure %v, want bad-module", name, res.Failure)
		}
	}
}

// TestReactorEndlessInitializeTimesOut checks that a reactor's
// _initialize runs on the task's clock: one that never returns ends in
// the task's timeout, as a command's endless start does, not in the
// worker's much longer wait for a module to be ready.
func TestReactorEndlessInitializeTimesOut(t *testing.T) {
	types := wasmSection(1, 1, 0x60, 0, 0)
	funcs := wasmSection(3, 2, 0, 0)
	exports := wasmSection(7, 2,
		11, '_', 'i', 'n', 'i', 't', 'i', 'a', 'l', 'i', 'z', 'e', 0, 0,
		13, 'i', 'd', 'l', 'e', 'p', 'o', 'o', 'l', '_', 't', 'a', 's', 'k', 0, 1)
	code := wasmSection(10, 2, 7, 0, 0x03, 0x40, 0x0C, 0x00, 0x0B, 0x0B, 2, 0, 0x0b) // _initialize: loop br 0 end
	m := writeModule(t, "endless.wasm", wasmModule(types, funcs, exports, code))
	p, err := NewPool(childConfig(t, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	res, err := p.Run(context.Background(), Request{ModulePath: m.path, ModuleSHA256: m.sha, Stdin: []byte(`{}`), Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res.Failure == nil || res.Failure.Kind != FailureTimeout {
		t.Fatalf("failure %v, want timeout", res.Failure)
	}
}
