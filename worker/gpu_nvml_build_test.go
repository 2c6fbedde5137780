//go:build cgo && linux

package worker

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestNVMLBindingBuildsQuietly compiles the NVML binding from a cold build
// cache with the C flags the Makefile uses: a newcomer's first `make pi`
// must print no compiler warnings.
func TestNVMLBindingBuildsQuietly(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the NVML binding from scratch")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	flags, err := exec.Command("make", "-s", "--no-print-directory", "-C", "..", "cgo-cflags").Output()
	if err != nil {
		t.Fatalf("make cgo-cflags: %v", err)
	}
	gobin := filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		gobin = "go"
	}
	cmd := exec.Command(gobin, "build", "-o", os.DevNull, "github.com/NVIDIA/go-nvml/pkg/nvml")
	cmd.Env = append(os.Environ(), "GOCACHE="+t.TempDir(), "CGO_CFLAGS="+strings.TrimSpace(string(flags)))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("build the NVML binding: %v\n%s", err, out)
	}
	if len(out) > 0 {
		t.Errorf("building the NVML binding printed %d lines; want none:\n%.2000s", strings.Count(string(out), "\n"), out)
	}
}
