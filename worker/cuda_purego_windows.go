package worker

import "golang.org/x/sys/windows"

// cudaLibrary is the CUDA driver library's name on Windows.
const cudaLibrary = "nvcuda.dll"

// openCUDALibrary loads nvcuda.dll from the system directory only (where
// the NVIDIA driver installs it), never from the working directory.
func openCUDALibrary() (uintptr, error) {
	h, err := windows.LoadLibraryEx(cudaLibrary, 0, windows.LOAD_LIBRARY_SEARCH_SYSTEM32)
	return uintptr(h), err
}

// lookupCUDASymbol returns the address of a function of the library.
func lookupCUDASymbol(lib uintptr, name string) (uintptr, error) {
	return windows.GetProcAddress(windows.Handle(lib), name)
}
