//go:build linux || windows

package worker

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fakeOurs are the PIDs the listing tests call ours: one process on
// GPU-volta and one of GPU-pascal's twenty.
var fakeOurs = map[int]bool{100: true, 5001: true}

// wantFakeGPUs is what List gives for testdata/fakenvml's GPUs with
// fakeOurs: GPU-lost (index 3) is left out, and wantFakeErr names it.
func wantFakeGPUs() []GPU {
	pascal := GPU{Index: 1, UUID: "GPU-pascal", Name: "NVIDIA GeForce GTX 1080", MemoryTotalMiB: 8192, MemoryFreeMiB: 8000,
		TemperatureC: 55, PowerW: 90.5, ComputeCapability: "6.1", Problems: []string{"graphics processes: Insufficient Permissions"}}
	for pid := 5000; pid < 5020; pid++ {
		p := GPUProcess{PID: pid, UsedMemoryMiB: 64}
		if fakeOurs[pid] {
			pascal.OurProcesses = append(pascal.OurProcesses, p)
		} else {
			pascal.OtherProcesses = append(pascal.OtherProcesses, p)
		}
	}
	return []GPU{
		{
			Index: 0, UUID: "GPU-volta", Name: "Tesla V100-SXM2-16GB", MemoryTotalMiB: 16160, MemoryFreeMiB: 15000,
			UtilisationShare: 0.37, TemperatureC: 41, PowerW: 250, ComputeCapability: "7.0",
			OurProcesses:   []GPUProcess{{PID: 100, UsedMemoryMiB: 1024}},
			OtherProcesses: []GPUProcess{{PID: 4242, UsedMemoryMiB: 10240}, {PID: 777, UsedMemoryMiB: -1, Graphics: true}},
		},
		pascal,
		{
			Index: 2, UUID: "GPU-blind", Name: "NVIDIA GeForce GT 710", MemoryTotalMiB: 2048, MemoryFreeMiB: 2000,
			TemperatureC: 30, ComputeCapability: "3.5", Problems: []string{"utilisation: Not Supported", "power: Not Supported"},
		},
	}
}

// wantFakeErr is List's error for testdata/fakenvml's GPUs.
const wantFakeErr = "NVML: GPU 3 skipped: temperature: GPU is lost"

// checkFakeList checks a List of testdata/fakenvml's GPUs.
func checkFakeList(t *testing.T, gpus []GPU, err error) {
	t.Helper()
	if d := cmp.Diff(wantFakeGPUs(), gpus); d != "" {
		t.Errorf("List (-want +got):\n%s", d)
	}
	if err == nil || err.Error() != wantFakeErr || errors.Is(err, ErrNoGPU) {
		t.Errorf("List error = %v, want %q (not ErrNoGPU: three GPUs are usable)", err, wantFakeErr)
	}
}
