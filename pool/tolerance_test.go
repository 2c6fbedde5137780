package pool_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"idlepool/job"
	"idlepool/pool"
	"idlepool/pool/pooltest"
	"idlepool/worker"
)

const toleranceVerify = "rule = \"tolerance\"\n[verify.tolerance]\nx = { abs = 1e-3 }\n"

func xResult(x string) pool.Submission { return pooltest.Result([]byte(`{"x": ` + x + `, "n": 7}`)) }

// TestSchedToleranceQuorum: under rule = "tolerance" two replicas within
// tolerance of each other reach quorum, the lower digest is folded, and
// both earn receipts; a replica outside it is a disagreement as under the
// digest rule: more replicas, the majority wins, the outlier is marked.
func TestSchedToleranceQuorum(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), nil)
	alice := h.Device("alice", "alice-1")
	bob := h.Device("bob", "bob-1")
	carol := h.Device("carol", "carol-1")
	mallory := h.Device("mallory", "mallory-1")
	dave := h.Device("dave", "dave-1")
	j := h.Job("tolerant", 2, pooltest.Policy{Verify: toleranceVerify}, alice)

	// Task 0: bob and carol differ by 5e-4.
	// Task 1: bob and mallory differ by 0.5; carol and dave agree with bob.
	lb, lc := h.Lease(bob, 2), h.Lease(carol, 1)
	if len(lb) != 2 || len(lc) != 1 || lc[0].Task != 0 {
		t.Fatalf("leases %v %v", tasksOf(lb), tasksOf(lc))
	}
	near, exact := xResult("1.0005"), xResult("1.0")
	h.Submit(lb[0], exact)
	h.Submit(lc[0], near)
	lm := h.Lease(mallory, 1)
	if len(lm) != 1 || lm[0].Task != 1 {
		t.Fatalf("mallory's leases %v", tasksOf(lm))
	}
	h.Submit(lb[1], xResult("2.0"))
	h.Submit(lm[0], xResult("2.5"))
	got := h.Results(alice, j.ID)
	if len(got) != 1 || got[0].Task != 0 || got[0].Status != pool.OutcomeOK {
		t.Fatalf("results %+v, want task 0 accepted and task 1 undecided", got)
	}
	folded := exact
	if bytes.Compare(near.Digest[:], exact.Digest[:]) < 0 {
		folded = near
	}
	if !bytes.Equal(got[0].Result, folded.Result) {
		t.Errorf("task 0 folded %s, want the lower digest's %s", got[0].Result, folded.Result)
	}
	// Task 1 wants more replicas: carol and dave agree with bob within tolerance.
	lc2 := h.Lease(carol, 1)
	if len(lc2) != 1 || lc2[0].Task != 1 {
		t.Fatalf("carol's second leases %v", tasksOf(lc2))
	}
	h.Submit(lc2[0], xResult("2.0009"))
	if ld := h.Lease(dave, 1); len(ld) == 1 {
		h.Submit(ld[0], xResult("1.9995"))
	}
	got = h.Results(alice, j.ID)
	if len(got) != 2 || got[1].Task != 1 || got[1].Status != pool.OutcomeOK {
		t.Fatalf("results %+v, want task 1 accepted too", got)
	}
	var x struct{ X float64 }
	if err := json.Unmarshal(got[1].Result, &x); err != nil || x.X == 2.5 {
		t.Errorf("task 1 folded %s (%v): the outlier", got[1].Result, err)
	}
	kinds := map[string]map[int64]string{}
	for _, e := range h.Ledger() {
		if e.Kind == pool.KindDeviation && !strings.Contains(e.Reason, "agreed within tolerance with") {
			t.Errorf("deviation reason %q does not say the others agreed within tolerance", e.Reason)
		}
		if kinds[e.Peer] == nil {
			kinds[e.Peer] = map[int64]string{}
		}
		kinds[e.Peer][e.Task] = e.Kind
	}
	for _, c := range []struct {
		peer string
		task int64
		kind string
	}{
		{bob, 0, pool.KindReceipt}, {carol, 0, pool.KindReceipt},
		{bob, 1, pool.KindReceipt}, {carol, 1, pool.KindReceipt}, {mallory, 1, pool.KindDeviation},
	} {
		if got := kinds[c.peer][c.task]; got != c.kind {
			t.Errorf("ledger: %s for task %d has %q, want %q", c.peer, c.task, got, c.kind)
		}
	}
}

// TestSchedDigestRuleUnchanged: without the rule the same two near
// results are a disagreement, as before.
func TestSchedDigestRuleUnchanged(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), nil)
	alice := h.Device("alice", "alice-1")
	bob := h.Device("bob", "bob-1")
	carol := h.Device("carol", "carol-1")
	j := h.Job("digest", 1, pooltest.Policy{}, alice)
	h.Submit(h.Lease(bob, 1)[0], xResult("1.0"))
	h.Submit(h.Lease(carol, 1)[0], xResult("1.0005"))
	if got := h.Results(alice, j.ID); len(got) != 0 {
		t.Fatalf("results %+v: two different results reached quorum under the digest rule", got)
	}
}

// wobblyExec computes {"x": i + d} for task i where d alternates between
// 0 and Delta on successive runs: two processes of the same machine that
// round differently.
type wobblyExec struct {
	Delta float64
	runs  atomic.Int64
}

func (e *wobblyExec) Run(_ context.Context, req worker.Request) (worker.Result, error) {
	var t struct {
		Index int64 `json:"index"`
	}
	if err := json.Unmarshal(req.Stdin, &t); err != nil {
		return worker.Result{}, fmt.Errorf("%w: stdin: %v", worker.ErrInvalidRequest, err)
	}
	n := e.runs.Add(1)
	x := float64(t.Index)
	if n%2 == 0 {
		x += e.Delta
	}
	return worker.Result{PID: int(n), Stdout: fmt.Appendf(nil, `{"x": %v}`, x)}, nil
}

// TestSoloVerifyTolerance: `run --verify` uses the job's rule: results
// within tolerance agree, others are a disagreement (the task fails), and
// the digest rule still wants equal bytes.
func TestSoloVerifyTolerance(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.wasm"), []byte("\x00asm\x01\x00\x00\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	plan := func(verify string) *job.Job {
		text := "name = \"wobbly\"\nprogram = \"p.wasm\"\n[split]\nrule = \"range\"\ntasks = 4\n[[merge]]\nfield = \"x\"\nrule = \"sum\"\n" + verify
		m, err := job.ParseManifest("wobbly.toml", dir, []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		j, err := job.Plan(m)
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	for _, tc := range []struct {
		name, verify string
		delta        float64
		ok           int64
	}{
		{"within tolerance", "[verify]\n" + toleranceVerify, 5e-4, 4},
		{"outside tolerance", "[verify]\n" + toleranceVerify, 5e-3, 0},
		{"digest rule", "", 5e-4, 0},
		{"digest rule, equal", "", 0, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := pool.RunSolo(context.Background(), plan(tc.verify), &wobblyExec{Delta: tc.delta},
				pool.SoloConfig{Slots: 1, RunDir: t.TempDir(), Verify: true})
			if err != nil && tc.ok > 0 {
				t.Fatal(err)
			}
			if out.OK != tc.ok {
				t.Errorf("%d tasks verified, want %d (failures %+v)", out.OK, tc.ok, out.Failures)
			}
		})
	}
}
