package worker

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPTXKernels(t *testing.T) {
	src := `
.version 7.0
.target sm_60
.address_size 64
	// .visible .entry gone(.param .u64 a)
.visible .entry add_u32(
	.param .u64 .ptr .global .align 4 add_u32_param_0,
	.param .u32 add_u32_param_1,
	.param .u32 add_u32_param_2
)
.maxntid 256, 1, 1
{ ret; }
.entry none() { ret; }
.weak .entry bare { ret; }
/* .entry hidden(.param .u8 x) */
.func (.param .b32 r) helper(.param .b64 x) { ret; }
.visible .entry mixed(.param .f64 a, .param .f32 b, .param .u16 c, .param .align 8 .b8 s[24], .param .s64 d)
{ ret; }
.visible .entry$x(.param .u64 a) { ret; }
.visible .entry spaced(.param .align 8 .b8 s[ 16 ], .param .u32 n) { ret; }
// A string that looks like a kernel, or opens a comment, is neither.
.file 1 ".entry fake() /*"
.visible .entry real(.param .u64 a, .param .u64 b) { ret; }
.file 2 "*/ \" .entry fake2()"
`
	got, err := ptxKernels([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]int{"add_u32": {8, 4, 4}, "none": nil, "bare": nil, "mixed": {8, 4, 2, 24, 8},
		"spaced": {16, 4}, "real": {8, 8}}
	gotW := map[string][]int{}
	for name, k := range got {
		gotW[name] = k.params
	}
	if d := cmp.Diff(want, gotW); d != "" {
		t.Errorf("kernels (-want +got):\n%s", d)
	}
}

func TestPTXKernelsRefused(t *testing.T) {
	for _, tc := range []struct{ name, src, err string }{
		{"nul", ".version 7.0\x00.visible .entry k(.param .u64 a) {}", "not PTX text"},
		{"utf8", ".version 7.0\xff", "not PTX text"},
		{"unclosed", ".visible .entry k(.param .u64 a {", "kernel k: parameter list without ')'"},
		{"noname", ".visible .entry (.param .u64 a) {}", ".entry without a kernel name"},
		{"notparam", ".visible .entry k(.reg .u64 a) {}", `kernel k, parameter 0: ".reg .u64 a" is not a .param`},
		{"notype", ".visible .entry k(.param .u64 a, .param .align 8 x) {}", "kernel k, parameter 1"},
		{"texref", ".visible .entry k(.param .texref t) {}", ".texref parameters are not supported"},
		{"array", ".visible .entry k(.param .b8 s[0]) {}", "bad array size"},
		{"twice", ".visible .entry k() {}\n.visible .entry k() {}", "kernel k is declared twice"},
		{"vector", ".visible .entry k(.param .v4 .u32 a) {}", ".v4 is not a type or attribute"},
		{"unknown", ".visible .entry k(.param .u64 .weird a) {}", ".weird is not a type or attribute"},
		{"twodim", ".visible .entry k(.param .b8 s[2][3]) {}", "bad array size"},
		{"aligntext", ".visible .entry k(.param .align x .b8 s[8]) {}", ".align without a number"},
		{"comment", ".visible .entry k(.param .u64 a) {} /* open", "comment is not closed"},
		{"string", ".file 1 \"open\n.visible .entry k() {}", "string literal is not closed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ptxKernels([]byte(tc.src))
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("err = %v, want one with %q", err, tc.err)
			}
		})
	}
}

func TestCheckLaunchParams(t *testing.T) {
	k := ptxKernel{params: []int{8, 4, 2, 8}}
	if err := checkLaunchParams("k", k, []uint32{paramBuffer, paramU32, paramU32, paramF64}); err != nil {
		t.Errorf("matching launch refused: %v", err)
	}
	for _, tc := range []struct {
		kinds []uint32
		err   string
	}{
		{[]uint32{paramBuffer, paramU32, paramU32}, "takes 4 parameters, the launch passes 3"},
		{[]uint32{paramF32, paramU32, paramU32, paramF64}, "parameter 0 takes 8 bytes"},
		{[]uint32{paramBuffer, paramU64, paramU32, paramF64}, "parameter 1 takes 4 bytes"},
		{[]uint32{paramBuffer, paramU32, paramBuffer, paramF64}, "parameter 2 takes 2 bytes"},
	} {
		if err := checkLaunchParams("k", k, tc.kinds); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%v: err = %v, want one with %q", tc.kinds, err, tc.err)
		}
	}
	if err := checkLaunchParams("k", ptxKernel{params: []int{16}}, []uint32{paramU64}); err == nil {
		t.Error("a 16-byte parameter was accepted")
	}
}

// TestPTXKernelsOfClang reads the parameter lists of kernels as the
// build's clang (NVPTX back end) writes them: the worker's test kernels
// and the GPU examples' kernels.
func TestPTXKernelsOfClang(t *testing.T) {
	clang, err := exec.LookPath("clang")
	if err != nil {
		t.Skip("no clang to compile kernels to PTX")
	}
	for _, tc := range []struct {
		src  string
		want map[string][]int
	}{
		{"testdata/kernels.cu", map[string][]int{"add_u32": {8, 4, 4}, "echo_params": {8, 4, 8, 4, 8, 8}, "fault": nil}},
		// The launches the examples make (examples/*/gpu.go): a buffer and
		// u64 scalars; optionmc adds four f32.
		{"../examples/gpupi/gpupi.cu", map[string][]int{"count_inside": {8, 8, 8, 8}}},
		{"../examples/optionmc/optionmc.cu", map[string][]int{"price_paths": {8, 8, 8, 8, 4, 4, 4, 4}}},
		// The perceptron's kernels: four buffers, four u32.
		{"../examples/fashion/mlp.cu", map[string][]int{"mlp_hidden": {8, 8, 8, 8, 4, 4, 4, 4}, "mlp_grad_w1": {8, 8, 8, 8, 4, 4, 4, 4}}},
	} {
		t.Run(filepath.Base(tc.src), func(t *testing.T) {
			if _, err := os.Stat(tc.src); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(t.TempDir(), "k.ptx")
			if b, err := exec.Command(clang, "-x", "cuda", "--cuda-device-only", "--cuda-gpu-arch=sm_60", "-nocudainc", "-nocudalib",
				"-O2", "-S", "-o", out, tc.src).CombinedOutput(); err != nil {
				t.Fatalf("clang: %v\n%s", err, b)
			}
			ptx, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			got, err := ptxKernels(ptx)
			if err != nil {
				t.Fatal(err)
			}
			gotW := map[string][]int{}
			for name, k := range got {
				gotW[name] = k.params
			}
			if d := cmp.Diff(tc.want, gotW); d != "" {
				t.Errorf("kernels (-want +got):\n%s", d)
			}
		})
	}
}

func TestCUDACacheEnv(t *testing.T) {
	dir := filepath.Join("home", "cache", "wazero")
	want := []string{"CUDA_CACHE_PATH=" + filepath.Join(dir, "cuda"), "CUDA_CACHE_MAXSIZE=268435456"}
	if d := cmp.Diff(want, cudaCacheEnv(dir)); d != "" {
		t.Errorf("cudaCacheEnv (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"CUDA_CACHE_DISABLE=1"}, cudaCacheEnv("")); d != "" {
		t.Errorf("cudaCacheEnv without a cache (-want +got):\n%s", d)
	}
}
