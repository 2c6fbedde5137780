package pool_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"idlepool/pool"
	"idlepool/pool/pooltest"
)

// storedDevice returns device id's trust record as st holds it, which is
// what a restart after a crash would restore: its agreed results and its
// deviations ({} when st holds none).
func storedDevice(t *testing.T, st pool.Store, id string) (rec struct {
	Agreed     int     `json:"agreed"`
	Deviations []int64 `json:"deviations"`
}) {
	t.Helper()
	snap, err := st.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range snap.Trust {
		if r.Kind == pool.TrustDevice && r.ID == id {
			if err := json.Unmarshal(r.Record, &rec); err != nil {
				t.Fatal(err)
			}
		}
	}
	return rec
}

// A device's trust record that only gained standing (an agreed, checked
// result) is written within ten seconds of the scheduler's clock, or when
// the scheduler stops, not in the batch of its change; one that lost
// standing (a deviation) is written in the batch of its change, so that
// a crash may lose a gain but never a sanction.
func TestTrustGainsWrittenLater(t *testing.T) {
	st := pool.NewMemStore()
	h := pooltest.NewHarness(t, st, nil)
	sub := h.Device("submitter", "sub-1")
	bob, carol := h.Device("bob", "bob-1"), h.Device("carol", "carol-1")
	dave, erin := h.Device("dave", "dave-1"), h.Device("erin", "erin-1")
	h.Job("j", 2, pooltest.Policy{}, sub) // two tasks: bob and carol agree on each
	agree := func(devs ...string) {
		t.Helper()
		var ls []pool.Lease
		for _, d := range devs {
			l := h.Lease(d, 1)
			if len(l) != 1 {
				t.Fatalf("%s leased %d tasks, want 1", d, len(l))
			}
			ls = append(ls, l...)
		}
		for _, l := range ls {
			h.Submit(l, pooltest.Good(l.Task))
		}
	}
	agree(bob, carol)
	if got := storedDevice(t, st, bob).Agreed; got != 0 {
		t.Fatalf("right after bob's agreed result, the store holds %d agreed, want 0 (written later)", got)
	}
	// Serve's tick (every second) writes the gains once ten seconds of
	// the scheduler's clock have passed since the first.
	h.Clock.Advance(10 * time.Second)
	deadline := time.Now().Add(time.Minute)
	if d, ok := t.Deadline(); ok {
		deadline = d.Add(-5 * time.Second)
	}
	for storedDevice(t, st, bob).Agreed != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("ten seconds after bob's agreed result, the store holds %+v, want 1 agreed", storedDevice(t, st, bob))
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A gain again, then a deviation of bob's: the deviation is in the
	// store as soon as its batch commits.
	agree(bob, carol)
	if got := storedDevice(t, st, bob).Agreed; got != 1 {
		t.Fatalf("right after bob's second agreed result, the store holds %d agreed, want still 1", got)
	}
	// Bob lies on the one task of another job, which three owners
	// settle (a split needs one more agreeing owner than the quorum).
	other := h.Job("other", 1, pooltest.Policy{}, sub)
	for _, d := range []string{bob, carol, dave, erin} {
		for _, l := range h.Lease(d, 1) {
			if l.Job != other.ID {
				t.Fatalf("lease %+v is not of job other", l)
			}
			if d == bob {
				h.Submit(l, pooltest.Bad(l.Task))
			} else {
				h.Submit(l, pooltest.Good(l.Task))
			}
		}
	}
	if n := entriesOf(h.Ledger(), pool.KindDeviation, bob); n != 1 {
		t.Fatalf("%d deviations of bob's in the ledger, want 1", n)
	}
	if rec := storedDevice(t, st, bob); len(rec.Deviations) != 1 || rec.Agreed != 0 {
		t.Fatalf("after bob's deviation committed, the store holds %+v, want one deviation and 0 agreed", rec)
	}
	// Carol's gains wait; stopping the scheduler writes them.
	if got := storedDevice(t, st, carol).Agreed; got != 1 {
		t.Fatalf("before the stop, the store holds %d agreed of carol's, want 1", got)
	}
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	if got := storedDevice(t, st, carol).Agreed; got < 3 {
		t.Fatalf("after the stop, the store holds %d agreed of carol's, want 3 or more", got)
	}
}
