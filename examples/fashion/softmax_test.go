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
// the base64 of the model file's bytes, and an accuracy only when it was
// asked for one (params.evaluate), so that a training can skip the
// held-out set in most rounds without reporting a stale figure.
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
	apply := func(evaluate any) map[string]any {
		var p map[string]any
		_ = json.Unmarshal(taskParams("apply", 1, 1), &p)
		if evaluate != nil {
			p["evaluate"] = evaluate
		}
		pb, _ := json.Marshal(p)
		r, err := compute(task.Task{Params: pb, Inputs: withInput(withInput(in, "model", model), "update", up)})
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
	if out := apply(nil); out["accuracy"] == nil {
		t.Errorf("no accuracy by default: %v", out["accuracy"])
	}
	if out := apply(true); out["accuracy"] == nil {
		t.Errorf("evaluate = true gave no accuracy")
	}
	if out := apply(false); out["accuracy"] != nil || out["loss"] == nil {
		t.Errorf("evaluate = false gave accuracy %v, loss %v; want none and a loss", out["accuracy"], out["loss"])
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
