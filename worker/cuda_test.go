package worker

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// testPTX is a "module" the fake driver accepts: its .entry lines name
// the fake kernels.
const testPTX = `.version 7.0
.target sm_60
.address_size 64
.visible .entry add_u32(.param .u64 p, .param .u32 n, .param .u32 k) { ret; }
.visible .entry echo_params(.param .u64 out, .param .u32 a, .param .u64 b, .param .f32 c, .param .f64 d, .param .u64 e) { ret; }
.visible .entry fault() { ret; }
/*
.visible .entry commented_out(.param .u64 x) { ret; }
*/
.visible .entry by_value(.param .align 8 .b8 s[24]) { ret; }
.visible .entry driver_disagrees(.param .u64 a, .param .u64 b) { ret; }
`

var (
	cudaGuestOnce sync.Once
	cudaGuest     testModule
	cudaGuestErr  error
)

// needCUDAGuest builds testdata/cudaguest once, skipping the test where
// there is no go tool.
func needCUDAGuest(t *testing.T) testModule {
	t.Helper()
	cudaGuestOnce.Do(func() {
		cudaGuest, cudaGuestErr = buildWasm(filepath.Join(testDir, "cudaguest.wasm"), "./testdata/cudaguest")
	})
	switch {
	case errors.Is(cudaGuestErr, errNoGoTool):
		t.Skipf("cuda test module unavailable: %v", cudaGuestErr)
	case cudaGuestErr != nil:
		t.Fatal(cudaGuestErr)
	}
	return cudaGuest
}

// newCUDAPool returns a pool of test workers whose CUDA driver is the fake
// ("none": no driver at all), and the directory where the fake records
// its contexts.
func newCUDAPool(t *testing.T, fake string) (*Pool, string) {
	t.Helper()
	checkClean(t)
	dir := t.TempDir()
	if fake == "" {
		fake = dir
	}
	cfg := childConfig(t, 1)
	cfg.Env = append(cfg.Env, fakeCUDAEnv+"="+fake)
	cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	p, err := NewPool(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p, dir
}

// cudaReq is a request to run the cuda guest in mode on GPU "GPU-fake-0"
// (none if !gpu) with a device-memory cap of capMiB.
func cudaReq(t *testing.T, mode string, n int, gpu bool, capMiB int64) Request {
	m := needCUDAGuest(t)
	stdin, _ := json.Marshal(map[string]any{"mode": mode, "n": n, "ptx": testPTX})
	r := Request{ModulePath: m.path, ModuleSHA256: m.sha, Stdin: stdin, Timeout: 2 * time.Minute, GPUMemoryLimitMiB: capMiB}
	if gpu {
		r.GPUs = []string{"GPU-fake-0"}
	}
	return r
}

// runGuest runs req, which must succeed, and returns the guest's report.
func runGuest(t *testing.T, p *Pool, req Request) (map[string]any, Result) {
	t.Helper()
	res := mustSucceed(t, p, req)
	var out map[string]any
	if err := json.Unmarshal(res.Stdout, &out); err != nil {
		t.Fatalf("guest output %q: %v", res.Stdout, err)
	}
	return out, res
}

// codes returns the guest's return codes (the report's numbers).
func codes(out map[string]any) map[string]int32 {
	c := map[string]int32{}
	for k, v := range out {
		if f, ok := v.(float64); ok {
			c[k] = int32(f)
		}
	}
	return c
}

// checkCodes compares the codes of want's steps with the report, and
// that each error in errs (step -> substring) is in that step's last
// error.
func checkCodes(t *testing.T, out map[string]any, want map[string]int32, errs map[string]string) {
	t.Helper()
	got := codes(out)
	for k := range got {
		if _, ok := want[k]; !ok {
			delete(got, k)
		}
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("codes (-want +got):\n%s", d)
	}
	for step, sub := range errs {
		msg, _ := out[step+".error"].(string)
		if !strings.Contains(msg, sub) {
			t.Errorf("last error after %s is %q, want it to contain %q", step, msg, sub)
		}
	}
}

// contexts returns how many contexts the fake created and destroyed in
// all worker processes, and whether any process loaded the driver.
func contexts(t *testing.T, dir string) (created, destroyed int, loaded bool) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "loaded-") {
			loaded = true
			continue
		}
		if strings.HasPrefix(e.Name(), "launches-") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		var c, d int
		if _, err := fmt.Sscanf(string(b), "%d %d", &c, &d); err != nil {
			t.Fatalf("%s: %q: %v", e.Name(), b, err)
		}
		created += c
		destroyed += d
	}
	return created, destroyed, loaded
}

// checkNoLiveContext fails the test when a context the fake created was
// not destroyed.
func checkNoLiveContext(t *testing.T, dir string) {
	t.Helper()
	if c, d, _ := contexts(t, dir); c != d {
		t.Errorf("%d contexts created, %d destroyed: %d live after the task", c, d, c-d)
	}
}

// TestMeterGPULaunches: a task's count (Result.Work) includes the threads
// of its accepted launches, grid × block, and only those: two more
// launches of 2^30 threads on the (fake) GPU count 2^31 more, and a few
// instructions of the loop; without a GPU the launches are refused and
// count nothing.
func TestMeterGPULaunches(t *testing.T) {
	p, _ := newCUDAPool(t, "")
	work := func(n int, gpu bool) uint64 {
		_, res := runGuest(t, p, cudaReq(t, "launches", n, gpu, 0))
		return res.Work
	}
	const threads, loop = 1 << 30, 100000
	w1, w3 := work(1, true), work(3, true)
	if w3 < w1+2*threads || w3 > w1+2*threads+loop {
		t.Errorf("1 launch counted %d, 3 launches %d: want 2 × %d more and under %d beside", w1, w3, threads, loop)
	}
	n1, n3 := work(1, false), work(3, false)
	if n3 < n1 || n3 > n1+loop || n1 == 0 {
		t.Errorf("without a GPU 1 launch counted %d, 3 launches %d: want the instructions only", n1, n3)
	}
}

func TestCUDANoGPUGiven(t *testing.T) {
	p, dir := newCUDAPool(t, "")
	out, res := runGuest(t, p, cudaReq(t, "nodevice", 0, false, 0))
	checkCodes(t, out, map[string]int32{
		"device_count": 0, "module_load": CUDAErrNoDevice, "mem_alloc": CUDAErrNoDevice,
		"device_info": CUDAErrNoDevice, "synchronize": 0,
	}, map[string]string{"module_load": "given no GPU", "mem_alloc": "no GPU for this task"})
	if res.GPU != nil {
		t.Errorf("Result.GPU = %+v for a task without GPUs, want nil", res.GPU)
	}
	if _, _, loaded := contexts(t, dir); loaded {
		t.Error("the worker loaded the CUDA driver for a task given no GPU")
	}
}

func TestCUDANoDriver(t *testing.T) {
	p, _ := newCUDAPool(t, "none")
	out, _ := runGuest(t, p, cudaReq(t, "nodevice", 0, true, 0))
	checkCodes(t, out, map[string]int32{
		"device_count": 0, "module_load": CUDAErrNoDevice, "mem_alloc": CUDAErrNoDevice, "device_info": CUDAErrNoDevice,
	}, map[string]string{"module_load": "CUDA driver unavailable: libcuda.so.1"})
}

// TestCUDAHostModule drives every function of idlepool_cuda through a
// real guest and the fake driver, one worker process for all modes, and
// checks after each task that its context was destroyed.
func TestCUDAHostModule(t *testing.T) {
	p, dir := newCUDAPool(t, "")
	tests := []struct {
		mode   string
		n      int
		capMiB int64
		want   map[string]int32
		errs   map[string]string // step -> substring of its last error
		check  func(t *testing.T, out map[string]any, res Result)
	}{
		{mode: "info", capMiB: 4096,
			want: map[string]int32{"device_count": 1, "device_info.small": CUDAErrInvalidArgument, "device_info.ordinal": CUDAErrNoDevice,
				"device_info.negative": CUDAErrNoDevice, "device_info.outside": CUDAErrOutOfBounds},
			errs: map[string]string{"device_info.small": "too small", "device_info.ordinal": "device 5 does not exist: this task has 1",
				"device_info.outside": "outside the guest's"},
			check: func(t *testing.T, out map[string]any, _ Result) {
				want := `{"name":"Fake GPU","memory_mib":8192,"compute_capability":"8.9","memory_cap_mib":4096}`
				if out["info"] != want || int(out["device_info"].(float64)) != len(want) {
					t.Errorf("device_info wrote %q (%v bytes), want %q", out["info"], out["device_info"], want)
				}
			}},
		{mode: "bounds",
			want: map[string]int32{"module_load.past": CUDAErrOutOfBounds, "module_load.overflow": CUDAErrOutOfBounds, "module_load.huge": CUDAErrOutOfBounds,
				"mem_alloc": 1, "htod.ok": 0, "htod.end": 0, "htod.negative": CUDAErrOutOfBounds, "htod.past": CUDAErrOutOfBounds,
				"htod.toolong": CUDAErrOutOfBounds, "htod.hugeoffset": CUDAErrOutOfBounds, "htod.minoffset": CUDAErrOutOfBounds,
				"htod.guest": CUDAErrOutOfBounds, "htod.guestwrap": CUDAErrOutOfBounds, "dtoh.negative": CUDAErrOutOfBounds,
				"dtoh.past": CUDAErrOutOfBounds, "dtoh.guest": CUDAErrOutOfBounds, "dtoh.empty": 0, "last_error.outside": CUDAErrOutOfBounds,
				"device_info.wrap": CUDAErrOutOfBounds},
			errs: map[string]string{"module_load.past": "PTX range", "htod.negative": "device range [-1, +4 bytes) is outside buffer 1 of 64 bytes",
				"htod.past": "device range [61, +4 bytes)", "htod.guest": "guest range"}},
		{mode: "handles",
			want: map[string]int32{"mem_free.unknown": CUDAErrInvalidHandle, "mem_alloc": 1, "mem_free": 0, "mem_free.double": CUDAErrInvalidHandle,
				"htod.freed": CUDAErrInvalidHandle, "dtoh.freed": CUDAErrInvalidHandle, "module_load": 2, "mem_free.module": CUDAErrInvalidHandle,
				"function_get.badmodule": CUDAErrInvalidHandle, "function_get.buffer": CUDAErrInvalidHandle, "function_get": 3,
				"launch.badfn": CUDAErrInvalidHandle, "launch.module": CUDAErrInvalidHandle, "launch.freedparam": CUDAErrInvalidHandle,
				"mem_free.negative": CUDAErrInvalidHandle},
			errs: map[string]string{"mem_free.double": "buffer handle 1 is not a live buffer", "function_get.badmodule": "module handle 999",
				"launch.badfn": "function handle 777", "launch.freedparam": "parameter 0: buffer handle 1"}},
		{mode: "cap", n: 1, capMiB: 1,
			want: map[string]int32{"mem_alloc.zero": CUDAErrInvalidArgument, "mem_alloc.negative": CUDAErrInvalidArgument, "mem_alloc.all": 1,
				"mem_alloc.over": CUDAErrOutOfMemory, "mem_free": 0, "mem_alloc.half": 2, "mem_alloc.half2": 3, "mem_alloc.over2": CUDAErrOutOfMemory,
				"mem_free.half": 0, "mem_alloc.again": 4, "mem_alloc.huge": CUDAErrOutOfMemory},
			errs: map[string]string{"mem_alloc.over": "over its cap of 1 MiB (the donor's share of this GPU)"},
			check: func(t *testing.T, out map[string]any, _ Result) {
				if s, _ := out["info"].(string); !strings.Contains(s, `"memory_cap_mib":1}`) {
					t.Errorf("device_info %q, want memory_cap_mib 1", s)
				}
			}},
		{mode: "cap", n: 9000, capMiB: 0, // no cap but the (fake) device's 8192 MiB
			want: map[string]int32{"mem_alloc.all": CUDAErrOutOfMemory, "mem_alloc.huge": CUDAErrOutOfMemory},
			errs: map[string]string{"mem_alloc.huge": "CUDA_ERROR_OUT_OF_MEMORY"}},
		{mode: "limit",
			want: map[string]int32{"mem_alloc.4096th": 4096, "mem_alloc.4097th": CUDAErrLimit, "mem_free": 0, "mem_alloc.after_free": 4097,
				"module_load.64th": 4097 + 64, "module_load.65th": CUDAErrLimit, "function_get.1024th": 4097 + 64 + 1024,
				"function_get.1025th": CUDAErrLimit},
			errs: map[string]string{"mem_alloc.4097th": "at most 4096 buffers", "module_load.65th": "at most 64 modules",
				"function_get.1025th": "at most 1024 functions"}},
		{mode: "module",
			want: map[string]int32{"module_load.bad": CUDAErrModuleLoad, "module_load.empty": CUDAErrInvalidArgument, "module_load": 1,
				"function_get.unknown": CUDAErrNotFound, "function_get.empty": CUDAErrInvalidArgument, "function_get.nul": CUDAErrInvalidArgument,
				"function_get": 2},
			errs: map[string]string{"module_load.bad": "CUDA_ERROR_INVALID_PTX", "function_get.unknown": `no kernel "no_such_kernel"`}},
		{mode: "compute",
			want: map[string]int32{"module_load": 1, "function_get": 2, "mem_alloc": 3, "htod": 0, "launch": 0, "synchronize": 0, "dtoh": 0,
				"dtoh.offset": 0, "function_get.echo": 4, "mem_alloc.echo": 5, "launch.echo": 0, "dtoh.echo": 0,
				"launch.grid0": CUDAErrInvalidArgument, "launch.gridy": CUDAErrInvalidArgument, "launch.block": CUDAErrInvalidArgument,
				"launch.blockthreads": CUDAErrInvalidArgument, "launch.blockz": CUDAErrInvalidArgument, "launch.count": CUDAErrInvalidArgument,
				"launch.negcount": CUDAErrInvalidArgument, "launch.paramsoutside": CUDAErrOutOfBounds, "launch.kind": CUDAErrInvalidArgument,
				"launch.reserved": CUDAErrInvalidArgument, "launch.bighandle": CUDAErrInvalidHandle,
				"function_get.fault": 6, "launch.fault": 0, "synchronize.fault": CUDAErrLaunch,
				"launch.fewer": CUDAErrInvalidArgument, "launch.more": CUDAErrInvalidArgument, "launch.narrow": CUDAErrInvalidArgument,
				"launch.wide": CUDAErrInvalidArgument, "function_get.byvalue": 7, "launch.byvalue": CUDAErrInvalidArgument,
				"function_get.commented": CUDAErrNotFound, "module_load.binary": CUDAErrModuleLoad,
				"function_get.disagrees": CUDAErrInvalidArgument},
			errs: map[string]string{"launch.block": "block [2048 1 1]", "launch.count": "65 parameters", "launch.kind": "unknown kind 9",
				"synchronize.fault": "CUDA_ERROR_ILLEGAL_ADDRESS", "launch.fewer": "kernel add_u32 takes 3 parameters, the launch passes 2",
				"launch.more": "takes 3 parameters, the launch passes 4", "launch.narrow": "parameter 0 takes 8 bytes; pass a buffer, u64 or f64, not a u32",
				"launch.wide": "parameter 1 takes 4 bytes; pass a u32 or f32, not a u64", "launch.byvalue": "parameter 0 is a 24-byte value",
				"module_load.binary": "not PTX text", "function_get.disagrees": `the driver reads kernel "driver_disagrees"'s parameters as [8] bytes, its PTX declares [8 8]`},
			check: func(t *testing.T, out map[string]any, res Result) {
				if out["sum_ok"] != true {
					t.Error("the kernel's result is wrong")
				}
				if d := cmp.Diff([]any{float64(17), float64(18)}, out["part"]); d != "" {
					t.Errorf("partial copy (-want +got):\n%s", d)
				}
				// Buffers are the fake's first allocations, 256-byte aligned.
				want := "0x7f0000001000 0x5 0x10000000000 0x3fc00000 0xc002000000000000 0x7f0000000000"
				if out["echo"] != want {
					t.Errorf("kernel parameters %v, want %s", out["echo"], want)
				}
				if res.GPU == nil || res.GPU.Modules != 1 || res.GPU.Launches != 3 {
					t.Errorf("Result.GPU = %+v, want 1 module and 3 launches (add, echo, fault)", res.GPU)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.mode+"/"+strconv.Itoa(tc.n), func(t *testing.T) {
			out, res := runGuest(t, p, cudaReq(t, tc.mode, tc.n, true, tc.capMiB))
			checkCodes(t, out, tc.want, tc.errs)
			if tc.check != nil {
				tc.check(t, out, res)
			}
			checkNoLiveContext(t, dir)
		})
	}
	if c, _, _ := contexts(t, dir); c == 0 {
		t.Error("the fake made no context at all")
	}
}

// TestCUDAContextEndsWithTask checks that a task's context is destroyed
// when it traps, and what happens when its worker is killed at the time
// limit: the process is gone, and with it (the real driver's doing) every
// context it held.
func TestCUDAContextEndsWithTask(t *testing.T) {
	p, dir := newCUDAPool(t, "")
	res := mustRun(t, p, cudaReq(t, "trap", 0, true, 0))
	if res.Failure == nil || res.Failure.Kind != FailureTrap {
		t.Fatalf("failure %v, want trap", res.Failure)
	}
	checkNoLiveContext(t, dir)
	if c, _, _ := contexts(t, dir); c != 1 {
		t.Errorf("%d contexts created, want 1", c)
	}

	req := cudaReq(t, "loop", 0, true, 0)
	req.Timeout = 10 * time.Second
	res = mustRun(t, p, req)
	if res.Failure == nil || res.Failure.Kind != FailureTimeout {
		t.Fatalf("failure %v, want timeout", res.Failure)
	}
	if err := signalZero(res.PID); err == nil {
		t.Errorf("worker %d still exists after the timeout", res.PID)
	}
	// The killed worker could not destroy its context; the driver
	// reclaims a dead process's contexts. The fake only counts.
	if c, d, _ := contexts(t, dir); c != d && c != d+1 {
		t.Errorf("%d contexts created, %d destroyed", c, d)
	}
	out, _ := runGuest(t, p, cudaReq(t, "compute", 0, true, 0))
	if out["sum_ok"] != true {
		t.Error("a task after the killed one computed a wrong result")
	}
}

// TestGPUWorkers checks that a GPU task runs in a worker process whose
// CUDA_VISIBLE_DEVICES names its GPUs, reused only by tasks with the same
// GPUs.
func TestGPUWorkers(t *testing.T) {
	p, _ := newCUDAPool(t, "")
	a := mustSucceed(t, p, cudaReq(t, "info", 0, true, 0))
	b := mustSucceed(t, p, cudaReq(t, "info", 0, true, 0))
	if a.PID != b.PID {
		t.Errorf("two tasks with the same GPUs ran on workers %d and %d, want one reused", a.PID, b.PID)
	}
	c := mustSucceed(t, p, cudaReq(t, "nodevice", 0, false, 0))
	if c.PID == b.PID {
		t.Errorf("a task without GPUs ran on the GPU worker %d", c.PID)
	}
	req := cudaReq(t, "info", 0, true, 0)
	req.GPUs = []string{"GPU-fake-0", "GPU-fake-1"}
	d := mustSucceed(t, p, req)
	if d.PID == b.PID || d.PID == c.PID {
		t.Errorf("a task with other GPUs reused worker %d", d.PID)
	}
}

func TestCUDAImports(t *testing.T) {
	p, _ := newCUDAPool(t, "")
	importCUDA := func(name string, typ byte) []byte {
		c := append([]byte{1, byte(len(CUDAModuleName))}, CUDAModuleName...)
		c = append(c, byte(len(name)))
		c = append(c, name...)
		return wasmSection(2, append(c, 0, typ)...)
	}
	// Types: 0 is [] -> [], 1 is [] -> [i32].
	types := wasmSection(1, 2, 0x60, 0, 0, 0x60, 0, 1, 0x7f)
	tests := []struct {
		name, message string
		bin           []byte
		kind          FailureKind
	}{
		{"unknown function", "imports idlepool_cuda.no_such: idlepool_cuda has no such function",
			wasmModule(types, importCUDA("no_such", 0), funcType0, exportStart1, codeEmpty), FailureBadModule},
		{"wrong signature", "instantiate", wasmModule(types, importCUDA("device_count", 0), funcType0, exportStart1, codeEmpty), FailureBadModule},
		{"right signature", "", wasmModule(types, importCUDA("device_count", 1), funcType0, exportStart1, codeEmpty), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := writeModule(t, "m.wasm", tc.bin)
			res := mustRun(t, p, Request{ModulePath: m.path, ModuleSHA256: m.sha, Timeout: time.Minute})
			switch {
			case tc.kind == "" && res.Failure != nil:
				t.Errorf("failure %v, want success", res.Failure)
			case tc.kind != "" && (res.Failure == nil || res.Failure.Kind != tc.kind || !strings.Contains(res.Failure.Message, tc.message)):
				t.Errorf("failure %v, want %s with %q", res.Failure, tc.kind, tc.message)
			}
		})
	}
}

func TestGPUMemoryLimitChecked(t *testing.T) {
	_, _, err := newRunBody(Request{ModulePath: "x.wasm", ModuleSHA256: strings.Repeat("00", 32), GPUs: []string{"GPU-1"}, GPUMemoryLimitMiB: -1})
	if !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), "GPUMemoryLimitMiB") {
		t.Errorf("error %v, want ErrInvalidRequest naming GPUMemoryLimitMiB", err)
	}
}
