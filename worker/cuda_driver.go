package worker

import "fmt"

// CUDADriver is the part of the CUDA driver API (the cu* functions of
// libcuda.so.1 / nvcuda.dll, https://docs.nvidia.com/cuda/cuda-driver-api/)
// that the idlepool_cuda host module uses. The product's implementation
// loads the driver library at run time without cgo (cuda_purego.go); tests
// use a hand-written fake. Device ordinals are CUDA's, 0..DeviceCount()-1,
// among the devices CUDA_VISIBLE_DEVICES leaves visible.
//
// Errors wrap ErrCUDAUnavailable when there is no usable driver,
// ErrCUDAOutOfMemory for CUDA_ERROR_OUT_OF_MEMORY and ErrCUDANotFound for
// CUDA_ERROR_NOT_FOUND; the real driver's errors are *CUDAError. Methods
// are called from one goroutine at a time.
type CUDADriver interface {
	// DeviceCount returns the number of visible devices (cuInit then
	// cuDeviceGetCount).
	DeviceCount() (int, error)
	// Device describes device ordinal (cuDeviceGet, cuDeviceGetName,
	// cuDeviceTotalMem_v2, cuDeviceGetAttribute for the compute
	// capability).
	Device(ordinal int) (CUDADevice, error)
	// NewContext creates a context on device ordinal (cuCtxCreate_v2).
	// The caller destroys it with CUDAContext.Destroy.
	NewContext(ordinal int) (CUDAContext, error)
}

// CUDAContext is one CUDA context and the driver calls made in it. Every
// method makes the context current on the calling OS thread first
// (cuCtxSetCurrent), so it may be called from any goroutine, one at a time.
// Handles (modules, functions) are the driver's opaque values; device
// pointers are CUdeviceptr values.
type CUDAContext interface {
	// LoadModule loads PTX text (cuModuleLoadData; the driver JIT-compiles
	// it for the device). The module lives until Destroy.
	LoadModule(ptx []byte) (uintptr, error)
	// Function returns the kernel called name in module mod
	// (cuModuleGetFunction); ErrCUDANotFound when there is none.
	Function(mod uintptr, name string) (uintptr, error)
	// ParamSizes returns the sizes in bytes of kernel fn's parameters as
	// the driver reads them (cuFuncGetParamInfo, CUDA 12.4 and later), or
	// nil with no error when the driver cannot say (an older driver).
	ParamSizes(fn uintptr) ([]int, error)
	// Alloc allocates bytes of device memory, zeroed (cuMemAlloc_v2, then
	// cuMemsetD8_v2: the driver does not clear memory an earlier task of
	// the same worker, or another process, freed).
	Alloc(bytes uint64) (uint64, error)
	// Free frees memory from Alloc (cuMemFree_v2).
	Free(ptr uint64) error
	// CopyHtoD copies src to device address dst (cuMemcpyHtoD_v2).
	CopyHtoD(dst uint64, src []byte) error
	// CopyDtoH copies len(dst) bytes from device address src
	// (cuMemcpyDtoH_v2).
	CopyDtoH(dst []byte, src uint64) error
	// Launch launches kernel fn (cuLaunchKernel) on the context's default
	// stream and returns without waiting for it. params holds one 8-byte
	// slot per kernel parameter, little-endian: a device pointer, or a
	// scalar in its low 4 or all 8 bytes; the driver reads from each slot
	// as many bytes as the kernel's parameter takes.
	Launch(fn uintptr, grid, block [3]uint32, sharedBytes uint32, params []uint64) error
	// Synchronize waits for every launch of the context
	// (cuCtxSynchronize) and returns the first failure among them.
	Synchronize() error
	// Destroy destroys the context with its modules and memory
	// (cuCtxDestroy_v2). The context is unusable afterwards.
	Destroy() error
}

// CUDADevice describes one CUDA device. Units are in the names.
type CUDADevice struct {
	// Name is the product name, e.g. "NVIDIA H200".
	Name string
	// MemoryMiB is the device's total memory in MiB (2^20 bytes).
	MemoryMiB int64
	// ComputeCapability is "major.minor", e.g. "9.0".
	ComputeCapability string
}

// CUDAError is an error code returned by a function of the CUDA driver
// API, with the driver's name and description of it (cuGetErrorName,
// cuGetErrorString). It matches ErrCUDAOutOfMemory for
// CUDA_ERROR_OUT_OF_MEMORY (2) and ErrCUDANotFound for CUDA_ERROR_NOT_FOUND
// (500).
type CUDAError struct {
	Func    string // e.g. "cuMemAlloc_v2"
	Code    int    // the CUresult
	Name    string // e.g. "CUDA_ERROR_OUT_OF_MEMORY"; "" if unknown
	Message string // e.g. "out of memory"; "" if unknown
}

// CUDA driver API result codes the worker tells apart (cuda.h, enum
// cudaError_enum).
const (
	cudaSuccess          = 0
	cudaErrorOutOfMemory = 2
	cudaErrorNotFound    = 500
)

// Error returns e.g. "cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory".
func (e *CUDAError) Error() string {
	s := fmt.Sprintf("%s: ", e.Func)
	if e.Name != "" {
		s += e.Name + " "
	}
	s += fmt.Sprintf("(%d)", e.Code)
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Is reports whether target is the sentinel for e's code.
func (e *CUDAError) Is(target error) bool {
	switch e.Code {
	case cudaErrorOutOfMemory:
		return target == ErrCUDAOutOfMemory
	case cudaErrorNotFound:
		return target == ErrCUDANotFound
	}
	return false
}

// newCUDADriver returns the process's CUDA driver. It is called at most
// once per worker process, on the first idlepool_cuda call of a task that
// was given GPUs. The product loads the driver library (loadCUDADriver);
// the package's tests replace it with their fake in the re-executed test
// binary, which no product binary can do (it is unexported, and set only
// in _test.go files).
var newCUDADriver = loadCUDADriver
