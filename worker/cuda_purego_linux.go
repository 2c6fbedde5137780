package worker

import "github.com/ebitengine/purego"

// cudaLibrary is the CUDA driver library's soname on Linux.
const cudaLibrary = "libcuda.so.1"

// openCUDALibrary opens libcuda.so.1 through the dynamic loader's search
// path (where the NVIDIA driver installs it).
func openCUDALibrary() (uintptr, error) {
	return purego.Dlopen(cudaLibrary, purego.RTLD_NOW|purego.RTLD_LOCAL)
}

// lookupCUDASymbol returns the address of a function of the library.
func lookupCUDASymbol(lib uintptr, name string) (uintptr, error) {
	return purego.Dlsym(lib, name)
}
