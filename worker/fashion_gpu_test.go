package worker

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// mlpStubPTX declares the perceptron's kernels as clang writes them
// (examples/fashion/mlp.cu), for a machine without clang: the fake driver
// runs them as fakeMLPHidden and fakeMLPGradW1.
const mlpStubPTX = `.version 7.0
.target sm_60
.address_size 64
.visible .entry mlp_hidden(.param .u64 a, .param .u64 w1, .param .u64 b1, .param .u64 px, .param .u32 f, .param .u32 h, .param .u32 first, .param .u32 count) { ret; }
.visible .entry mlp_grad_w1(.param .u64 g, .param .u64 over, .param .u64 px, .param .u64 dh, .param .u32 f, .param .u32 h, .param .u32 first, .param .u32 count) { ret; }
`

// TestFashionGPUPathOnFakeDriver runs a grad task of the perceptron
// (examples/fashion built with the tag gpu, as fashion-gpu.wasm) through
// the worker twice: with a GPU, whose kernels the fake driver runs as Go
// code with mlp.cu's arithmetic, and without. The GPU run must launch
// both kernels, say nothing of a fallback, and give the CPU run's bytes:
// this exercises the guest's uploads, launches, parameter order and
// read-back through the real idlepool_cuda host module (including its
// check of the launch against the PTX's parameter list, the kernels as
// clang compiles them where clang is installed).
func TestFashionGPUPathOnFakeDriver(t *testing.T) {
	const src = "/usr/share/datasets/fashion-mnist"
	if _, err := os.Stat(filepath.Join(src, "train-images-idx3-ubyte.gz")); err != nil {
		t.Skipf("Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist): %v", err)
	}
	mod, err := buildWasm(filepath.Join(testDir, "fashion-gpu.wasm"), "../examples/fashion", "-tags", "gpu")
	if err != nil {
		if strings.Contains(err.Error(), errNoGoTool.Error()) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	in := t.TempDir()
	const n, hidden = 40, 24
	cut := func(name string, header, row int) {
		f, err := os.Open(filepath.Join(src, name+".gz"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		z, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, header+row*n)
		if _, err := io.ReadFull(z, b); err != nil {
			t.Fatal(err)
		}
		binary.BigEndian.PutUint32(b[4:], n)
		if err := os.WriteFile(filepath.Join(in, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cut("train-images-idx3-ubyte", 16, 784)
	cut("train-labels-idx1-ubyte", 8, 1)
	ptx := []byte(mlpStubPTX)
	if clang, err := exec.LookPath("clang"); err == nil {
		out := filepath.Join(t.TempDir(), "mlp.ptx")
		if b, err := exec.Command(clang, "-x", "cuda", "--cuda-device-only", "--cuda-gpu-arch=sm_60", "-nocudainc", "-nocudalib",
			"-O3", "-ffp-contract=off", "-S", "-o", out, "../examples/fashion/mlp.cu").CombinedOutput(); err != nil {
			t.Fatalf("clang: %v\n%s", err, b)
		}
		if ptx, err = os.ReadFile(out); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(in, "ptx"), ptx, 0o644); err != nil {
		t.Fatal(err)
	}

	p, dir := newCUDAPool(t, "")
	stdin := func(params map[string]any) []byte {
		params["features"], params["classes"], params["hidden"], params["batch"], params["lr"] = 784, 10, hidden, n, 0.001
		b, _ := json.Marshal(map[string]any{"job": "00", "index": 1, "seed": 1, "params": params, "inputs": map[string]string{
			"train_images": "/input/train-images-idx3-ubyte", "train_labels": "/input/train-labels-idx1-ubyte",
			"model": "/input/model", "ptx": "/input/ptx"}})
		return b
	}
	req := func(params map[string]any, gpu bool) Request {
		r := Request{ModulePath: mod.path, ModuleSHA256: mod.sha, InputDir: in, Stdin: stdin(params), Timeout: 2 * time.Minute}
		if gpu {
			r.GPUs = []string{"GPU-fake-0"}
		}
		return r
	}
	// The first model, from the program's init mode.
	res := mustSucceed(t, p, req(map[string]any{"mode": "init", "seed": 5}, false))
	var init struct{ Model string }
	if err := json.Unmarshal(res.Stdout, &init); err != nil {
		t.Fatalf("init: %v: %.200s", err, res.Stdout)
	}
	model, err := base64.StdEncoding.DecodeString(init.Model)
	if err != nil || len(model) == 0 {
		t.Fatalf("init's model: %v", err)
	}
	if err := os.WriteFile(filepath.Join(in, "model"), model, 0o644); err != nil {
		t.Fatal(err)
	}

	grad := map[string]any{"mode": "grad", "round": 1, "shards": 2}
	cpu := mustSucceed(t, p, req(grad, false))
	gpu := mustSucceed(t, p, req(grad, true))
	if bytes.Contains(gpu.Stderr, []byte("GPU path failed")) {
		t.Fatalf("the GPU run fell back to the CPU:\n%s", gpu.Stderr)
	}
	launched := ""
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "launches-") {
			b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
			launched += string(b)
		}
	}
	if launched != "mlp_hidden\nmlp_grad_w1\n" {
		t.Fatalf("kernels launched: %q, want mlp_hidden then mlp_grad_w1 once each (20 examples, one chunk)", launched)
	}
	if !bytes.Equal(cpu.Stdout, gpu.Stdout) {
		t.Fatalf("the GPU path's result differs from the CPU path's:\nCPU %.300s\nGPU %.300s", cpu.Stdout, gpu.Stdout)
	}
	if !bytes.Contains(cpu.Stdout, []byte(`{"update":[`)) {
		t.Fatalf("not a grad result: %.200s", cpu.Stdout)
	}
	checkNoLiveContext(t, dir)
}
