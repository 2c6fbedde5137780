package main

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// gpuExample builds the GPU example name (gpupi, optionmc) for WASI and
// its PTX with the Makefile's rule, and puts them in a new directory
// beside a copy of its manifest with edits applied (old text → new),
// returning the manifest's path. It skips the test without clang (CI
// installs it).
func gpuExample(t *testing.T, name string, edits map[string]string) string {
	t.Helper()
	if _, err := exec.LookPath("clang"); err != nil {
		t.Skip("clang not found: the GPU examples' PTX input is built with it (Debian: apt-get install clang)")
	}
	dir := t.TempDir()
	wasmPath := filepath.Join(dir, name+".wasm")
	build := exec.Command("go", "build", "-trimpath", "-o", wasmPath, "../../examples/"+name)
	build.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build examples/%s for WASI: %v\n%s", name, err, b)
	}
	mk := exec.Command("make", "-s", "--no-print-directory", "examples/"+name+"/"+name+".ptx")
	mk.Dir = filepath.Join("..", "..")
	if b, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make examples/%s/%s.ptx: %v\n%s", name, name, err, b)
	}
	ptx, err := os.ReadFile(filepath.Join("..", "..", "examples", name, name+".ptx"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".ptx"), ptx, 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join("..", "..", "examples", name, name+".toml"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	for old, repl := range edits {
		if !strings.Contains(text, old) {
			t.Fatalf("examples/%s/%s.toml has no %q", name, name, old)
		}
		text = strings.Replace(text, old, repl, 1)
	}
	path := filepath.Join(dir, name+".toml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// runGPUExample runs manifest with idlepool run --json and returns the
// result and the stdout bytes.
func runGPUExample(t *testing.T, manifest string, extra ...string) (result, string) {
	t.Helper()
	out := idlepool(t, t.TempDir(), append([]string{"run", manifest, "--json"}, extra...)...)
	if out.code != 0 {
		t.Fatalf("run %s: exit %d\nstderr:\n%s", manifest, out.code, out.stderr)
	}
	var r result
	if err := json.Unmarshal([]byte(out.stdout), &r); err != nil {
		t.Fatalf("run --json printed something that is not one JSON document: %v\n%s", err, out.stdout)
	}
	if r.Tasks.Failed != 0 || r.Tasks.OK != r.Tasks.Total {
		t.Fatalf("tasks = %+v, failures %+v", r.Tasks, r.Failures)
	}
	return r, out.stdout
}

// TestGPUPiCPUPath runs gpupi through idlepool run on a machine whose
// worker gives its tasks no GPU (device_count 0: CI, this machine): the
// program computes on the CPU, the estimate is within 4 standard errors
// of pi, and the result is the same bytes with 1 and with 3 workers and
// with every task run twice (--verify).
func TestGPUPiCPUPath(t *testing.T) {
	t.Parallel()
	m := gpuExample(t, "gpupi", map[string]string{"tasks = 64": "tasks = 6", "samples = 8388608": "samples = 1048576"})
	r, one := runGPUExample(t, m, "--workers", "1")
	pi, se := r.Derived["pi"], r.Derived["pi_se"]
	if se <= 0 || math.Abs(pi-math.Pi) > 4*se {
		t.Errorf("pi = %.6f, %.2f standard errors (se %.2g) from pi", pi, math.Abs(pi-math.Pi)/se, se)
	}
	if _, three := runGPUExample(t, m, "--workers", "3", "--verify"); three != one {
		t.Errorf("result with 3 workers and --verify differs from 1 worker:\n%s\n%s", three, one)
	}
}

// TestOptionMCCPUPath runs optionmc through idlepool run on the CPU path
// with every task run twice (--verify, replicas compared by the
// manifest's tolerance rule): the merged price is within 4 standard
// errors of the Black–Scholes price 10.450584.
func TestOptionMCCPUPath(t *testing.T) {
	m := gpuExample(t, "optionmc", map[string]string{"tasks = 32": "tasks = 8", "paths = 2097152": "paths = 131072"})
	r, _ := runGPUExample(t, m, "--workers", "2", "--verify")
	var price struct{ Mean float64 }
	if err := json.Unmarshal(r.Result["price"], &price); err != nil {
		t.Fatalf("result.price: %v\n%s", err, r.Result["price"])
	}
	const blackScholes = 10.450583572185565 // s0 = strike = 100, rate 5%, sigma 20%, one year
	se := r.Derived["price_se"]
	if se <= 0 || math.Abs(price.Mean-blackScholes) > 4*se {
		t.Errorf("price %.5f is %.2f standard errors (se %.2g) from Black–Scholes %.5f",
			price.Mean, math.Abs(price.Mean-blackScholes)/se, se, blackScholes)
	}
}
