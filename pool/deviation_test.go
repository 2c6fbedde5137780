package pool_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"idlepool/pool"
	"idlepool/pool/pooltest"
)

// deviations collects what a Scheduler's OnDeviate is told.
type deviations = collected[pool.Deviation]

// lieOnce has mallory-1 lie on a one-task job of h, outvoted by three
// honest owners (a split needs one more agreeing owner), so that h
// decides one deviation of it; tag keeps the job and honest devices apart
// from those of another call.
func lieOnce(t *testing.T, h *pooltest.Harness, tag string) {
	t.Helper()
	sub := h.Device("submitter", "sub-"+tag)
	liar := h.Device("mallory", "mallory-1")
	h.Job("lie-"+tag, 1, pooltest.Policy{}, sub)
	ls := h.Lease(liar, 1)
	if len(ls) != 1 {
		t.Fatalf("the liar was leased %d tasks, want 1", len(ls))
	}
	h.Submit(ls[0], bad(ls[0].Task))
	for _, o := range []string{"h1", "h2", "h3"} {
		d := h.Device(o+"-"+tag, o+"-"+tag+"-dev")
		for _, l := range h.Lease(d, 1) {
			h.Submit(l, good(l.Task))
		}
	}
}

// A deviation decided on one shard counts on another (OnDeviate, then
// Deviated): with ExcludeAfter 2, one lie on A and one on B exclude the
// liar on B, which tells OnExclude; A's own deviation handed back to it,
// or handed to B again, counts nothing more; a deviation older than
// ExcludeFor counts nothing.
func TestDeviationCountsOnAnotherScheduler(t *testing.T) {
	var devA, devB deviations
	var exclB exclusions
	cfg := func(dv *deviations, ex *exclusions) func(*pool.SchedulerConfig) {
		return func(c *pool.SchedulerConfig) {
			c.Trust.ExcludeAfter, c.Trust.ExcludeFor = 2, time.Hour
			c.OnDeviate = dv.add
			if ex != nil {
				c.OnExclude = ex.add
			}
		}
	}
	ha := newHarness(t, pool.NewMemStore(), cfg(&devA, nil))
	hb := newHarness(t, pool.NewMemStore(), cfg(&devB, &exclB))
	ctx := context.Background()

	lieOnce(t, ha, "a1")
	fromA := devA.get()
	liar := ha.Peers["mallory-1"].ID
	if len(fromA) != 1 || fromA[0].Device != liar || fromA[0].Owner != ha.Peers["mallory-1"].Owner || fromA[0].At.IsZero() {
		t.Fatalf("A's OnDeviate was told %+v, want the liar's one deviation", fromA)
	}
	// A's own deviation handed back: not counted twice (a second count
	// would exclude the liar on A).
	if err := ha.S.Deviated(ctx, fromA[0]); err != nil {
		t.Fatalf("Deviated on A of its own: %v", err)
	}
	if _, err := lease(ha, liar, 1); errors.Is(err, pool.ErrExcluded) {
		t.Fatalf("A counted its own deviation handed back to it: %v", err)
	}

	// B counts A's deviation, and its own lie then excludes the liar.
	if err := hb.S.Deviated(ctx, fromA[0]); err != nil {
		t.Fatalf("Deviated on B: %v", err)
	}
	if err := hb.S.Deviated(ctx, fromA[0]); err != nil { // handed over twice
		t.Fatalf("Deviated on B again: %v", err)
	}
	if got := devB.get(); len(got) != 0 {
		t.Fatalf("B told OnDeviate of a deviation it did not decide: %+v", got)
	}
	lieOnce(t, hb, "b1")
	ex := exclB.get()
	if len(ex) != 1 || ex[0].Device != liar {
		t.Fatalf("B's exclusions after A's deviation and its own: %+v, want the liar's", ex)
	}
	wantExcluded(t, hb, liar, ex[0].Until)
	// Handed over once more after the exclusion cleared the count: nothing.
	if err := hb.S.Deviated(ctx, fromA[0]); err != nil {
		t.Fatal(err)
	}
	if got := exclB.get(); len(got) != 1 {
		t.Fatalf("B excluded again on a deviation it counted: %+v", got)
	}

	// A deviation older than ExcludeFor on B's clock counts nothing: a
	// fresh B with one such and one lie of its own excludes no one.
	var exclC exclusions
	hc := newHarness(t, pool.NewMemStore(), cfg(&deviations{}, &exclC))
	old := pool.Deviation{Device: liar, Owner: fromA[0].Owner, At: hc.Clock.Now().Add(-2 * time.Hour)}
	if err := hc.S.Deviated(ctx, old); err != nil {
		t.Fatal(err)
	}
	lieOnce(t, hc, "c1")
	if got := exclC.get(); len(got) != 0 {
		t.Fatalf("an old deviation counted: exclusions %+v", got)
	}

	at := hb.Clock.Now()
	for _, bad := range []pool.Deviation{{Owner: "o", At: at}, {Device: "d", At: at}, {Device: "d", Owner: "o"}} {
		if err := hb.S.Deviated(ctx, bad); !errors.Is(err, pool.ErrBadRequest) {
			t.Errorf("Deviated(%+v): %v, want ErrBadRequest", bad, err)
		}
	}
}
