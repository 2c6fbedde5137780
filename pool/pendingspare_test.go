package pool

import "testing"

// A committed batch's slices and map are kept emptied (no record, and so
// no result bytes, left in them) and handed to one later batch only:
// taken when they have room for as many records as the last batch held,
// a new slice when they have not.
func TestPendingSpare(t *testing.T) {
	var sp pendingSpare
	p := &pending{b: Batch{
		Replicas: []ReplicaRecord{{Lease: "a", Result: []byte("r")}, {Lease: "b", Result: []byte("s")}},
		Outcomes: []OutcomeRecord{{Verified: Verified{Seq: 1, Result: []byte("r")}}},
		Entries:  []Entry{{Seq: 1, Peer: "p"}, {Seq: 2, Peer: "q"}, {Seq: 3, Peer: "p"}},
	}, rep: map[string]int{"a": 0, "b": 1}}
	replicas, entries := p.b.Replicas, p.b.Entries
	sp.keep(p)
	for i, r := range replicas[:cap(replicas)] {
		if r.Lease != "" || r.Result != nil {
			t.Errorf("kept replica slot %d still holds %+v", i, r)
		}
	}
	for i, e := range entries[:cap(entries)] {
		if e.Seq != 0 || e.Peer != "" {
			t.Errorf("kept entry slot %d still holds %+v", i, e)
		}
	}
	if len(sp.rep) != 0 || len(sp.replicas) != 0 || len(sp.entries) != 0 || len(sp.outcomes) != 0 {
		t.Fatalf("spare not empty: %d leases, %d replicas, %d entries, %d outcomes", len(sp.rep), len(sp.replicas), len(sp.entries), len(sp.outcomes))
	}
	// The next batch after one of 2 replicas and 3 entries takes them; the
	// one after that finds no spare and allocates.
	last := &pending{b: Batch{Replicas: make([]ReplicaRecord, 2), Entries: make([]Entry, 3), Outcomes: make([]OutcomeRecord, 1)}, rep: map[string]int{"x": 0}}
	q := sp.newPendingLike(last)
	if &q.b.Replicas[:1][0] != &replicas[:1][0] || &q.b.Entries[:1][0] != &entries[:1][0] || q.rep == nil {
		t.Error("the next batch did not take the spare slices")
	}
	if sp.replicas != nil || sp.entries != nil || sp.outcomes != nil || sp.rep != nil {
		t.Error("the spare is still held after a batch took it")
	}
	r := sp.newPendingLike(last)
	if cap(r.b.Replicas) < 2 || cap(r.b.Entries) < 3 || r.rep == nil || &r.b.Replicas[:1][0] == &replicas[:1][0] {
		t.Error("a batch with no spare to take did not get slices of its own")
	}
	// A spare too small for the last batch is dropped, not taken.
	sp.keep(q)
	bigger := &pending{b: Batch{Replicas: make([]ReplicaRecord, 64)}, rep: map[string]int{}}
	if s := sp.newPendingLike(bigger); cap(s.b.Replicas) < 64 || &s.b.Replicas[:1][0] == &replicas[:1][0] {
		t.Errorf("a batch after one of 64 replicas got a spare of room %d", cap(s.b.Replicas))
	}
}
