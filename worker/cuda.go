package worker

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// CUDAModuleName is the name of the host module through which a guest
// computes on the task's GPUs: device query, PTX modules, device memory,
// copies, launches. Every worker instantiates it beside WASI; a program
// that does not import it is unaffected, and on a task given no GPU it
// reports 0 devices. The functions, their parameters and the error codes
// are the contract in docs/author.md ("The GPU host module
// idlepool_cuda"); cuda.go implements them.
const CUDAModuleName = "idlepool_cuda"

// The error codes of the idlepool_cuda functions: every function returns
// an int32, >= 0 on success, one of these on failure.
const (
	CUDAErrNoDevice        int32 = -1  // no GPU given to the task, no driver, or an ordinal out of range
	CUDAErrInvalidArgument int32 = -2  // a bad size, dimension, count or parameter kind
	CUDAErrOutOfBounds     int32 = -3  // a guest memory range or device range outside its memory or buffer
	CUDAErrInvalidHandle   int32 = -4  // a module, function or buffer handle not live in this task
	CUDAErrOutOfMemory     int32 = -5  // past the task's device-memory cap, or the driver's out of memory
	CUDAErrModuleLoad      int32 = -6  // the driver refused the PTX
	CUDAErrNotFound        int32 = -7  // no kernel of that name in the module
	CUDAErrLaunch          int32 = -8  // a launch or a synchronize failed
	CUDAErrDriver          int32 = -9  // any other driver error
	CUDAErrLimit           int32 = -10 // too many live handles
)

// Limits of one task's idlepool_cuda state.
const (
	// MaxCUDABuffers, MaxCUDAModules and MaxCUDAFunctions bound the live
	// handles of one task.
	MaxCUDABuffers   = 4096
	MaxCUDAModules   = 64
	MaxCUDAFunctions = 1024
	// MaxCUDALaunchParams is the most parameters one launch may pass.
	MaxCUDALaunchParams = 64
	// maxKernelNameBytes bounds a kernel name passed to function_get.
	maxKernelNameBytes = 1024
	// launchParamBytes is the size of one launch parameter record.
	launchParamBytes = 16
	// CUDA's limits on launch dimensions (CUDA C Programming Guide,
	// "Compute Capabilities", table of technical specifications; the same
	// for every compute capability from 3.0 on).
	maxBlockThreads = 1024
	maxBlockXY      = 1024
	maxBlockZ       = 64
	maxGridX        = math.MaxInt32
	maxGridYZ       = 65535
)

// Launch parameter kinds (the kind field of a parameter record).
const (
	paramBuffer  = 0
	paramU32     = 1
	paramU64     = 2
	paramF32     = 3
	paramF64     = 4
	maxParamKind = paramF64
)

// GPUStats is what a task's use of the GPU cost the worker, for
// measurement; Result.GPU carries it for tasks that called idlepool_cuda
// with GPUs given. Durations are in milliseconds, measured with the
// monotonic clock.
type GPUStats struct {
	// DriverLoadMS is the time to load the driver library and call cuInit;
	// 0 when the worker process had loaded it for an earlier task.
	DriverLoadMS float64 `json:"driverLoadMs"`
	// ContextCreateMS is the time cuCtxCreate took; 0 when the task made
	// no context.
	ContextCreateMS float64 `json:"contextCreateMs"`
	// ModuleLoadMS is the time the task's module loads took (the driver's
	// JIT compilation of PTX), all together; Modules how many there were.
	ModuleLoadMS float64 `json:"moduleLoadMs"`
	Modules      int     `json:"modules"`
	// Launches counts the task's successful kernel launches.
	Launches int `json:"launches"`
	// ContextDestroyMS is the time cuCtxDestroy took at the task's end.
	ContextDestroyMS float64 `json:"contextDestroyMs"`
}

// cudaHost is a worker process's CUDA driver, loaded at most once, on the
// first idlepool_cuda call of a task that was given GPUs.
type cudaHost struct {
	loaded bool
	driver CUDADriver
	err    error // why the driver could not be loaded
}

// load returns the driver, loading it on first use, and how long loading
// took this time (0 if it was loaded before).
func (c *cudaHost) load() (CUDADriver, time.Duration, error) {
	if c.loaded {
		return c.driver, 0, c.err
	}
	start := time.Now()
	c.driver, c.err = newCUDADriver()
	c.loaded = true
	return c.driver, time.Since(start), c.err
}

// cudaTask is the idlepool_cuda state of one task: its handles, its
// device-memory use against its cap, its context and its last error. It
// lives in the context.Context of the task's _start call, from which
// wazero passes it to every host function call.
type cudaTask struct {
	host     *cudaHost
	gpus     int    // GPUs given to the task (Request.GPUs)
	capBytes uint64 // device-memory cap; 0: none but the device's own

	counted  bool // devices counted
	devices  int
	noDevice string // why there is none, when devices is 0
	ctx      CUDAContext
	next     int32 // the next handle; handles are never reused in a task
	modules  map[int32]cudaModule
	funcs    map[int32]cudaFunction
	buffers  map[int32]cudaBuffer
	used     uint64 // bytes allocated and not freed
	lastErr  string
	stats    GPUStats
	touched  bool   // the task made a driver call (stats are worth reporting)
	threads  uint64 // threads of the task's accepted launches: its GPU work (MeterRule)
}

// mulSat and addSat multiply and add, saturating at the largest uint64.
func mulSat(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi != 0 {
		return math.MaxUint64
	}
	return lo
}

func addSat(a, b uint64) uint64 {
	s, carry := bits.Add64(a, b, 0)
	if carry != 0 {
		return math.MaxUint64
	}
	return s
}

// cudaModule is a loaded module and the kernels its PTX declares.
type cudaModule struct {
	mod     uintptr
	kernels map[string]ptxKernel
}

// cudaFunction is a kernel of a loaded module, with its declared
// parameters, against which every launch is checked.
type cudaFunction struct {
	fn     uintptr
	name   string
	kernel ptxKernel
}

type cudaBuffer struct {
	ptr  uint64
	size uint64
}

func newCUDATask(host *cudaHost, gpus int, capMiB int64) *cudaTask {
	return &cudaTask{
		host: host, gpus: gpus, capBytes: uint64(max(capMiB, 0)) << 20, next: 1,
		modules: map[int32]cudaModule{}, funcs: map[int32]cudaFunction{}, buffers: map[int32]cudaBuffer{},
	}
}

type cudaTaskKey struct{}

// withCUDATask returns ctx carrying t for the host functions.
func withCUDATask(ctx context.Context, t *cudaTask) context.Context {
	return context.WithValue(ctx, cudaTaskKey{}, t)
}

// fail records the last error and returns code.
func (t *cudaTask) fail(code int32, op, format string, args ...any) int32 {
	t.lastErr = op + ": " + fmt.Sprintf(format, args...)
	return code
}

// handle returns a fresh handle. Callers first check that t.next is below
// math.MaxInt32 (a task that made 2^31 handles has no more).
func (t *cudaTask) handle() int32 {
	h := t.next
	t.next++
	return h
}

// end destroys the task's context, freeing its modules and memory, and
// returns the task's GPU statistics (nil when it made no driver call).
func (t *cudaTask) end() (*GPUStats, error) {
	var err error
	if t.ctx != nil {
		start := time.Now()
		err = t.ctx.Destroy()
		t.stats.ContextDestroyMS = ms(time.Since(start))
		t.ctx = nil
	}
	clear(t.modules)
	clear(t.funcs)
	clear(t.buffers)
	if !t.touched {
		return nil, err
	}
	s := t.stats
	return &s, err
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// deviceCount counts the task's devices once: 0 without GPUs given or
// without a driver (the reason is the last error).
func (t *cudaTask) deviceCount() int {
	if t.counted {
		return t.devices
	}
	t.counted = true
	t.noDevice = "this task was given no GPU"
	if t.gpus == 0 {
		t.lastErr = "device_count: " + t.noDevice
		return 0
	}
	t.touched = true
	d, took, err := t.host.load()
	t.stats.DriverLoadMS = ms(took)
	if err == nil {
		t.devices, err = d.DeviceCount()
	}
	switch {
	case err != nil:
		t.noDevice, t.devices = err.Error(), 0
		t.lastErr = "device_count: " + t.noDevice
	case t.devices == 0:
		t.noDevice = "the CUDA driver sees no device"
	}
	return t.devices
}

// context returns the task's context, creating it on device 0 on first
// use; code is 0 or the error code to return.
func (t *cudaTask) context(op string) (CUDAContext, int32) {
	if t.ctx != nil {
		return t.ctx, 0
	}
	if t.deviceCount() == 0 {
		return nil, t.fail(CUDAErrNoDevice, op, "no GPU for this task: %s", t.noDevice)
	}
	start := time.Now()
	c, err := t.host.driver.NewContext(0)
	t.stats.ContextCreateMS = ms(time.Since(start))
	if err != nil {
		return nil, t.driverFail(CUDAErrDriver, op, err)
	}
	t.ctx = c
	return c, 0
}

// driverFail records a driver error; out-of-memory errors give
// CUDAErrOutOfMemory whatever code says.
func (t *cudaTask) driverFail(code int32, op string, err error) int32 {
	if errors.Is(err, ErrCUDAOutOfMemory) {
		code = CUDAErrOutOfMemory
	}
	return t.fail(code, op, "%v", err)
}

// guestRange returns the guest memory [ptr, ptr+n) as a view (writes go to
// the guest), or false when it is not all inside linear memory.
func guestRange(mem api.Memory, ptr, n uint32) ([]byte, bool) {
	if uint64(ptr)+uint64(n) > uint64(memSize(mem)) {
		return nil, false
	}
	if n == 0 {
		return []byte{}, true
	}
	return mem.Read(ptr, n)
}

// memSize is the size of the guest's linear memory in bytes, 0 for a
// module without memory.
func memSize(mem api.Memory) uint32 {
	if mem == nil {
		return 0
	}
	return mem.Size()
}

// deviceRange checks [offset, offset+n) against a buffer.
func deviceRange(b cudaBuffer, offset int64, n uint32) bool {
	return offset >= 0 && uint64(offset) <= b.size && uint64(n) <= b.size-uint64(offset)
}

func (t *cudaTask) deviceInfo(mem api.Memory, ordinal int32, out, outLen uint32) int32 {
	const op = "device_info"
	dst, ok := guestRange(mem, out, outLen)
	if !ok {
		return t.fail(CUDAErrOutOfBounds, op, "output range [%d, +%d bytes) is outside the guest's %d bytes of memory", out, outLen, memSize(mem))
	}
	if n := t.deviceCount(); ordinal < 0 || int(ordinal) >= n {
		return t.fail(CUDAErrNoDevice, op, "device %d does not exist: this task has %d", ordinal, n)
	}
	d, err := t.host.driver.Device(int(ordinal))
	if err != nil {
		return t.driverFail(CUDAErrDriver, op, err)
	}
	capMiB := d.MemoryMiB
	if t.capBytes > 0 {
		capMiB = min(capMiB, int64(t.capBytes>>20))
	}
	js, _ := json.Marshal(struct {
		Name              string `json:"name"`
		MemoryMiB         int64  `json:"memory_mib"`
		ComputeCapability string `json:"compute_capability"`
		MemoryCapMiB      int64  `json:"memory_cap_mib"`
	}{d.Name, d.MemoryMiB, d.ComputeCapability, capMiB})
	if len(js) > len(dst) {
		return t.fail(CUDAErrInvalidArgument, op, "output of %d bytes is too small for %d bytes of JSON", outLen, len(js))
	}
	return int32(copy(dst, js))
}

func (t *cudaTask) moduleLoad(mem api.Memory, ptx, n uint32) int32 {
	const op = "module_load"
	src, ok := guestRange(mem, ptx, n)
	switch {
	case !ok:
		return t.fail(CUDAErrOutOfBounds, op, "PTX range [%d, +%d bytes) is outside the guest's %d bytes of memory", ptx, n, memSize(mem))
	case n == 0:
		return t.fail(CUDAErrInvalidArgument, op, "empty PTX")
	case len(t.modules) >= MaxCUDAModules:
		return t.fail(CUDAErrLimit, op, "a task may hold at most %d modules", MaxCUDAModules)
	}
	kernels, err := ptxKernels(src)
	if err != nil {
		return t.fail(CUDAErrModuleLoad, op, "%v", err)
	}
	c, code := t.context(op)
	if code != 0 {
		return code
	}
	if t.next == math.MaxInt32 {
		return t.fail(CUDAErrLimit, op, "out of handles")
	}
	start := time.Now()
	m, err := c.LoadModule(src)
	t.stats.ModuleLoadMS += ms(time.Since(start))
	if err != nil {
		return t.driverFail(CUDAErrModuleLoad, op, err)
	}
	t.stats.Modules++
	h := t.handle()
	t.modules[h] = cudaModule{mod: m, kernels: kernels}
	return h
}

func (t *cudaTask) functionGet(mem api.Memory, module int32, name, n uint32) int32 {
	const op = "function_get"
	m, ok := t.modules[module]
	if !ok {
		return t.fail(CUDAErrInvalidHandle, op, "module handle %d is not a live module of this task", module)
	}
	b, ok := guestRange(mem, name, n)
	switch {
	case !ok:
		return t.fail(CUDAErrOutOfBounds, op, "name range [%d, +%d bytes) is outside the guest's %d bytes of memory", name, n, memSize(mem))
	case n == 0 || n > maxKernelNameBytes:
		return t.fail(CUDAErrInvalidArgument, op, "a kernel name has 1..%d bytes, got %d", maxKernelNameBytes, n)
	case !utf8.Valid(b) || containsNUL(b):
		return t.fail(CUDAErrInvalidArgument, op, "the kernel name is not valid UTF-8 without NUL bytes")
	case len(t.funcs) >= MaxCUDAFunctions:
		return t.fail(CUDAErrLimit, op, "a task may hold at most %d functions", MaxCUDAFunctions)
	}
	if t.next == math.MaxInt32 {
		return t.fail(CUDAErrLimit, op, "out of handles")
	}
	k, declared := m.kernels[string(b)]
	f, err := t.ctx.Function(m.mod, string(b))
	if err == nil && !declared {
		// The driver knows a kernel the PTX text does not declare where
		// ptxKernels reads: its parameters cannot be checked.
		err = ErrCUDANotFound
	}
	if err != nil {
		if errors.Is(err, ErrCUDANotFound) {
			return t.fail(CUDAErrNotFound, op, "module %d has no kernel %q (is it declared extern \"C\"?)", module, b)
		}
		return t.driverFail(CUDAErrDriver, op, err)
	}
	// Where the driver can say how it reads the kernel's parameters, it
	// must read them as the PTX text declares them.
	sizes, err := t.ctx.ParamSizes(f)
	if err != nil {
		return t.driverFail(CUDAErrDriver, op, err)
	}
	if sizes != nil && !slices.Equal(sizes, k.params) {
		return t.fail(CUDAErrInvalidArgument, op, "the driver reads kernel %q's parameters as %v bytes, its PTX declares %v", b, sizes, k.params)
	}
	h := t.handle()
	t.funcs[h] = cudaFunction{fn: f, name: string(b), kernel: k}
	return h
}

func containsNUL(b []byte) bool {
	for _, c := range b {
		if c == 0 {
			return true
		}
	}
	return false
}

func (t *cudaTask) memAlloc(bytes int64) int32 {
	const op = "mem_alloc"
	switch {
	case bytes <= 0:
		return t.fail(CUDAErrInvalidArgument, op, "size must be positive, got %d", bytes)
	case len(t.buffers) >= MaxCUDABuffers:
		return t.fail(CUDAErrLimit, op, "a task may hold at most %d buffers", MaxCUDABuffers)
	case t.capBytes > 0 && uint64(bytes) > t.capBytes-t.used:
		return t.fail(CUDAErrOutOfMemory, op,
			"%d bytes more would bring this task's device memory to %.1f MiB, over its cap of %d MiB (the donor's share of this GPU)",
			bytes, float64(t.used+uint64(bytes))/(1<<20), t.capBytes>>20)
	}
	c, code := t.context(op)
	if code != 0 {
		return code
	}
	if t.next == math.MaxInt32 {
		return t.fail(CUDAErrLimit, op, "out of handles")
	}
	ptr, err := c.Alloc(uint64(bytes))
	if err != nil {
		return t.driverFail(CUDAErrDriver, op, err)
	}
	h := t.handle()
	t.buffers[h] = cudaBuffer{ptr: ptr, size: uint64(bytes)}
	t.used += uint64(bytes)
	return h
}

func (t *cudaTask) memFree(buf int32) int32 {
	const op = "mem_free"
	b, ok := t.buffers[buf]
	if !ok {
		return t.fail(CUDAErrInvalidHandle, op, "buffer handle %d is not a live buffer of this task (freed twice?)", buf)
	}
	delete(t.buffers, buf)
	t.used -= b.size
	if err := t.ctx.Free(b.ptr); err != nil {
		return t.driverFail(CUDAErrDriver, op, err)
	}
	return 0
}

// copyCheck checks a copy's buffer, device range and guest range and
// returns the buffer and the guest memory view.
func (t *cudaTask) copyCheck(op string, mem api.Memory, buf int32, offset int64, ptr, n uint32) (cudaBuffer, []byte, int32) {
	b, ok := t.buffers[buf]
	if !ok {
		return b, nil, t.fail(CUDAErrInvalidHandle, op, "buffer handle %d is not a live buffer of this task", buf)
	}
	if !deviceRange(b, offset, n) {
		return b, nil, t.fail(CUDAErrOutOfBounds, op, "device range [%d, +%d bytes) is outside buffer %d of %d bytes", offset, n, buf, b.size)
	}
	g, ok := guestRange(mem, ptr, n)
	if !ok {
		return b, nil, t.fail(CUDAErrOutOfBounds, op, "guest range [%d, +%d bytes) is outside the guest's %d bytes of memory", ptr, n, memSize(mem))
	}
	return b, g, 0
}

func (t *cudaTask) memcpyHtoD(mem api.Memory, buf int32, offset int64, src, n uint32) int32 {
	const op = "memcpy_htod"
	b, g, code := t.copyCheck(op, mem, buf, offset, src, n)
	if code != 0 {
		return code
	}
	if err := t.ctx.CopyHtoD(b.ptr+uint64(offset), g); err != nil {
		return t.driverFail(CUDAErrDriver, op, err)
	}
	return 0
}

func (t *cudaTask) memcpyDtoH(mem api.Memory, dst uint32, buf int32, offset int64, n uint32) int32 {
	const op = "memcpy_dtoh"
	b, g, code := t.copyCheck(op, mem, buf, offset, dst, n)
	if code != 0 {
		return code
	}
	if err := t.ctx.CopyDtoH(g, b.ptr+uint64(offset)); err != nil {
		return t.driverFail(CUDAErrDriver, op, err)
	}
	return 0
}

// launch checks and launches a kernel. While the task is suspended the
// whole worker process is stopped (SIGSTOP of its process group;
// NtSuspendProcess on Windows), so no launch is made and none returns
// until it is resumed; kernels already queued run to their end.
func (t *cudaTask) launch(mem api.Memory, fn int32, grid, block [3]uint32, shared, paramsPtr uint32, count int32) int32 {
	const op = "launch"
	f, ok := t.funcs[fn]
	if !ok {
		return t.fail(CUDAErrInvalidHandle, op, "function handle %d is not a live function of this task", fn)
	}
	for i, g := range grid {
		if g == 0 || (i == 0 && g > maxGridX) || (i > 0 && g > maxGridYZ) {
			return t.fail(CUDAErrInvalidArgument, op, "grid %v: each dimension must be 1..%d (x) or 1..%d (y, z)", grid, maxGridX, maxGridYZ)
		}
	}
	if block[0] == 0 || block[1] == 0 || block[2] == 0 || block[0] > maxBlockXY || block[1] > maxBlockXY || block[2] > maxBlockZ ||
		uint64(block[0])*uint64(block[1])*uint64(block[2]) > maxBlockThreads {
		return t.fail(CUDAErrInvalidArgument, op, "block %v: dimensions must be at least 1, at most %d, %d, %d and %d threads in all",
			block, maxBlockXY, maxBlockXY, maxBlockZ, maxBlockThreads)
	}
	if count < 0 || count > MaxCUDALaunchParams {
		return t.fail(CUDAErrInvalidArgument, op, "%d parameters: a launch takes 0..%d", count, MaxCUDALaunchParams)
	}
	raw, ok := guestRange(mem, paramsPtr, uint32(count)*launchParamBytes)
	if !ok {
		return t.fail(CUDAErrOutOfBounds, op, "parameter range [%d, +%d bytes) is outside the guest's %d bytes of memory", paramsPtr, uint32(count)*launchParamBytes, memSize(mem))
	}
	params := make([]uint64, count)
	kinds := make([]uint32, count)
	for i := range params {
		rec := raw[i*launchParamBytes:]
		kind, reserved, v := binary.LittleEndian.Uint32(rec), binary.LittleEndian.Uint32(rec[4:]), binary.LittleEndian.Uint64(rec[8:])
		kinds[i] = kind
		switch {
		case reserved != 0:
			return t.fail(CUDAErrInvalidArgument, op, "parameter %d: reserved field is %d, must be 0", i, reserved)
		case kind > maxParamKind:
			return t.fail(CUDAErrInvalidArgument, op, "parameter %d: unknown kind %d (0 buffer, 1 u32, 2 u64, 3 f32, 4 f64)", i, kind)
		case kind == paramBuffer:
			b, ok := t.buffers[int32(v)]
			if !ok || v > math.MaxInt32 {
				return t.fail(CUDAErrInvalidHandle, op, "parameter %d: buffer handle %d is not a live buffer of this task", i, int64(v))
			}
			params[i] = b.ptr
		case kind == paramU32 || kind == paramF32:
			params[i] = v & math.MaxUint32
		default:
			params[i] = v
		}
	}
	if err := checkLaunchParams(f.name, f.kernel, kinds); err != nil {
		return t.fail(CUDAErrInvalidArgument, op, "%v", err)
	}
	if err := t.ctx.Launch(f.fn, grid, block, shared, params); err != nil {
		return t.driverFail(CUDAErrLaunch, op, err)
	}
	t.stats.Launches++
	// The work a launch counts (MeterRule 1) is its declared size, one
	// per thread: grid × block, saturating (a grid may declare up to
	// 2^73 threads).
	t.threads = addSat(t.threads, mulSat(mulSat(uint64(grid[0])*uint64(grid[1]), uint64(grid[2])),
		uint64(block[0])*uint64(block[1])*uint64(block[2])))
	return 0
}

func (t *cudaTask) synchronize() int32 {
	if t.ctx == nil {
		return 0 // nothing was launched
	}
	if err := t.ctx.Synchronize(); err != nil {
		return t.driverFail(CUDAErrLaunch, "synchronize", err)
	}
	return 0
}

func (t *cudaTask) lastError(mem api.Memory, out, n uint32) int32 {
	dst, ok := guestRange(mem, out, n)
	if !ok {
		return CUDAErrOutOfBounds // last_error keeps the error it reports
	}
	msg := t.lastErr
	if len(msg) > len(dst) {
		msg = msg[:len(dst)]
		for len(msg) > 0 && !utf8.ValidString(msg) { // do not cut a character
			msg = msg[:len(msg)-1]
		}
	}
	return int32(copy(dst, msg))
}

// cudaFunc is one function of the host module: its name, parameter types
// (the result is one i32) and its body.
type cudaFunc struct {
	name   string
	params []api.ValueType
	call   func(t *cudaTask, mem api.Memory, s []uint64) int32
}

var (
	i32 = api.ValueTypeI32
	i64 = api.ValueTypeI64
)

// u32 and s32 read an i32 argument as unsigned (pointers, lengths,
// dimensions) or signed (handles, ordinals, counts); s64 an i64.
func u32(v uint64) uint32 { return uint32(v) }
func s32(v uint64) int32  { return int32(uint32(v)) }
func s64(v uint64) int64  { return int64(v) }

// cudaFuncList lists the host module's functions; docs/author.md documents
// them.
var cudaFuncList = []cudaFunc{
	{"device_count", nil, func(t *cudaTask, _ api.Memory, _ []uint64) int32 { return int32(t.deviceCount()) }},
	{"device_info", []api.ValueType{i32, i32, i32}, func(t *cudaTask, m api.Memory, s []uint64) int32 {
		return t.deviceInfo(m, s32(s[0]), u32(s[1]), u32(s[2]))
	}},
	{"module_load", []api.ValueType{i32, i32}, func(t *cudaTask, m api.Memory, s []uint64) int32 {
		return t.moduleLoad(m, u32(s[0]), u32(s[1]))
	}},
	{"function_get", []api.ValueType{i32, i32, i32}, func(t *cudaTask, m api.Memory, s []uint64) int32 {
		return t.functionGet(m, s32(s[0]), u32(s[1]), u32(s[2]))
	}},
	{"mem_alloc", []api.ValueType{i64}, func(t *cudaTask, _ api.Memory, s []uint64) int32 { return t.memAlloc(s64(s[0])) }},
	{"mem_free", []api.ValueType{i32}, func(t *cudaTask, _ api.Memory, s []uint64) int32 { return t.memFree(s32(s[0])) }},
	{"memcpy_htod", []api.ValueType{i32, i64, i32, i32}, func(t *cudaTask, m api.Memory, s []uint64) int32 {
		return t.memcpyHtoD(m, s32(s[0]), s64(s[1]), u32(s[2]), u32(s[3]))
	}},
	{"memcpy_dtoh", []api.ValueType{i32, i32, i64, i32}, func(t *cudaTask, m api.Memory, s []uint64) int32 {
		return t.memcpyDtoH(m, u32(s[0]), s32(s[1]), s64(s[2]), u32(s[3]))
	}},
	{"launch", []api.ValueType{i32, i32, i32, i32, i32, i32, i32, i32, i32, i32}, func(t *cudaTask, m api.Memory, s []uint64) int32 {
		return t.launch(m, s32(s[0]), [3]uint32{u32(s[1]), u32(s[2]), u32(s[3])}, [3]uint32{u32(s[4]), u32(s[5]), u32(s[6])},
			u32(s[7]), u32(s[8]), s32(s[9]))
	}},
	{"synchronize", nil, func(t *cudaTask, _ api.Memory, _ []uint64) int32 { return t.synchronize() }},
	{"last_error", []api.ValueType{i32, i32}, func(t *cudaTask, m api.Memory, s []uint64) int32 {
		return t.lastError(m, u32(s[0]), u32(s[1]))
	}},
}

// cudaFuncNames is the set of the host module's function names.
var cudaFuncNames = func() map[string]bool {
	m := map[string]bool{}
	for _, f := range cudaFuncList {
		m[f.name] = true
	}
	return m
}()

// instantiateCUDA instantiates the idlepool_cuda host module in rt. Its
// functions find the running task's state in the call's context
// (withCUDATask); a call outside a task reports no device.
func instantiateCUDA(ctx context.Context, rt wazero.Runtime) error {
	b := rt.NewHostModuleBuilder(CUDAModuleName)
	for _, f := range cudaFuncList {
		call := f.call
		b.NewFunctionBuilder().
			WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
				t, _ := ctx.Value(cudaTaskKey{}).(*cudaTask)
				if t == nil {
					stack[0] = api.EncodeI32(CUDAErrNoDevice)
					return
				}
				stack[0] = api.EncodeI32(call(t, mod.Memory(), stack))
			}), f.params, []api.ValueType{i32}).
			Export(f.name)
	}
	if _, err := b.Instantiate(ctx); err != nil {
		return fmt.Errorf("instantiate %s: %w", CUDAModuleName, err)
	}
	return nil
}
