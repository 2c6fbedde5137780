package energy

import (
	"os"
	"path/filepath"
	"strings"
)

// GPUReading is one GPU's energy reading.
type GPUReading struct {
	UUID string // NVML's UUID, "GPU-..."
	// EnergyMJ is NVML's total energy counter in millijoules since the
	// driver was loaded (nvmlDeviceGetTotalEnergyConsumption, Volta and
	// newer); valid when HasEnergy.
	EnergyMJ  uint64
	HasEnergy bool
	// PowerW is the board's power draw now in watts
	// (nvmlDeviceGetPowerUsage); valid when HasPower.
	PowerW   float64
	HasPower bool
}

// GPUReader reads the energy of GPUs by UUID. It returns a reading for
// each UUID it could read, in any order, and an error naming those it
// could not; a GPU that is gone is simply missing. *worker.GPULister
// implements it through NVML. Called from one goroutine at a time.
type GPUReader interface {
	ReadGPUs(uuids []string) ([]GPUReading, error)
}

// nvidiaVendor is the PCI vendor ID of NVIDIA.
const nvidiaVendor = "0x10de"

// PCIRoot is where Linux lists PCI devices.
const PCIRoot = "/sys/bus/pci/devices"

// GPUsAsleep reports whether every NVIDIA device under root (PCIRoot, or a
// fake tree) is in runtime suspend (power/runtime_status "suspended"): a
// laptop's discrete GPU powered down while nothing uses it. Asking NVML
// about such a GPU wakes it for seconds and costs more than the reading
// is worth, so a Meter does not ask. No NVIDIA device, or a tree that
// cannot be read (not Linux), is false: ask NVML.
func GPUsAsleep(root string) bool {
	if root == "" {
		return false
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return false
	}
	found := false
	for _, e := range entries {
		dir := filepath.Join(root, e.Name())
		v, err := os.ReadFile(filepath.Join(dir, "vendor"))
		if err != nil || strings.TrimSpace(string(v)) != nvidiaVendor {
			continue
		}
		class, _ := os.ReadFile(filepath.Join(dir, "class"))
		if !strings.HasPrefix(strings.TrimSpace(string(class)), "0x03") {
			continue // not a display controller (the GPU's audio function)
		}
		found = true
		st, err := os.ReadFile(filepath.Join(dir, "power", "runtime_status"))
		if err != nil || strings.TrimSpace(string(st)) != "suspended" {
			return false
		}
	}
	return found
}
