//go:build cgo && linux

package worker

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/google/go-cmp/cmp"

	"idlepool/energy"
)

// fakeGPU describes one simulated device; fail names readings that return
// the given NVML error instead.
type fakeGPU struct {
	uuid, name       string
	totalMiB, free   uint64
	util, temp, mW   uint32
	major, minor     int
	compute, graphic []nvml.ProcessInfo
	fail             map[string]nvml.Return
}

func (f fakeGPU) device() *mock.Device {
	ret := func(what string) nvml.Return {
		if r, ok := f.fail[what]; ok {
			return r
		}
		return nvml.SUCCESS
	}
	return &mock.Device{
		GetUUIDFunc: func() (string, nvml.Return) { return f.uuid, ret("uuid") },
		GetNameFunc: func() (string, nvml.Return) { return f.name, ret("name") },
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
			return nvml.Memory{Total: f.totalMiB << 20, Free: f.free << 20, Used: (f.totalMiB - f.free) << 20}, ret("memory")
		},
		GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{Gpu: f.util}, ret("util")
		},
		GetTemperatureFunc: func(s nvml.TemperatureSensors) (uint32, nvml.Return) {
			if s != nvml.TEMPERATURE_GPU {
				return 0, nvml.ERROR_INVALID_ARGUMENT
			}
			return f.temp, ret("temp")
		},
		GetPowerUsageFunc:               func() (uint32, nvml.Return) { return f.mW, ret("power") },
		GetCudaComputeCapabilityFunc:    func() (int, int, nvml.Return) { return f.major, f.minor, ret("cc") },
		GetComputeRunningProcessesFunc:  func() ([]nvml.ProcessInfo, nvml.Return) { return f.compute, ret("compute") },
		GetGraphicsRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) { return f.graphic, ret("graphics") },
	}
}

// fakeNVML returns a mock library with these devices; handleFail makes
// DeviceGetHandleByIndex fail for those indexes.
func fakeNVML(gpus []fakeGPU, handleFail map[int]nvml.Return) *mock.Interface {
	devs := make([]*mock.Device, len(gpus))
	for i, g := range gpus {
		devs[i] = g.device()
	}
	return &mock.Interface{
		InitFunc:           func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:       func() nvml.Return { return nvml.SUCCESS },
		DeviceGetCountFunc: func() (int, nvml.Return) { return len(devs), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if r, ok := handleFail[i]; ok {
				return nil, r
			}
			return devs[i], nvml.SUCCESS
		},
	}
}

var (
	rtx  = fakeGPU{uuid: "GPU-aaaa", name: "NVIDIA GeForce RTX 4090", totalMiB: 24564, free: 24000, util: 3, temp: 41, mW: 28500, major: 8, minor: 9}
	h100 = fakeGPU{uuid: "GPU-bbbb", name: "NVIDIA H100 80GB HBM3", totalMiB: 81559, free: 81000, util: 0, temp: 33, mW: 70123, major: 9, minor: 0}
)

func TestGPUListerMock(t *testing.T) {
	busy := rtx
	busy.util, busy.free = 71, 12000
	busy.compute = []nvml.ProcessInfo{{Pid: 4242, UsedGpuMemory: 10 << 30}, {Pid: 100, UsedGpuMemory: 1 << 30}}
	busy.graphic = []nvml.ProcessInfo{{Pid: 777, UsedGpuMemory: math.MaxUint64}, {Pid: 4242, UsedGpuMemory: 10 << 30}}
	hot := h100
	hot.temp = 91

	want1 := GPU{Index: 0, UUID: "GPU-aaaa", Name: "NVIDIA GeForce RTX 4090", MemoryTotalMiB: 24564, MemoryFreeMiB: 24000, UtilisationShare: 0.03, TemperatureC: 41, PowerW: 28.5, ComputeCapability: "8.9"}
	want2 := GPU{Index: 1, UUID: "GPU-bbbb", Name: "NVIDIA H100 80GB HBM3", MemoryTotalMiB: 81559, MemoryFreeMiB: 81000, TemperatureC: 33, PowerW: 70.123, ComputeCapability: "9.0"}
	wantBusy := want1
	wantBusy.UtilisationShare, wantBusy.MemoryFreeMiB = 0.71, 12000
	wantBusy.OurProcesses = []GPUProcess{{PID: 100, UsedMemoryMiB: 1024}}
	wantBusy.OtherProcesses = []GPUProcess{{PID: 4242, UsedMemoryMiB: 10240}, {PID: 777, UsedMemoryMiB: -1, Graphics: true}}
	wantHot := want2
	wantHot.Index, wantHot.TemperatureC = 0, 91

	tests := []struct {
		name       string
		gpus       []fakeGPU
		handleFail map[int]nvml.Return
		want       []GPU
		wantErr    string // substring; "" for none
		noGPU      bool   // the error matches ErrNoGPU
	}{
		{name: "one GPU", gpus: []fakeGPU{rtx}, want: []GPU{want1}},
		{name: "two GPUs", gpus: []fakeGPU{rtx, h100}, want: []GPU{want1, want2}},
		{name: "busy GPU", gpus: []fakeGPU{busy}, want: []GPU{wantBusy}},
		{name: "hot GPU", gpus: []fakeGPU{hot}, want: []GPU{wantHot}},
		{name: "no GPU", gpus: nil, wantErr: "no usable GPU: no NVIDIA GPU", noGPU: true},
		{
			name:       "handle fails on one of two",
			gpus:       []fakeGPU{rtx, h100},
			handleFail: map[int]nvml.Return{0: nvml.ERROR_GPU_IS_LOST},
			want:       []GPU{want2},
			wantErr:    "GPU 0 skipped: get handle: ERROR_GPU_IS_LOST",
		},
		{
			name: "required reading fails on the only GPU",
			gpus: []fakeGPU{func() fakeGPU {
				g := rtx
				g.fail = map[string]nvml.Return{"temp": nvml.ERROR_UNKNOWN}
				return g
			}()},
			wantErr: "no usable GPU: NVML: GPU 0 skipped: temperature: ERROR_UNKNOWN",
			noGPU:   true,
		},
		{
			name: "optional readings fail",
			gpus: []fakeGPU{func() fakeGPU {
				g := rtx
				g.fail = map[string]nvml.Return{"power": nvml.ERROR_NOT_SUPPORTED, "util": nvml.ERROR_NOT_SUPPORTED, "graphics": nvml.ERROR_NO_PERMISSION}
				return g
			}()},
			want: []GPU{func() GPU {
				g := want1
				g.PowerW, g.UtilisationShare = 0, 0
				g.Problems = []string{"utilisation: ERROR_NOT_SUPPORTED", "power: ERROR_NOT_SUPPORTED", "graphics processes: ERROR_NO_PERMISSION"}
				return g
			}()},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lib := fakeNVML(tc.gpus, tc.handleFail)
			l := newGPULister(lib)
			got, err := l.List(map[int]bool{100: true})
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("List (-want +got):\n%s", diff)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("List: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("List error %v, want one containing %q", err, tc.wantErr)
			case tc.wantErr != "" && errors.Is(err, ErrNoGPU) != tc.noGPU:
				t.Errorf("errors.Is(%v, ErrNoGPU) = %v, want %v", err, !tc.noGPU, tc.noGPU)
			}
			// A second List reuses the initialised library.
			if _, err := l.List(nil); (err == nil) != (tc.wantErr == "") {
				t.Errorf("second List: %v", err)
			}
			if err := l.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			if n := len(lib.InitCalls()); n != 1 {
				t.Errorf("Init called %d times, want 1", n)
			}
			if n := len(lib.ShutdownCalls()); n != 1 {
				t.Errorf("Shutdown called %d times, want 1", n)
			}
		})
	}
}

// TestGPUListerNoDriver: after a failed Init nothing else of NVML may be
// called (it would kill the process). The mock's other methods are nil:
// calling any of them panics, and the call records stay empty.
func TestGPUListerNoDriver(t *testing.T) {
	for _, tc := range []struct {
		ret  nvml.Return
		want string
	}{
		{nvml.ERROR_LIBRARY_NOT_FOUND, "no usable GPU: no NVIDIA driver (NVML not found)"},
		{nvml.ERROR_DRIVER_NOT_LOADED, "no usable GPU: the NVIDIA driver is not loaded"},
		{nvml.ERROR_NO_PERMISSION, "no usable GPU: no permission to use the NVIDIA driver"},
		{nvml.ERROR_UNKNOWN, "no usable GPU: NVML: nvmlInit: ERROR_UNKNOWN"},
	} {
		t.Run(tc.ret.Error(), func(t *testing.T) {
			lib := &mock.Interface{InitFunc: func() nvml.Return { return tc.ret }}
			l := newGPULister(lib)
			now := time.Unix(1e9, 0)
			l.now = func() time.Time { return now }
			for i := range 3 {
				gpus, err := l.List(nil)
				if gpus != nil || err == nil || err.Error() != tc.want || !errors.Is(err, ErrNoGPU) {
					t.Fatalf("List = %v, %v; want nil, %q", gpus, err, tc.want)
				}
				if i == 1 {
					now = now.Add(initRetry) // the driver may have been installed: try again
				}
			}
			if err := l.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			if n := len(lib.InitCalls()); n != 2 {
				t.Errorf("Init called %d times, want 2 (once, then again after initRetry)", n)
			}
			if len(lib.ShutdownCalls())+len(lib.DeviceGetCountCalls())+len(lib.DeviceGetHandleByIndexCalls())+len(lib.ErrorStringCalls()) != 0 {
				t.Error("an NVML function other than Init was called after Init failed")
			}
		})
	}
}

// TestGPUListerCountFails: a failing nvmlDeviceGetCount (the driver went
// away) shuts NVML down so that the next List initialises it afresh.
func TestGPUListerCountFails(t *testing.T) {
	lib := fakeNVML([]fakeGPU{rtx}, nil)
	failing := true
	lib.DeviceGetCountFunc = func() (int, nvml.Return) {
		if failing {
			return 0, nvml.ERROR_DRIVER_NOT_LOADED
		}
		return 1, nvml.SUCCESS
	}
	l := newGPULister(lib)
	if _, err := l.List(nil); err == nil || !errors.Is(err, ErrNoGPU) || !strings.Contains(err.Error(), "ERROR_DRIVER_NOT_LOADED") {
		t.Fatalf("List: %v", err)
	}
	failing = false
	gpus, err := l.List(nil)
	if err != nil || len(gpus) != 1 {
		t.Fatalf("List after recovery = %v, %v", gpus, err)
	}
	_ = l.Close()
	if i, s := len(lib.InitCalls()), len(lib.ShutdownCalls()); i != 2 || s != 2 {
		t.Errorf("Init %d, Shutdown %d times; want 2 and 2", i, s)
	}
}

// TestGPUListerReal runs the real lister: on a machine without the NVIDIA
// driver it must say so cleanly (not crash); with one it lists GPUs.
func TestGPUListerReal(t *testing.T) {
	l := NewGPULister()
	defer l.Close()
	gpus, err := l.List(nil)
	switch {
	case err == nil:
		t.Logf("found %d GPUs: %+v", len(gpus), gpus)
		for _, g := range gpus {
			if g.UUID == "" || g.MemoryTotalMiB <= 0 {
				t.Errorf("implausible GPU: %+v", g)
			}
		}
	case !errors.Is(err, ErrNoGPU):
		t.Errorf("List: %v does not match ErrNoGPU", err)
	case len(gpus) == 0:
		t.Logf("no GPU here: %v", err)
		if got := err.Error(); !strings.HasPrefix(got, "no usable GPU: ") {
			t.Errorf("reason %q", got)
		}
	}
}

// ReadGPUs reads the energy counter where the GPU has one (Volta and
// newer), else the power reading, and names GPUs it cannot find.
func TestGPUListerReadGPUs(t *testing.T) {
	volta := &mock.Device{
		GetTotalEnergyConsumptionFunc: func() (uint64, nvml.Return) { return 123456, nvml.SUCCESS },
		GetPowerUsageFunc:             func() (uint32, nvml.Return) { return 250000, nvml.SUCCESS },
	}
	pascal := &mock.Device{
		GetTotalEnergyConsumptionFunc: func() (uint64, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED },
		GetPowerUsageFunc:             func() (uint32, nvml.Return) { return 90500, nvml.SUCCESS },
	}
	blind := &mock.Device{
		GetTotalEnergyConsumptionFunc: func() (uint64, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED },
		GetPowerUsageFunc:             func() (uint32, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED },
	}
	devs := map[string]*mock.Device{"GPU-volta": volta, "GPU-pascal": pascal, "GPU-blind": blind}
	lib := &mock.Interface{
		InitFunc:     func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc: func() nvml.Return { return nvml.SUCCESS },
		DeviceGetHandleByUUIDFunc: func(u string) (nvml.Device, nvml.Return) {
			if d, ok := devs[u]; ok {
				return d, nvml.SUCCESS
			}
			return nil, nvml.ERROR_NOT_FOUND
		},
	}
	l := newGPULister(lib)
	got, err := l.ReadGPUs([]string{"GPU-volta", "GPU-pascal", "GPU-blind", "GPU-gone"})
	want := []energy.GPUReading{
		{UUID: "GPU-volta", EnergyMJ: 123456, HasEnergy: true, PowerW: 250, HasPower: true},
		{UUID: "GPU-pascal", PowerW: 90.5, HasPower: true},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("ReadGPUs (-want +got):\n%s", d)
	}
	if err == nil || !strings.Contains(err.Error(), "GPU-blind: power: ERROR_NOT_SUPPORTED") || !strings.Contains(err.Error(), "GPU-gone: ERROR_NOT_FOUND") {
		t.Errorf("err = %v, want GPU-blind and GPU-gone named", err)
	}
	if n := len(lib.DeviceGetHandleByIndexCalls()); n != 0 {
		t.Errorf("ReadGPUs asked for %d GPUs by index; it asks for the named ones only", n)
	}

	noDriver := newGPULister(&mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }})
	if _, err := noDriver.ReadGPUs([]string{"GPU-volta"}); !errors.Is(err, ErrNoGPU) {
		t.Errorf("no driver: err = %v, want ErrNoGPU", err)
	}
}
