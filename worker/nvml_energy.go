package worker

import (
	"fmt"
	"strings"

	"idlepool/energy"
)

// nvmlEnergy is the part of NVML that reads GPUs' energy and power, by
// UUID: go-nvml's binding on Linux (goNVML) and NVML loaded through
// purego (pureNVML: nvml.dll on Windows, libnvidia-ml.so.1 on Linux)
// implement it, and readGPUEnergy reads through it. Errors name NVML's
// code ("ERROR_NOT_SUPPORTED"). NVML is initialised before any call.
type nvmlEnergy interface {
	// device returns the GPU with uuid (nvmlDeviceGetHandleByUUID).
	device(uuid string) (nvmlDevice, error)
	// totalEnergyMJ is its energy counter in millijoules since the
	// driver loaded (nvmlDeviceGetTotalEnergyConsumption, Volta on).
	totalEnergyMJ(d nvmlDevice) (uint64, error)
	// powerMW is its board's draw now in milliwatts
	// (nvmlDeviceGetPowerUsage).
	powerMW(d nvmlDevice) (uint32, error)
}

// nvmlDevice is a GPU's handle, as its nvmlEnergy gave it.
type nvmlDevice any

// readGPUEnergy reads the energy of the GPUs named by UUID through lib
// (energy.GPUReader's contract): the energy counter where the GPU has
// one, its power draw where it has that, and the GPUs NVML cannot find,
// or that have neither reading, named in the error.
func readGPUEnergy(lib nvmlEnergy, uuids []string) ([]energy.GPUReading, error) {
	var out []energy.GPUReading
	var problems []string
	for _, u := range uuids {
		dev, err := lib.device(u)
		if err != nil {
			problems = append(problems, u+": "+err.Error())
			continue
		}
		r := energy.GPUReading{UUID: u}
		if mJ, err := lib.totalEnergyMJ(dev); err == nil {
			r.EnergyMJ, r.HasEnergy = mJ, true
		}
		if mW, err := lib.powerMW(dev); err == nil {
			r.PowerW, r.HasPower = float64(mW)/1000, true
		} else if !r.HasEnergy {
			problems = append(problems, u+": power: "+err.Error())
			continue
		}
		out = append(out, r)
	}
	if len(problems) > 0 {
		return out, fmt.Errorf("read GPU energy: %s", strings.Join(problems, "; "))
	}
	return out, nil
}
