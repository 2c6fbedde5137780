package worker

import (
	"errors"
	"sync"
	"time"

	"idlepool/energy"
)

// GPULister reads the machine's NVIDIA GPUs through NVML, which it loads
// from nvml.dll through purego (go-nvml is Linux-only) on the first
// ReadGPUs and keeps loaded until Close; a failed load is tried again
// after a minute. Listing GPUs for tasks is not built for Windows yet:
// List reports no usable GPU. Its methods are safe for concurrent use.
type GPULister struct {
	mu       sync.Mutex
	lib      *pureNVML
	failedAt time.Time
	failed   error
}

// NewGPULister returns a lister of the NVIDIA driver's nvml.dll. It
// loads nothing yet.
func NewGPULister() *GPULister { return &GPULister{} }

// List returns a *NoGPUError wrapping errors.ErrUnsupported: choosing
// GPUs for tasks needs NVML's device listing, which this build has on
// Linux only.
func (l *GPULister) List(ours map[int]bool) ([]GPU, error) {
	return nil, &NoGPUError{Reason: "GPUs are not listed for tasks on Windows yet", Err: errors.ErrUnsupported}
}

// ReadGPUs reads the energy of the GPUs named by UUID through nvml.dll
// (energy.GPUReader), as the Linux build does through go-nvml: the
// energy counter where the GPU has one, else its power draw; with no
// driver the error is a *NoGPUError.
func (l *GPULister) ReadGPUs(uuids []string) ([]energy.GPUReading, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lib == nil {
		if !l.failedAt.IsZero() && time.Since(l.failedAt) < initRetry {
			return nil, l.failed
		}
		lib, err := openPureNVML("")
		if err != nil {
			l.failedAt, l.failed = time.Now(), err
			return nil, err
		}
		l.lib, l.failedAt, l.failed = lib, time.Time{}, nil
	}
	return readGPUEnergy(l.lib, uuids)
}

// Close shuts NVML down if ReadGPUs loaded it. The lister may be used
// again afterwards.
func (l *GPULister) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lib == nil {
		return nil
	}
	err := l.lib.shutdown()
	l.lib = nil
	return err
}

// initRetry is how long a GPULister answers with the last failure to
// load NVML before it tries again.
const initRetry = time.Minute

var _ energy.GPUReader = (*GPULister)(nil)
