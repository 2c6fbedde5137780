package main

import (
	"compress/gzip"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"idlepool/examples/internal/splitmix"
	"idlepool/examples/internal/task"
)

// subset writes the first n examples of Fashion-MNIST's training set (as
// both the training and the test set) into a new directory.
func subset(t *testing.T, n int) map[string]string {
	t.Helper()
	const src = "/usr/share/datasets/fashion-mnist"
	if _, err := os.Stat(src); err != nil {
		t.Skipf("Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist): %v", err)
	}
	dir := t.TempDir()
	cut := func(name string, header, row int) string {
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
		binary.BigEndian.PutUint32(b[4:], uint32(n))
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	img, lab := cut("train-images-idx3-ubyte", 16, 784), cut("train-labels-idx1-ubyte", 8, 1)
	return map[string]string{"train_images": img, "train_labels": lab, "test_images": img, "test_labels": lab}
}

func taskParams(mode string, round, shards int) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"mode": mode, "round": round, "shards": shards,
		"features": 784, "classes": 10, "batch": 60, "lr": 0.01})
	return b
}

// writeModel writes model as float64 little-endian.
func writeModel(t *testing.T, model []float64) string {
	t.Helper()
	b := make([]byte, 8*len(model))
	for i, f := range model {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(f))
	}
	p := filepath.Join(t.TempDir(), "model.bin")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestGradShardsSumExactly: the shards' fixed-point updates of one batch,
// summed as integers, are the same for 1, 3 and 7 shards, after a step
// that makes the model non-trivial.
func TestGradShardsSumExactly(t *testing.T) {
	in := subset(t, 120)
	init, err := compute(task.Task{Params: taskParams("init", 0, 1), Inputs: in})
	if err != nil {
		t.Fatal(err)
	}
	with := func(k, v string) map[string]string {
		m := map[string]string{k: v}
		for a, b := range in {
			m[a] = b
		}
		return m
	}
	model := writeModel(t, init.(applyResult).Model)
	sum := func(model string, round, shards int) []int64 {
		var total []int64
		for i := range shards {
			r, err := compute(task.Task{Index: i, Params: taskParams("grad", round, shards), Inputs: with("model", model)})
			if err != nil {
				t.Fatal(err)
			}
			u := r.(gradResult).Update
			if total == nil {
				total = make([]int64, len(u))
			}
			for j, v := range u {
				total[j] += v
			}
		}
		return total
	}
	// One step, so that the second round's errors are not all alike.
	first := sum(model, 1, 1)
	upd, _ := json.Marshal(map[string]any{"update": map[string]any{"count": 1, "sum": first}})
	up := filepath.Join(t.TempDir(), "update.json")
	if err := os.WriteFile(up, upd, 0o644); err != nil {
		t.Fatal(err)
	}
	m := with("model", model)
	m["update"] = up
	stepped, err := compute(task.Task{Params: taskParams("apply", 1, 1), Inputs: m})
	if err != nil {
		t.Fatal(err)
	}
	model2 := writeModel(t, stepped.(applyResult).Model)
	want := sum(model2, 2, 1)
	for _, shards := range []int{3, 7} {
		got := sum(model2, 2, shards)
		for j := range want {
			if got[j] != want[j] {
				t.Fatalf("%d shards: element %d is %d, one shard gives %d", shards, j, got[j], want[j])
			}
		}
	}
}

func TestGradRejectsAModelOfTheWrongSize(t *testing.T) {
	in := subset(t, 60)
	in["model"] = writeModel(t, make([]float64, 5))
	_, err := compute(task.Task{Params: taskParams("grad", 1, 1), Inputs: in})
	if err == nil || !strings.Contains(err.Error(), "model: 40 bytes, want 188416") {
		t.Fatalf("error %v, want one naming the model's size", err)
	}
	// Run says it is the data's fault (exit status 65), not the program's.
	tk, _ := json.Marshal(task.Task{Job: strings.Repeat("0", 64), Params: taskParams("grad", 1, 1), Inputs: in})
	var stdout, stderr strings.Builder
	if code := task.Run(strings.NewReader(string(tk)), &stdout, &stderr, compute); code != task.ExitData {
		t.Errorf("exit status %d, want %d (data error): %s", code, task.ExitData, stderr.String())
	}
}

// TestApplyResultIsBinary: the update step's result carries the model as
// the base64 of the model file's bytes and the training loss, and no
// accuracy: the held-out set is the eval tasks' (TestEvalShardsAddUp).
func TestApplyResultIsBinary(t *testing.T) {
	in := subset(t, 60)
	init, err := compute(task.Task{Params: taskParams("init", 0, 1), Inputs: in})
	if err != nil {
		t.Fatal(err)
	}
	model := writeModel(t, init.(applyResult).Model)
	g, err := compute(task.Task{Params: taskParams("grad", 1, 1), Inputs: withInput(in, "model", model)})
	if err != nil {
		t.Fatal(err)
	}
	upd, _ := json.Marshal(map[string]any{"update": map[string]any{"count": 1, "sum": g.(gradResult).Update}})
	up := filepath.Join(t.TempDir(), "update.json")
	if err := os.WriteFile(up, upd, 0o644); err != nil {
		t.Fatal(err)
	}
	apply := func() map[string]any {
		r, err := compute(task.Task{Params: taskParams("apply", 1, 1), Inputs: withInput(withInput(in, "model", model), "update", up)})
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var out map[string]any
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatal(err)
		}
		mb, err := base64.StdEncoding.DecodeString(out["model"].(string))
		if err != nil {
			t.Fatalf("model: %v", err)
		}
		want := r.(applyResult).Model
		if len(mb) != 8*len(want) {
			t.Fatalf("model: %d bytes, want %d", len(mb), 8*len(want))
		}
		for i, f := range want {
			if binary.LittleEndian.Uint64(mb[8*i:]) != math.Float64bits(f) {
				t.Fatalf("model number %d differs from the file's", i)
			}
		}
		return out
	}
	if out := apply(); out["accuracy"] != nil || out["loss"] == nil || len(out) != 2 {
		t.Errorf("apply result %v: want a model and a loss only", out)
	}
}

// TestEvalShardsAddUp: the eval tasks' results of the held-out set cut
// into 1, 3 and 7 shards add up to the same counts and the same
// fixed-point loss, for softmax regression and for the perceptron (random
// weights, so that the classes differ), and the counts are those of one
// pass over the whole set: every example counted once, the right ones as
// the highest logit says.
func TestEvalShardsAddUp(t *testing.T) {
	const n = 50
	in := subset(t, n)
	for _, hidden := range []int{0, 24} {
		p := params{Features: 784, Classes: 10, Hidden: hidden}
		// Weights that tell some classes apart: the perceptron's first
		// weights, or softmax weights drawn within ±1/8.
		model := mlpInit(p, 3)
		if hidden == 0 {
			r := splitmix.New(7)
			for i := range p.size() {
				model[i] = float64(int64(r.Uint64()>>40)-1<<23) * 0x1p-26
			}
		}
		in := withInput(in, "model", writeModel(t, model))
		eval := func(shards int) [3]int64 {
			var total [3]int64
			for i := range shards {
				b, _ := json.Marshal(map[string]any{"mode": "eval", "round": 1, "shards": shards, "features": 784, "classes": 10, "hidden": hidden})
				res, err := compute(task.Task{Index: i, Params: b, Inputs: in})
				if err != nil {
					t.Fatalf("hidden %d, %d shards, task %d: %v", hidden, shards, i, err)
				}
				for j, v := range res.(evalResult).Eval {
					total[j] += v
				}
			}
			return total
		}
		want := eval(1)
		for _, shards := range []int{3, 7} {
			if got := eval(shards); got != want {
				t.Errorf("hidden %d: %d shards give %v, one shard %v", hidden, shards, got, want)
			}
		}
		// One pass over the whole set, as the update step measured it
		// before the held-out set was cut into eval tasks.
		d, err := openData(task.Task{Inputs: in}, "test", p)
		if err != nil {
			t.Fatal(err)
		}
		px, lb, err := d.read(0, n, 10)
		if err != nil {
			t.Fatal(err)
		}
		right := int64(0)
		z := make([]float64, 10)
		for e, y := range lb {
			if hidden > 0 {
				newMLP(p, model).forward(px[784*e:784*e+784], z)
			} else {
				logits(model, p, px[784*e:784*e+784], z)
			}
			best := 0
			for k := range z {
				if z[k] > z[best] {
					best = k
				}
			}
			if best == int(y) {
				right++
			}
		}
		if want[0] != right || want[1] != n || want[2] <= 0 {
			t.Errorf("hidden %d: eval %v, want %d right of %d and a positive loss", hidden, want, right, n)
		}
		if right == 0 || right == n {
			t.Errorf("hidden %d: %d of %d right: the check does not tell right from wrong", hidden, right, n)
		}
	}
	// Without a held-out set: zeros, no error.
	b, _ := json.Marshal(map[string]any{"mode": "eval", "round": 1, "shards": 2, "features": 784, "classes": 10})
	noTest := map[string]string{"model": writeModel(t, make([]float64, 3*7850+2))}
	res, err := compute(task.Task{Params: b, Inputs: noTest})
	if err != nil || res.(evalResult).Eval != [3]int64{} {
		t.Errorf("eval without a held-out set: %v, %v; want zeros", res, err)
	}
}

// TestLearningRateFallsLinearly: lr falls from lr to lr_end over
// decay_rounds rounds and stays there; decay_rounds 0 keeps lr.
func TestLearningRateFallsLinearly(t *testing.T) {
	p := params{LR: 0.003, LREnd: 0.0001, DecayRounds: 100}
	for _, c := range []struct {
		round int
		want  float64
	}{{1, 0.003}, {51, 0.00155}, {101, 0.0001}, {500, 0.0001}} {
		p.Round = c.round
		if got := p.rate(); math.Abs(got-c.want) > 1e-15 {
			t.Errorf("round %d: lr %g, want %g", c.round, got, c.want)
		}
	}
	if got := (params{LR: 0.01, Round: 77}).rate(); got != 0.01 {
		t.Errorf("without decay: lr %g, want 0.01", got)
	}
}
