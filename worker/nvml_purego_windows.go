package worker

import (
	"os"
	"path/filepath"

	"golang.org/x/sys/windows"
)

// nvmlLibrary is NVML's name on Windows.
const nvmlLibrary = "nvml.dll"

// openNVMLLibrary opens the NVML library at path, or nvml.dll where the
// NVIDIA driver installs it: the system directory (drivers since 2019),
// else %ProgramFiles%\NVIDIA Corporation\NVSMI (older ones); never from
// the working directory.
func openNVMLLibrary(path string) (uintptr, error) {
	if path != "" {
		h, err := windows.LoadLibraryEx(path, 0, windows.LOAD_WITH_ALTERED_SEARCH_PATH)
		return uintptr(h), err
	}
	h, err := windows.LoadLibraryEx(nvmlLibrary, 0, windows.LOAD_LIBRARY_SEARCH_SYSTEM32)
	if err == nil {
		return uintptr(h), nil
	}
	pf := os.Getenv("ProgramFiles")
	if pf == "" {
		return 0, err
	}
	h, err2 := windows.LoadLibraryEx(filepath.Join(pf, "NVIDIA Corporation", "NVSMI", nvmlLibrary), 0, windows.LOAD_WITH_ALTERED_SEARCH_PATH)
	if err2 != nil {
		return 0, err
	}
	return uintptr(h), nil
}
