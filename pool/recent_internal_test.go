package pool

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Past maxRecentEntries the oldest entries leave the tail, and a query
// that reaches before what it holds is not answered from it.
func TestRecentEntriesBounded(t *testing.T) {
	r := newRecentEntries(10)
	n := maxRecentEntries + 100
	es := make([]Entry, n)
	for i := range es {
		es[i] = Entry{Seq: uint64(11 + i), Peer: fmt.Sprint("p", i%3)}
	}
	r.add(es[:n/2])
	r.add(es[n/2:])
	if _, ok := r.peer("p0", 10, 10); ok {
		t.Fatalf("a query from Seq 10 answered after %d entries left the tail", 100)
	}
	from := es[99].Seq
	if got, ok := r.peer("p1", from-1, 10); ok {
		t.Fatalf("a query from before the tail (Seq %d) answered: %d entries", from-1, len(got))
	}
	got, ok := r.peer("p1", from, 4)
	var want []Entry
	for _, e := range es[100:] {
		if e.Peer == "p1" && len(want) < 4 {
			want = append(want, e)
		}
	}
	if !ok || !cmp.Equal(want, got) {
		t.Fatalf("peer p1 after %d: ok %v (-want +got):\n%s", from, ok, cmp.Diff(want, got))
	}
	if held := len(r.fifo); held != maxRecentEntries {
		t.Errorf("%d entries held, want %d", held, maxRecentEntries)
	}
}
