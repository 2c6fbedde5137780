//go:build cgo && linux

package worker

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"
)

// goNVMLListChild is childEnv's value for a test binary that lists the
// GPUs of the NVML library at goNVMLLibraryEnv through go-nvml and
// prints them as a goNVMLListing.
const (
	goNVMLListChild  = "go-nvml-list"
	goNVMLLibraryEnv = "IDLEPOOL_WORKER_TEST_NVML"
)

// goNVMLListing is what the child prints.
type goNVMLListing struct {
	GPUs  []GPU
	Err   string
	NoGPU bool
}

// goNVMLLimitChild is childEnv's value for a test binary that runs
// powerLimitSteps through go-nvml on the library at goNVMLLibraryEnv and
// prints its lines as JSON.
const goNVMLLimitChild = "go-nvml-limit"

func init() {
	testChildren[goNVMLListChild] = goNVMLListMain
	testChildren[goNVMLLimitChild] = goNVMLLimitMain
}

func goNVMLLimitMain() int {
	l := NewGPUListerWith(nvml.New(nvml.WithLibraryPath(os.Getenv(goNVMLLibraryEnv))))
	defer l.Close()
	limitMW := func() (uint32, error) {
		d, err := goNVML{l.lib}.device("GPU-volta")
		if err != nil {
			return 0, err
		}
		return goNVML{l.lib}.powerLimitMW(d)
	}
	if err := json.NewEncoder(os.Stdout).Encode(powerLimitSteps(l.SetPowerLimit, l.RestorePowerLimits, limitMW)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// TestGoNVMLPowerLimit: the Linux build's lister (go-nvml) sets and
// restores the stand-in's power limits as the purego one does
// (wantPowerLimitSteps), in a process of its own.
func TestGoNVMLPowerLimit(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+goNVMLLimitChild, goNVMLLibraryEnv+"="+fakeNVMLLibrary(t))
	cmd.Stderr = os.Stderr
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("go-nvml child: %v\n%s", err, b)
	}
	var got []string
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("go-nvml child printed %q: %v", b, err)
	}
	if d := cmp.Diff(wantPowerLimitSteps, got); d != "" {
		t.Errorf("power limits through go-nvml (-want +got):\n%s", d)
	}
}

// goNVMLListMain lists through go-nvml in a process of its own: go-nvml
// binds NVML's symbols process-wide (RTLD_GLOBAL, lazily), so that a
// real driver loaded by another test would answer in the stand-in's
// place, or the other way round.
func goNVMLListMain() int {
	l := NewGPUListerWith(nvml.New(nvml.WithLibraryPath(os.Getenv(goNVMLLibraryEnv))))
	defer l.Close()
	gpus, err := l.List(fakeOurs)
	out := goNVMLListing{GPUs: gpus}
	if err != nil {
		out.Err, out.NoGPU = err.Error(), isNoGPU(err)
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// TestGoNVMLAndPuregoListAlike: the Linux build's lister (go-nvml, cgo)
// and the Windows build's (purego), pointed at the same stand-in NVML
// library, give the same GPUs and the same error, for a driver of today
// and for one with only the first process listings.
func TestGoNVMLAndPuregoListAlike(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		flags []string
	}{{"today's driver", nil}, {"v1 process listings", []string{"-DFAKENVML_V1"}}} {
		t.Run(tc.name, func(t *testing.T) {
			so := fakeNVMLLibrary(t, tc.flags...)
			cmd := exec.Command(exe, "-test.run=^$")
			cmd.Env = append(os.Environ(), childEnv+"="+goNVMLListChild, goNVMLLibraryEnv+"="+so)
			cmd.Stderr = os.Stderr
			b, err := cmd.Output()
			if err != nil {
				t.Fatalf("go-nvml child: %v\n%s", err, b)
			}
			var viaGoNVML goNVMLListing
			if err := json.Unmarshal(b, &viaGoNVML); err != nil {
				t.Fatalf("go-nvml child printed %q: %v", b, err)
			}
			checkFakeList(t, viaGoNVML.GPUs, listErr(viaGoNVML))

			l := &pureLister{path: so, now: time.Now}
			defer l.close()
			gpus, err := l.list(fakeOurs)
			viaPurego := goNVMLListing{GPUs: gpus}
			if err != nil {
				viaPurego.Err, viaPurego.NoGPU = err.Error(), isNoGPU(err)
			}
			if d := cmp.Diff(viaGoNVML, viaPurego); d != "" {
				t.Errorf("go-nvml and purego list differently (-go-nvml +purego):\n%s", d)
			}
		})
	}
}

func isNoGPU(err error) bool { return errors.Is(err, ErrNoGPU) }

// listErr is the error a listing printed, matching ErrNoGPU as it did.
func listErr(l goNVMLListing) error {
	switch {
	case l.Err == "":
		return nil
	case l.NoGPU:
		return &NoGPUError{Reason: strings.TrimPrefix(l.Err, "no usable GPU: ")}
	}
	return errors.New(l.Err)
}
