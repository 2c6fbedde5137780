//go:build linux || windows

package worker

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/ebitengine/purego"
)

// nvmlPureFuncs are the NVML entry points pureNVML calls (nvml.h; the
// _v2 init is what nvmlInit names since CUDA 5).
var nvmlPureFuncs = []string{
	"nvmlInit_v2", "nvmlShutdown", "nvmlDeviceGetHandleByUUID",
	"nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetPowerUsage",
}

// nvmlReturnNames are the names of nvmlReturn_t's codes (nvml.h), as
// go-nvml's Return.Error gives them, so that both bindings say the same.
var nvmlReturnNames = map[int]string{
	1: "ERROR_UNINITIALIZED", 2: "ERROR_INVALID_ARGUMENT", 3: "ERROR_NOT_SUPPORTED",
	4: "ERROR_NO_PERMISSION", 6: "ERROR_NOT_FOUND", 9: "ERROR_DRIVER_NOT_LOADED",
	12: "ERROR_LIBRARY_NOT_FOUND", 13: "ERROR_FUNCTION_NOT_FOUND", 15: "ERROR_GPU_IS_LOST",
	17: "ERROR_OPERATING_SYSTEM", 18: "ERROR_LIB_RM_VERSION_MISMATCH", 999: "ERROR_UNKNOWN",
}

// nvmlCode is an nvmlReturn_t other than NVML_SUCCESS, as an error.
type nvmlCode int

// nvmlNoPermission is NVML_ERROR_NO_PERMISSION.
const nvmlNoPermission nvmlCode = 4

func (c nvmlCode) Error() string {
	if n, ok := nvmlReturnNames[int(c)]; ok {
		return n
	}
	return fmt.Sprintf("ERROR_%d", int(c))
}

// pureNVML is NVML loaded at run time through purego, without cgo:
// nvml.dll on Windows (go-nvml is Linux-only), libnvidia-ml.so.1 on
// Linux. Every call is purego.SyscallN on an address looked up once.
// Its methods are safe for concurrent use (NVML's are).
type pureNVML struct {
	fn map[string]uintptr
}

// openPureNVML opens the NVML library at path ("": where the NVIDIA
// driver installs it, openNVMLLibrary), looks up every entry point
// pureNVML calls and calls nvmlInit_v2. A missing library or entry
// point, or an init that fails, is a *NoGPUError.
func openPureNVML(path string) (*pureNVML, error) {
	lib, err := openNVMLLibrary(path)
	if err != nil {
		return nil, &NoGPUError{Reason: "no NVIDIA driver (NVML not found)", Err: err}
	}
	n := &pureNVML{fn: map[string]uintptr{}}
	for _, name := range nvmlPureFuncs {
		addr, err := lookupCUDASymbol(lib, name)
		if err != nil || addr == 0 {
			return nil, &NoGPUError{Reason: "the NVIDIA driver's NVML lacks " + name, Err: err}
		}
		n.fn[name] = addr
	}
	if err := n.call("nvmlInit_v2"); err != nil {
		return nil, initErrorOf(err)
	}
	return n, nil
}

// initErrorOf explains a failed nvmlInit_v2 as initError does.
func initErrorOf(err error) error {
	cause := fmt.Errorf("nvmlInit: %w", err)
	switch err {
	case nvmlCode(9):
		return &NoGPUError{Reason: "the NVIDIA driver is not loaded", Err: cause}
	case nvmlNoPermission:
		return &NoGPUError{Reason: "no permission to use the NVIDIA driver", Err: cause}
	}
	return &NoGPUError{Reason: "NVML: " + cause.Error(), Err: cause}
}

// call calls an NVML function and turns a code other than NVML_SUCCESS
// into an nvmlCode.
func (n *pureNVML) call(name string, args ...uintptr) error {
	r, _, _ := purego.SyscallN(n.fn[name], args...)
	if code := int(int32(r)); code != 0 {
		return nvmlCode(code)
	}
	return nil
}

// shutdown calls nvmlShutdown.
func (n *pureNVML) shutdown() error { return n.call("nvmlShutdown") }

func (n *pureNVML) device(uuid string) (nvmlDevice, error) {
	s := append([]byte(uuid), 0)
	h := new(uintptr) // nvmlDevice_t, a pointer NVML owns
	var pin runtime.Pinner
	pin.Pin(&s[0])
	pin.Pin(h)
	defer pin.Unpin()
	if err := n.call("nvmlDeviceGetHandleByUUID", uintptr(unsafe.Pointer(&s[0])), uintptr(unsafe.Pointer(h))); err != nil {
		return nil, err
	}
	return *h, nil
}

func (n *pureNVML) totalEnergyMJ(d nvmlDevice) (uint64, error) {
	v := new(uint64) // unsigned long long
	var pin runtime.Pinner
	pin.Pin(v)
	defer pin.Unpin()
	if err := n.call("nvmlDeviceGetTotalEnergyConsumption", d.(uintptr), uintptr(unsafe.Pointer(v))); err != nil {
		return 0, err
	}
	return *v, nil
}

func (n *pureNVML) powerMW(d nvmlDevice) (uint32, error) {
	return n.uint32Of("nvmlDeviceGetPowerUsage", d)
}

// uint32Of calls fn(device, unsigned int*) and returns the value.
func (n *pureNVML) uint32Of(fn string, d nvmlDevice) (uint32, error) {
	v := new(uint32)
	var pin runtime.Pinner
	pin.Pin(v)
	defer pin.Unpin()
	if err := n.call(fn, d.(uintptr), uintptr(unsafe.Pointer(v))); err != nil {
		return 0, err
	}
	return *v, nil
}

var _ nvmlEnergy = (*pureNVML)(nil)
