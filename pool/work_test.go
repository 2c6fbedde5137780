package pool_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"idlepool/pool"
	"idlepool/pool/pooltest"
	"idlepool/worker"
)

// counted is a submission of result b whose device counted n instructions.
func counted(b string, n uint64) pool.Submission {
	s := pooltest.Result([]byte(b))
	s.Work = &pool.Work{Rule: worker.MeterRule, Count: n}
	return s
}

// receipts returns the ledger's receipts as peer -> cost and peer -> work.
func receipts(es []pool.Entry) (map[string]float64, map[string]uint64) {
	cost, work := map[string]float64{}, map[string]uint64{}
	for _, e := range es {
		if e.Kind == pool.KindReceipt {
			cost[e.Peer], work[e.Peer] = e.Cost, e.Work
		}
	}
	return cost, work
}

// TestWorkCredited: a receipt credits the work the task took, at
// job.InstructionsPerCostUnit, capped by the declared cost. A job whose
// owner declares 1,000 units for a trivial task (5,000,000 instructions)
// pays its two donors 0.05 each, and a job declaring 2 for a task of
// 3 × 10^8 instructions pays 2.
func TestWorkCredited(t *testing.T) {
	for _, tc := range []struct {
		name     string
		declared float64
		count    uint64
		want     float64
	}{
		{"inflated declaration", 1000, 5_000_000, 0.05},
		{"declared less than the work", 2, 300_000_000, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, pool.NewMemStore(), nil)
			alice := h.Device("alice", "alice-1")
			bob, carol := h.Device("bob", "bob-1"), h.Device("carol", "carol-1")
			j := h.Job("trivial", 1, pooltest.Policy{TaskCost: tc.declared}, alice)
			h.Submit(h.Lease(bob, 1)[0], counted("r", tc.count))
			h.Submit(h.Lease(carol, 1)[0], counted("r", tc.count))
			cost, work := receipts(h.Ledger())
			wantCost := map[string]float64{bob: tc.want, carol: tc.want}
			if diff := cmp.Diff(wantCost, cost); diff != "" {
				t.Errorf("receipts' costs (-want +got):\n%s", diff)
			}
			if work[bob] != tc.count || work[carol] != tc.count {
				t.Errorf("receipts' work %v, want %d each", work, tc.count)
			}
			if vs := h.Results(alice, j.ID); len(vs) != 1 || vs[0].Work != tc.count {
				t.Errorf("outcome %+v, want work %d", vs, tc.count)
			}
		})
	}
}

// TestWorkAgreedOn: under the digest rule the count is part of what
// replicas agree on. Two owners that return the same bytes but different
// counts decide nothing; a third that counts like one of them decides,
// credits that count, and the other is a deviation. A device cannot raise
// its credit by counting more than the others.
func TestWorkAgreedOn(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), nil)
	alice := h.Device("alice", "alice-1")
	bob, mallory, carol, dave := h.Device("bob", "bob-1"), h.Device("mallory", "mallory-1"), h.Device("carol", "carol-1"), h.Device("dave", "dave-1")
	j := h.Job("agree", 1, pooltest.Policy{TaskCost: 1000}, alice)
	h.Submit(h.Lease(bob, 1)[0], counted("r", 7_000_000))
	h.Submit(h.Lease(mallory, 1)[0], counted("r", 90_000_000_000))
	if vs := h.Results(alice, j.ID); len(vs) != 0 {
		t.Fatalf("decided on one count against another: %+v", vs)
	}
	for _, p := range []string{carol, dave} {
		if ls := h.Lease(p, 1); len(ls) == 1 {
			h.Submit(ls[0], counted("r", 7_000_000))
		}
	}
	vs := h.Results(alice, j.ID)
	if len(vs) != 1 || vs[0].Status != pool.OutcomeOK || vs[0].Work != 7_000_000 {
		t.Fatalf("outcome %+v, want ok with work 7000000", vs)
	}
	cost, _ := receipts(h.Ledger())
	if cost[bob] != 0.07 || cost[carol] != 0.07 {
		t.Errorf("receipts %v, want 0.07 for bob and carol", cost)
	}
	if _, ok := cost[mallory]; ok {
		t.Errorf("mallory, who counted 90000000000, earned a receipt: %v", cost)
	}
	var deviated bool
	for _, e := range h.Ledger() {
		deviated = deviated || (e.Kind == pool.KindDeviation && e.Peer == mallory)
	}
	if !deviated {
		t.Error("mallory's count was not marked as a deviation")
	}
}

// TestWorkUnderTolerance: under a tolerance rule (a GPU and a CPU run
// different code for one answer) counts are not compared, and the
// receipts credit the smallest count of the agreeing replicas.
func TestWorkUnderTolerance(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), nil)
	alice := h.Device("alice", "alice-1")
	bob, carol := h.Device("bob", "bob-1"), h.Device("carol", "carol-1")
	j := h.Job("tolerant", 1, pooltest.Policy{TaskCost: 1000, Verify: toleranceVerify}, alice)
	h.Submit(h.Lease(bob, 1)[0], counted(`{"x": 1.0001}`, 40_000_000))
	h.Submit(h.Lease(carol, 1)[0], counted(`{"x": 1.0002}`, 9_000_000))
	if vs := h.Results(alice, j.ID); len(vs) != 1 || vs[0].Work != 9_000_000 {
		t.Fatalf("outcome %+v, want ok with the smaller count 9000000", vs)
	}
	cost, _ := receipts(h.Ledger())
	if diff := cmp.Diff(map[string]float64{bob: 0.09, carol: 0.09}, cost); diff != "" {
		t.Errorf("receipts (-want +got):\n%s", diff)
	}
}

// TestWorkOnGPU: a job that can use a GPU counts its launches' threads on
// a device with one and its CPU path's instructions on one without, so
// counts are not compared and the smaller is credited.
func TestWorkOnGPU(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), nil)
	alice := h.Device("alice", "alice-1")
	cpu, gpu := h.Device("bob", "bob-1"), h.Device("carol", "carol-1")
	j := h.Job("gpupi", 1, pooltest.Policy{TaskCost: 1000, Requirements: "gpu = \"optional\"\n"}, alice)
	h.Submit(h.Lease(cpu, 1)[0], counted(`{"inside": 7}`, 2_600_000_000))
	h.Submit(h.Lease(gpu, 1)[0], counted(`{"inside": 7}`, 12_000_000))
	if vs := h.Results(alice, j.ID); len(vs) != 1 || vs[0].Work != 12_000_000 {
		t.Fatalf("outcome %+v, want ok with the smaller count 12000000", vs)
	}
	cost, _ := receipts(h.Ledger())
	if diff := cmp.Diff(map[string]float64{cpu: 0.12, gpu: 0.12}, cost); diff != "" {
		t.Errorf("receipts (-want +got):\n%s", diff)
	}
}

// TestWorkUncounted: replicas that counted nothing (agents older than
// metering) agree with each other, not with counted ones, and earn
// receipts of cost 0 that say why.
func TestWorkUncounted(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), nil)
	alice := h.Device("alice", "alice-1")
	bob, carol := h.Device("bob", "bob-1"), h.Device("carol", "carol-1")
	h.Job("old", 1, pooltest.Policy{TaskCost: 5}, alice)
	old := pooltest.Result([]byte("r"))
	old.Work = nil
	h.Submit(h.Lease(bob, 1)[0], old)
	h.Submit(h.Lease(carol, 1)[0], old)
	var n int
	for _, e := range h.Ledger() {
		if e.Kind == pool.KindReceipt {
			n++
			if e.Cost != 0 || e.Work != 0 || !strings.Contains(e.Reason, "counted no work") {
				t.Errorf("receipt %+v, want cost 0 and a reason", e)
			}
		}
	}
	if n != 2 {
		t.Errorf("%d receipts, want 2", n)
	}
}

// TestWorkRefused: a submission's work must name a rule and fit the
// stores.
func TestWorkRefused(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), nil)
	alice, bob := h.Device("alice", "alice-1"), h.Device("bob", "bob-1")
	h.Job("refused", 1, pooltest.Policy{}, alice)
	l := h.Lease(bob, 1)[0]
	for _, w := range []pool.Work{{Rule: 0, Count: 5}, {Rule: 1, Count: pool.MaxWorkCount + 1}} {
		s := pooltest.Result([]byte("r"))
		s.Work = &w
		if err := h.S.Submit(t.Context(), bob, l.ID, s); err == nil || !strings.Contains(err.Error(), "work counted by rule") {
			t.Errorf("work %+v: %v, want it refused", w, err)
		}
	}
}

// TestWorkSplitUnverified: replicas that returned the same bytes but
// counted differently are different votes; when no count can win, the
// task ends unverified, and its reason names the counts.
func TestWorkSplitUnverified(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), func(c *pool.SchedulerConfig) { c.MaxReplicas = 2 })
	alice := h.Device("alice", "alice-1")
	bob, carol := h.Device("bob", "bob-1"), h.Device("carol", "carol-1")
	j := h.Job("split", 1, pooltest.Policy{}, alice)
	h.Submit(h.Lease(bob, 1)[0], counted("r", 5_000_000))
	h.Submit(h.Lease(carol, 1)[0], counted("r", 6_000_000))
	vs := h.Results(alice, j.ID)
	if len(vs) != 1 || vs[0].Status != pool.OutcomeUnverified ||
		!strings.Contains(vs[0].Reason, "counting 5000000×1") || !strings.Contains(vs[0].Reason, "counting 6000000×1") {
		t.Errorf("outcome %+v, want unverified naming both counts", vs)
	}
}
