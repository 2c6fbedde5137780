//go:build linux || windows

package worker

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"idlepool/energy"
)

// pureLister lists GPUs and reads their energy through NVML loaded with
// purego (pureNVML): the Windows build's GPULister, and on Linux the
// same code run on a stand-in library in the tests. It keeps the Linux
// lister's rules: NVML is loaded and initialised on the first call and
// kept until close; a failed load is answered from memory for initRetry
// before it is tried again; a failed device count (the driver went away)
// shuts NVML down so that the next call initialises it afresh. Its
// methods are safe for concurrent use.
type pureLister struct {
	path string           // the library; "" for where the driver installs it
	now  func() time.Time // time.Now; a fake clock in tests

	mu       sync.Mutex
	lib      *pureNVML
	failedAt time.Time // when loading last failed; zero after a success
	failed   error     // what it failed with
	limits   powerLimits
}

// loadLocked loads and initialises NVML unless it is, or failed less
// than initRetry ago.
func (l *pureLister) loadLocked() error {
	if l.lib != nil {
		return nil
	}
	if !l.failedAt.IsZero() && l.now().Sub(l.failedAt) < initRetry {
		return l.failed
	}
	lib, err := openPureNVML(l.path)
	if err != nil {
		l.failedAt, l.failed = l.now(), err
		return err
	}
	l.lib, l.failedAt, l.failed = lib, time.Time{}, nil
	return nil
}

// list is GPULister.List.
func (l *pureLister) list(ours map[int]bool) ([]GPU, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.loadLocked(); err != nil {
		return nil, err
	}
	gpus, lost, err := listGPUs(l.lib, ours)
	if lost {
		_ = l.shutdownLocked() // the driver may have gone: initialise afresh next time
	}
	return gpus, err
}

// readGPUs is GPULister.ReadGPUs.
func (l *pureLister) readGPUs(uuids []string) ([]energy.GPUReading, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.loadLocked(); err != nil {
		return nil, err
	}
	return readGPUEnergy(l.lib, uuids)
}

// setPowerLimit is GPULister.SetPowerLimit.
func (l *pureLister) setPowerLimit(uuid string, watts float64) (PowerLimit, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.loadLocked(); err != nil {
		return PowerLimit{}, fmt.Errorf("%w: %w", ErrPowerLimitRefused, err)
	}
	return l.limits.set(l.lib, uuid, watts)
}

// resetPowerLimit is GPULister.ResetPowerLimit.
func (l *pureLister) resetPowerLimit(uuid string, watts float64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.loadLocked(); err != nil {
		return fmt.Errorf("%w: %w", ErrPowerLimitRefused, err)
	}
	return l.limits.reset(l.lib, uuid, watts)
}

// restorePowerLimits is GPULister.RestorePowerLimits.
func (l *pureLister) restorePowerLimits() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lib == nil || len(l.limits.saved) == 0 {
		return nil
	}
	return l.limits.restore(l.lib)
}

// close restores the power limits it set and shuts NVML down if it is
// initialised.
func (l *pureLister) close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var err error
	if l.lib != nil && len(l.limits.saved) > 0 {
		err = l.limits.restore(l.lib)
	}
	return errors.Join(err, l.shutdownLocked())
}

func (l *pureLister) shutdownLocked() error {
	if l.lib == nil {
		return nil
	}
	err := l.lib.shutdown()
	l.lib = nil
	if err != nil {
		return fmt.Errorf("worker: nvmlShutdown: %w", err)
	}
	return nil
}
