//go:build linux || windows

package worker

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"github.com/ebitengine/purego"
)

// nvmlPureFuncs are the NVML entry points pureNVML calls (nvml.h's
// signatures): the _v2 ones are what nvml.h names nvmlInit,
// nvmlDeviceGetCount and nvmlDeviceGetHandleByIndex since CUDA 5, and
// every driver of the last decade exports all of them.
var nvmlPureFuncs = []string{
	"nvmlInit_v2", "nvmlShutdown", "nvmlErrorString", "nvmlDeviceGetHandleByUUID",
	"nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetPowerUsage",
	"nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetUUID",
	"nvmlDeviceGetName", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetTemperature",
	"nvmlDeviceGetUtilizationRates", "nvmlDeviceGetCudaComputeCapability",
}

// nvmlProcessFuncs are the versions of the two process listings, newest
// first, as go-nvml picks them: _v3 (drivers since 510) and _v2 fill
// nvmlProcessInfo_t (nvmlProcessInfo_v2_t's layout), the unversioned one
// nvmlProcessInfo_v1_t. pureNVML calls the newest the driver exports.
var nvmlProcessFuncs = [2][]string{
	{"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2", "nvmlDeviceGetComputeRunningProcesses"},
	{"nvmlDeviceGetGraphicsRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v2", "nvmlDeviceGetGraphicsRunningProcesses"},
}

// nvmlPowerLimitFuncs are the power limit's entry points: looked up
// when the library opens, and a driver that lacks one answers
// NVML_ERROR_FUNCTION_NOT_FOUND for it (powerLimitMW and the others).
var nvmlPowerLimitFuncs = []string{
	"nvmlDeviceGetPowerManagementLimitConstraints", "nvmlDeviceGetPowerManagementLimit", "nvmlDeviceSetPowerManagementLimit",
}

// nvmlProcessInfoV1 is nvmlProcessInfo_v1_t (nvml.h), field for field:
// {unsigned int pid; unsigned long long usedGpuMemory;}, 16 bytes.
type nvmlProcessInfoV1 struct {
	Pid           uint32
	UsedGpuMemory uint64
}

// nvmlProcessInfoV2 is nvmlProcessInfo_v2_t, which nvmlProcessInfo_t
// names: nvmlProcessInfo_v1_t and {unsigned int gpuInstanceId,
// computeInstanceId;}, 24 bytes.
type nvmlProcessInfoV2 struct {
	Pid               uint32
	UsedGpuMemory     uint64
	GpuInstanceId     uint32
	ComputeInstanceId uint32
}

// nvmlMemoryV1 is nvmlMemory_t: {unsigned long long total, free, used;}
// in bytes.
type nvmlMemoryV1 struct{ Total, Free, Used uint64 }

// nvmlUtilization is nvmlUtilization_t: {unsigned int gpu, memory;} in
// percent.
type nvmlUtilization struct{ Gpu, Memory uint32 }

// NVML's constants (nvml.h).
const (
	nvmlTemperatureGPU       = 0  // NVML_TEMPERATURE_GPU
	nvmlInsufficientSize     = 7  // NVML_ERROR_INSUFFICIENT_SIZE
	nvmlDeviceUUIDBufferSize = 96 // NVML_DEVICE_UUID_V2_BUFFER_SIZE
	nvmlDeviceNameBufferSize = 96 // NVML_DEVICE_NAME_V2_BUFFER_SIZE
)

// nvmlReturnNames are the names of nvmlReturn_t's codes (nvml.h), as
// go-nvml's Return.Error gives them while no library is loaded. With a
// library, both bindings describe a code with its nvmlErrorString.
var nvmlReturnNames = map[int]string{
	1: "ERROR_UNINITIALIZED", 2: "ERROR_INVALID_ARGUMENT", 3: "ERROR_NOT_SUPPORTED",
	4: "ERROR_NO_PERMISSION", 6: "ERROR_NOT_FOUND", 7: "ERROR_INSUFFICIENT_SIZE", 9: "ERROR_DRIVER_NOT_LOADED",
	12: "ERROR_LIBRARY_NOT_FOUND", 13: "ERROR_FUNCTION_NOT_FOUND", 15: "ERROR_GPU_IS_LOST",
	17: "ERROR_OPERATING_SYSTEM", 18: "ERROR_LIB_RM_VERSION_MISMATCH", 999: "ERROR_UNKNOWN",
}

// nvmlCode is an nvmlReturn_t other than NVML_SUCCESS, as an error.
type nvmlCode int

// nvmlNoPermission is NVML_ERROR_NO_PERMISSION.
const nvmlNoPermission nvmlCode = 4

// nvmlDriverNotLoaded is NVML_ERROR_DRIVER_NOT_LOADED.
const nvmlDriverNotLoaded nvmlCode = 9

// nvmlError is a code the library returned, with its text from the
// library's nvmlErrorString (e.g. "Not Supported"), which go-nvml's
// Return.Error also gives once the library is loaded. It unwraps to its
// nvmlCode.
type nvmlError struct {
	code nvmlCode
	text string
}

func (e *nvmlError) Error() string { return e.text }

// Unwrap returns the code.
func (e *nvmlError) Unwrap() error { return e.code }

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
	// procs are the process listings it calls, compute then graphics,
	// and whether they fill nvmlProcessInfo_v1_t.
	procs [2]string
	v1    [2]bool
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
	for _, name := range nvmlPowerLimitFuncs {
		if addr, err := lookupCUDASymbol(lib, name); err == nil && addr != 0 {
			n.fn[name] = addr
		}
	}
	for kind, names := range nvmlProcessFuncs {
		for i, name := range names {
			if addr, err := lookupCUDASymbol(lib, name); err == nil && addr != 0 {
				n.fn[name], n.procs[kind], n.v1[kind] = addr, name, i == len(names)-1
				break
			}
		}
		if n.procs[kind] == "" {
			return nil, &NoGPUError{Reason: "the NVIDIA driver's NVML lacks " + names[len(names)-1], Err: errors.ErrUnsupported}
		}
	}
	if err := n.call("nvmlInit_v2"); err != nil {
		return nil, initErrorOf(err)
	}
	return n, nil
}

// initErrorOf explains a failed nvmlInit_v2 as initError does.
func initErrorOf(err error) error {
	cause := fmt.Errorf("nvmlInit: %w", err)
	switch {
	case errors.Is(err, nvmlDriverNotLoaded):
		return &NoGPUError{Reason: "the NVIDIA driver is not loaded", Err: cause}
	case errors.Is(err, nvmlNoPermission):
		return &NoGPUError{Reason: "no permission to use the NVIDIA driver", Err: cause}
	}
	return &NoGPUError{Reason: "NVML: " + cause.Error(), Err: cause}
}

// callOptional is call for an entry point the library may lack:
// NVML_ERROR_FUNCTION_NOT_FOUND when it does.
func (n *pureNVML) callOptional(name string, args ...uintptr) error {
	if n.fn[name] == 0 {
		return &nvmlError{code: nvmlFunctionNotFound, text: "Function Not Found"}
	}
	return n.call(name, args...)
}

func (n *pureNVML) powerLimitMW(d nvmlDevice) (uint32, error) {
	v := new(uint32)
	var pin runtime.Pinner
	pin.Pin(v)
	defer pin.Unpin()
	if err := n.callOptional("nvmlDeviceGetPowerManagementLimit", d.(uintptr), uintptr(unsafe.Pointer(v))); err != nil {
		return 0, err
	}
	return *v, nil
}

func (n *pureNVML) powerLimitConstraintsMW(d nvmlDevice) (lo, hi uint32, err error) {
	v := new([2]uint32) // unsigned int minLimit, maxLimit
	var pin runtime.Pinner
	pin.Pin(v)
	defer pin.Unpin()
	if err := n.callOptional("nvmlDeviceGetPowerManagementLimitConstraints", d.(uintptr), uintptr(unsafe.Pointer(&v[0])), uintptr(unsafe.Pointer(&v[1]))); err != nil {
		return 0, 0, err
	}
	return v[0], v[1], nil
}

func (n *pureNVML) setPowerLimitMW(d nvmlDevice, mW uint32) error {
	return n.callOptional("nvmlDeviceSetPowerManagementLimit", d.(uintptr), uintptr(mW))
}

// call calls an NVML function and turns a code other than NVML_SUCCESS
// into an *nvmlError.
func (n *pureNVML) call(name string, args ...uintptr) error {
	r, _, _ := purego.SyscallN(n.fn[name], args...)
	if code := nvmlCode(int32(r)); code != 0 {
		return &nvmlError{code: code, text: n.errorString(code)}
	}
	return nil
}

// errorString is nvmlErrorString(code): a pointer into the library's
// static strings.
func (n *pureNVML) errorString(code nvmlCode) string {
	r, _, _ := purego.SyscallN(n.fn["nvmlErrorString"], uintptr(code))
	if s := goString(*(*unsafe.Pointer)(unsafe.Pointer(&r))); s != "" {
		return s
	}
	return code.Error()
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

func (n *pureNVML) deviceCount() (int, error) {
	v, err := n.uint32Out("nvmlDeviceGetCount_v2")
	return int(v), err
}

func (n *pureNVML) deviceByIndex(i int) (nvmlDevice, error) {
	h := new(uintptr) // nvmlDevice_t
	var pin runtime.Pinner
	pin.Pin(h)
	defer pin.Unpin()
	if err := n.call("nvmlDeviceGetHandleByIndex_v2", uintptr(uint32(i)), uintptr(unsafe.Pointer(h))); err != nil {
		return nil, err
	}
	return *h, nil
}

func (n *pureNVML) uuid(d nvmlDevice) (string, error) {
	return n.stringOf("nvmlDeviceGetUUID", d, nvmlDeviceUUIDBufferSize)
}

func (n *pureNVML) name(d nvmlDevice) (string, error) {
	return n.stringOf("nvmlDeviceGetName", d, nvmlDeviceNameBufferSize)
}

func (n *pureNVML) memory(d nvmlDevice) (total, free uint64, err error) {
	m := new(nvmlMemoryV1)
	var pin runtime.Pinner
	pin.Pin(m)
	defer pin.Unpin()
	if err := n.call("nvmlDeviceGetMemoryInfo", d.(uintptr), uintptr(unsafe.Pointer(m))); err != nil {
		return 0, 0, err
	}
	return m.Total, m.Free, nil
}

func (n *pureNVML) temperatureC(d nvmlDevice) (uint32, error) {
	v := new(uint32)
	var pin runtime.Pinner
	pin.Pin(v)
	defer pin.Unpin()
	if err := n.call("nvmlDeviceGetTemperature", d.(uintptr), nvmlTemperatureGPU, uintptr(unsafe.Pointer(v))); err != nil {
		return 0, err
	}
	return *v, nil
}

func (n *pureNVML) utilisationPercent(d nvmlDevice) (uint32, error) {
	u := new(nvmlUtilization)
	var pin runtime.Pinner
	pin.Pin(u)
	defer pin.Unpin()
	if err := n.call("nvmlDeviceGetUtilizationRates", d.(uintptr), uintptr(unsafe.Pointer(u))); err != nil {
		return 0, err
	}
	return u.Gpu, nil
}

func (n *pureNVML) computeCapability(d nvmlDevice) (major, minor int, err error) {
	v := new([2]int32) // int major, minor
	var pin runtime.Pinner
	pin.Pin(v)
	defer pin.Unpin()
	if err := n.call("nvmlDeviceGetCudaComputeCapability", d.(uintptr), uintptr(unsafe.Pointer(&v[0])), uintptr(unsafe.Pointer(&v[1]))); err != nil {
		return 0, 0, err
	}
	return int(v[0]), int(v[1]), nil
}

// nvmlMaxProcesses bounds the process list pureNVML asks for.
const nvmlMaxProcesses = 1 << 16

// processes calls the newest process listing the driver has (see
// nvmlProcessFuncs) with a buffer that grows as NVML asks (it returns
// NVML_ERROR_INSUFFICIENT_SIZE and the count it needs).
func (n *pureNVML) processes(d nvmlDevice, graphics bool) ([]nvmlProcess, error) {
	kind := 0
	if graphics {
		kind = 1
	}
	fn, v1 := n.procs[kind], n.v1[kind]
	for size := uint32(16); ; {
		count := new(uint32)
		*count = size
		var buf unsafe.Pointer
		var v1s []nvmlProcessInfoV1
		var v2s []nvmlProcessInfoV2
		if v1 {
			v1s = make([]nvmlProcessInfoV1, size)
			buf = unsafe.Pointer(&v1s[0])
		} else {
			v2s = make([]nvmlProcessInfoV2, size)
			buf = unsafe.Pointer(&v2s[0])
		}
		var pin runtime.Pinner
		pin.Pin(count)
		pin.Pin(buf)
		err := n.call(fn, d.(uintptr), uintptr(unsafe.Pointer(count)), uintptr(buf))
		pin.Unpin()
		var e *nvmlError
		if errors.As(err, &e) && e.code == nvmlInsufficientSize && size < nvmlMaxProcesses {
			size = min(max(*count, 2*size), nvmlMaxProcesses)
			continue
		}
		if err != nil {
			return nil, err
		}
		got := min(*count, size)
		out := make([]nvmlProcess, got)
		for i := range out {
			if v1 {
				out[i] = nvmlProcess{pid: v1s[i].Pid, usedBytes: v1s[i].UsedGpuMemory}
			} else {
				out[i] = nvmlProcess{pid: v2s[i].Pid, usedBytes: v2s[i].UsedGpuMemory}
			}
		}
		return out, nil
	}
}

// uint32Out calls fn(unsigned int*) and returns the value.
func (n *pureNVML) uint32Out(fn string) (uint32, error) {
	v := new(uint32)
	var pin runtime.Pinner
	pin.Pin(v)
	defer pin.Unpin()
	if err := n.call(fn, uintptr(unsafe.Pointer(v))); err != nil {
		return 0, err
	}
	return *v, nil
}

// stringOf calls fn(device, char*, unsigned int length) with a buffer of
// size bytes and returns the NUL-terminated string it wrote.
func (n *pureNVML) stringOf(fn string, d nvmlDevice, size int) (string, error) {
	buf := make([]byte, size)
	var pin runtime.Pinner
	pin.Pin(&buf[0])
	defer pin.Unpin()
	if err := n.call(fn, d.(uintptr), uintptr(unsafe.Pointer(&buf[0])), uintptr(size)); err != nil {
		return "", err
	}
	if i := bytes.IndexByte(buf, 0); i >= 0 {
		buf = buf[:i]
	}
	return string(buf), nil
}

var (
	_ nvmlEnergy     = (*pureNVML)(nil)
	_ nvmlDevices    = (*pureNVML)(nil)
	_ nvmlPowerLimit = (*pureNVML)(nil)
)
