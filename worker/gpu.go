package worker

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// GPU is one NVIDIA GPU as NVML reports it, read by GPULister.List. Units
// are in the names. Sources: the NVML API reference
// (https://docs.nvidia.com/deploy/nvml-api/), functions nvmlDeviceGetUUID,
// nvmlDeviceGetName, nvmlDeviceGetMemoryInfo, nvmlDeviceGetUtilizationRates,
// nvmlDeviceGetTemperature (NVML_TEMPERATURE_GPU), nvmlDeviceGetPowerUsage,
// nvmlDeviceGetCudaComputeCapability and
// nvmlDeviceGet{Compute,Graphics}RunningProcesses.
type GPU struct {
	// Index is NVML's device index, 0..count-1. It may differ from the
	// CUDA runtime's order: tell GPUs apart by UUID.
	Index int
	// UUID is NVML's stable identifier, e.g. "GPU-5e3a...". It is what
	// Request.GPUs and CUDA_VISIBLE_DEVICES name.
	UUID string
	// Name is the product name, e.g. "NVIDIA GeForce RTX 4090".
	Name string
	// MemoryTotalMiB and MemoryFreeMiB are the device's frame buffer
	// memory in MiB (2^20 bytes), total and not allocated by anyone.
	MemoryTotalMiB int64
	MemoryFreeMiB  int64
	// UtilisationShare is the share of time (0..1) over NVML's last sample
	// period (1/6 s to 1 s, by product) during which a kernel ran.
	UtilisationShare float64
	// TemperatureC is the GPU core temperature in degrees Celsius.
	TemperatureC float64
	// PowerW is the board's power draw in watts (NVML reports milliwatts).
	PowerW float64
	// ComputeCapability is the CUDA compute capability, "major.minor",
	// e.g. "8.9".
	ComputeCapability string
	// OurProcesses and OtherProcesses are the processes with a compute or
	// graphics context on the GPU, split by whether their PID was in the
	// set passed to List.
	OurProcesses   []GPUProcess
	OtherProcesses []GPUProcess
	// Problems lists readings of optional fields that NVML refused
	// (e.g. "power: Not Supported"); those fields are left zero. A GPU
	// whose identity, memory, temperature or compute processes cannot be
	// read is not listed at all (see GPULister.List).
	Problems []string
}

// OtherMemoryMiB is the memory held on g by processes that are not ours,
// in MiB. Processes whose use NVML does not know count as 0.
func (g GPU) OtherMemoryMiB() int64 {
	var n int64
	for _, p := range g.OtherProcesses {
		n += max(p.UsedMemoryMiB, 0)
	}
	return n
}

// OtherPIDs returns the PIDs of the processes on g that are not ours.
func (g GPU) OtherPIDs() []int {
	pids := make([]int, 0, len(g.OtherProcesses))
	for _, p := range g.OtherProcesses {
		pids = append(pids, p.PID)
	}
	return pids
}

// OurPIDs returns the PIDs of the processes on g that are ours.
func (g GPU) OurPIDs() []int {
	pids := make([]int, 0, len(g.OurProcesses))
	for _, p := range g.OurProcesses {
		pids = append(pids, p.PID)
	}
	return pids
}

// GPUProcess is a process with a context on a GPU.
type GPUProcess struct {
	PID int
	// UsedMemoryMiB is the GPU memory the process holds in MiB; -1 when
	// NVML cannot tell (NVML_VALUE_NOT_AVAILABLE, e.g. under Windows WDDM).
	UsedMemoryMiB int64
	// Graphics is true for a graphics context (a game, a desktop), false
	// for a compute context (CUDA, OpenCL). A process with both is listed
	// once, as compute.
	Graphics bool
}

// ErrNoGPU is matched (errors.Is) by every NoGPUError.
var ErrNoGPU = errors.New("worker: no usable GPU")

// NoGPUError says why GPULister.List found no usable GPU, in words for
// people: Error returns "no usable GPU: " followed by Reason, e.g. "no
// usable GPU: no NVIDIA driver (NVML not found)". It matches ErrNoGPU and
// unwraps to its cause (errors.ErrUnsupported when built without NVML).
type NoGPUError struct {
	Reason string
	Err    error // the cause; may be nil
}

func (e *NoGPUError) Error() string { return "no usable GPU: " + e.Reason }

// Unwrap returns the cause.
func (e *NoGPUError) Unwrap() error { return e.Err }

// Is reports whether target is ErrNoGPU.
func (e *NoGPUError) Is(target error) bool { return target == ErrNoGPU }

// CUDAVisibleDevicesEnv is the environment variable through which the
// CUDA runtime restricts a process to some GPUs.
const CUDAVisibleDevicesEnv = "CUDA_VISIBLE_DEVICES"

// GPUEnv returns env with CUDA_VISIBLE_DEVICES set to uuids, comma-joined
// (any earlier setting is removed). No uuids sets it to the empty string,
// which the CUDA runtime reads as "no visible device". env is not
// modified.
func GPUEnv(env, uuids []string) []string {
	out := slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		return strings.HasPrefix(kv, CUDAVisibleDevicesEnv+"=")
	})
	return append(out, CUDAVisibleDevicesEnv+"="+strings.Join(uuids, ","))
}

// cudaJITCacheBytes bounds the CUDA driver's cache of PTX compiled for
// the GPU (CUDA_CACHE_MAXSIZE, in bytes).
const cudaJITCacheBytes = 256 << 20

// cudaCacheEnv returns the environment that keeps the CUDA driver's JIT
// cache (the PTX it compiled for the card) inside the workers'
// compilation cache, which the donor's disk cap counts and trims, instead
// of ~/.nv/ComputeCache: CUDA_CACHE_PATH=cacheDir/cuda and
// CUDA_CACHE_MAXSIZE. With no cacheDir the driver's cache is off
// (CUDA_CACHE_DISABLE=1), as wazero's is then kept in memory only.
// These variables are the driver's (CUDA C Programming Guide, "CUDA
// Environment Variables").
func cudaCacheEnv(cacheDir string) []string {
	if cacheDir == "" {
		return []string{"CUDA_CACHE_DISABLE=1"}
	}
	return []string{"CUDA_CACHE_PATH=" + filepath.Join(cacheDir, "cuda"), "CUDA_CACHE_MAXSIZE=" + strconv.Itoa(cudaJITCacheBytes)}
}

// checkGPUs checks the UUIDs of Request.GPUs.
func checkGPUs(uuids []string) error {
	for _, u := range uuids {
		if u == "" || strings.ContainsAny(u, ",= \t\n") {
			return fmt.Errorf("GPU UUID %q is empty or holds a comma, '=' or space", u)
		}
	}
	return nil
}

// joinReasons joins reasons with "; ".
func joinReasons(reasons []string) string { return strings.Join(reasons, "; ") }
