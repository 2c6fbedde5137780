package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"idlepool/pool"
)

// shifted returns a Tamper hook that adds d to every task's "square": a
// device that computes the same numbers with another rounding.
func shifted(d float64) func(pool.Lease, pool.TaskOutcome) pool.TaskOutcome {
	return func(l pool.Lease, out pool.TaskOutcome) pool.TaskOutcome {
		var r struct {
			Index  int64   `json:"index"`
			Square float64 `json:"square"`
		}
		if out.Status != pool.StatusOK || json.Unmarshal(out.Body, &r) != nil {
			return out
		}
		out.Body = fmt.Appendf(nil, `{"index":%d,"square":%v}`, r.Index, r.Square+d)
		return out
	}
}

const toleranceTable = "[verify]\nrule = \"tolerance\"\n[verify.tolerance]\nsquare = { abs = 0.5 }\n"

// TestPoolToleranceOverHTTP runs a real coordinator and agents over HTTP
// on a job verified by tolerance. Two devices whose results differ within
// the tolerance reach quorum on every task and both earn receipts. A
// device whose results differ by more reaches no quorum with the honest
// one: every task waits for more replicas; once two more honest devices
// join (a disputed task needs one agreeing voter more than the quorum),
// the job completes and the outlier is marked deviating on every
// task it computed.
func TestPoolToleranceOverHTTP(t *testing.T) {
	const tasks = 6
	t.Run("within", func(t *testing.T) {
		j := planJob(t, "squares-tolerant", tasks, toleranceTable)
		co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
		honest, near := newDevice(t, nil), newDevice(t, nil)
		startAgent(t, co.url, honest, &fakeExec{}, 1, nil)
		startAgent(t, co.url, near, &fakeExec{}, 1, shifted(0.25))
		sub := newSubmitter(t, co.url, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		got, err := sub.run(t, ctx, j)
		if err != nil {
			t.Fatalf("follow: %v", err)
		}
		if got.OK != tasks || got.Failed != 0 {
			t.Fatalf("%d tasks ok, %d failed, want all %d ok", got.OK, got.Failed, tasks)
		}
		settle(t, honest, near)
		receipts := map[string]int{}
		for _, e := range ledger(t, sub.c) {
			if e.Kind != pool.KindReceipt {
				t.Errorf("ledger entry %d is a %s: %s", e.Seq, e.Kind, e.Reason)
			}
			receipts[e.Peer]++
		}
		if receipts[honest.key.ID()] != tasks || receipts[near.key.ID()] != tasks {
			t.Errorf("receipts %v, want %d for each device", receipts, tasks)
		}
	})
	t.Run("outside", func(t *testing.T) {
		// A lease timeout long enough for the two devices that settle
		// the split to join on a busy machine: the split tasks end
		// unverified once the job has had nothing to compute for one.
		j := planJob(t, "squares-outlier", tasks, "lease_timeout = \"2m\"\n"+toleranceTable)
		co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
		honest, far := newDevice(t, nil), newDevice(t, nil)
		startAgent(t, co.url, honest, &fakeExec{}, 1, nil)
		startAgent(t, co.url, far, &fakeExec{}, 1, shifted(2))
		sub := newSubmitter(t, co.url, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := sub.c.Submit(ctx, j); err != nil {
			t.Fatal(err)
		}
		// Both devices return every task; none may reach quorum.
		for {
			st, err := sub.c.Status(ctx, j.ID)
			if err != nil {
				t.Fatal(err)
			}
			if st.Accepted > 0 || st.Failed > 0 {
				t.Fatalf("status %+v: a task was decided with only two results %v apart, outside the tolerance of 0.5", st, 2)
			}
			if st.Waiting == tasks && st.Leased == 0 {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("the two devices did not return every task: %+v", st)
			case <-time.After(20 * time.Millisecond):
			}
		}
		// A disputed task needs one agreeing voter more than the quorum
		// (pool: quorumOf): two more honest devices settle it.
		second, third := newDevice(t, nil), newDevice(t, nil)
		startAgent(t, co.url, second, &fakeExec{}, 1, nil)
		startAgent(t, co.url, third, &fakeExec{}, 1, nil)
		got, err := sub.run(t, ctx, j)
		if err != nil {
			st, _ := sub.c.Status(context.Background(), j.ID)
			t.Fatalf("follow: %v; status %+v", err, st)
		}
		want := solo(t, j, &fakeExec{})
		same(t, got, want) // the outlier's numbers were never folded
		settle(t, honest, far, second, third)
		deviations := 0
		for _, e := range ledger(t, sub.c) {
			switch {
			case e.Peer == far.key.ID() && e.Kind == pool.KindReceipt:
				t.Errorf("the outlier earned receipt %d for task %d", e.Seq, e.Task)
			case e.Peer == far.key.ID() && e.Kind == pool.KindDeviation:
				deviations++
			}
		}
		if deviations != tasks {
			t.Errorf("%d deviations marked for the outlier, want %d", deviations, tasks)
		}
	})
}
