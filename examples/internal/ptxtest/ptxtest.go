// Package ptxtest is what the GPU examples' tests share: finding clang,
// which builds their PTX and the host builds of their kernels' device
// functions, and building an example's PTX with the Makefile's rule.
package ptxtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// NeedClang returns clang's path, or skips the test when clang is not
// installed (CI installs it, see .ci/run).
func NeedClang(t testing.TB) string {
	t.Helper()
	clang, err := exec.LookPath("clang")
	if err != nil {
		t.Skip("clang not found: install it (Debian: apt-get install clang) to build and check the PTX kernels")
	}
	return clang
}

// Build makes target (a path from the repository's root, such as
// "examples/gpupi/gpupi.ptx") with the Makefile's rule, from a test in
// examples/NAME, and returns the file's text. It skips the test without
// clang or make and fails it when the build fails, with make's output.
func Build(t testing.TB, target string) string {
	t.Helper()
	NeedClang(t)
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make not found")
	}
	root := filepath.Join("..", "..")
	cmd := exec.Command("make", "-s", "--no-print-directory", target)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make %s: %v\n%s", target, err, out)
	}
	b, err := os.ReadFile(filepath.Join(root, target))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
