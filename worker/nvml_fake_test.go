//go:build linux || windows

package worker

import (
	"errors"
	"fmt"
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

// powerLimitSteps sets and restores testdata/fakenvml's power limits
// through a binding (set, restore; limitMW reads GPU-volta's limit in
// force through the same library) and says what each step gave, one
// line each, for wantPowerLimitSteps. It needs no *testing.T, so that a
// child process runs it through go-nvml.
func powerLimitSteps(set func(uuid string, watts float64) (PowerLimit, error), restore func() error, limitMW func() (uint32, error)) []string {
	var out []string
	say := func(what string, p PowerLimit, err error) {
		if err != nil {
			out = append(out, fmt.Sprintf("%s: error (refused: %t): %v", what, errors.Is(err, ErrPowerLimitRefused), err))
			return
		}
		mW, rerr := limitMW()
		out = append(out, fmt.Sprintf("%s: %g W in %g..%g W, was %g W; volta holds %d mW (%v)", what, p.LimitW, p.MinW, p.MaxW, p.PreviousW, mW, rerr))
	}
	p, err := set("GPU-volta", 150)
	say("volta 150 W", p, err)
	p, err = set("GPU-volta", 40)
	say("volta 40 W", p, err)
	p, err = set("GPU-volta", 1000)
	say("volta 1000 W", p, err)
	p, err = set("GPU-pascal", 150)
	say("pascal 150 W", p, err)
	p, err = set("GPU-blind", 150)
	say("blind 150 W", p, err)
	p, err = set("GPU-gone", 150)
	say("gone 150 W", p, err)
	p, err = set("GPU-volta", -1)
	say("volta -1 W", p, err)
	p, err = set("GPU-volta", 120)
	say("volta 120 W", p, err)
	rerr := restore()
	mW, lerr := limitMW()
	out = append(out, fmt.Sprintf("restore: %v; volta holds %d mW (%v)", rerr, mW, lerr))
	out = append(out, fmt.Sprintf("restore again: %v", restore()))
	return out
}

// wantPowerLimitSteps is what powerLimitSteps says for either binding:
// a limit set within the driver's constraints, a ceiling below or above
// them clamped into them, the previous limit kept from the first change,
// refusals (no permission, not supported) told apart from a GPU not
// found, and the first limit back after restore.
var wantPowerLimitSteps = []string{
	"volta 150 W: 150 W in 100..300 W, was 300 W; volta holds 150000 mW (<nil>)",
	"volta 40 W: 100 W in 100..300 W, was 300 W; volta holds 100000 mW (<nil>)",
	"volta 1000 W: 300 W in 100..300 W, was 300 W; volta holds 300000 mW (<nil>)",
	"pascal 150 W: error (refused: true): worker: the driver refuses to set the GPU's power limit: GPU GPU-pascal: set its power limit to 150 W: Insufficient Permissions",
	"blind 150 W: error (refused: true): worker: the driver refuses to set the GPU's power limit: GPU GPU-blind: read its power limit's constraints: Not Supported",
	"gone 150 W: error (refused: false): worker: GPU GPU-gone: find it: Not Found",
	"volta -1 W: error (refused: false): worker: GPU GPU-volta: a power limit of -1 W: must be a positive number of watts",
	"volta 120 W: 120 W in 100..300 W, was 300 W; volta holds 120000 mW (<nil>)",
	"restore: <nil>; volta holds 300000 mW (<nil>)",
	"restore again: <nil>",
}
