//go:build wasip1

package cuda

import "unsafe"

// platformHost returns the host module of a WebAssembly build: the
// idlepool_cuda imports.
func platformHost() host { return wasmHost{} }

// wasmHost calls the idlepool_cuda host module. Slices become (pointer,
// length) pairs of linear memory; Go's garbage collector does not move
// objects, and a pointer argument keeps its object alive for the call.
type wasmHost struct{}

// ptr returns the linear-memory address of p's first byte (nil when p is
// empty: the host accepts any address with length 0).
func ptr(p []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(p)) }

//go:wasmimport idlepool_cuda device_count
func cudaDeviceCount() int32

//go:wasmimport idlepool_cuda device_info
func cudaDeviceInfo(ordinal int32, out unsafe.Pointer, outLen uint32) int32

//go:wasmimport idlepool_cuda module_load
func cudaModuleLoad(ptx unsafe.Pointer, ptxLen uint32) int32

//go:wasmimport idlepool_cuda function_get
func cudaFunctionGet(module int32, name unsafe.Pointer, nameLen uint32) int32

//go:wasmimport idlepool_cuda mem_alloc
func cudaMemAlloc(bytes int64) int32

//go:wasmimport idlepool_cuda mem_free
func cudaMemFree(buffer int32) int32

//go:wasmimport idlepool_cuda memcpy_htod
func cudaMemcpyHtoD(buffer int32, offset int64, src unsafe.Pointer, n uint32) int32

//go:wasmimport idlepool_cuda memcpy_dtoh
func cudaMemcpyDtoH(dst unsafe.Pointer, buffer int32, offset int64, n uint32) int32

//go:wasmimport idlepool_cuda launch
func cudaLaunch(function int32, gridX, gridY, gridZ, blockX, blockY, blockZ, sharedBytes uint32, params unsafe.Pointer, count uint32) int32

//go:wasmimport idlepool_cuda synchronize
func cudaSynchronize() int32

//go:wasmimport idlepool_cuda last_error
func cudaLastError(out unsafe.Pointer, outLen uint32) int32

func (wasmHost) deviceCount() int32 { return cudaDeviceCount() }

func (wasmHost) deviceInfo(ordinal int32, out []byte) int32 {
	return cudaDeviceInfo(ordinal, ptr(out), uint32(len(out)))
}

func (wasmHost) moduleLoad(ptx []byte) int32 { return cudaModuleLoad(ptr(ptx), uint32(len(ptx))) }

func (wasmHost) functionGet(module int32, name []byte) int32 {
	return cudaFunctionGet(module, ptr(name), uint32(len(name)))
}

func (wasmHost) memAlloc(bytes int64) int32 { return cudaMemAlloc(bytes) }

func (wasmHost) memFree(buffer int32) int32 { return cudaMemFree(buffer) }

func (wasmHost) memcpyHtoD(buffer int32, offset int64, src []byte) int32 {
	return cudaMemcpyHtoD(buffer, offset, ptr(src), uint32(len(src)))
}

func (wasmHost) memcpyDtoH(dst []byte, buffer int32, offset int64) int32 {
	return cudaMemcpyDtoH(ptr(dst), buffer, offset, uint32(len(dst)))
}

func (wasmHost) launch(function int32, grid, block Dim3, sharedBytes uint32, params []byte, count int32) int32 {
	return cudaLaunch(function, grid.X, grid.Y, grid.Z, block.X, block.Y, block.Z, sharedBytes, ptr(params), uint32(count))
}

func (wasmHost) synchronize() int32 { return cudaSynchronize() }

func (wasmHost) lastError(out []byte) int32 { return cudaLastError(ptr(out), uint32(len(out))) }
