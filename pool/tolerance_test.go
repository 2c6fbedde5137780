package pool_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

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

// priceOf prices task i's share of a Monte Carlo as a GPU does in float32
// (f32) or a CPU in float64, from the same uniforms (a fixed generator):
// the two differ by float32 rounding, far within the job's tolerance.
func priceOf(i int64, f32 bool) []byte {
	rng := rand.New(rand.NewPCG(uint64(i), 7))
	var sum64 float64
	var sum32 float32
	const paths = 4096
	for range paths {
		u := rng.Float64()
		payoff := math.Max(100*math.Exp(0.2*(u-0.5))-100, 0)
		sum64 += payoff
		sum32 += float32(payoff)
	}
	if f32 {
		return fmt.Appendf(nil, `{"price": %v, "paths": %d}`+"\n", float32(sum32/paths), paths)
	}
	return fmt.Appendf(nil, `{"price": %v, "paths": %d}`+"\n", sum64/paths, paths)
}

// Found by trying it: a job compared under a tolerance rule still checked
// known answers by exact digest, so a GPU that computes in float32 (its
// bytes within the tolerance of the CPU's, not equal to them) was marked
// deviating against the submitter's answer and sanctioned. Now a known
// answer of such a job is the task's result itself, compared by the job's
// rule: the GPU replica passes, a result outside the tolerance is caught
// at once, and a digest answer is refused when the job is planned.
func TestKnownAnswerWithinTolerance(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), nil)
	alice := h.Device("alice", "alice-1")
	cpu, gpu := h.Device("bob", "bob-cpu"), h.Device("carol", "carol-gpu")
	mallory := h.Device("mallory", "mallory-1")
	// The submitter ran tasks 1 and 2 on its CPU first (idlepool run).
	answers := fmt.Sprintf(`{"1": %s, "2": %s}`, bytes.TrimSpace(priceOf(1, false)), bytes.TrimSpace(priceOf(2, false)))
	if err := os.WriteFile(filepath.Join(h.Dir, "answers.json"), []byte(answers), 0o600); err != nil {
		t.Fatal(err)
	}
	verify := "rule = \"tolerance\"\nknown_answers = \"answers.json\"\n[verify.tolerance]\nprice = { abs = 1e-4, rel = 1e-5 }\n"
	j := h.Job("gpu-tolerance", 3, pooltest.Policy{Verify: verify}, alice)
	if bytes.Equal(priceOf(1, true), priceOf(1, false)) {
		t.Fatal("the float32 and float64 prices are equal bytes: the test checks nothing")
	}
	// The GPU device asks first and returns its float32 result of every
	// task; the CPU device its float64 one; task 2 goes to mallory
	// instead, outside the tolerance.
	for _, l := range h.Lease(gpu, 3) {
		h.Submit(l, pooltest.Result(priceOf(l.Task, true)))
	}
	for _, l := range h.Lease(cpu, 2) {
		h.Submit(l, pooltest.Result(priceOf(l.Task, false)))
	}
	lm := h.Lease(mallory, 1)
	if len(lm) != 1 || lm[0].Task != 2 {
		t.Fatalf("mallory's leases %v, want task 2", tasksOf(lm))
	}
	h.Submit(lm[0], pooltest.Result([]byte(`{"price": 10.5, "paths": 4096}`+"\n")))
	name := map[string]string{}
	for n, p := range h.Peers {
		name[p.ID] = n
	}
	var got []string
	for _, e := range h.Ledger() {
		got = append(got, fmt.Sprintf("%s %d %s", e.Kind, e.Task, name[e.Peer]))
	}
	want := []string{"deviation 2 mallory-1", "receipt 0 bob-cpu", "receipt 0 carol-gpu", "receipt 1 bob-cpu", "receipt 1 carol-gpu"}
	slices.Sort(got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ledger (-want +got):\n%s", diff)
	}
	if st, _ := h.S.Status(j.ID); st.Accepted != 2 {
		t.Errorf("%d tasks accepted, want tasks 0 and 1", st.Accepted)
	}

	// A digest can say nothing of other bytes within a tolerance: refused.
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "p.wasm"), []byte("\x00asm\x01\x00\x00\x00"), 0o644)
	os.WriteFile(filepath.Join(dir, "answers.json"), fmt.Appendf(nil, `{"1": "%s"}`, pool.ReplicaDigest(priceOf(1, false), false, "")), 0o600)
	m, err := job.ParseManifest("k.toml", dir, []byte("name = \"k\"\nprogram = \"p.wasm\"\n[split]\nrule = \"range\"\ntasks = 3\n[[merge]]\nfield = \"price\"\nrule = \"sum\"\n[verify]\n"+verify))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := job.Plan(m); !errors.Is(err, job.ErrManifest) || !strings.Contains(err.Error(), "give the task's result itself") {
		t.Errorf("a digest answer under a tolerance rule: %v, want a manifest error asking for the result", err)
	}
}
