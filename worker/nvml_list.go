package worker

import (
	"fmt"
	"math"
	"time"
)

// initRetry is how long a GPULister answers with Init's last failure
// before it calls Init again: on a machine without the driver each Init
// searches the library path for libnvidia-ml (most of a resting donor's
// CPU when it was tried every second); a driver installed later is found
// within it.
const initRetry = time.Minute

// nvmlDevices is the part of NVML that lists GPUs for tasks: go-nvml's
// binding on Linux (goNVML) and NVML loaded through purego (pureNVML:
// nvml.dll on Windows) implement it, and listGPUs reads through it, so
// that both builds list a device with the same rules. Each method is one
// NVML function (named in its comment; the versioned one the driver
// exports where nvml.h maps the plain name to it). Errors read as NVML's
// nvmlErrorString gives the code. NVML is initialised before any call.
type nvmlDevices interface {
	nvmlEnergy // powerMW (nvmlDeviceGetPowerUsage)
	// deviceCount is the number of GPUs (nvmlDeviceGetCount_v2).
	deviceCount() (int, error)
	// deviceByIndex is GPU i, 0..count-1 (nvmlDeviceGetHandleByIndex_v2).
	deviceByIndex(i int) (nvmlDevice, error)
	// uuid is the GPU's UUID, "GPU-..." (nvmlDeviceGetUUID).
	uuid(d nvmlDevice) (string, error)
	// name is the product name (nvmlDeviceGetName).
	name(d nvmlDevice) (string, error)
	// memory is the frame buffer's total and free bytes
	// (nvmlDeviceGetMemoryInfo, nvmlMemory_t).
	memory(d nvmlDevice) (total, free uint64, err error)
	// temperatureC is the core's temperature (nvmlDeviceGetTemperature,
	// NVML_TEMPERATURE_GPU).
	temperatureC(d nvmlDevice) (uint32, error)
	// utilisationPercent is the share of the last sample period in
	// which a kernel ran, 0..100 (nvmlDeviceGetUtilizationRates, its
	// gpu field).
	utilisationPercent(d nvmlDevice) (uint32, error)
	// computeCapability is the CUDA compute capability
	// (nvmlDeviceGetCudaComputeCapability).
	computeCapability(d nvmlDevice) (major, minor int, err error)
	// processes are the processes with a compute context, or with a
	// graphics one (nvmlDeviceGet{Compute,Graphics}RunningProcesses_v3).
	processes(d nvmlDevice, graphics bool) ([]nvmlProcess, error)
}

// nvmlProcess is a process on a GPU as NVML lists it (nvmlProcessInfo_t).
type nvmlProcess struct {
	pid uint32
	// usedBytes is its GPU memory; math.MaxUint64
	// (NVML_VALUE_NOT_AVAILABLE) when NVML cannot tell.
	usedBytes uint64
}

// listGPUs lists the GPUs of lib in NVML's index order, with the
// processes on each split into ours (PIDs in ours) and others' (the
// rules of GPULister.List). lost is true when NVML could not count the
// devices: the driver may have gone, and the caller shuts NVML down to
// initialise it afresh next time.
func listGPUs(lib nvmlDevices, ours map[int]bool) (gpus []GPU, lost bool, err error) {
	n, err := lib.deviceCount()
	if err != nil {
		return nil, true, &NoGPUError{Reason: "NVML: count devices: " + err.Error(), Err: fmt.Errorf("nvmlDeviceGetCount: %w", err)}
	}
	if n == 0 {
		return nil, false, &NoGPUError{Reason: "no NVIDIA GPU"}
	}
	var skipped []string
	for i := range n {
		g, err := readGPU(lib, i, ours)
		if err != nil {
			skipped = append(skipped, err.Error())
			continue
		}
		gpus = append(gpus, g)
	}
	if len(skipped) == 0 {
		return gpus, false, nil
	}
	err = fmt.Errorf("NVML: %s", joinReasons(skipped))
	if len(gpus) == 0 {
		return nil, false, &NoGPUError{Reason: err.Error(), Err: err}
	}
	return gpus, false, err
}

// readGPU reads device i. It fails when a required reading (handle,
// UUID, memory, temperature, compute processes) fails; an optional one
// that fails is noted in GPU.Problems.
func readGPU(lib nvmlDevices, i int, ours map[int]bool) (GPU, error) {
	fail := func(what string, err error) (GPU, error) {
		return GPU{}, fmt.Errorf("GPU %d skipped: %s: %w", i, what, err)
	}
	dev, err := lib.deviceByIndex(i)
	if err != nil {
		return fail("get handle", err)
	}
	g := GPU{Index: i}
	if g.UUID, err = lib.uuid(dev); err != nil {
		return fail("UUID", err)
	}
	total, free, err := lib.memory(dev)
	if err != nil {
		return fail("memory", err)
	}
	g.MemoryTotalMiB, g.MemoryFreeMiB = int64(total>>20), int64(free>>20)
	temp, err := lib.temperatureC(dev)
	if err != nil {
		return fail("temperature", err)
	}
	g.TemperatureC = float64(temp)
	compute, err := lib.processes(dev, false)
	if err != nil {
		return fail("compute processes", err)
	}

	problem := func(what string, err error) {
		g.Problems = append(g.Problems, what+": "+err.Error())
	}
	if g.Name, err = lib.name(dev); err != nil {
		problem("name", err)
	}
	if u, err := lib.utilisationPercent(dev); err == nil {
		g.UtilisationShare = min(float64(u)/100, 1)
	} else {
		problem("utilisation", err)
	}
	if mW, err := lib.powerMW(dev); err == nil {
		g.PowerW = float64(mW) / 1000
	} else {
		problem("power", err)
	}
	if major, minor, err := lib.computeCapability(dev); err == nil {
		g.ComputeCapability = fmt.Sprintf("%d.%d", major, minor)
	} else {
		problem("compute capability", err)
	}
	graphics, err := lib.processes(dev, true)
	if err != nil {
		problem("graphics processes", err)
	}

	seen := map[int]bool{}
	add := func(infos []nvmlProcess, isGraphics bool) {
		for _, p := range infos {
			pid := int(p.pid)
			if seen[pid] {
				continue
			}
			seen[pid] = true
			gp := GPUProcess{PID: pid, UsedMemoryMiB: -1, Graphics: isGraphics}
			if p.usedBytes != math.MaxUint64 { // NVML_VALUE_NOT_AVAILABLE
				gp.UsedMemoryMiB = int64(p.usedBytes >> 20)
			}
			if ours[pid] {
				g.OurProcesses = append(g.OurProcesses, gp)
			} else {
				g.OtherProcesses = append(g.OtherProcesses, gp)
			}
		}
	}
	add(compute, false)
	add(graphics, true)
	return g, nil
}
