//go:build cgo && linux

package agent_test

import (
	"os"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/google/go-cmp/cmp"

	"idlepool/agent"
	"idlepool/idle"
	"idlepool/worker"
)

// TestNVMLGPUsOurProcesses: the GPU source tells the policy which
// processes on a GPU are ours (this process and its workers) and which
// are not, so that a GPU counts as ours only while a task of ours has a
// context on it.
func TestNVMLGPUsOurProcesses(t *testing.T) {
	lib := mockNVML()
	dev, _ := lib.DeviceGetHandleByIndex(0)
	dev.(*mock.Device).GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return []nvml.ProcessInfo{{Pid: uint32(os.Getpid()), UsedGpuMemory: 1 << 30}, {Pid: 4242, UsedGpuMemory: 512 << 20}}, nvml.SUCCESS
	}
	lister := worker.NewGPUListerWith(lib)
	defer lister.Close()
	gs, err := agent.NVMLGPUs{Lister: lister}.GPUs(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := []idle.GPU{{Index: 0, UUID: "GPU-4090", Name: "NVIDIA GeForce RTX 4090", MemoryTotalMiB: 24564, MemoryFreeMiB: 24000,
		UtilisationShare: 0.02, TemperatureC: 40, PowerW: 30, ComputeCapability: "8.9",
		OtherProcesses: []int{4242}, OtherMemoryMiB: 512, OurProcesses: []int{os.Getpid()}}}
	if diff := cmp.Diff(want, gs); diff != "" {
		t.Errorf("GPUs (-want +got):\n%s", diff)
	}
}
