package worker

import "github.com/ebitengine/purego"

// nvmlLibrary is NVML's soname on Linux.
const nvmlLibrary = "libnvidia-ml.so.1"

// openNVMLLibrary opens the NVML library at path, or libnvidia-ml.so.1
// through the dynamic loader's search path.
func openNVMLLibrary(path string) (uintptr, error) {
	if path == "" {
		path = nvmlLibrary
	}
	return purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
}
