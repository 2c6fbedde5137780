//go:build linux || windows

package worker

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"github.com/ebitengine/purego"
)

// cudaFuncs are the entry points of the CUDA driver API the worker calls,
// the _v2 variants where the driver has them (cuda.h maps the plain names
// to those since CUDA 3.2).
var cudaFuncs = []string{
	"cuInit", "cuDeviceGetCount", "cuDeviceGet", "cuDeviceGetName",
	"cuDeviceTotalMem_v2", "cuDeviceGetAttribute", "cuCtxCreate_v2",
	"cuCtxDestroy_v2", "cuCtxSetCurrent", "cuCtxSynchronize",
	"cuModuleLoadDataEx", "cuModuleGetFunction", "cuMemAlloc_v2",
	"cuMemsetD8_v2", "cuMemFree_v2", "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuLaunchKernel",
	"cuGetErrorName", "cuGetErrorString",
}

// cudaOptionalFuncs are entry points newer drivers have; the worker uses
// them where they exist.
var cudaOptionalFuncs = []string{
	"cuFuncGetParamInfo", // CUDA 12.4
}

// cudaErrorInvalidValue is CUDA_ERROR_INVALID_VALUE (cuda.h), which
// cuFuncGetParamInfo answers for an index past the last parameter.
const cudaErrorInvalidValue = 1

// CUdevice_attribute values (cuda.h).
const (
	cuDeviceAttrComputeCapabilityMajor = 75
	cuDeviceAttrComputeCapabilityMinor = 76
)

// CUjit_option values (cuda.h) for the PTX compiler's error log.
const (
	cuJITErrorLogBuffer          = 5
	cuJITErrorLogBufferSizeBytes = 6
	jitLogBytes                  = 4096
)

// pureCUDA is the CUDA driver library loaded at run time through purego,
// without cgo: every call is purego.SyscallN on an address looked up once.
type pureCUDA struct {
	fn map[string]uintptr
}

// loadCUDADriver opens the CUDA driver library (libcuda.so.1 on Linux,
// nvcuda.dll from the system directory on Windows), looks up every entry
// point it needs and calls cuInit. Errors wrap ErrCUDAUnavailable: no
// driver installed, an old driver without an entry point, or cuInit
// failing (e.g. CUDA_ERROR_NO_DEVICE when CUDA_VISIBLE_DEVICES hides every
// device).
func loadCUDADriver() (CUDADriver, error) {
	lib, err := openCUDALibrary()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCUDAUnavailable, err)
	}
	d := &pureCUDA{fn: map[string]uintptr{}}
	for _, name := range cudaFuncs {
		addr, err := lookupCUDASymbol(lib, name)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrCUDAUnavailable, name, err)
		}
		d.fn[name] = addr
	}
	for _, name := range cudaOptionalFuncs {
		if addr, err := lookupCUDASymbol(lib, name); err == nil && addr != 0 {
			d.fn[name] = addr
		}
	}
	if err := d.call("cuInit", 0); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCUDAUnavailable, err)
	}
	return d, nil
}

// call calls a driver function and turns a CUresult other than
// CUDA_SUCCESS into a *CUDAError.
func (d *pureCUDA) call(name string, args ...uintptr) error {
	r, _, _ := purego.SyscallN(d.fn[name], args...)
	if code := int(int32(r)); code != cudaSuccess {
		return d.errorOf(name, code)
	}
	return nil
}

// errorOf describes a CUresult with the driver's own name and text.
func (d *pureCUDA) errorOf(fn string, code int) *CUDAError {
	e := &CUDAError{Func: fn, Code: code}
	var p unsafe.Pointer // const char* into the driver's static strings
	var pin runtime.Pinner
	pin.Pin(&p)
	defer pin.Unpin()
	if r, _, _ := purego.SyscallN(d.fn["cuGetErrorName"], uintptr(code), uintptr(unsafe.Pointer(&p))); r == 0 {
		e.Name = goString(p)
	}
	p = nil
	if r, _, _ := purego.SyscallN(d.fn["cuGetErrorString"], uintptr(code), uintptr(unsafe.Pointer(&p))); r == 0 {
		e.Message = goString(p)
	}
	return e
}

// goString copies a NUL-terminated C string of at most 1 KiB.
func goString(p unsafe.Pointer) string {
	if p == nil {
		return ""
	}
	var b []byte
	for i := 0; i < 1024; i++ {
		c := *(*byte)(unsafe.Add(p, i))
		if c == 0 {
			break
		}
		b = append(b, c)
	}
	return string(b)
}

func (d *pureCUDA) DeviceCount() (int, error) {
	n := new(int32)
	var pin runtime.Pinner
	pin.Pin(n)
	defer pin.Unpin()
	if err := d.call("cuDeviceGetCount", uintptr(unsafe.Pointer(n))); err != nil {
		return 0, err
	}
	return int(*n), nil
}

// device returns the CUdevice of an ordinal.
func (d *pureCUDA) device(ordinal int) (uintptr, error) {
	dev := new(int32)
	var pin runtime.Pinner
	pin.Pin(dev)
	defer pin.Unpin()
	if err := d.call("cuDeviceGet", uintptr(unsafe.Pointer(dev)), uintptr(ordinal)); err != nil {
		return 0, err
	}
	return uintptr(*dev), nil
}

func (d *pureCUDA) Device(ordinal int) (CUDADevice, error) {
	dev, err := d.device(ordinal)
	if err != nil {
		return CUDADevice{}, err
	}
	name := make([]byte, 256)
	total := new(uint64)
	major, minor := new(int32), new(int32)
	var pin runtime.Pinner
	pin.Pin(&name[0])
	pin.Pin(total)
	pin.Pin(major)
	pin.Pin(minor)
	defer pin.Unpin()
	if err := d.call("cuDeviceGetName", uintptr(unsafe.Pointer(&name[0])), uintptr(len(name)), dev); err != nil {
		return CUDADevice{}, err
	}
	if err := d.call("cuDeviceTotalMem_v2", uintptr(unsafe.Pointer(total)), dev); err != nil {
		return CUDADevice{}, err
	}
	if err := d.call("cuDeviceGetAttribute", uintptr(unsafe.Pointer(major)), cuDeviceAttrComputeCapabilityMajor, dev); err != nil {
		return CUDADevice{}, err
	}
	if err := d.call("cuDeviceGetAttribute", uintptr(unsafe.Pointer(minor)), cuDeviceAttrComputeCapabilityMinor, dev); err != nil {
		return CUDADevice{}, err
	}
	return CUDADevice{
		Name:              goString(unsafe.Pointer(&name[0])),
		MemoryMiB:         int64(*total >> 20),
		ComputeCapability: fmt.Sprintf("%d.%d", *major, *minor),
	}, nil
}

func (d *pureCUDA) NewContext(ordinal int) (CUDAContext, error) {
	dev, err := d.device(ordinal)
	if err != nil {
		return nil, err
	}
	ctx := new(uintptr)
	var pin runtime.Pinner
	pin.Pin(ctx)
	defer pin.Unpin()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := d.call("cuCtxCreate_v2", uintptr(unsafe.Pointer(ctx)), 0, dev); err != nil {
		return nil, err
	}
	return &pureContext{d: d, ctx: *ctx}, nil
}

// pureContext is a CUDA context of a pureCUDA driver.
type pureContext struct {
	d   *pureCUDA
	ctx uintptr // CUcontext; 0 once destroyed
}

var errContextDestroyed = errors.New("CUDA context already destroyed")

// in runs f with the context current on a locked OS thread: CUDA keeps
// the current context per thread, and goroutines move between threads.
func (c *pureContext) in(f func() error) error {
	if c.ctx == 0 {
		return errContextDestroyed
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := c.d.call("cuCtxSetCurrent", c.ctx); err != nil {
		return err
	}
	return f()
}

func (c *pureContext) LoadModule(ptx []byte) (uintptr, error) {
	// cuModuleLoadDataEx reads PTX as a NUL-terminated string.
	image := make([]byte, len(ptx)+1)
	copy(image, ptx)
	logBuf := make([]byte, jitLogBytes)
	opts := []int32{cuJITErrorLogBufferSizeBytes, cuJITErrorLogBuffer}
	vals := []uintptr{jitLogBytes, uintptr(unsafe.Pointer(&logBuf[0]))}
	mod := new(uintptr)
	var pin runtime.Pinner
	pin.Pin(&image[0])
	pin.Pin(&logBuf[0])
	pin.Pin(&opts[0])
	pin.Pin(&vals[0])
	pin.Pin(mod)
	defer pin.Unpin()
	err := c.in(func() error {
		return c.d.call("cuModuleLoadDataEx", uintptr(unsafe.Pointer(mod)), uintptr(unsafe.Pointer(&image[0])),
			uintptr(len(opts)), uintptr(unsafe.Pointer(&opts[0])), uintptr(unsafe.Pointer(&vals[0])))
	})
	if err != nil {
		var ce *CUDAError
		if log := goString(unsafe.Pointer(&logBuf[0])); log != "" && errors.As(err, &ce) {
			ce.Message += ": " + log
		}
		return 0, err
	}
	return *mod, nil
}

func (c *pureContext) Function(mod uintptr, name string) (uintptr, error) {
	cname := append([]byte(name), 0)
	fn := new(uintptr)
	var pin runtime.Pinner
	pin.Pin(&cname[0])
	pin.Pin(fn)
	defer pin.Unpin()
	err := c.in(func() error {
		return c.d.call("cuModuleGetFunction", uintptr(unsafe.Pointer(fn)), mod, uintptr(unsafe.Pointer(&cname[0])))
	})
	return *fn, err
}

func (c *pureContext) ParamSizes(fn uintptr) ([]int, error) {
	if c.d.fn["cuFuncGetParamInfo"] == 0 {
		return nil, nil
	}
	var offset, size uint64 // size_t
	var pin runtime.Pinner
	pin.Pin(&offset)
	pin.Pin(&size)
	defer pin.Unpin()
	var sizes []int
	err := c.in(func() error {
		for i := 0; i <= MaxCUDALaunchParams; i++ {
			err := c.d.call("cuFuncGetParamInfo", fn, uintptr(i), uintptr(unsafe.Pointer(&offset)), uintptr(unsafe.Pointer(&size)))
			var ce *CUDAError
			if errors.As(err, &ce) && ce.Code == cudaErrorInvalidValue {
				return nil // past the last parameter
			}
			if err != nil {
				return err
			}
			sizes = append(sizes, int(size))
		}
		return nil // more than a launch may pass: the count check refuses it
	})
	return sizes, err
}

func (c *pureContext) Alloc(bytes uint64) (uint64, error) {
	ptr := new(uint64)
	var pin runtime.Pinner
	pin.Pin(ptr)
	defer pin.Unpin()
	err := c.in(func() error {
		if err := c.d.call("cuMemAlloc_v2", uintptr(unsafe.Pointer(ptr)), uintptr(bytes)); err != nil {
			return err
		}
		// The driver hands out memory as an earlier context left it: zero
		// it, so that no task reads another's data. The memset runs on the
		// default stream, before any later copy or launch of the context.
		if err := c.d.call("cuMemsetD8_v2", uintptr(*ptr), 0, uintptr(bytes)); err != nil {
			_ = c.d.call("cuMemFree_v2", uintptr(*ptr))
			return err
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return *ptr, nil
}

func (c *pureContext) Free(ptr uint64) error {
	return c.in(func() error { return c.d.call("cuMemFree_v2", uintptr(ptr)) })
}

func (c *pureContext) CopyHtoD(dst uint64, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	var pin runtime.Pinner
	pin.Pin(&src[0])
	defer pin.Unpin()
	return c.in(func() error {
		return c.d.call("cuMemcpyHtoD_v2", uintptr(dst), uintptr(unsafe.Pointer(&src[0])), uintptr(len(src)))
	})
}

func (c *pureContext) CopyDtoH(dst []byte, src uint64) error {
	if len(dst) == 0 {
		return nil
	}
	var pin runtime.Pinner
	pin.Pin(&dst[0])
	defer pin.Unpin()
	return c.in(func() error {
		return c.d.call("cuMemcpyDtoH_v2", uintptr(unsafe.Pointer(&dst[0])), uintptr(src), uintptr(len(dst)))
	})
}

func (c *pureContext) Launch(fn uintptr, grid, block [3]uint32, sharedBytes uint32, params []uint64) error {
	// kernelParams is an array of pointers, one to each parameter's value.
	vals := make([]uint64, len(params)+1) // never empty, so &vals[0] exists
	copy(vals, params)
	ptrs := make([]uintptr, len(params)+1)
	var pin runtime.Pinner
	pin.Pin(&vals[0])
	pin.Pin(&ptrs[0])
	defer pin.Unpin()
	for i := range params {
		ptrs[i] = uintptr(unsafe.Pointer(&vals[i]))
	}
	kernelParams := uintptr(0)
	if len(params) > 0 {
		kernelParams = uintptr(unsafe.Pointer(&ptrs[0]))
	}
	return c.in(func() error {
		return c.d.call("cuLaunchKernel", fn,
			uintptr(grid[0]), uintptr(grid[1]), uintptr(grid[2]),
			uintptr(block[0]), uintptr(block[1]), uintptr(block[2]),
			uintptr(sharedBytes), 0, kernelParams, 0)
	})
}

func (c *pureContext) Synchronize() error {
	return c.in(func() error { return c.d.call("cuCtxSynchronize") })
}

func (c *pureContext) Destroy() error {
	if c.ctx == 0 {
		return errContextDestroyed
	}
	ctx := c.ctx
	c.ctx = 0
	return c.d.call("cuCtxDestroy_v2", ctx)
}
