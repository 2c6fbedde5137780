//go:build cgo && linux

package worker

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestNVMLBindingBuildsQuietly compiles the NVML binding with the C flags
// the Makefile uses: a newcomer's first `make pi` must print no compiler
// warnings.
//
// The go command does not replay a cached package's compiler output, so
// the binding must really be compiled. A build cache of its own did that
// by compiling the standard library too: 24 s of CPU alone, over two
// minutes in CI beside the other packages. Instead, the C flags carry a
// definition nothing reads, new at every run, which is part of the cache
// key of the packages that use cgo and of no other: only those (the
// binding, runtime/cgo) are compiled again, about 11 s, and about 14 MB
// goes into the developer's build cache, which the go command trims
// after five days unused.
func TestNVMLBindingBuildsQuietly(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the NVML binding")
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
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	cflags := strings.TrimSpace(string(flags)) + " -DIDLEPOOL_BUILD_CHECK=0x" + hex.EncodeToString(nonce[:])
	cmd.Env = append(os.Environ(), "CGO_CFLAGS="+cflags)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("build the NVML binding: %v\n%s", err, out)
	}
	if len(out) > 0 {
		t.Errorf("building the NVML binding printed %d lines; want none:\n%.2000s", strings.Count(string(out), "\n"), out)
	}
}
