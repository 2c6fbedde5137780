//go:build linux

package worker

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"idlepool/energy"
)

// fakeNVMLLibrary compiles testdata/fakenvml (a stand-in for
// libnvidia-ml.so.1) into a shared library once per test binary.
var fakeNVMLLibrary = sync.OnceValues(func() (string, error) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		return "", err
	}
	dir, err := exec.Command("mktemp", "-d").Output()
	if err != nil {
		return "", err
	}
	so := filepath.Join(strings.TrimSpace(string(dir)), "libfakenvml.so")
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-O1", "-o", so, "testdata/fakenvml/fakenvml.c").CombinedOutput(); err != nil {
		return "", errors.New(string(out))
	}
	return so, nil
})

func openFakeNVML(t *testing.T) *pureNVML {
	t.Helper()
	so, err := fakeNVMLLibrary()
	if err != nil {
		t.Skipf("cannot build the stand-in NVML library (a C compiler is needed): %v", err)
	}
	n, err := openPureNVML(so)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.shutdown() })
	return n
}

// TestPureNVMLOnAFakeLibrary: the purego binding of NVML (what the
// Windows build loads from nvml.dll) called for real on a shared library
// with NVML's entry points, read through readGPUEnergy as the Linux
// build's go-nvml binding is in TestGPUListerReadGPUs, with the same
// readings and the same errors.
func TestPureNVMLOnAFakeLibrary(t *testing.T) {
	n := openFakeNVML(t)
	got, err := readGPUEnergy(n, []string{"GPU-volta", "GPU-pascal", "GPU-blind", "GPU-gone"})
	want := []energy.GPUReading{
		{UUID: "GPU-volta", EnergyMJ: 123456, HasEnergy: true, PowerW: 250, HasPower: true},
		{UUID: "GPU-pascal", PowerW: 90.5, HasPower: true},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("readGPUEnergy (-want +got):\n%s", d)
	}
	if err == nil || !strings.Contains(err.Error(), "GPU-blind: power: ERROR_NOT_SUPPORTED") || !strings.Contains(err.Error(), "GPU-gone: ERROR_NOT_FOUND") {
		t.Errorf("err = %v, want GPU-blind and GPU-gone named", err)
	}
	// The counter is read afresh each time (the stand-in adds 1000 mJ
	// per read), as a 64-bit value.
	got, _ = readGPUEnergy(n, []string{"GPU-volta"})
	if len(got) != 1 || got[0].EnergyMJ != 124456 {
		t.Errorf("second reading = %+v, want 124456 mJ", got)
	}

	if _, err := openPureNVML(filepath.Join(t.TempDir(), "libnvidia-ml.so.1")); !errors.Is(err, ErrNoGPU) {
		t.Errorf("no library: err = %v, want ErrNoGPU", err)
	}
}
