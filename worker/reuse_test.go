package worker

import (
	"testing"
)

// Hand-made modules on one page of memory. memClean traps unless the
// word at 0 and, after growing by a page, the word at 65544 are zero,
// then writes both; memDirty writes both and traps. memTouch64 grows its
// memory by 1024 pages and writes 64 MiB.
var (
	memPage1   = wasmSection(5, 1, 0, 1) // memory of at least 1 page
	memCheckOp = []byte{
		0x41, 0x00, 0x28, 0x02, 0x00, 0x04, 0x40, 0x00, 0x0b, // if i32.load(0) != 0: unreachable
		0x41, 0x01, 0x40, 0x00, 0x1a, // drop(memory.grow(1))
		0x41, 0x88, 0x80, 0x04, 0x28, 0x02, 0x00, 0x04, 0x40, 0x00, 0x0b, // if i32.load(65544) != 0: unreachable
	}
	memWriteOp = []byte{
		0x41, 0x00, 0x41, 0x01, 0x36, 0x02, 0x00, // i32.store(0, 1)
		0x41, 0x01, 0x40, 0x00, 0x1a, // drop(memory.grow(1))
		0x41, 0x88, 0x80, 0x04, 0x41, 0x07, 0x36, 0x02, 0x00, // i32.store(65544, 7)
	}
	memTouchOp = []byte{
		0x41, 0x80, 0x08, 0x40, 0x00, 0x1a, // drop(memory.grow(1024))
		0x41, 0x00, 0x41, 0x01, 0x41, 0x80, 0x80, 0x80, 0x20, 0xfc, 0x0b, 0x00, // memory.fill(0, 1, 64 MiB)
	}
)

// funcModule is a WASI command on one page of memory whose _start runs
// body (no locals).
func funcModule(body ...byte) []byte {
	code := append([]byte{0}, body...)
	code = append(code, 0x0b)
	return wasmModule(typeVoid, funcType0, memPage1, exportStart0, wasmSection(10, append([]byte{1, byte(len(code))}, code...)...))
}

func memClean() []byte   { return funcModule(append(memCheckOp, memWriteOp...)...) }
func memDirty() []byte   { return funcModule(append(memWriteOp, 0x00)...) }
func memTouch64() []byte { return funcModule(memTouchOp...) }

// TestTasksStartFromIdenticalState runs tasks one after another on one
// worker process, so that every task after the first reuses what the
// worker keeps (compiled modules, linear memory): each must start as in a
// fresh instance. A Go program that counts its tasks in a global and
// checks that its zero-initialised and freshly grown memory is zero gets
// the same answer every time, also after a task that dirtied all of it and
// panicked; a hand-made module that traps on a non-zero word succeeds
// after one that wrote those words and trapped. The same task's metered
// work is the same every time.
func TestTasksStartFromIdenticalState(t *testing.T) {
	needHostile(t)
	p := newTestPool(t, 1)
	clean := writeModule(t, "clean.wasm", memClean())
	dirty := writeModule(t, "dirty.wasm", memDirty())
	global := func(n int) Request { return task("global", n) }
	raw := func(m testModule) Request { r := task("", 0); r.ModulePath, r.ModuleSHA256 = m.path, m.sha; return r }

	const want = `{"seen":1,"dirty":0}` + "\n"
	steps := []struct {
		name string
		req  Request
		trap bool
	}{
		{"go first", global(0), false},
		{"go second", global(0), false},
		{"go dirties and panics", global(1), true},
		{"go after the panic", global(0), false},
		{"raw clean", raw(clean), false},
		{"raw clean again", raw(clean), false},
		{"raw dirties and traps", raw(dirty), true},
		{"raw after the trap", raw(clean), false},
		{"go after raw", global(0), false},
	}
	pid := 0
	works := map[string]uint64{} // the metered work of each module's clean task
	for _, s := range steps {
		res := mustRun(t, p, s.req)
		if pid == 0 {
			pid = res.PID
		}
		if res.PID != pid {
			t.Fatalf("%s: ran on worker %d, want the same worker %d throughout", s.name, res.PID, pid)
		}
		switch {
		case s.trap && (res.Failure == nil || res.Failure.Kind != FailureTrap):
			t.Errorf("%s: failure %v, want a trap", s.name, res.Failure)
		case !s.trap && res.Failure != nil:
			t.Errorf("%s: failed: %v\nstderr: %s", s.name, res.Failure, res.Stderr)
		case !s.trap && s.req.ModulePath == hostile.path && string(res.Stdout) != want:
			t.Errorf("%s: stdout %q, want %q", s.name, res.Stdout, want)
		}
		if !s.trap {
			if w, ok := works[s.req.ModulePath]; ok && w != res.Work {
				t.Errorf("%s: work %d, want %d as the same task counted before", s.name, res.Work, w)
			}
			works[s.req.ModulePath] = res.Work
		}
	}
}
