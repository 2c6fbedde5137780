package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"idlepool/examples/internal/exact"
	"idlepool/examples/internal/gpukernel"
	"idlepool/examples/internal/ptxtest"
	"idlepool/examples/internal/task"
)

// TestMLPPTXBuild builds mlp.ptx with the Makefile's rule and checks that
// it is PTX for sm_60 with the kernels and parameters gpu.go launches,
// that every float64 operation has an explicit rounding mode (.rn, which
// ptxas may not fuse into a multiply-add), and that nothing in it fuses,
// flushes subnormals to zero, approximates or adds atomically: the bits
// must be the CPU path's.
func TestMLPPTXBuild(t *testing.T) {
	ptx := ptxtest.Build(t, "examples/fashion/mlp.ptx")
	if problems := checkMLPPTX(ptx); len(problems) > 0 {
		t.Errorf("mlp.ptx:\n%s", strings.Join(problems, "\n"))
	}
}

// f64Op matches a float64 arithmetic instruction of PTX.
var f64Op = regexp.MustCompile(`(?m)^\s*((?:add|sub|mul|div|fma|mad|sqrt|rcp)(?:\.[a-z0-9]+)*\.f64)\s`)

// checkMLPPTX returns what is wrong with the text of mlp.ptx.
func checkMLPPTX(text string) []string {
	var problems []string
	for _, want := range []string{".target sm_60", ".address_size 64", ".visible .entry mlp_hidden(", ".visible .entry mlp_grad_w1("} {
		if !strings.Contains(text, want) {
			problems = append(problems, fmt.Sprintf("lacks %q", want))
		}
	}
	for _, name := range []string{"mlp_hidden", "mlp_grad_w1"} {
		i := strings.Index(text, ".entry "+name+"(")
		if i < 0 {
			continue
		}
		entry := text[i:]
		entry = entry[:strings.Index(entry, ")")]
		// Four pointers, then features, hidden, first and count.
		if n, m := strings.Count(entry, ".param .u64"), strings.Count(entry, ".param .u32"); n != 4 || m != 4 {
			problems = append(problems, fmt.Sprintf("%s has %d .u64 and %d .u32 parameters, want 4 and 4:\n%s", name, n, m, entry))
		}
	}
	for _, bad := range []string{"fma", "mad.", ".ftz", ".approx", "atom.", "red."} {
		if strings.Contains(text, bad) {
			problems = append(problems, fmt.Sprintf("has %q", bad))
		}
	}
	ops := f64Op.FindAllStringSubmatch(text, -1)
	if len(ops) < 3 {
		problems = append(problems, fmt.Sprintf("%d float64 operations, want the division, the product and the sum", len(ops)))
	}
	for _, op := range ops {
		if !strings.Contains(op[1], ".rn.") {
			problems = append(problems, fmt.Sprintf("%s has no explicit rounding mode (.rn): ptxas may fuse it", op[1]))
		}
	}
	return problems
}

// TestCheckMLPPTXRefusesContraction: the check refuses the PTX that
// clang writes from mlp.cu without -ffp-contract=off (fma.rn.f64), and
// one without rounding modes (add.f64, which ptxas may fuse).
func TestCheckMLPPTXRefusesContraction(t *testing.T) {
	clang := ptxtest.NeedClang(t)
	out := filepath.Join(t.TempDir(), "fused.ptx")
	if b, err := exec.Command(clang, "-x", "cuda", "--cuda-device-only", "--cuda-gpu-arch=sm_60", "-nocudainc", "-nocudalib",
		"-O3", "-S", "-o", out, "mlp.cu").CombinedOutput(); err != nil {
		t.Fatalf("clang: %v\n%s", err, b)
	}
	fused, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if p := checkMLPPTX(string(fused)); !strings.Contains(strings.Join(p, "\n"), `has "fma"`) {
		t.Errorf("PTX built with contraction passes the check: %q", p)
	}
	loose := ".target sm_60\n.address_size 64\n.visible .entry mlp_hidden(.param .u64 a)\n{\n\tdiv.rn.f64 %fd1, %fd2, %fd3;\n\tmul.f64 %fd4, %fd1, %fd5;\n\tadd.f64 %fd6, %fd6, %fd4;\n}\n"
	if p := checkMLPPTX(loose); !strings.Contains(strings.Join(p, "\n"), "mul.f64 has no explicit rounding mode") {
		t.Errorf("PTX without rounding modes passes the check: %q", p)
	}
}

// mlpHarness is the host (CPU) build of mlp.cu's device functions.
type mlpHarness string

// buildMLPHarness compiles mlp.cu's device functions (MLP_HOST_TEST) as
// host C++ with flags, into a program that reads a case (mlpCase.encode)
// on stdin and writes hidden_pre of every example and unit and the sums
// grad_w1_add makes of every weight, in two launches (examples [0, split)
// and [split, n)), as gpu.go launches them.
func buildMLPHarness(t *testing.T, clang string, flags ...string) mlpHarness {
	t.Helper()
	dir := t.TempDir()
	src, err := filepath.Abs("mlp.cu")
	if err != nil {
		t.Fatal(err)
	}
	harness := fmt.Sprintf(`#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include %q
static void *take(u64 n) {
  void *p = malloc(n ? n : 1);
  if (fread(p, 1, n, stdin) != n) exit(3);
  return p;
}
int main(void) {
  u32 *hdr = (u32 *)take(16);
  const u32 f = hdr[0], h = hdr[1], n = hdr[2], split = hdr[3];
  const double *w1 = (const double *)take(8ull * f * h), *b1 = (const double *)take(8ull * h);
  const u8 *px = (const u8 *)take((u64)n * f);
  const i64 *dh = (const i64 *)take(8ull * n * h);
  i64 *g = (i64 *)take(8ull * f * h);
  for (u32 e = 0; e < n; e++)
    for (u32 j = 0; j < h; j++) {
      const double a = hidden_pre(w1, b1, px + (u64)e * f, f, h, j);
      fwrite(&a, 8, 1, stdout);
    }
  u32 over = 0;
  for (u32 i = 0; i < f; i++)
    for (u32 j = 0; j < h; j++) {
      grad_w1_add(g + (u64)i * h + j, &over, px, dh, f, h, i, j, 0, split);
      grad_w1_add(g + (u64)i * h + j, &over, px, dh + (u64)split * h, f, h, i, j, split, n - split);
    }
  fwrite(g, 8, (u64)f * h, stdout);
  fwrite(&over, 4, 1, stdout);
  return 0;
}
`, src)
	if err := os.WriteFile(filepath.Join(dir, "h.cc"), []byte(harness), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "h")
	args := append([]string{"-x", "c++", "-DMLP_HOST_TEST", "-O2", "-Wall", "-Werror"}, flags...)
	if out, err := exec.Command(clang, append(args, "-o", bin, filepath.Join(dir, "h.cc"))...).CombinedOutput(); err != nil {
		t.Fatalf("clang (host build of mlp.cu): %v\n%s", err, out)
	}
	return mlpHarness(bin)
}

// mlpCase is the input of both kernels for n examples.
type mlpCase struct {
	p        params
	w1, b1   []float64
	px       []byte  // n·features
	dh       []int64 // n·hidden
	g0       []int64 // the sums before the examples, features·hidden
	split, n int
}

// run runs the harness on c and returns the pre-activations, the sums and
// the overflow flag.
func (h mlpHarness) run(t *testing.T, c mlpCase) (a []float64, g []int64, over bool) {
	t.Helper()
	f, hid := c.p.Features, c.p.Hidden
	var in bytes.Buffer
	for _, v := range []any{[]uint32{uint32(f), uint32(hid), uint32(c.n), uint32(c.split)}, c.w1, c.b1, c.px, c.dh, c.g0} {
		if err := binary.Write(&in, binary.LittleEndian, v); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(string(h))
	cmd.Stdin = &in
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	if want := 8*c.n*hid + 8*f*hid + 4; len(out) != want {
		t.Fatalf("harness wrote %d bytes, want %d", len(out), want)
	}
	a = make([]float64, c.n*hid)
	g = make([]int64, f*hid)
	r := bytes.NewReader(out)
	_ = binary.Read(r, binary.LittleEndian, a)
	_ = binary.Read(r, binary.LittleEndian, g)
	var o uint32
	_ = binary.Read(r, binary.LittleEndian, &o)
	return a, g, o != 0
}

// mlpKernelCase is n real Fashion-MNIST images under a perceptron of
// hidden units (Glorot weights, biases spread around zero), with the
// hidden errors the Go code computes for them.
func mlpKernelCase(t *testing.T, n, hidden int) mlpCase {
	t.Helper()
	in := subset(t, n)
	p := params{Features: 784, Classes: 10, Hidden: hidden, Batch: n, Round: 1}
	w := mlpInit(p, 7)[:p.size()]
	r := rand.New(rand.NewPCG(1, 2))
	for i := 784 * hidden; i < len(w); i++ {
		w[i] += 0.2 * (r.Float64() - 0.5)
	}
	d, err := openData(task.Task{Inputs: in}, "train", p)
	if err != nil {
		t.Fatal(err)
	}
	px, lb, err := d.read(0, n, 10)
	if err != nil {
		t.Fatal(err)
	}
	g := newMLPGrad(p, w)
	c := mlpCase{p: p, w1: g.m.w1, b1: g.m.b1, px: px, dh: make([]int64, n*hidden), g0: make([]int64, 784*hidden), split: n / 3, n: n}
	for e := range n {
		g.m.hidden(px[e*784 : (e+1)*784])
		dh, _, err := g.example(lb[e], e)
		if err != nil {
			t.Fatal(err)
		}
		copy(c.dh[e*hidden:], dh)
	}
	return c
}

// goKernels is what the Go code computes for c: mlp.hidden's
// pre-activations of each example, and the first layer's sums as
// mlpGradCPU adds them into an exact.Vec (starting from c.g0), with its
// overflow.
func goKernels(c mlpCase) (a []float64, g []int64, over bool) {
	f, h := c.p.Features, c.p.Hidden
	m := newMLP(c.p, append(append(append([]float64{}, c.w1...), c.b1...), make([]float64, h*c.p.Classes+c.p.Classes)...))
	u := exact.NewVec(f * h)
	copy(u.S, c.g0)
	for e := range c.n {
		img := c.px[e*f : (e+1)*f]
		m.hidden(img)
		a = append(a, m.a...)
		for i, v := range img {
			if v == 0 {
				continue
			}
			for j, d := range c.dh[e*h : (e+1)*h] {
				if d != 0 {
					u.Add(i*h+j, int64(v)*d)
				}
			}
		}
	}
	return a, u.S, u.Err() != nil
}

// fmaFlags returns the flags that let the host C compiler use fused
// multiply-adds, or "" where this CPU has none (or the test cannot tell).
func fmaFlags() string {
	if runtime.GOARCH != "amd64" {
		return ""
	}
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil || !regexp.MustCompile(`(?m)^flags\s*:.*\bfma\b`).Match(b) {
		return ""
	}
	return "-mfma"
}

// TestMLPKernelsMatchGo compiles mlp.cu's device functions as host C++
// with -ffp-contract=off, as the PTX is built (and with fused
// multiply-adds available to the compiler where this CPU has them, so
// that only the flag keeps them out), and checks them against the Go
// code bit for bit: the pre-activations of 48 real Fashion-MNIST images
// under a perceptron of 128 units, and the first layer's int64 sums of
// their hidden errors, in two launches, with overflow where the sums
// start near the int64 limits.
func TestMLPKernelsMatchGo(t *testing.T) {
	clang := ptxtest.NeedClang(t)
	c := mlpKernelCase(t, 48, 128)
	flags := []string{"-ffp-contract=off"}
	if f := fmaFlags(); f != "" {
		flags = append(flags, f)
	}
	h := buildMLPHarness(t, clang, flags...)

	t.Run("real rows", func(t *testing.T) {
		a, g, over := h.run(t, c)
		wa, wg, wover := goKernels(c)
		compareKernels(t, a, g, over, wa, wg, wover)
		nonzero := 0
		for _, v := range wg {
			if v != 0 {
				nonzero++
			}
		}
		if nonzero < len(wg)/4 || wover {
			t.Fatalf("%d of %d first-layer sums are non-zero, overflow %v: the case shows little", nonzero, len(wg), wover)
		}
	})
	t.Run("overflow", func(t *testing.T) {
		o := c
		o.dh = append([]int64{}, c.dh...)
		o.g0 = make([]int64, len(c.g0))
		for i := range o.g0 {
			switch i % 3 {
			case 0:
				o.g0[i] = math.MaxInt64 - 1<<40
			case 1:
				o.g0[i] = math.MinInt64 + 1<<40
			}
		}
		for i := range o.dh {
			if i%5 == 0 {
				o.dh[i] = math.MaxInt64 / 100 // 255·dh wraps, as Go's int64 product does
			}
		}
		a, g, over := h.run(t, o)
		wa, wg, wover := goKernels(o)
		if !wover {
			t.Fatal("the Go sums do not overflow: the case shows nothing")
		}
		compareKernels(t, a, g, over, wa, wg, wover)
	})
}

// compareKernels reports where the harness's results differ from Go's.
func compareKernels(t *testing.T, a []float64, g []int64, over bool, wa []float64, wg []int64, wover bool) {
	t.Helper()
	bad := 0
	for i := range wa {
		if math.Float64bits(a[i]) != math.Float64bits(wa[i]) {
			if bad++; bad <= 3 {
				t.Errorf("pre-activation %d: mlp.cu %x (%v), Go %x (%v)", i, math.Float64bits(a[i]), a[i], math.Float64bits(wa[i]), wa[i])
			}
		}
	}
	for i := range wg {
		if g[i] != wg[i] {
			if bad++; bad <= 6 {
				t.Errorf("first-layer sum %d: mlp.cu %d, Go %d", i, g[i], wg[i])
			}
		}
	}
	if over != wover {
		t.Errorf("overflow: mlp.cu %v, Go %v", over, wover)
	}
	if bad > 0 {
		t.Errorf("%d values differ", bad)
	}
}

// TestMLPKernelCheckSeesContraction: the same host build with
// contraction allowed (-ffp-contract=fast -mfma: every b + w·x becomes one
// fused multiply-add, rounded once) gives pre-activations that differ
// from Go's, so TestMLPKernelsMatchGo would fail on a kernel built
// that way. It needs a CPU with FMA.
func TestMLPKernelCheckSeesContraction(t *testing.T) {
	clang := ptxtest.NeedClang(t)
	f := fmaFlags()
	if f == "" {
		t.Skip("this CPU has no fused multiply-add (amd64 FMA3): contraction cannot be shown here")
	}
	c := mlpKernelCase(t, 16, 128)
	a, _, _ := buildMLPHarness(t, clang, "-ffp-contract=fast", f).run(t, c)
	wa, _, _ := goKernels(c)
	differ := 0
	for i := range wa {
		if math.Float64bits(a[i]) != math.Float64bits(wa[i]) {
			differ++
		}
	}
	t.Logf("%d of %d pre-activations differ under contraction", differ, len(wa))
	if differ == 0 {
		t.Error("a build with fused multiply-adds gives Go's bits: the check would not see contraction")
	}
}

// TestMLPGradGPUWithoutGPU: the program built with its GPU path
// (gpuGrad set, as fashion-gpu.wasm has it) computes a task that has no
// GPU on the CPU, as planned: mlpGradGPU says gpukernel.ErrNoGPU, and the
// result is fashion.wasm's. (Native builds never see a GPU; the worker's
// test TestFashionGPUPathOnFakeDriver runs the GPU path itself.)
func TestMLPGradGPUWithoutGPU(t *testing.T) {
	in := subset(t, 40)
	const hidden, batch = 16, 40
	init, err := compute(task.Task{Params: mlpParams("init", 0, 1, hidden, batch), Inputs: in})
	if err != nil {
		t.Fatal(err)
	}
	tk := task.Task{Index: 1, Params: mlpParams("grad", 1, 2, hidden, batch), Inputs: withInput(in, "model", writeModel(t, init.(applyResult).Model))}
	cpu, err := compute(tk)
	if err != nil {
		t.Fatal(err)
	}
	p := params{Features: 784, Classes: 10, Hidden: hidden, Batch: batch, Round: 1}
	if _, err := mlpGradGPU(tk, p, nil, nil, nil, 0); !errors.Is(err, gpukernel.ErrNoGPU) {
		t.Fatalf("mlpGradGPU without a GPU: %v, want gpukernel.ErrNoGPU", err)
	}
	old := gpuGrad
	gpuGrad = mlpGradGPU
	t.Cleanup(func() { gpuGrad = old })
	withPath, err := compute(tk)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(cpu, withPath); diff != "" {
		t.Errorf("the program with its GPU path, no GPU, differs from the CPU path (-cpu +gpu build):\n%s", diff)
	}
}
