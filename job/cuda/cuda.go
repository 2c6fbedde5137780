package cuda

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
)

// host is the idlepool_cuda host module as this package calls it: one
// method per host function, slices standing for (pointer, length) pairs of
// the guest's linear memory. Every method returns the host function's
// int32 result: >= 0 success, < 0 an error code. Under GOOS=wasip1 it is
// the wasm import; elsewhere it is noDevice; tests replace it with a fake.
type host interface {
	deviceCount() int32
	deviceInfo(ordinal int32, out []byte) int32
	moduleLoad(ptx []byte) int32
	functionGet(module int32, name []byte) int32
	memAlloc(bytes int64) int32
	memFree(buffer int32) int32
	memcpyHtoD(buffer int32, offset int64, src []byte) int32
	memcpyDtoH(dst []byte, buffer int32, offset int64) int32
	launch(function int32, grid, block Dim3, sharedBytes uint32, params []byte, count int32) int32
	synchronize() int32
	lastError(out []byte) int32
}

// hostModule is the host module in use: the wasm import under wasip1,
// noDevice elsewhere.
var hostModule host = platformHost()

// maxParams is the most kernel parameters one launch may pass.
const maxParams = 64

// paramBytes is the size of one parameter record in the launch call.
const paramBytes = 16

// Parameter kinds of the launch call's 16-byte records.
const (
	kindBuffer uint32 = 0 // a buffer handle, passed as its device pointer
	kindU32    uint32 = 1 // uint32/int32: the low 32 bits of value
	kindU64    uint32 = 2 // uint64/int64
	kindF32    uint32 = 3 // float32 bits in the low 32 bits of value
	kindF64    uint32 = 4 // float64 bits
)

// fail returns the error for code from the host call op, with the host's
// last_error message.
func fail(op string, code int32) error {
	buf := make([]byte, 1024)
	n := hostModule.lastError(buf)
	msg := ""
	if n > 0 && int(n) <= len(buf) {
		msg = string(buf[:n])
	}
	return &Error{Code: code, Op: op, Message: msg}
}

// local returns an error found by this package before calling the host.
func local(op string, code int32, format string, args ...any) error {
	return &Error{Code: code, Op: op, Message: fmt.Sprintf(format, args...)}
}

// Devices returns the number of GPUs this task may use: 0 where the worker
// gave it none, where there is no driver, on any error, and always when the
// program was not built for WebAssembly.
func Devices() int {
	n := hostModule.deviceCount()
	if n < 0 {
		return 0
	}
	return int(n)
}

// DeviceInfo describes one GPU as the worker reports it.
type DeviceInfo struct {
	// Name is the device's marketing name, e.g. "NVIDIA H200".
	Name string `json:"name"`
	// MemoryMiB is the device's total memory in MiB (2^20 bytes).
	MemoryMiB int64 `json:"memory_mib"`
	// ComputeCapability is "major.minor", e.g. "9.0".
	ComputeCapability string `json:"compute_capability"`
	// MemoryCapMiB is what this task may allocate on the device, in MiB:
	// the donor's memory share of it.
	MemoryCapMiB int64 `json:"memory_cap_mib"`
}

// Info describes device ordinal (0 ≤ ordinal < Devices()). It fails with
// ErrNoDevice for an ordinal out of range, and with ErrDriver when the
// host's answer is not the JSON object the contract names.
func Info(ordinal int) (DeviceInfo, error) {
	if ordinal < 0 || ordinal > math.MaxInt32 {
		return DeviceInfo{}, local("device_info", codeNoDevice, "ordinal %d out of range", ordinal)
	}
	for _, size := range []int{512, 64 << 10} {
		out := make([]byte, size)
		n := hostModule.deviceInfo(int32(ordinal), out)
		if n == codeInvalidArgument && size < 64<<10 {
			continue // the object did not fit: ask again with more room
		}
		if n < 0 {
			return DeviceInfo{}, fail("device_info", n)
		}
		if int(n) > len(out) {
			return DeviceInfo{}, local("device_info", codeDriver, "host wrote %d bytes into %d", n, len(out))
		}
		var d DeviceInfo
		if err := json.Unmarshal(out[:n], &d); err != nil {
			return DeviceInfo{}, local("device_info", codeDriver, "host's device description is not JSON: %v", err)
		}
		return d, nil
	}
	return DeviceInfo{}, local("device_info", codeInvalidArgument, "device description longer than 64 KiB")
}

// Module is a PTX module loaded into the task's CUDA context.
type Module struct {
	handle int32
}

// LoadModule loads ptx, the text of a PTX module (as clang's NVPTX back
// end or nvcc writes it), into the task's CUDA context, creating the
// context on device 0 on first use. The driver compiles the PTX for the
// GPU at hand. Read the PTX from one of the job's inputs (under /input) so
// that it is part of the job's identity. It fails with ErrModuleLoad when
// the driver refuses the text, ErrNoDevice without a GPU, ErrLimit past 64
// modules.
func LoadModule(ptx []byte) (*Module, error) {
	if len(ptx) == 0 {
		return nil, local("module_load", codeInvalidArgument, "empty PTX")
	}
	if uint64(len(ptx)) > math.MaxUint32 {
		return nil, local("module_load", codeInvalidArgument, "PTX of %d bytes is too long", len(ptx))
	}
	h := hostModule.moduleLoad(ptx)
	if h < 0 {
		return nil, fail("module_load", h)
	}
	return &Module{handle: h}, nil
}

// Function is one kernel (a PTX .entry) of a loaded module.
type Function struct {
	handle int32
	name   string
}

// Function returns the kernel named name (the PTX .entry name; declare the
// kernel extern "C" so that it is not mangled). It fails with ErrNotFound
// when the module has no such kernel, ErrInvalidHandle for a nil module.
func (m *Module) Function(name string) (*Function, error) {
	op := "function_get " + name
	if m == nil {
		return nil, local(op, codeInvalidHandle, "nil module")
	}
	if name == "" {
		return nil, local(op, codeInvalidArgument, "empty kernel name")
	}
	h := hostModule.functionGet(m.handle, []byte(name))
	if h < 0 {
		return nil, fail(op, h)
	}
	return &Function{handle: h, name: name}, nil
}

// Buffer is a block of device memory owned by the task.
type Buffer struct {
	handle int32
	size   int64
	freed  bool
}

// Alloc allocates bytes (> 0) of device memory. It fails with
// ErrOutOfMemory when the allocation would pass the task's cap (see
// DeviceInfo.MemoryCapMiB) or the device is full, ErrInvalidArgument for
// bytes ≤ 0, ErrLimit past 4096 live buffers.
func Alloc(bytes int64) (*Buffer, error) {
	if bytes <= 0 {
		return nil, local("mem_alloc", codeInvalidArgument, "size %d bytes, want > 0", bytes)
	}
	h := hostModule.memAlloc(bytes)
	if h < 0 {
		return nil, fail("mem_alloc", h)
	}
	return &Buffer{handle: h, size: bytes}, nil
}

// Size returns the buffer's size in bytes.
func (b *Buffer) Size() int64 {
	if b == nil {
		return 0
	}
	return b.size
}

// Free returns the buffer's device memory. Using the buffer afterwards, or
// freeing it twice, fails with ErrInvalidHandle.
func (b *Buffer) Free() error {
	if err := b.check("mem_free"); err != nil {
		return err
	}
	if r := hostModule.memFree(b.handle); r < 0 {
		return fail("mem_free", r)
	}
	b.freed = true
	return nil
}

// check returns an error for a nil or freed buffer.
func (b *Buffer) check(op string) error {
	switch {
	case b == nil:
		return local(op, codeInvalidHandle, "nil buffer")
	case b.freed:
		return local(op, codeInvalidHandle, "buffer already freed")
	}
	return nil
}

// rangeCheck returns an error unless [offset, offset+n) lies within b.
func (b *Buffer) rangeCheck(op string, offset int64, n int) error {
	if err := b.check(op); err != nil {
		return err
	}
	if uint64(n) > math.MaxUint32 {
		return local(op, codeInvalidArgument, "%d bytes in one copy, at most %d", n, uint32(math.MaxUint32))
	}
	if offset < 0 || offset > b.size || int64(n) > b.size-offset {
		return local(op, codeOutOfBounds, "bytes [%d, %d) outside the buffer of %d bytes", offset, offset+int64(n), b.size)
	}
	return nil
}

// Write copies p into the buffer at byte offset (host to device). The range
// [offset, offset+len(p)) must lie within the buffer (ErrOutOfBounds).
// The copy is complete when Write returns.
func (b *Buffer) Write(offset int64, p []byte) error {
	if err := b.rangeCheck("memcpy_htod", offset, len(p)); err != nil {
		return err
	}
	if r := hostModule.memcpyHtoD(b.handle, offset, p); r < 0 {
		return fail("memcpy_htod", r)
	}
	return nil
}

// Read copies len(p) bytes from the buffer at byte offset into p (device
// to host), after the task's earlier launches have written them. The range
// must lie within the buffer (ErrOutOfBounds).
func (b *Buffer) Read(offset int64, p []byte) error {
	if err := b.rangeCheck("memcpy_dtoh", offset, len(p)); err != nil {
		return err
	}
	if r := hostModule.memcpyDtoH(p, b.handle, offset); r < 0 {
		return fail("memcpy_dtoh", r)
	}
	return nil
}

// Dim3 is a grid size in blocks or a block size in threads, as CUDA's
// dim3; every component must be at least 1.
type Dim3 struct{ X, Y, Z uint32 }

// Arg is one kernel parameter. Build it with BufferArg, U32, U64, F32 or
// F64, in the order of the kernel's parameters; each must match the
// kernel's parameter type (a buffer for a pointer, U32 for int or
// unsigned int, U64 for long long, F32 for float, F64 for double).
type Arg struct {
	kind  uint32
	value uint64
	buf   *Buffer
}

// BufferArg passes b to the kernel as its 64-bit device pointer.
func BufferArg(b *Buffer) Arg { return Arg{kind: kindBuffer, buf: b} }

// U32 passes a 32-bit integer (unsigned int, or int via uint32(v)).
func U32(v uint32) Arg { return Arg{kind: kindU32, value: uint64(v)} }

// U64 passes a 64-bit integer (unsigned long long, or long long via
// uint64(v)).
func U64(v uint64) Arg { return Arg{kind: kindU64, value: v} }

// F32 passes a float.
func F32(v float32) Arg { return Arg{kind: kindF32, value: uint64(math.Float32bits(v))} }

// F64 passes a double.
func F64(v float64) Arg { return Arg{kind: kindF64, value: math.Float64bits(v)} }

// encodeArgs returns args as the launch call's parameter records: 16 bytes
// each, little-endian: kind uint32, reserved uint32 (0), value uint64 (a
// buffer's handle for kind 0).
func encodeArgs(op string, args []Arg) ([]byte, error) {
	if len(args) > maxParams {
		return nil, local(op, codeInvalidArgument, "%d kernel parameters, at most %d", len(args), maxParams)
	}
	out := make([]byte, paramBytes*len(args))
	for i, a := range args {
		v := a.value
		switch a.kind {
		case kindBuffer:
			if err := a.buf.check(op); err != nil {
				return nil, local(op, codeInvalidHandle, "parameter %d: %s", i, err.(*Error).Message)
			}
			v = uint64(uint32(a.buf.handle))
		case kindU32, kindU64, kindF32, kindF64:
		default:
			return nil, local(op, codeInvalidArgument, "parameter %d: unknown kind %d (build parameters with BufferArg, U32, U64, F32 or F64)", i, a.kind)
		}
		rec := out[paramBytes*i:]
		binary.LittleEndian.PutUint32(rec[0:], a.kind)
		binary.LittleEndian.PutUint32(rec[4:], 0)
		binary.LittleEndian.PutUint64(rec[8:], v)
	}
	return out, nil
}

// Launch starts the kernel on grid blocks of block threads each, with
// sharedBytes of dynamic shared memory per block, passing args (at most
// 64). Launches are asynchronous: call Synchronize, or Read a buffer the
// kernel wrote after Synchronize, to wait for them. Keep each launch
// short (well under 100 ms): while the task is suspended (the owner came
// back, a game started) Launch does not return until it resumes, but a
// launch already running holds the GPU until it ends. It fails with
// ErrInvalidArgument for a zero dimension or too many parameters,
// ErrInvalidHandle for a nil function or a freed buffer, ErrLaunch when
// the driver refuses the launch.
func (f *Function) Launch(grid, block Dim3, sharedBytes uint32, args ...Arg) error {
	if f == nil {
		return local("launch", codeInvalidHandle, "nil function")
	}
	op := "launch " + f.name
	if grid.X == 0 || grid.Y == 0 || grid.Z == 0 || block.X == 0 || block.Y == 0 || block.Z == 0 {
		return local(op, codeInvalidArgument, "grid %v and block %v: every dimension must be at least 1", grid, block)
	}
	params, err := encodeArgs(op, args)
	if err != nil {
		return err
	}
	if r := hostModule.launch(f.handle, grid, block, sharedBytes, params, int32(len(args))); r < 0 {
		return fail(op, r)
	}
	return nil
}

// Synchronize waits until the task's launches have finished. It fails with
// ErrLaunch when one of them failed (a bad address, a trap), with the
// driver's words in Error.Message.
func Synchronize() error {
	if r := hostModule.synchronize(); r < 0 {
		return fail("synchronize", r)
	}
	return nil
}
