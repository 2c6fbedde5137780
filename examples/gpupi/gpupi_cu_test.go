package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"idlepool/examples/internal/ptxtest"
)

// TestPTXBuild builds gpupi.ptx with the Makefile's rule, as `make gpupi`
// does, and checks that it is PTX for sm_60 with the kernel count_inside
// and its four parameters.
func TestPTXBuild(t *testing.T) {
	text := ptxtest.Build(t, "examples/gpupi/gpupi.ptx")
	for _, want := range []string{".target sm_60", ".address_size 64", ".visible .entry count_inside(", "atom.global.add.u64"} {
		if !strings.Contains(text, want) {
			t.Errorf("gpupi.ptx lacks %q", want)
		}
	}
	entry := text[strings.Index(text, ".entry count_inside("):]
	entry = entry[:strings.Index(entry, ")")]
	if n := strings.Count(entry, ".param .u64"); n != 4 {
		t.Errorf("count_inside has %d .u64 parameters, want 4 (count, seed, first, n):\n%s", n, entry)
	}
}

// TestKernelSourceMatchesGo compiles gpupi.cu's counting function as host
// C++ (GPUPI_HOST_TEST) and checks that it counts exactly what countInside
// counts, for seeds and ranges that cross 32-bit word boundaries, and that
// the kernel's strided split across threads covers every sample once.
func TestKernelSourceMatchesGo(t *testing.T) {
	clang := ptxtest.NeedClang(t)
	dir := t.TempDir()
	src, err := filepath.Abs("gpupi.cu")
	if err != nil {
		t.Fatal(err)
	}
	harness := fmt.Sprintf(`#include <stdio.h>
#include <stdlib.h>
#include %q
int main(int argc, char **argv) {
  if (argc != 5) return 2;
  u64 seed = strtoull(argv[1], 0, 0), first = strtoull(argv[2], 0, 0);
  u64 n = strtoull(argv[3], 0, 0), threads = strtoull(argv[4], 0, 0);
  u64 total = 0;
  for (u64 t = 0; t < threads; t++) total += count_strided(seed, first, n, t, threads);
  printf("%%llu\n", total);
  return 0;
}
`, src)
	if err := os.WriteFile(filepath.Join(dir, "h.cc"), []byte(harness), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "h")
	if out, err := exec.Command(clang, "-x", "c++", "-DGPUPI_HOST_TEST", "-O2", "-Wall", "-Werror",
		"-o", bin, filepath.Join(dir, "h.cc")).CombinedOutput(); err != nil {
		t.Fatalf("clang (host build of gpupi.cu): %v\n%s", err, out)
	}
	tests := []struct{ seed, first, n, threads uint64 }{
		{42, 0, 100_000, 1},
		{42, 0, 100_000, 256},
		{0, 0, 50_000, 7},
		{0xdeadbeefcafef00d, 1<<32 - 20_000, 40_000, 1000},
		{^uint64(0), 1<<40 + 3, 30_000, 262_144},
	}
	num := regexp.MustCompile(`^\d+\n$`)
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%#x/%d+%d/%d", tc.seed, tc.first, tc.n, tc.threads), func(t *testing.T) {
			out, err := exec.Command(bin, fmt.Sprint(tc.seed), fmt.Sprint(tc.first), fmt.Sprint(tc.n),
				fmt.Sprint(tc.threads)).Output()
			if err != nil || !num.Match(out) {
				t.Fatalf("harness: %v, output %q", err, out)
			}
			got, _ := strconv.ParseUint(strings.TrimSpace(string(out)), 10, 64)
			if want := countInside(tc.seed, tc.first, tc.n); got != want {
				t.Errorf("gpupi.cu counts %d, philox.go %d", got, want)
			}
		})
	}
}
