package worker

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/energy"
)

// fakeNVMLDLLEnv names testdata/fakenvml built as a DLL with mingw-w64
// (`make wine-nvml-check` builds it and runs this test under Wine).
const fakeNVMLDLLEnv = "IDLEPOOL_FAKE_NVML_DLL"

// TestWindowsGPUListerOnAFakeDLL: the Windows GPULister loads the
// stand-in NVML as a DLL through LoadLibraryEx and GetProcAddress, lists
// its GPUs as the Linux build does (TestGoNVMLAndPuregoListAlike) and
// reads their energy.
func TestWindowsGPUListerOnAFakeDLL(t *testing.T) {
	dll := os.Getenv(fakeNVMLDLLEnv)
	if dll == "" {
		t.Skip(fakeNVMLDLLEnv + " is not set: no stand-in nvml.dll to load (make wine-nvml-check)")
	}
	l := &GPULister{l: pureLister{path: dll, now: time.Now}}
	defer l.Close()
	gpus, err := l.List(fakeOurs)
	checkFakeList(t, gpus, err)
	got, err := l.ReadGPUs([]string{"GPU-volta", "GPU-pascal", "GPU-gone"})
	want := []energy.GPUReading{
		{UUID: "GPU-volta", EnergyMJ: 123456, HasEnergy: true, PowerW: 250, HasPower: true},
		{UUID: "GPU-pascal", PowerW: 90.5, HasPower: true},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("ReadGPUs (-want +got):\n%s", d)
	}
	if err == nil || !strings.Contains(err.Error(), "GPU-gone: Not Found") {
		t.Errorf("ReadGPUs error = %v, want GPU-gone named", err)
	}
	limitMW := func() (uint32, error) {
		d, err := l.l.lib.device("GPU-volta")
		if err != nil {
			return 0, err
		}
		return l.l.lib.powerLimitMW(d)
	}
	if d := cmp.Diff(wantPowerLimitSteps, powerLimitSteps(l.SetPowerLimit, l.RestorePowerLimits, limitMW)); d != "" {
		t.Errorf("power limits through nvml.dll (-want +got):\n%s", d)
	}
	if err := l.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}
