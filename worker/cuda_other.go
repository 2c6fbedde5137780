//go:build !linux && !windows

package worker

import (
	"errors"
	"fmt"
)

// errNoCUDALibrary is the cause of ErrCUDAUnavailable on systems without a
// known driver library.
var errNoCUDALibrary = errors.New("no CUDA driver library on this operating system")

// loadCUDADriver reports that this operating system has no CUDA driver
// library the worker knows how to load.
func loadCUDADriver() (CUDADriver, error) {
	return nil, fmt.Errorf("%w: %w", ErrCUDAUnavailable, errNoCUDALibrary)
}
