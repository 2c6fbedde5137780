//go:build linux

package worker

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ebitengine/purego"
	"github.com/google/go-cmp/cmp"

	"idlepool/energy"
)

// fakeNVMLBuild compiles testdata/fakenvml (a stand-in for
// libnvidia-ml.so.1) into a shared library, once per test binary and
// set of C flags: none for a driver of today, -DFAKENVML_V1 for one that
// has only the first process listings.
var fakeNVMLBuild = sync.OnceValue(func() func(flags ...string) (string, error) {
	var mu sync.Mutex
	built := map[string]string{}
	return func(flags ...string) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		key := strings.Join(flags, " ")
		if so, ok := built[key]; ok {
			return so, nil
		}
		cc, err := exec.LookPath("cc")
		if err != nil {
			return "", err
		}
		dir, err := os.MkdirTemp("", "idlepool-fakenvml-")
		if err != nil {
			return "", err
		}
		so := filepath.Join(dir, "libfakenvml.so")
		args := append([]string{"-shared", "-fPIC", "-O1", "-o", so}, flags...)
		if out, err := exec.Command(cc, append(args, "testdata/fakenvml/fakenvml.c")...).CombinedOutput(); err != nil {
			return "", errors.New(string(out))
		}
		built[key] = so
		return so, nil
	}
})

// fakeNVMLLibrary is the path of the stand-in library built with flags;
// the test is skipped where there is no C compiler.
func fakeNVMLLibrary(t *testing.T, flags ...string) string {
	t.Helper()
	so, err := fakeNVMLBuild()(flags...)
	if err != nil {
		t.Skipf("cannot build the stand-in NVML library (a C compiler is needed): %v", err)
	}
	return so
}

func openFakeNVML(t *testing.T) *pureNVML {
	t.Helper()
	n, err := openPureNVML(fakeNVMLLibrary(t))
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
// readings; errors read as the library's nvmlErrorString says.
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
	if err == nil || !strings.Contains(err.Error(), "GPU-blind: power: Not Supported") || !strings.Contains(err.Error(), "GPU-gone: Not Found") {
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

// TestPureGPUListerOnAFakeLibrary: the Windows build's listing (purego,
// pureLister) run for real on the stand-in library, with the process
// listings of today's drivers (_v3, nvmlProcessInfo_t) and of drivers
// before 470 (nvmlProcessInfo_v1_t): the same GPUs either way, a GPU
// whose temperature fails left out and named, problems of optional
// readings noted, a process list longer than the first buffer read
// whole.
func TestPureGPUListerOnAFakeLibrary(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags []string
		procs string
	}{
		{"v3 process listings", nil, "nvmlDeviceGetComputeRunningProcesses_v3"},
		{"v1 process listings", []string{"-DFAKENVML_V1"}, "nvmlDeviceGetComputeRunningProcesses"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &pureLister{path: fakeNVMLLibrary(t, tc.flags...), now: time.Now}
			defer l.close()
			gpus, err := l.list(fakeOurs)
			checkFakeList(t, gpus, err)
			if l.lib == nil || l.lib.procs[0] != tc.procs {
				t.Fatalf("process listing called: %+v, want %s", l.lib, tc.procs)
			}
			gpus, err = l.list(fakeOurs) // NVML stays initialised
			checkFakeList(t, gpus, err)
			if err := l.close(); err != nil {
				t.Errorf("close: %v", err)
			}
		})
	}
}

// TestPureGPUListerRetries: with no library the lister says so and does
// not look again for initRetry (a fake clock); a library that appears
// is then found. A failing device count (the driver went away) shuts
// NVML down, and the next List initialises it afresh.
func TestPureGPUListerRetries(t *testing.T) {
	src := fakeNVMLLibrary(t)
	so := filepath.Join(t.TempDir(), "libnvidia-ml.so.1") // its own copy: its own state
	now := time.Unix(1e9, 0)
	l := &pureLister{path: so, now: func() time.Time { return now }}
	defer l.close()
	const noDriver = "no usable GPU: no NVIDIA driver (NVML not found)"
	if gpus, err := l.list(nil); gpus != nil || !errors.Is(err, ErrNoGPU) || err.Error() != noDriver {
		t.Fatalf("List without a library = %v, %v; want %q", gpus, err, noDriver)
	}
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(so, b, 0o755); err != nil {
		t.Fatal(err)
	}
	now = now.Add(initRetry - time.Second)
	if _, err := l.list(nil); err == nil || err.Error() != noDriver {
		t.Fatalf("List within initRetry = %v; want the remembered %q", err, noDriver)
	}
	now = now.Add(time.Second)
	gpus, err := l.list(fakeOurs)
	checkFakeList(t, gpus, err)
	// ReadGPUs shares the loaded library.
	readings, err := l.readGPUs([]string{"GPU-volta"})
	if err != nil || len(readings) != 1 || readings[0].EnergyMJ != 123456 {
		t.Errorf("readGPUs = %+v, %v; want GPU-volta's 123456 mJ", readings, err)
	}

	h, err := purego.Dlopen(so, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		t.Fatal(err)
	}
	var inits func() int32
	var failCount func(int32)
	purego.RegisterLibFunc(&inits, h, "fakenvmlInits")
	purego.RegisterLibFunc(&failCount, h, "fakenvmlFailCount")
	if n := inits(); n != 1 {
		t.Errorf("nvmlInit_v2 called %d times, want 1", n)
	}
	failCount(1)
	const lost = "no usable GPU: NVML: count devices: Unknown Error"
	if gpus, err := l.list(nil); gpus != nil || !errors.Is(err, ErrNoGPU) || err.Error() != lost {
		t.Fatalf("List with a failing count = %v, %v; want %q", gpus, err, lost)
	}
	if l.lib != nil {
		t.Error("NVML still initialised after the count failed")
	}
	failCount(0)
	gpus, err = l.list(fakeOurs)
	checkFakeList(t, gpus, err)
	if n := inits(); n != 2 {
		t.Errorf("nvmlInit_v2 called %d times, want 2 (again after the count failed)", n)
	}
}

// TestPurePowerLimitOnAFakeLibrary: the purego binding sets the
// stand-in's power limits (wantPowerLimitSteps), and close restores a
// limit still set.
func TestPurePowerLimitOnAFakeLibrary(t *testing.T) {
	so := ownFakeNVMLLibrary(t)
	l := &pureLister{path: so, now: time.Now}
	defer l.close()
	limitMW := func() (uint32, error) {
		d, err := l.lib.device("GPU-volta")
		if err != nil {
			return 0, err
		}
		return l.lib.powerLimitMW(d)
	}
	got := powerLimitSteps(l.setPowerLimit, l.restorePowerLimits, limitMW)
	if d := cmp.Diff(wantPowerLimitSteps, got); d != "" {
		t.Errorf("power limits (-want +got):\n%s", d)
	}

	if _, err := l.setPowerLimit("GPU-volta", 200); err != nil {
		t.Fatal(err)
	}
	if err := l.close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if _, err := l.list(nil); err != nil && !strings.Contains(err.Error(), "GPU 3") {
		t.Fatal(err)
	}
	if mW, err := limitMW(); mW != 300000 || err != nil {
		t.Errorf("after close, volta holds %d mW (%v), want its 300000 back", mW, err)
	}
}

// TestPurePowerLimitReset: a limit left by a donor that stopped without
// restoring it (150 W) is put back with ResetPowerLimit as the GPU's own
// limit: a later change is undone to it, not to the limit left behind.
func TestPurePowerLimitReset(t *testing.T) {
	so := ownFakeNVMLLibrary(t)
	// limitW reads volta's limit through the lister's library: both
	// listers load the same file, so they share the stand-in's state.
	limitW := func(l *pureLister) float64 {
		t.Helper()
		d, err := l.lib.device("GPU-volta")
		if err != nil {
			t.Fatal(err)
		}
		mW, err := l.lib.powerLimitMW(d)
		if err != nil {
			t.Fatal(err)
		}
		return float64(mW) / 1000
	}

	// The donor before: it sets 150 W and stops without restoring.
	crashed := &pureLister{path: so, now: time.Now}
	if _, err := crashed.setPowerLimit("GPU-volta", 150); err != nil {
		t.Fatal(err)
	}
	crashed.limits.saved = nil // its memory is gone, as after kill -9
	defer crashed.close()

	if got := limitW(crashed); got != 150 {
		t.Fatalf("the limit left behind = %g W, want 150 W", got)
	}
	l := &pureLister{path: so, now: time.Now}
	defer l.close()
	if err := l.resetPowerLimit("GPU-volta", 300); err != nil {
		t.Fatal(err)
	}
	if got := limitW(l); got != 300 {
		t.Errorf("after the reset, volta holds %g W, want 300 W", got)
	}
	p, err := l.setPowerLimit("GPU-volta", 120)
	if err != nil {
		t.Fatal(err)
	}
	if p.PreviousW != 300 {
		t.Errorf("the limit to restore after a reset = %g W, want 300 W", p.PreviousW)
	}
	if err := l.restorePowerLimits(); err != nil {
		t.Fatal(err)
	}
	if got := limitW(l); got != 300 {
		t.Errorf("restored to %g W, want 300 W", got)
	}
	if err := l.resetPowerLimit("GPU-missing", 300); err == nil {
		t.Error("a reset of a GPU NVML does not know succeeded")
	}
}

// ownFakeNVMLLibrary returns the path of a copy of the stand-in NVML
// library of its own, so that the limits a test sets are not seen by
// another test's loading of the shared one.
func ownFakeNVMLLibrary(t *testing.T) string {
	t.Helper()
	so := filepath.Join(t.TempDir(), "libnvidia-ml.so.1")
	b, err := os.ReadFile(fakeNVMLLibrary(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(so, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return so
}
