package pool_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"idlepool/pool"
	"idlepool/pool/pooltest"
)

// exclusions collects what a Scheduler hands SchedulerConfig.OnExclude.
type exclusions = collected[pool.Exclusion]

// collected gathers what a Scheduler's hook (OnExclude, OnDeviate) is
// told, in order; safe for concurrent use.
type collected[T any] struct {
	mu   sync.Mutex
	list []T
}

func (x *collected[T]) add(e T) {
	x.mu.Lock()
	x.list = append(x.list, e)
	x.mu.Unlock()
}

func (x *collected[T]) get() []T {
	x.mu.Lock()
	defer x.mu.Unlock()
	return append([]T(nil), x.list...)
}

// trustVersions returns the version of each trust record st holds, by
// kind and ID.
func trustVersions(t *testing.T, st pool.Store) map[string]int64 {
	t.Helper()
	snap, err := st.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, r := range snap.Trust {
		out[r.Kind+" "+r.ID] = r.Version
	}
	return out
}

// wantExcluded fails the test unless peer is refused a lease on h as
// excluded until until.
func wantExcluded(t *testing.T, h *pooltest.Harness, peer string, until time.Time) {
	t.Helper()
	_, err := lease(h, peer, 1)
	var ex *pool.ExcludedError
	if !errors.Is(err, pool.ErrExcluded) || !errors.As(err, &ex) || !ex.Until.Equal(until) {
		t.Errorf("lease of %s: %v, want excluded until %s", peer, err, until)
	}
}

// A pool divided into shards runs a Scheduler per shard. A device that
// scheduler A excludes after repeated deviations is handed to scheduler
// B (OnExclude, then Exclude): B refuses it and its owner's other
// devices, its vote on B's undecided task no longer counts, applying it
// again changes and writes nothing, and B keeps it after a restart.
func TestExclusionHandedToAnotherScheduler(t *testing.T) {
	var fromA, fromB exclusions
	ha := newHarness(t, pool.NewMemStore(), func(c *pool.SchedulerConfig) {
		c.Trust.ExcludeFor = time.Hour
		c.OnExclude = fromA.add
	})
	storeB := pool.NewMemStore()
	hb := newHarness(t, storeB, func(c *pool.SchedulerConfig) {
		c.Trust.ExcludeFor = time.Hour
		c.OnExclude = fromB.add
	})
	ctx := context.Background()

	// On B, before anything happens on A: the liar and an honest device
	// split the one task of a job, 1-1, so it needs a third voter (one
	// more agreeing owner once the voters disagree: 3 agreeing).
	subB := hb.Device("submitter", "sub-1")
	liarB := hb.Device("mallory", "mallory-1")
	liar2B := hb.Device("mallory", "mallory-2")
	h1B := hb.Device("h1", "h1-dev")
	h2B := hb.Device("h2", "h2-dev")
	jb := hb.Job("shard-b", 1, pooltest.Policy{}, subB)
	for _, d := range []struct {
		peer string
		sub  func(int64) pool.Submission
	}{{liarB, bad}, {h1B, good}} {
		ls := hb.Lease(d.peer, 1)
		if len(ls) != 1 {
			t.Fatalf("%s was leased %d tasks on B, want 1", d.peer, len(ls))
		}
		hb.Submit(ls[0], d.sub(ls[0].Task))
	}
	if vs := hb.Results(subB, jb.ID); len(vs) != 0 {
		t.Fatalf("B's task decided on a 1-1 split: %+v", vs)
	}

	// On A: the liar is outvoted until it is excluded (as in
	// TestTrustRateLimitAndExclusion).
	sub := ha.Device("submitter", "sub-1")
	liar := ha.Device("mallory", "mallory-1")
	if liar != liarB {
		t.Fatalf("the liar's ID is %s on A, %s on B", liar, liarB)
	}
	var honest []string
	for _, o := range []string{"h1", "h2", "h3"} {
		honest = append(honest, ha.Device(o, o+"-dev"))
	}
	ha.Job("greedy", 200, pooltest.Policy{}, sub)
	for _, l := range ha.Lease(liar, 200) {
		ha.Submit(l, bad(l.Task))
	}
	for round := 0; round < 20 && len(fromA.get()) == 0; round++ {
		for _, d := range honest {
			for _, l := range ha.Lease(d, 8) {
				if err := ha.S.Submit(ctx, l.Peer, l.ID, good(l.Task)); err != nil && !errors.Is(err, pool.ErrTaskDecided) {
					t.Fatalf("Submit task %d: %v", l.Task, err)
				}
			}
		}
	}
	until := ha.Clock.Now().Add(time.Hour)
	want := []pool.Exclusion{{Device: liar, Owner: ha.Peers["mallory-1"].Owner, Until: until,
		Reason: "3 deviations within 1h0m0s"}}
	if diff := cmp.Diff(want, fromA.get()); diff != "" {
		t.Fatalf("A's exclusions (-want +got):\n%s", diff)
	}
	wantExcluded(t, ha, liar, until)

	// Handed to B.
	ex := fromA.get()[0]
	if err := hb.S.Exclude(ctx, ex); err != nil {
		t.Fatalf("Exclude on B: %v", err)
	}
	wantExcluded(t, hb, liarB, until)
	wantExcluded(t, hb, liar2B, until)
	// The liar's vote is void: h1 alone agrees, and one more honest
	// owner decides the task (had the liar's vote counted, 2 against 1
	// would need a third agreeing owner).
	ls := hb.Lease(h2B, 1)
	if len(ls) != 1 || ls[0].Task != 0 {
		t.Fatalf("h2 was leased %v on B, want task 0", tasksOf(ls))
	}
	hb.Submit(ls[0], good(0))
	vs := hb.Results(subB, jb.ID)
	if len(vs) != 1 || vs[0].Task != 0 || vs[0].Status != pool.OutcomeOK {
		t.Fatalf("B's task after the exclusion: %+v, want task 0 ok", vs)
	}
	var receipts []string
	for _, e := range hb.Ledger() {
		if e.Kind == pool.KindReceipt {
			receipts = append(receipts, e.Peer)
		}
	}
	if diff := cmp.Diff([]string{h1B, h2B}, receipts, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("B's receipts (-want +got):\n%s", diff)
	}

	// Applying it again, or a shorter one, changes and writes nothing.
	before := trustVersions(t, storeB)
	if before[pool.TrustDevice+" "+liar] == 0 || before[pool.TrustOwner+" "+ex.Owner] == 0 {
		t.Fatalf("B stored no trust records of the exclusion: %v", before)
	}
	shorter := ex
	shorter.Until = until.Add(-time.Minute)
	for _, e := range []pool.Exclusion{ex, shorter} {
		if err := hb.S.Exclude(ctx, e); err != nil {
			t.Fatalf("Exclude again: %v", err)
		}
	}
	hb.Device("h3", "h3-dev") // a commit after them
	if diff := cmp.Diff(before, trustVersions(t, storeB)); diff != "" {
		t.Errorf("B's trust records after applying the exclusion again (-before +after):\n%s", diff)
	}
	wantExcluded(t, hb, liarB, until)
	if got := fromB.get(); len(got) != 0 {
		t.Errorf("B handed on exclusions it applied: %+v", got)
	}

	// A device B never saw: recorded all the same, refused once it
	// registers.
	eve := pooltest.Device(t, pooltest.Key(t, "owner/eve"), "eve-1")
	if err := hb.S.Exclude(ctx, pool.Exclusion{Device: eve.ID, Owner: eve.Owner, Until: until, Reason: "test"}); err != nil {
		t.Fatalf("Exclude of an unknown device: %v", err)
	}

	// B restarted from its store still excludes them all.
	hb.Restart()
	wantExcluded(t, hb, liarB, until)
	wantExcluded(t, hb, liar2B, until)
	wantExcluded(t, hb, hb.Device("mallory", "mallory-3"), until)
	wantExcluded(t, hb, hb.Device("eve", "eve-1"), until)
	if err := hb.S.Exclude(ctx, ex); err != nil {
		t.Fatalf("Exclude after the restart: %v", err)
	}
	hb.Device("h4", "h4-dev")
	after := trustVersions(t, storeB)
	for _, k := range []string{pool.TrustDevice + " " + liar, pool.TrustOwner + " " + ex.Owner} {
		if after[k] != before[k] {
			t.Errorf("record %s: version %d after the restart and Exclude again, want %d", k, after[k], before[k])
		}
	}

	// Once it ends, B leases to them again.
	hb.Clock.Advance(time.Hour + time.Second)
	if _, err := lease(hb, liar2B, 1); err != nil {
		t.Errorf("lease on B after the exclusion ended: %v", err)
	}
}

// Exclude refuses an exclusion without a device, owner or end.
func TestExcludeBadRequest(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), nil)
	until := h.Clock.Now().Add(time.Hour)
	for _, tc := range []struct {
		name string
		e    pool.Exclusion
	}{
		{"no device", pool.Exclusion{Owner: "o", Until: until}},
		{"no owner", pool.Exclusion{Device: "d", Until: until}},
		{"no end", pool.Exclusion{Device: "d", Owner: "o"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := h.S.Exclude(context.Background(), tc.e); !errors.Is(err, pool.ErrBadRequest) {
				t.Errorf("Exclude: %v, want ErrBadRequest", err)
			}
		})
	}
}
