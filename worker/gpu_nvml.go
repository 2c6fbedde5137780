//go:build cgo && linux

package worker

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"idlepool/energy"
)

// GPULister lists the machine's NVIDIA GPUs through NVML, which go-nvml
// loads at run time (dlopen of libnvidia-ml.so.1 in nvml.Init): a binary
// built with it starts and runs on machines without the driver.
//
// NVML's rule, kept here: nothing but Init is called until Init has
// succeeded. On a machine without the driver Init returns
// ERROR_LIBRARY_NOT_FOUND, and calling any other NVML function after that
// kills the process (an unresolved symbol, which no recover catches).
//
// A GPULister initialises NVML on the first List and keeps it initialised
// until Close, so that polling is cheap; after an error that suggests the
// driver went away it shuts NVML down and initialises it again on the next
// List. Its methods are safe for concurrent use.
type GPULister struct {
	lib nvml.Interface
	now func() time.Time // time.Now; a fake clock in tests

	mu       sync.Mutex
	inited   bool
	failedAt time.Time // when Init last failed; zero after a success
	failed   error     // what it failed with
	limits   powerLimits
}

// NewGPULister returns a lister of the real NVML library. It loads
// nothing yet.
func NewGPULister() *GPULister { return newGPULister(nvml.New()) }

// newGPULister returns a lister of lib (the mock in tests).
func newGPULister(lib nvml.Interface) *GPULister { return &GPULister{lib: lib, now: time.Now} }

// List returns the usable GPUs in NVML's index order, with the processes
// on each split into ours (PIDs in ours; nil means none) and others'.
//
// With no usable GPU it returns a *NoGPUError (matching ErrNoGPU), e.g.
// "no usable GPU: no NVIDIA driver (NVML not found)", "no usable GPU: no
// NVIDIA GPU", or "no usable GPU: NVML: ..." for an NVML failure. When
// some GPUs are usable and others not (NVML refused a required reading:
// UUID, memory, temperature or compute processes), it returns the usable
// ones and an error naming the others. Readings of optional fields (name,
// utilisation, power, compute capability, graphics processes) that fail
// are noted in GPU.Problems.
func (l *GPULister) List(ours map[int]bool) ([]GPU, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.initLocked(); err != nil {
		return nil, err
	}
	gpus, lost, err := listGPUs(goNVML{l.lib}, ours)
	if lost {
		l.shutdownLocked() // the driver may have gone: initialise afresh next time
	}
	return gpus, err
}

// initLocked initialises NVML unless it is, or failed less than
// initRetry ago.
func (l *GPULister) initLocked() error {
	if l.inited {
		return nil
	}
	if !l.failedAt.IsZero() && l.now().Sub(l.failedAt) < initRetry {
		return l.failed
	}
	// The only call allowed before a successful Init (see the type's
	// doc): on failure, return without touching NVML again.
	if ret := l.lib.Init(); ret != nvml.SUCCESS {
		l.failedAt, l.failed = l.now(), initError(ret)
		return l.failed
	}
	l.inited, l.failedAt, l.failed = true, time.Time{}, nil
	return nil
}

// ReadGPUs reads the energy of the GPUs named by UUID (energy.GPUReader):
// NVML's total energy counter (nvmlDeviceGetTotalEnergyConsumption, in
// mJ, Volta and newer) and the power draw (nvmlDeviceGetPowerUsage). A
// GPU NVML cannot find, or that has neither reading, is left out and
// named in the error; with no driver the error is a *NoGPUError. It asks
// NVML about these GPUs only: a caller that must not wake a sleeping GPU
// checks first (energy.GPUsAsleep).
func (l *GPULister) ReadGPUs(uuids []string) ([]energy.GPUReading, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.initLocked(); err != nil {
		return nil, err
	}
	return readGPUEnergy(goNVML{l.lib}, uuids)
}

// SetPowerLimit sets the board power limit of GPU uuid (NVML's UUID) to
// watts, clamped into the driver's constraints
// (nvmlDeviceGetPowerManagementLimitConstraints), and returns the limit
// now in force. The limit before the first change is kept for
// RestorePowerLimits. A driver that refuses (root only, or no settable
// limit) is an error matching ErrPowerLimitRefused; with no driver too.
func (l *GPULister) SetPowerLimit(uuid string, watts float64) (PowerLimit, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.initLocked(); err != nil {
		return PowerLimit{}, fmt.Errorf("%w: %w", ErrPowerLimitRefused, err)
	}
	return l.limits.set(goNVML{l.lib}, uuid, watts)
}

// ResetPowerLimit sets the board power limit of GPU uuid to watts,
// clamped into the driver's constraints, as the GPU's own limit: what
// RestorePowerLimits returns to afterwards, not a change it undoes. It
// puts back a limit recorded before a donor stopped without restoring
// it (killed, or the machine lost power). A refusal matches
// ErrPowerLimitRefused.
func (l *GPULister) ResetPowerLimit(uuid string, watts float64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.initLocked(); err != nil {
		return fmt.Errorf("%w: %w", ErrPowerLimitRefused, err)
	}
	return l.limits.reset(goNVML{l.lib}, uuid, watts)
}

// RestorePowerLimits sets back every limit SetPowerLimit changed to what
// it was before; the GPUs it could not restore are named in the error.
func (l *GPULister) RestorePowerLimits() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.inited || len(l.limits.saved) == 0 {
		return nil
	}
	return l.limits.restore(goNVML{l.lib})
}

// goNVML is go-nvml's binding as an nvmlEnergy.
type goNVML struct{ lib nvml.Interface }

func (g goNVML) device(uuid string) (nvmlDevice, error) {
	d, ret := g.lib.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	return d, nil
}

func (g goNVML) totalEnergyMJ(d nvmlDevice) (uint64, error) {
	mJ, ret := d.(nvml.Device).GetTotalEnergyConsumption()
	if ret != nvml.SUCCESS {
		return 0, ret
	}
	return mJ, nil
}

func (g goNVML) powerMW(d nvmlDevice) (uint32, error) {
	mW, ret := d.(nvml.Device).GetPowerUsage()
	if ret != nvml.SUCCESS {
		return 0, ret
	}
	return mW, nil
}

func (g goNVML) deviceCount() (int, error) {
	n, ret := g.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return 0, ret
	}
	return n, nil
}

func (g goNVML) deviceByIndex(i int) (nvmlDevice, error) {
	d, ret := g.lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	return d, nil
}

func (g goNVML) uuid(d nvmlDevice) (string, error) {
	return nvmlValue(d.(nvml.Device).GetUUID())
}

func (g goNVML) name(d nvmlDevice) (string, error) {
	return nvmlValue(d.(nvml.Device).GetName())
}

func (g goNVML) memory(d nvmlDevice) (total, free uint64, err error) {
	m, ret := d.(nvml.Device).GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return 0, 0, ret
	}
	return m.Total, m.Free, nil
}

func (g goNVML) temperatureC(d nvmlDevice) (uint32, error) {
	return nvmlValue(d.(nvml.Device).GetTemperature(nvml.TEMPERATURE_GPU))
}

func (g goNVML) utilisationPercent(d nvmlDevice) (uint32, error) {
	u, ret := d.(nvml.Device).GetUtilizationRates()
	if ret != nvml.SUCCESS {
		return 0, ret
	}
	return u.Gpu, nil
}

func (g goNVML) computeCapability(d nvmlDevice) (major, minor int, err error) {
	major, minor, ret := d.(nvml.Device).GetCudaComputeCapability()
	if ret != nvml.SUCCESS {
		return 0, 0, ret
	}
	return major, minor, nil
}

func (g goNVML) processes(d nvmlDevice, graphics bool) ([]nvmlProcess, error) {
	get := d.(nvml.Device).GetComputeRunningProcesses
	if graphics {
		get = d.(nvml.Device).GetGraphicsRunningProcesses
	}
	infos, ret := get()
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	out := make([]nvmlProcess, len(infos))
	for i, p := range infos {
		out[i] = nvmlProcess{pid: p.Pid, usedBytes: p.UsedGpuMemory}
	}
	return out, nil
}

// limitErr is NVML's code as the purego binding gives it, so that
// limitError tells a refusal alike in both.
func limitErr(ret nvml.Return) error { return &nvmlError{code: nvmlCode(ret), text: ret.Error()} }

func (g goNVML) powerLimitMW(d nvmlDevice) (uint32, error) {
	mW, ret := d.(nvml.Device).GetPowerManagementLimit()
	if ret != nvml.SUCCESS {
		return 0, limitErr(ret)
	}
	return mW, nil
}

func (g goNVML) powerLimitConstraintsMW(d nvmlDevice) (lo, hi uint32, err error) {
	lo, hi, ret := d.(nvml.Device).GetPowerManagementLimitConstraints()
	if ret != nvml.SUCCESS {
		return 0, 0, limitErr(ret)
	}
	return lo, hi, nil
}

func (g goNVML) setPowerLimitMW(d nvmlDevice, mW uint32) error {
	if ret := d.(nvml.Device).SetPowerManagementLimit(mW); ret != nvml.SUCCESS {
		return limitErr(ret)
	}
	return nil
}

// nvmlValue turns go-nvml's (value, Return) into (value, error).
func nvmlValue[T any](v T, ret nvml.Return) (T, error) {
	if ret != nvml.SUCCESS {
		var zero T
		return zero, ret
	}
	return v, nil
}

var (
	_ nvmlDevices    = goNVML{}
	_ nvmlPowerLimit = goNVML{}
)

// Close restores the power limits SetPowerLimit changed and shuts NVML
// down if it was initialised. The lister may be used again afterwards.
// It returns an error only when a limit cannot be restored or
// nvmlShutdown fails.
func (l *GPULister) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var err error
	if l.inited && len(l.limits.saved) > 0 {
		err = l.limits.restore(goNVML{l.lib})
	}
	return errors.Join(err, l.shutdownLocked())
}

func (l *GPULister) shutdownLocked() error {
	if !l.inited {
		return nil
	}
	l.inited = false
	if ret := l.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("worker: nvmlShutdown: %s", ret.Error())
	}
	return nil
}

// initError explains a failed nvmlInit. ret.Error() is safe here: go-nvml
// names codes itself while the library is not loaded.
func initError(ret nvml.Return) error {
	cause := fmt.Errorf("nvmlInit: %s", ret.Error())
	switch ret {
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return &NoGPUError{Reason: "no NVIDIA driver (NVML not found)", Err: cause}
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return &NoGPUError{Reason: "the NVIDIA driver is not loaded", Err: cause}
	case nvml.ERROR_NO_PERMISSION:
		return &NoGPUError{Reason: "no permission to use the NVIDIA driver", Err: cause}
	}
	return &NoGPUError{Reason: "NVML: " + cause.Error(), Err: cause}
}

// NewGPUListerWith returns a lister of lib instead of the real NVML
// library: the go-nvml mock (github.com/NVIDIA/go-nvml/pkg/nvml/mock) in
// the tests of packages that take a lister, such as an agent whose GPUs
// are simulated.
func NewGPUListerWith(lib nvml.Interface) *GPULister { return newGPULister(lib) }

var _ energy.GPUReader = (*GPULister)(nil)
