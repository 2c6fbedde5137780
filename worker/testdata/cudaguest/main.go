// Command cudaguest is the WebAssembly test program of the idlepool_cuda
// host module: a WASI preview 1 command that calls the module's functions
// with good and bad arguments, as its task's mode says, and prints one JSON
// object: for each step its return code (and, where the test asks, the
// last error's words). It declares the imports itself, with raw offsets
// for pointers, so that it can pass any value the ABI allows.
//
// Task (stdin): {"mode": "...", "ptx": "...", "n": N}. Modes:
//
//	nodevice  device_count, then calls that need a device
//	info      device_info, good and bad
//	bounds    guest and device ranges outside memory and buffers
//	handles   bad, stale and mixed-up handles, double free
//	cap       allocations against a cap of n MiB
//	limit     too many buffers and modules
//	module    a PTX the driver refuses, a kernel name it lacks
//	compute   a kernel run end to end, parameter passing, launch checks
//	launches  n launches of 2^30 threads each (grid 2^20, block 1024)
//	trap      allocate, load a module, then trap
//	loop      allocate, load a module, then loop forever
package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
	"unsafe"
)

//go:wasmimport idlepool_cuda device_count
func deviceCount() int32

//go:wasmimport idlepool_cuda device_info
func deviceInfo(ordinal int32, out, outLen uint32) int32

//go:wasmimport idlepool_cuda module_load
func moduleLoad(ptx, n uint32) int32

//go:wasmimport idlepool_cuda function_get
func functionGet(module int32, name, n uint32) int32

//go:wasmimport idlepool_cuda mem_alloc
func memAlloc(bytes int64) int32

//go:wasmimport idlepool_cuda mem_free
func memFree(buf int32) int32

//go:wasmimport idlepool_cuda memcpy_htod
func memcpyHtoD(buf int32, offset int64, src, n uint32) int32

//go:wasmimport idlepool_cuda memcpy_dtoh
func memcpyDtoH(dst uint32, buf int32, offset int64, n uint32) int32

//go:wasmimport idlepool_cuda launch
func launch(fn int32, gx, gy, gz, bx, by, bz, shared, params uint32, count int32) int32

//go:wasmimport idlepool_cuda synchronize
func synchronize() int32

//go:wasmimport idlepool_cuda last_error
func lastError(out, n uint32) int32

type task struct {
	Mode string `json:"mode"`
	PTX  string `json:"ptx"`
	N    int    `json:"n"`
}

// out is the program's result: step name -> code, and "<step>.error" ->
// the last error after that step where recorded.
var out = map[string]any{}

func ptr(b []byte) uint32 { return uint32(uintptr(unsafe.Pointer(&b[0]))) }

func lastErr() string {
	buf := make([]byte, 4096)
	n := lastError(ptr(buf), uint32(len(buf)))
	if n < 0 {
		return fmt.Sprintf("last_error returned %d", n)
	}
	return string(buf[:n])
}

// step records a code; withErr also the last error.
func step(name string, code int32) int32 { out[name] = code; return code }
func stepErr(name string, code int32) int32 {
	out[name] = code
	out[name+".error"] = lastErr()
	return code
}

func load(t task) int32 {
	b := []byte(t.PTX)
	return moduleLoad(ptr(b), uint32(len(b)))
}

func fn(mod int32, name string) int32 {
	b := []byte(name)
	return functionGet(mod, ptr(b), uint32(len(b)))
}

// memEnd is the first offset past the guest's linear memory.
func memEnd() uint32 { return uint32(memorySize()) * 65536 }

func memorySize() int32

// param is one launch parameter record.
func params(recs ...[3]uint64) []byte {
	b := make([]byte, 16*len(recs)+16)
	for i, r := range recs {
		binary.LittleEndian.PutUint32(b[16*i:], uint32(r[0]))
		binary.LittleEndian.PutUint32(b[16*i+4:], uint32(r[1]))
		binary.LittleEndian.PutUint64(b[16*i+8:], r[2])
	}
	return b
}

func main() {
	var t task
	if err := json.NewDecoder(os.Stdin).Decode(&t); err != nil {
		fmt.Fprintln(os.Stderr, "bad task:", err)
		os.Exit(1)
	}
	switch t.Mode {
	case "nodevice":
		step("device_count", deviceCount())
		stepErr("module_load", load(t))
		stepErr("mem_alloc", memAlloc(16))
		info := make([]byte, 256)
		step("device_info", deviceInfo(0, ptr(info), uint32(len(info))))
		step("synchronize", synchronize())
	case "info":
		step("device_count", deviceCount())
		info := make([]byte, 256)
		n := step("device_info", deviceInfo(0, ptr(info), uint32(len(info))))
		if n > 0 {
			out["info"] = string(info[:n])
		}
		stepErr("device_info.small", deviceInfo(0, ptr(info), 8))
		stepErr("device_info.ordinal", deviceInfo(5, ptr(info), uint32(len(info))))
		step("device_info.negative", deviceInfo(-1, ptr(info), uint32(len(info))))
		stepErr("device_info.outside", deviceInfo(0, memEnd()-8, 256))
	case "bounds":
		stepErr("module_load.past", moduleLoad(memEnd(), 16))
		step("module_load.overflow", moduleLoad(0xFFFFFFF0, 0x20))
		step("module_load.huge", moduleLoad(16, 0xFFFFFFFF))
		buf := step("mem_alloc", memAlloc(64))
		host := make([]byte, 128)
		step("htod.ok", memcpyHtoD(buf, 0, ptr(host), 64))
		step("htod.end", memcpyHtoD(buf, 60, ptr(host), 4))
		stepErr("htod.negative", memcpyHtoD(buf, -1, ptr(host), 4))
		stepErr("htod.past", memcpyHtoD(buf, 61, ptr(host), 4))
		step("htod.toolong", memcpyHtoD(buf, 0, ptr(host), 65))
		step("htod.hugeoffset", memcpyHtoD(buf, math.MaxInt64, ptr(host), 1))
		step("htod.minoffset", memcpyHtoD(buf, math.MinInt64, ptr(host), 1))
		stepErr("htod.guest", memcpyHtoD(buf, 0, memEnd()-2, 4))
		step("htod.guestwrap", memcpyHtoD(buf, 0, 0xFFFFFFFF, 2))
		step("dtoh.negative", memcpyDtoH(ptr(host), buf, -8, 4))
		step("dtoh.past", memcpyDtoH(ptr(host), buf, 0, 65))
		step("dtoh.guest", memcpyDtoH(memEnd()-2, buf, 0, 4))
		step("dtoh.empty", memcpyDtoH(memEnd(), buf, 64, 0))
		step("last_error.outside", lastError(memEnd(), 1))
		step("device_info.wrap", deviceInfo(0, 0xFFFFFF00, 0x200))
	case "handles":
		stepErr("mem_free.unknown", memFree(12345))
		buf := step("mem_alloc", memAlloc(16))
		step("mem_free", memFree(buf))
		stepErr("mem_free.double", memFree(buf))
		host := make([]byte, 16)
		step("htod.freed", memcpyHtoD(buf, 0, ptr(host), 4))
		step("dtoh.freed", memcpyDtoH(ptr(host), buf, 0, 4))
		mod := step("module_load", load(t))
		step("mem_free.module", memFree(mod))
		stepErr("function_get.badmodule", fn(999, "add_u32"))
		step("function_get.buffer", fn(buf, "add_u32"))
		f := step("function_get", fn(mod, "add_u32"))
		p := params()
		stepErr("launch.badfn", launch(777, 1, 1, 1, 1, 1, 1, 0, ptr(p), 0))
		step("launch.module", launch(mod, 1, 1, 1, 1, 1, 1, 0, ptr(p), 0))
		bp := params([3]uint64{0, 0, uint64(buf)}, [3]uint64{1, 0, 1}, [3]uint64{1, 0, 1})
		stepErr("launch.freedparam", launch(f, 1, 1, 1, 1, 1, 1, 0, ptr(bp), 3))
		step("mem_free.negative", memFree(-1))
	case "cap":
		mib := int64(t.N) << 20
		step("mem_alloc.zero", memAlloc(0))
		step("mem_alloc.negative", memAlloc(-5))
		a := step("mem_alloc.all", memAlloc(mib))
		stepErr("mem_alloc.over", memAlloc(1))
		step("mem_free", memFree(a))
		b := step("mem_alloc.half", memAlloc(mib/2))
		step("mem_alloc.half2", memAlloc(mib/2))
		step("mem_alloc.over2", memAlloc(1))
		step("mem_free.half", memFree(b))
		step("mem_alloc.again", memAlloc(1))
		stepErr("mem_alloc.huge", memAlloc(math.MaxInt64))
		info := make([]byte, 256)
		if n := deviceInfo(0, ptr(info), uint32(len(info))); n > 0 {
			out["info"] = string(info[:n])
		}
	case "limit":
		var last int32
		for i := 0; i < 4096; i++ {
			if last = memAlloc(1); last < 0 {
				break
			}
		}
		step("mem_alloc.4096th", last)
		stepErr("mem_alloc.4097th", memAlloc(1))
		step("mem_free", memFree(last))
		step("mem_alloc.after_free", memAlloc(1))
		for i := 0; i < 64; i++ {
			if last = load(t); last < 0 {
				break
			}
		}
		step("module_load.64th", last)
		stepErr("module_load.65th", load(t))
		mod := last
		for i := 0; i < 1024; i++ {
			if last = fn(mod, "add_u32"); last < 0 {
				break
			}
		}
		step("function_get.1024th", last)
		stepErr("function_get.1025th", fn(mod, "add_u32"))
	case "module":
		bad := []byte("this is not PTX")
		stepErr("module_load.bad", moduleLoad(ptr(bad), uint32(len(bad))))
		step("module_load.empty", moduleLoad(ptr(bad), 0))
		mod := step("module_load", load(t))
		stepErr("function_get.unknown", fn(mod, "no_such_kernel"))
		step("function_get.empty", functionGet(mod, ptr(bad), 0))
		step("function_get.nul", fn(mod, "add\x00u32"))
		step("function_get", fn(mod, "add_u32"))
	case "compute":
		compute(t)
	case "launches":
		add := step("function_get", fn(step("module_load", load(t)), "add_u32"))
		buf := step("mem_alloc", memAlloc(4))
		p := params([3]uint64{0, 0, uint64(buf)}, [3]uint64{1, 0, 0}, [3]uint64{1, 0, 1}) // n = 0: the fake kernel touches nothing
		for i := 0; i < t.N; i++ {
			step("launch", launch(add, 1<<20, 1, 1, 1024, 1, 1, 0, ptr(p), 3))
		}
		step("synchronize", synchronize())
	case "trap", "loop":
		step("mem_alloc", memAlloc(1024))
		step("module_load", load(t))
		if t.Mode == "trap" {
			var p *int
			fmt.Println(*p)
		}
		for {
		}
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", t.Mode)
		os.Exit(1)
	}
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
}

func compute(t task) {
	const n = 1000
	mod := step("module_load", load(t))
	add := step("function_get", fn(mod, "add_u32"))
	buf := step("mem_alloc", memAlloc(4*n))
	host := make([]byte, 4*n)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(host[4*i:], uint32(i))
	}
	step("htod", memcpyHtoD(buf, 0, ptr(host), uint32(len(host))))
	p := params([3]uint64{0, 0, uint64(buf)}, [3]uint64{1, 0, n | 0xABCD<<32}, [3]uint64{1, 0, 7})
	step("launch", launch(add, (n+255)/256, 1, 1, 256, 1, 1, 0, ptr(p), 3))
	step("synchronize", synchronize())
	back := make([]byte, 4*n)
	step("dtoh", memcpyDtoH(ptr(back), buf, 0, uint32(len(back))))
	ok := true
	for i := 0; i < n; i++ {
		if binary.LittleEndian.Uint32(back[4*i:]) != uint32(i)+7 {
			ok = false
		}
	}
	out["sum_ok"] = ok
	// A partial copy at an offset.
	part := make([]byte, 8)
	step("dtoh.offset", memcpyDtoH(ptr(part), buf, 4*10, 8))
	out["part"] = []uint32{binary.LittleEndian.Uint32(part), binary.LittleEndian.Uint32(part[4:])}

	// Parameters as the kernel sees them.
	echo := step("function_get.echo", fn(mod, "echo_params"))
	eb := step("mem_alloc.echo", memAlloc(8*6))
	ep := params([3]uint64{0, 0, uint64(eb)}, [3]uint64{1, 0, 0xFFFFFFFF_00000005}, [3]uint64{2, 0, 1 << 40},
		[3]uint64{3, 0, uint64(math.Float32bits(1.5)) | 0xDEAD<<32}, [3]uint64{4, 0, math.Float64bits(-2.25)}, [3]uint64{0, 0, uint64(buf)})
	step("launch.echo", launch(echo, 1, 1, 1, 1, 1, 1, 0, ptr(ep), 6))
	eo := make([]byte, 8*6)
	step("dtoh.echo", memcpyDtoH(ptr(eo), eb, 0, uint32(len(eo))))
	var vals []string
	for i := 0; i < 6; i++ {
		vals = append(vals, fmt.Sprintf("%#x", binary.LittleEndian.Uint64(eo[8*i:])))
	}
	out["echo"] = strings.Join(vals, " ")

	// Launch checks.
	p1 := params([3]uint64{0, 0, uint64(buf)}, [3]uint64{1, 0, n}, [3]uint64{1, 0, 7})
	step("launch.grid0", launch(add, 0, 1, 1, 1, 1, 1, 0, ptr(p1), 3))
	step("launch.gridy", launch(add, 1, 65536, 1, 1, 1, 1, 0, ptr(p1), 3))
	stepErr("launch.block", launch(add, 1, 1, 1, 2048, 1, 1, 0, ptr(p1), 3))
	step("launch.blockthreads", launch(add, 1, 1, 1, 64, 64, 1, 0, ptr(p1), 3))
	step("launch.blockz", launch(add, 1, 1, 1, 1, 1, 65, 0, ptr(p1), 3))
	stepErr("launch.count", launch(add, 1, 1, 1, 1, 1, 1, 0, ptr(p1), 65))
	step("launch.negcount", launch(add, 1, 1, 1, 1, 1, 1, 0, ptr(p1), -1))
	step("launch.paramsoutside", launch(add, 1, 1, 1, 1, 1, 1, 0, memEnd()-16, 3))
	kind := params([3]uint64{9, 0, 0})
	stepErr("launch.kind", launch(add, 1, 1, 1, 1, 1, 1, 0, ptr(kind), 1))
	res := params([3]uint64{1, 1, 0})
	step("launch.reserved", launch(add, 1, 1, 1, 1, 1, 1, 0, ptr(res), 1))
	hb := params([3]uint64{0, 0, 1 << 33})
	step("launch.bighandle", launch(add, 1, 1, 1, 1, 1, 1, 0, ptr(hb), 1))

	// A kernel that faults: the launch is accepted, synchronize fails.
	bad := step("function_get.fault", fn(mod, "fault"))
	step("launch.fault", launch(bad, 1, 1, 1, 1, 1, 1, 0, ptr(p1), 0))
	stepErr("synchronize.fault", synchronize())

	// Launches that do not match the kernel's declared parameters.
	stepErr("launch.fewer", launch(add, 1, 1, 1, 1, 1, 1, 0, ptr(p1), 2))
	p4 := params([3]uint64{0, 0, uint64(buf)}, [3]uint64{1, 0, n}, [3]uint64{1, 0, 7}, [3]uint64{1, 0, 7})
	stepErr("launch.more", launch(add, 1, 1, 1, 1, 1, 1, 0, ptr(p4), 4))
	narrow := params([3]uint64{1, 0, 0x1000}, [3]uint64{1, 0, n}, [3]uint64{1, 0, 7})
	stepErr("launch.narrow", launch(add, 1, 1, 1, 1, 1, 1, 0, ptr(narrow), 3))
	wide := params([3]uint64{0, 0, uint64(buf)}, [3]uint64{2, 0, n}, [3]uint64{1, 0, 7})
	stepErr("launch.wide", launch(add, 1, 1, 1, 1, 1, 1, 0, ptr(wide), 3))
	bv := step("function_get.byvalue", fn(mod, "by_value"))
	one := params([3]uint64{2, 0, 0})
	stepErr("launch.byvalue", launch(bv, 1, 1, 1, 1, 1, 1, 0, ptr(one), 1))
	step("function_get.commented", fn(mod, "commented_out"))
	stepErr("function_get.disagrees", fn(mod, "driver_disagrees"))
	// A binary image (an ELF cubin starts with these bytes) is not PTX.
	elf := []byte("\x7fELF\x02\x01\x01\x00\x00\x00.visible .entry add_u32(.param .u64 p) { ret; }")
	stepErr("module_load.binary", moduleLoad(ptr(elf), uint32(len(elf))))
}
