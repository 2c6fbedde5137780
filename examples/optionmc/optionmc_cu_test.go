package main

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"idlepool/examples/internal/ptxtest"
)

// TestPTXBuild builds optionmc.ptx with the Makefile's rule and checks
// that it is PTX for sm_60 with the kernel price_paths, its eight
// parameters, and no calls (no libdevice: the math is PTX instructions).
func TestPTXBuild(t *testing.T) {
	text := ptxtest.Build(t, "examples/optionmc/optionmc.ptx")
	for _, want := range []string{".target sm_60", ".visible .entry price_paths(", "lg2.approx.f32", "ex2.approx.f32", "atom.global.add.f64"} {
		if !strings.Contains(text, want) {
			t.Errorf("optionmc.ptx lacks %q", want)
		}
	}
	if strings.Contains(text, "call.uni") || strings.Contains(text, ".extern .func") {
		t.Error("optionmc.ptx calls a function the driver cannot resolve (no libdevice is linked)")
	}
	entry := text[strings.Index(text, ".entry price_paths("):]
	entry = entry[:strings.Index(entry, ")")]
	if n := strings.Count(entry, ".param"); n != 8 {
		t.Errorf("price_paths has %d parameters, want 8:\n%s", n, entry)
	}
}

// TestFloat32KernelWithinTolerance compiles optionmc.cu's sum_payoffs as
// host C++ in float32 (OPTIONMC_HOST_TEST: <math.h>'s float functions in
// place of the PTX approximations), runs it as a launch of gridBlocks ×
// blockThreads threads would (thread sums in float32, added in float64),
// and checks that every task's price agrees with the float64 CPU path
// within the manifest's [verify.tolerance], while a replica computed with
// another seed does not.
func TestFloat32KernelWithinTolerance(t *testing.T) {
	clang := ptxtest.NeedClang(t)
	abs, rel := manifestTolerance(t)
	dir := t.TempDir()
	src, err := filepath.Abs("optionmc.cu")
	if err != nil {
		t.Fatal(err)
	}
	harness := fmt.Sprintf(`#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include %q
int main(int argc, char **argv) {
  if (argc != 8) return 2;
  u64 seed = strtoull(argv[1], 0, 0), pairs = strtoull(argv[2], 0, 0), threads = strtoull(argv[3], 0, 0);
  float s0 = strtof(argv[4], 0), k = strtof(argv[5], 0), drift = strtof(argv[6], 0), vol = strtof(argv[7], 0);
  double sum = 0;
  for (u64 t = 0; t < threads; t++) sum += (double)sum_payoffs(seed, 0, pairs, t, threads, s0, k, drift, vol);
  printf("%%.17g\n", sum);
  return 0;
}
`, src)
	if err := os.WriteFile(filepath.Join(dir, "h.cc"), []byte(harness), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "h")
	if out, err := exec.Command(clang, "-x", "c++", "-DOPTIONMC_HOST_TEST", "-O2", "-Wall", "-Werror",
		"-o", bin, filepath.Join(dir, "h.cc"), "-lm").CombinedOutput(); err != nil {
		t.Fatalf("clang (host build of optionmc.cu): %v\n%s", err, out)
	}
	p := params{S0: 100, Strike: 100, Rate: 0.05, Sigma: 0.2, Maturity: 1, Paths: 1 << 18}
	drift, vol := p.drift()
	pairs := uint64(p.Paths / 2)
	float32Price := func(seed uint64) float64 {
		out, err := exec.Command(bin, fmt.Sprint(seed), fmt.Sprint(pairs), fmt.Sprint(gridBlocks*blockThreads),
			fmt.Sprint(float32(p.S0)), fmt.Sprint(float32(p.Strike)), fmt.Sprint(float32(drift)), fmt.Sprint(float32(vol))).Output()
		if err != nil {
			t.Fatalf("harness: %v", err)
		}
		sum, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
		if err != nil {
			t.Fatalf("harness output %q: %v", out, err)
		}
		return math.Exp(-p.Rate*p.Maturity) * sum / float64(p.Paths)
	}
	within := func(a, b float64) bool {
		d := math.Abs(a - b)
		return d <= abs || d <= rel*max(math.Abs(a), math.Abs(b))
	}
	var worst float64
	for _, seed := range []uint64{1, 0xdeadbeefcafef00d, 0x9e3779b97f4a7c15, ^uint64(0)} {
		cpu := math.Exp(-p.Rate*p.Maturity) * sumPayoffs(seed, 0, pairs, p.S0, p.Strike, drift, vol) / float64(p.Paths)
		gpu := float32Price(seed)
		worst = max(worst, math.Abs(cpu-gpu))
		if !within(cpu, gpu) {
			t.Errorf("seed %#x: float64 price %.9f, float32 %.9f: differ by %.2g, outside the tolerance abs %g rel %g",
				seed, cpu, gpu, math.Abs(cpu-gpu), abs, rel)
		}
		if other := float32Price(seed + 1); within(cpu, other) {
			t.Errorf("seed %#x: a replica with seed+1 (price %.9f) agrees with %.9f: the tolerance would accept wrong numbers",
				seed, other, cpu)
		}
	}
	t.Logf("largest float32 vs float64 difference of a task's price: %.3g (tolerance abs %g, rel %g)", worst, abs, rel)
}
