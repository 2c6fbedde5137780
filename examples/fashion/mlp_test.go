package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"idlepool/examples/internal/task"
)

func mlpParams(mode string, round, shards, hidden, batch int) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"mode": mode, "round": round, "shards": shards,
		"features": 784, "classes": 10, "batch": batch, "lr": 0.003, "hidden": hidden})
	return b
}

func withInput(in map[string]string, k, v string) map[string]string {
	m := map[string]string{k: v}
	for a, b := range in {
		m[a] = b
	}
	return m
}

// mlpShardSum is the integer sum of the grad tasks' updates of one round
// cut into shards.
func mlpShardSum(t *testing.T, in map[string]string, model string, round, shards, hidden, batch int) []int64 {
	t.Helper()
	var total []int64
	for i := range shards {
		r, err := compute(task.Task{Index: i, Params: mlpParams("grad", round, shards, hidden, batch), Inputs: withInput(in, "model", model)})
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

// TestMLPGradShardsSumExactly: the perceptron's fixed-point updates of one
// batch, summed as integers, are the same for 1, 4 and 9 shards, after a
// step of Adam that made the model its own.
func TestMLPGradShardsSumExactly(t *testing.T) {
	in := subset(t, 72)
	const hidden, batch = 24, 36
	init, err := compute(task.Task{Params: mlpParams("init", 0, 1, hidden, batch), Inputs: in})
	if err != nil {
		t.Fatal(err)
	}
	model := writeModel(t, init.(applyResult).Model)
	first := mlpShardSum(t, in, model, 1, 1, hidden, batch)
	upd, _ := json.Marshal(map[string]any{"update": map[string]any{"count": 1, "sum": first}})
	up := filepath.Join(t.TempDir(), "update.json")
	if err := os.WriteFile(up, upd, 0o644); err != nil {
		t.Fatal(err)
	}
	stepped, err := compute(task.Task{Params: mlpParams("apply", 1, 1, hidden, batch), Inputs: withInput(withInput(in, "model", model), "update", up)})
	if err != nil {
		t.Fatal(err)
	}
	model2 := writeModel(t, stepped.(applyResult).Model)
	want := mlpShardSum(t, in, model2, 2, 1, hidden, batch)
	nonzero := 0
	for _, v := range want[:784*hidden] {
		if v != 0 {
			nonzero++
		}
	}
	if nonzero < 784*hidden/4 {
		t.Fatalf("only %d of the first layer's %d gradients are non-zero: the test would show little", nonzero, 784*hidden)
	}
	for _, shards := range []int{4, 9} {
		got := mlpShardSum(t, in, model2, 2, shards, hidden, batch)
		for j := range want {
			if got[j] != want[j] {
				t.Fatalf("%d shards: element %d is %d, one shard gives %d", shards, j, got[j], want[j])
			}
		}
	}
}

// TestMLPGradientMatchesFiniteDifferences: the fixed-point update, scaled
// back, is the gradient of the mean cross-entropy: it agrees with central
// differences of the loss on parameters of each of the four blocks.
func TestMLPGradientMatchesFiniteDifferences(t *testing.T) {
	in := subset(t, 20)
	const hidden, batch = 8, 20
	p := params{Features: 784, Classes: 10, Hidden: hidden, Batch: batch, Round: 1}
	w := mlpInit(p, 99)[:p.size()]
	for i := 784 * hidden; i < len(w); i++ { // biases away from zero
		w[i] += 0.01 * float64(i%7-3)
	}
	full := append(append([]float64{}, w...), make([]float64, 2*p.size()+2)...)
	r, err := compute(task.Task{Params: mlpParams("grad", 1, 1, hidden, batch), Inputs: withInput(in, "model", writeModel(t, full))})
	if err != nil {
		t.Fatal(err)
	}
	u := r.(gradResult).Update
	d, err := openData(task.Task{Inputs: in}, "train", p)
	if err != nil {
		t.Fatal(err)
	}
	px, lb, err := d.read(0, batch, 10)
	if err != nil {
		t.Fatal(err)
	}
	loss := func(w []float64) float64 {
		m, z, sum := newMLP(p, w), make([]float64, 10), 0.0
		for e := range lb {
			m.forward(px[e*784:(e+1)*784], z)
			mx := z[0]
			for _, v := range z {
				mx = math.Max(mx, v)
			}
			s := 0.0
			for _, v := range z {
				s += math.Exp(v - mx)
			}
			sum += math.Log(s) - (z[lb[e]] - mx)
		}
		return sum / batch
	}
	// A pixel that is non-zero in some image, for the first layer.
	pix := 0
	for i := range 784 {
		if px[i] != 0 && px[784+i] != 0 {
			pix = i
			break
		}
	}
	ob1, ow2, ob2 := 784*hidden, 784*hidden+hidden, 784*hidden+hidden+hidden*10
	for _, i := range []int{pix*hidden + 1, pix*hidden + 5, ob1 + 2, ob1 + 6, ow2 + 13, ow2 + 44, ob2 + 3, ob2 + 9} {
		g := float64(u[i]) / (1 << gradBits) / batch
		if i < ob1 {
			g /= 255
		}
		const h = 1e-5
		wp, wm := append([]float64{}, w...), append([]float64{}, w...)
		wp[i] += h
		wm[i] -= h
		num := (loss(wp) - loss(wm)) / (2 * h)
		if math.Abs(g-num) > 1e-5+1e-3*math.Abs(num) {
			t.Errorf("parameter %d: fixed-point gradient %.9f, central difference %.9f", i, g, num)
		}
	}
}

func TestMLPRejectsBadHidden(t *testing.T) {
	in := subset(t, 20)
	_, err := compute(task.Task{Params: mlpParams("init", 0, 1, -3, 20), Inputs: in})
	if err == nil || !strings.Contains(err.Error(), "hidden must be 0 (softmax regression) .. 4096, got -3") {
		t.Fatalf("error %v, want one naming hidden", err)
	}
	// A softmax model handed to a perceptron is the wrong size.
	in["model"] = writeModel(t, make([]float64, 3*(784*10+10)+2))
	_, err = compute(task.Task{Params: mlpParams("grad", 1, 1, 16, 20), Inputs: in})
	if err == nil || !strings.Contains(err.Error(), "model: 188416 bytes, want") {
		t.Fatalf("error %v, want one naming the model's size", err)
	}
}

// TestMLPInitFromSeed: the first model depends on params.seed alone, not
// on the task that makes it, and has 3·P+2 numbers with zero biases.
func TestMLPInitFromSeed(t *testing.T) {
	init := func(seed uint64, index int) []float64 {
		b, _ := json.Marshal(map[string]any{"mode": "init", "features": 784, "classes": 10, "hidden": 16, "seed": seed, "lr": 0.1})
		r, err := compute(task.Task{Index: index, Seed: uint64(index) * 77, Params: b})
		if err != nil {
			t.Fatal(err)
		}
		return r.(applyResult).Model
	}
	a, b, c := init(5, 0), init(5, 3), init(6, 0)
	if len(a) != 3*(784*16+16+16*10+10)+2 {
		t.Fatalf("%d numbers", len(a))
	}
	same, differ := true, false
	for i := range a {
		same = same && math.Float64bits(a[i]) == math.Float64bits(b[i])
		differ = differ || a[i] != c[i]
	}
	if !same || !differ {
		t.Errorf("the same seed gives the same model: %v; another seed another: %v", same, differ)
	}
	for _, v := range a[784*16 : 784*16+16] {
		if v != 0 {
			t.Fatalf("a hidden bias is %g", v)
		}
	}
}
