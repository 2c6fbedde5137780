package pool

import (
	"container/heap"
	"math/rand/v2"
	"testing"
	"time"
)

// stdDeadlines is deadlineHeap under container/heap, the order it must
// keep: the typed heap pops in exactly container/heap's order, equal
// deadlines included.
type stdDeadlines []deadlineItem

func (h stdDeadlines) Len() int           { return len(h) }
func (h stdDeadlines) Less(i, k int) bool { return h[i].at.Before(h[k].at) }
func (h stdDeadlines) Swap(i, k int)      { h[i], h[k] = h[k], h[i] }
func (h *stdDeadlines) Push(x any)        { *h = append(*h, x.(deadlineItem)) }
func (h *stdDeadlines) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// The typed deadline heap pops what container/heap pops, in the same
// order (equal deadlines included), through pushes, pops and an init of
// an unordered slice; a popped item's slot no longer holds its replica.
func TestDeadlineHeapIsContainerHeap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	base := time.UnixMilli(1_767_000_000_000)
	item := func() deadlineItem {
		// Few distinct deadlines, so that many are equal.
		return deadlineItem{at: base.Add(time.Duration(rng.IntN(20)) * time.Second), r: &replica{}}
	}
	var got deadlineHeap
	var want stdDeadlines
	for step := range 5000 {
		switch op := rng.IntN(10); {
		case op < 6:
			it := item()
			got.push(it)
			heap.Push(&want, it)
		case op < 9 && len(want) > 0:
			g, w := got.pop(), heap.Pop(&want).(deadlineItem)
			if g.r != w.r || !g.at.Equal(w.at) {
				t.Fatalf("step %d: popped %v %p, container/heap %v %p", step, g.at, g.r, w.at, w.r)
			}
			if full := got[:len(got)+1]; full[len(got)].r != nil {
				t.Fatalf("step %d: the popped slot still holds its replica", step)
			}
		case op == 9:
			// An unordered slice made a heap, as a compaction does.
			rng.Shuffle(len(got), func(i, k int) { got[i], got[k] = got[k], got[i] })
			want = append(want[:0], got...)
			got.init()
			heap.Init(&want)
		}
		if len(got) != len(want) {
			t.Fatalf("step %d: %d items, container/heap %d", step, len(got), len(want))
		}
	}
	for len(want) > 0 {
		if g, w := got.pop(), heap.Pop(&want).(deadlineItem); g.r != w.r {
			t.Fatalf("draining: popped %v, container/heap %v", g.at, w.at)
		}
	}
}
