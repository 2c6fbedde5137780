package main

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/pelletier/go-toml/v2"

	"idlepool/examples/internal/task"
)

// TestNativeRounds trains a training file's rounds in this process, with
// the program built for this machine and one shard, and logs each
// round's loss, held-out accuracy and model digest: the figures of a run
// without idlepool around it, and a check that the models are the bytes
// of `idlepool train`'s lineage.json (WebAssembly there, this
// architecture here). Off unless IDLEPOOL_NATIVE_TRAIN names the training
// file; IDLEPOOL_NATIVE_ROUNDS bounds the rounds, IDLEPOOL_NATIVE_PARAMS
// (a JSON object) overrides some of its [params] for tuning, and
// IDLEPOOL_NATIVE_EVAL_EVERY=N measures the held-out accuracy only every
// N rounds and at the last (a faster search). For example:
//
//	IDLEPOOL_NATIVE_TRAIN=$PWD/examples/fashion/mlp.toml IDLEPOOL_NATIVE_ROUNDS=20 \
//	  go test -run TestNativeRounds -v -timeout 60m ./examples/fashion
func TestNativeRounds(t *testing.T) {
	path := os.Getenv("IDLEPOOL_NATIVE_TRAIN")
	if path == "" {
		t.Skip("set IDLEPOOL_NATIVE_TRAIN to a training file (examples/fashion/mlp.toml)")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var tf struct {
		Rounds int               `toml:"rounds"`
		Inputs map[string]string `toml:"inputs"`
		Params map[string]any    `toml:"params"`
	}
	if err := toml.Unmarshal(b, &tf); err != nil {
		t.Fatal(err)
	}
	if n, err := strconv.Atoi(os.Getenv("IDLEPOOL_NATIVE_ROUNDS")); err == nil {
		tf.Rounds = n
	}
	if o := os.Getenv("IDLEPOOL_NATIVE_PARAMS"); o != "" {
		if err := json.Unmarshal([]byte(o), &tf.Params); err != nil {
			t.Fatalf("IDLEPOOL_NATIVE_PARAMS: %v", err)
		}
	}
	every, _ := strconv.Atoi(os.Getenv("IDLEPOOL_NATIVE_EVAL_EVERY"))
	every = max(every, 1)
	in := map[string]string{}
	for k, v := range tf.Inputs {
		in[k] = filepath.Join(filepath.Dir(path), v)
	}
	params := func(mode string, round int) json.RawMessage {
		p := map[string]any{"mode": mode, "round": round, "shards": 1}
		for k, v := range tf.Params {
			p[k] = v
		}
		b, _ := json.Marshal(p)
		return b
	}
	r, err := compute(task.Task{Params: params("init", 0), Inputs: in})
	if err != nil {
		t.Fatal(err)
	}
	model := r.(applyResult).Model
	dir := t.TempDir()
	start := time.Now()
	for k := 1; k <= tf.Rounds; k++ {
		mb := make([]byte, 8*len(model))
		for i, f := range model {
			binary.LittleEndian.PutUint64(mb[8*i:], math.Float64bits(f))
		}
		m := withInput(in, "model", filepath.Join(dir, "model.bin"))
		if err := os.WriteFile(m["model"], mb, 0o644); err != nil {
			t.Fatal(err)
		}
		g, err := compute(task.Task{Params: params("grad", k), Inputs: m})
		if err != nil {
			t.Fatal(err)
		}
		upd, _ := json.Marshal(map[string]any{"update": map[string]any{"count": 1, "sum": g.(gradResult).Update}})
		m["update"] = filepath.Join(dir, "update.json")
		if err := os.WriteFile(m["update"], upd, 0o644); err != nil {
			t.Fatal(err)
		}
		a, err := compute(task.Task{Params: params("apply", k), Inputs: m})
		if err != nil {
			t.Fatal(err)
		}
		ar := a.(applyResult)
		model = ar.Model
		for i, f := range model {
			binary.LittleEndian.PutUint64(mb[8*i:], math.Float64bits(f))
		}
		sum := sha256.Sum256(mb)
		acc := "not measured"
		if k%every == 0 || k == tf.Rounds {
			if err := os.WriteFile(m["model"], mb, 0o644); err != nil {
				t.Fatal(err)
			}
			e, err := compute(task.Task{Params: params("eval", k), Inputs: m}) // one shard: the whole held-out set
			if err != nil {
				t.Fatal(err)
			}
			ev := e.(evalResult).Eval
			acc = fmt.Sprintf("%.2f%% (loss %.4f)", 100*float64(ev[0])/float64(ev[1]), float64(ev[2])*0x1p-32/float64(ev[1]))
		}
		t.Logf("round %d: loss %.4f, held-out accuracy %s, model %s (%.1fs in all)", k, ar.Loss, acc, hex.EncodeToString(sum[:]), time.Since(start).Seconds())
	}
}
