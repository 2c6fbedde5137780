package worker

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
)

// Hand-assembled modules for the rewriter, with instruction counts worked
// out by hand.

var (
	typesStartF = wasmSection(1, 2, 0x60, 0, 0, 0x60, 1, 0x7F, 1, 0x7F) // type 0: [] -> []; type 1: [i32] -> [i32]
	funcs01     = wasmSection(3, 2, 0, 1)                               // func 0 of type 0, func 1 of type 1

	// countStart is _start of the counting module:
	//
	//	loop $top
	//	  local.get 0  call $f  drop
	//	  block $c block $b block $a
	//	    local.get 0  i32.const 3  i32.rem_u
	//	    br_table $a $b $c
	//	  end  i32.const 7  drop  br $c
	//	  end  i32.const 8  drop
	//	  end
	//	  local.get 0  i32.const 1  i32.add  local.tee 0
	//	  i32.const 10  i32.lt_u  br_if $top
	//	end
	//
	// Each of its 10 iterations counts 3 + 4 + 7 instructions, and 3, 2
	// or 0 more as i%3 is 0, 1 or 2: 140 + 18.
	countStart = []byte{
		0x01, 0x01, 0x7F, // one i32 local
		0x03, 0x40, 0x20, 0x00, 0x10, 0x01, 0x1A,
		0x02, 0x40, 0x02, 0x40, 0x02, 0x40,
		0x20, 0x00, 0x41, 0x03, 0x70, 0x0E, 0x02, 0x00, 0x01, 0x02,
		0x0B, 0x41, 0x07, 0x1A, 0x0C, 0x01,
		0x0B, 0x41, 0x08, 0x1A,
		0x0B,
		0x20, 0x00, 0x41, 0x01, 0x6A, 0x22, 0x00, 0x41, 0x0A, 0x49, 0x0D, 0x00,
		0x0B, 0x0B,
	}
	// countF is $f (param i32) (result i32):
	//
	//	local.get 0  i32.const 5  i32.lt_s
	//	if (result i32)  local.get 0  i32.const 2  i32.mul
	//	else  local.get 0  return
	//	end
	//
	// It counts 4 + 4 = 8 for a parameter under 5, else 4 + 2 = 6: 70 for
	// the parameters 0 to 9.
	countF = []byte{
		0x00,
		0x20, 0x00, 0x41, 0x05, 0x48,
		0x04, 0x7F, 0x20, 0x00, 0x41, 0x02, 0x6C,
		0x05, 0x20, 0x00, 0x0F,
		0x0B, 0x0B,
	}
)

// countModule is the counting module: 140 + 18 + 70 = 228 instructions.
const countModuleWork = 228

func countModule() []byte {
	return wasmModule(typesStartF, funcs01, exportStart0, codeSection(countStart, countF))
}

// richModule (wat2wasm of the text below) uses what the counting module
// does not: a br_table to a loop, a function of two results, memory.copy
// and memory.fill, a saturating truncation, sign extension, SIMD,
// call_indirect, if with a result, ref.null and a global. It counts 136:
// the loop 8 × 11 + 7, then 41 (with 2 in each call of $two).
//
//	(module
//	  (type $t2 (func (result i32 i64)))
//	  (memory 1)
//	  (data (i32.const 16) "hello")
//	  (table 2 funcref)
//	  (elem (i32.const 0) $two $start)
//	  (global $mine (mut i64) (i64.const 7))
//	  (func $two (type $t2)
//	    i32.const 1
//	    i64.const 2)
//	  (func $start (export "_start")
//	    (local i32 f32 v128)
//	    (block $out
//	      (loop $l
//	        local.get 0 i32.const 1 i32.add local.tee 0
//	        i32.const 9 i32.ge_u br_if $out
//	        local.get 0 i32.const 3 i32.and
//	        br_table $l $l $l $l $out))
//	    i32.const 0 i32.const 16 i32.const 5 memory.copy
//	    i32.const 32 i32.const 7 i32.const 2 memory.fill
//	    f32.const 1.5 i32.trunc_sat_f32_s drop
//	    i32.const 300 i32.extend8_s drop
//	    v128.const i32x4 1 2 3 4 i32x4.extract_lane 2 drop
//	    call $two drop drop
//	    i32.const 0 call_indirect (type $t2) drop drop
//	    i32.const 1 (if (result i32) (then i32.const 2) (else i32.const 3)) drop
//	    ref.null func drop
//	    global.get $mine i64.const 1 i64.add global.set $mine
//	    memory.size drop)
//	)
var richModule = []byte{
	0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, 0x01, 0x09, 0x02, 0x60, 0x00, 0x02, 0x7f, 0x7e,
	0x60, 0x00, 0x00, 0x03, 0x03, 0x02, 0x00, 0x01, 0x04, 0x04, 0x01, 0x70, 0x00, 0x02, 0x05, 0x03,
	0x01, 0x00, 0x01, 0x06, 0x06, 0x01, 0x7e, 0x01, 0x42, 0x07, 0x0b, 0x07, 0x0a, 0x01, 0x06, 0x5f,
	0x73, 0x74, 0x61, 0x72, 0x74, 0x00, 0x01, 0x09, 0x08, 0x01, 0x00, 0x41, 0x00, 0x0b, 0x02, 0x00,
	0x01, 0x0a, 0x88, 0x01, 0x02, 0x06, 0x00, 0x41, 0x01, 0x42, 0x02, 0x0b, 0x7f, 0x03, 0x01, 0x7f,
	0x01, 0x7d, 0x01, 0x7b, 0x02, 0x40, 0x03, 0x40, 0x20, 0x00, 0x41, 0x01, 0x6a, 0x22, 0x00, 0x41,
	0x09, 0x4f, 0x0d, 0x01, 0x20, 0x00, 0x41, 0x03, 0x71, 0x0e, 0x04, 0x00, 0x00, 0x00, 0x00, 0x01,
	0x0b, 0x0b, 0x41, 0x00, 0x41, 0x10, 0x41, 0x05, 0xfc, 0x0a, 0x00, 0x00, 0x41, 0x20, 0x41, 0x07,
	0x41, 0x02, 0xfc, 0x0b, 0x00, 0x43, 0x00, 0x00, 0xc0, 0x3f, 0xfc, 0x00, 0x1a, 0x41, 0xac, 0x02,
	0xc0, 0x1a, 0xfd, 0x0c, 0x01, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00,
	0x04, 0x00, 0x00, 0x00, 0xfd, 0x1b, 0x02, 0x1a, 0x10, 0x00, 0x1a, 0x1a, 0x41, 0x00, 0x11, 0x00,
	0x00, 0x1a, 0x1a, 0x41, 0x01, 0x04, 0x7f, 0x41, 0x02, 0x05, 0x41, 0x03, 0x0b, 0x1a, 0xd0, 0x70,
	0x1a, 0x23, 0x00, 0x42, 0x01, 0x7c, 0x24, 0x00, 0x3f, 0x00, 0x1a, 0x0b, 0x0b, 0x0b, 0x01, 0x00,
	0x41, 0x10, 0x0b, 0x05, 0x68, 0x65, 0x6c, 0x6c, 0x6f,
}

const richModuleWork = 136

// codeSection is a code section of the given bodies (each shorter than
// 128 bytes).
func codeSection(bodies ...[]byte) []byte {
	c := []byte{byte(len(bodies))}
	for _, b := range bodies {
		c = append(c, byte(len(b)))
		c = append(c, b...)
	}
	return wasmSection(10, c...)
}

// runMetered meters bin (plainly or not), compiles it with wazero's
// interpreter and runs its _start, returning the counter and _start's
// error.
func runMetered(t *testing.T, bin []byte, plain bool) (uint64, error) {
	t.Helper()
	out, err := meterModuleWith(bin, plain)
	if err != nil {
		t.Fatalf("meter: %v", err)
	}
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer rt.Close(ctx)
	mod, err := rt.InstantiateWithConfig(ctx, out, wazero.NewModuleConfig().WithStartFunctions())
	if err != nil {
		t.Fatalf("instantiate the metered module: %v", err)
	}
	_, callErr := mod.ExportedFunction("_start").Call(ctx)
	return mod.ExportedGlobal(MeterExport).Get(), callErr
}

// TestMeterCounts runs hand-assembled modules whose instruction counts
// are worked out by hand: loops, br_if, br_table, br, if and else, a
// call and a return with a value. Both forms count the same.
func TestMeterCounts(t *testing.T) {
	for _, plain := range []bool{true, false} {
		got, err := runMetered(t, countModule(), plain)
		if err != nil || got != countModuleWork {
			t.Errorf("plain=%v: counted %d (%v), want %d", plain, got, err, countModuleWork)
		}
	}
	for _, plain := range []bool{true, false} {
		got, err := runMetered(t, richModule, plain)
		if err != nil || got != richModuleWork {
			t.Errorf("rich module, plain=%v: counted %d (%v), want %d", plain, got, err, richModuleWork)
		}
	}
	got, err := runMetered(t, emptyModule(), false)
	if err != nil || got != 0 {
		t.Errorf("the empty module counted %d (%v), want 0", got, err)
	}
}

// TestMeterTrap: a trap ends the count where the functions active at it
// last added their counts to the global, the same every time. Here _start
// has a loop, so it adds its count before each call: the loop's 3 × 7
// instructions and the segment of the call, charged at its head, 4 with
// the trap.
func TestMeterTrap(t *testing.T) {
	// _start: loop (local.get 0  i32.const 1  i32.add  local.tee 0
	// i32.const 3  i32.lt_u  br_if 0) end  call $g  i32.const 2  drop
	// unreachable; $g: nothing. Both [] -> [].
	bin := wasmModule(typeVoid, wasmSection(3, 2, 0, 0), exportStart0, codeSection(
		[]byte{0x01, 0x01, 0x7F, 0x03, 0x40, 0x20, 0x00, 0x41, 0x01, 0x6A, 0x22, 0x00, 0x41, 0x03, 0x49, 0x0D, 0x00, 0x0B,
			0x10, 0x01, 0x41, 0x02, 0x1A, 0x00, 0x0B},
		[]byte{0x00, 0x0B}))
	for _, plain := range []bool{true, false, false} {
		got, err := runMetered(t, bin, plain)
		if err == nil || !strings.Contains(err.Error(), "unreachable") || got != 25 {
			t.Errorf("plain=%v: counted %d (%v), want 25 and a trap", plain, got, err)
		}
	}
}

// TestMeterRefuses: modules the rewriter cannot meter fail with a message
// that names the problem and its offset, and a worker turns that into a
// bad-module failure.
func TestMeterRefuses(t *testing.T) {
	atomic := wasmModule(typeVoid, funcType0, exportStart0, codeSection([]byte{0x00, 0x41, 0x00, 0xFE, 0x00, 0x02, 0x00, 0x1A, 0x0B}))
	atomicAt := len(atomic) - 6 // the 0xFE
	tests := []struct {
		name string
		bin  []byte
		want string
	}{
		{"atomics", atomic, fmt.Sprintf("metering: unknown opcode 0xfe at offset %d", atomicAt)},
		{"unknown 0xfc", wasmModule(typeVoid, funcType0, exportStart0, codeSection([]byte{0x00, 0xFC, 0x12, 0x0B})), "metering: unknown opcode 0xfc 0x12 at offset"},
		{"reserved simd", wasmModule(typeVoid, funcType0, exportStart0, codeSection([]byte{0x00, 0xFD, 0x9A, 0x01, 0x0B})), "metering: unknown opcode 0xfd 0x9a at offset"},
		{"exports the counter", wasmModule(typeVoid, funcType0, wasmSection(7, 1, 15, '_', '_', 'i', 'd', 'l', 'e', 'p', 'o', 'o', 'l', '_', 'w', 'o', 'r', 'k', 0, 0), codeEmpty),
			`metering: the module already exports "__idlepool_work"`},
		{"truncated body", wasmModule(typeVoid, funcType0, exportStart0, codeSection([]byte{0x00, 0x41})), "metering: "},
		{"no end", wasmModule(typeVoid, funcType0, exportStart0, codeSection([]byte{0x00, 0x01})), "ends before its last end"},
		{"branch too far", wasmModule(typeVoid, funcType0, exportStart0, codeSection([]byte{0x00, 0x0C, 0x05, 0x0B})), "metering: branch to label 5"},
		{"else without if", wasmModule(typeVoid, funcType0, exportStart0, codeSection([]byte{0x00, 0x05, 0x0B})), "metering: else outside an if"},
		{"unknown section", wasmModule(wasmSection(42, 0)), "metering: unknown section 42 at offset 8"},
		{"sections out of order", wasmModule(funcType0, typeVoid), "out of order"},
		{"not wasm", []byte("\x7fELF\x02\x01\x01\x00"), "metering: not a WebAssembly module"},
		{"function of no type", wasmModule(funcType0, exportStart0, codeEmpty), "metering: function of type 0 at offset"},
		{"bodies and functions differ", wasmModule(typeVoid, funcType0, exportStart0, codeSection([]byte{0x00, 0x0B}, []byte{0x00, 0x0B})), "2 function bodies for 1 functions"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := meterModule(tc.bin)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("meterModule: %v, want an error with %q", err, tc.want)
			}
		})
	}
	// Through a worker's host: a bad module, with the message.
	h := newTestHost(t, true)
	path := filepath.Join(t.TempDir(), "atomic.wasm")
	if err := os.WriteFile(path, atomic, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := hashModule(path)
	if err != nil {
		t.Fatal(err)
	}
	res := runInHost(t, h, &runBody{ModulePath: m.path, ModuleSHA256: m.sha, Seed: strings.Repeat("0", 64),
		MemoryLimitPages: 16, MaxStdoutBytes: 1024, MaxStderrBytes: 1024})
	if res.Failure == nil || res.Failure.Kind != FailureBadModule || res.Failure.Message != tests[0].want {
		t.Errorf("failure %+v, want bad-module %q", res.Failure, tests[0].want)
	}
}

// TestMeterHostile runs modes of the hostile Go program through a
// worker: the count goes with every outcome the task determines (a
// success, an exit status, a panic), is the same on a second worker, and
// grows with the work.
func TestMeterHostile(t *testing.T) {
	needHostile(t)
	p := newTestPool(t, 2)
	counts := map[string]uint64{}
	for _, mode := range []struct {
		name string
		n    int
		kind FailureKind
	}{{"echo", 0, ""}, {"busy", 1000, ""}, {"busy", 100000, ""}, {"exit", 0, FailureExitStatus}, {"panic", 0, FailureTrap}} {
		req := task(mode.name, mode.n)
		first := mustRun(t, p, req)
		req.AvoidPID = first.PID
		second := mustRun(t, p, req)
		if (first.Failure == nil) != (mode.kind == "") || (first.Failure != nil && first.Failure.Kind != mode.kind) {
			t.Fatalf("%s: failure %v, want %q", mode.name, first.Failure, mode.kind)
		}
		if first.Work == 0 || first.Work != second.Work || first.PID == second.PID {
			t.Errorf("%s/%d: counted %d on worker %d and %d on worker %d; want the same, not 0, on two workers",
				mode.name, mode.n, first.Work, first.PID, second.Work, second.PID)
		}
		counts[fmt.Sprintf("%s/%d", mode.name, mode.n)] = first.Work
	}
	// The busy loop's 99000 more iterations count at least one
	// instruction each.
	if d := counts["busy/100000"] - counts["busy/1000"]; counts["busy/100000"] < counts["busy/1000"] || d < 99000 {
		t.Errorf("busy/100000 counted %d, busy/1000 %d: want at least 99000 more", counts["busy/100000"], counts["busy/1000"])
	}
	t.Logf("counts: %v", counts)
}

// FuzzMeterModule feeds the rewriter arbitrary modules (a worker meters
// every module it is given, which is outside input): it must not panic,
// must give the same bytes twice, and whatever wazero accepts before
// metering it must accept after. The seeds (testdata/fuzz/FuzzMeterModule)
// are the hand-assembled modules of these tests.
func FuzzMeterModule(f *testing.F) {
	f.Add(countModule())
	f.Add(richModule)
	f.Add(emptyModule())
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer rt.Close(ctx)
	f.Fuzz(func(t *testing.T, bin []byte) {
		out, err := meterModule(bin)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "metering: ") {
				t.Fatalf("error %q does not start with \"metering: \"", err)
			}
			return
		}
		again, err := meterModule(bin)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("a second rewrite gave other bytes (%v)", err)
		}
		if _, err := meterModule(out); err == nil || !strings.Contains(err.Error(), "already exports") {
			t.Fatalf("metering the metered module: %v, want it refused as already metered", err)
		}
		orig, err := rt.CompileModule(ctx, bin)
		if err != nil {
			return
		}
		_ = orig.Close(ctx)
		metered, err := rt.CompileModule(ctx, out)
		if err != nil {
			t.Fatalf("wazero accepts the module but not its metered form: %v", err)
		}
		_ = metered.Close(ctx)
	})
}
