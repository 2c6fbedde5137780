package pool_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"idlepool/pool"
	"idlepool/pool/pooltest"
)

// dividedHarnesses starts the schedulers of a pool of n shards, each on a
// memory store and all signing with one key, and decides a job of tasks
// tasks on each (two devices agreeing), so that every ledger has entries.
func dividedHarnesses(t *testing.T, n int, tasks int64) []*pooltest.Harness {
	t.Helper()
	hs := make([]*pooltest.Harness, n)
	for s := range hs {
		hs[s] = newHarness(t, pool.NewMemStore(), func(c *pool.SchedulerConfig) { c.Shard, c.Shards = s, n })
		decideJob(t, hs[s], fmt.Sprintf("job-of-shard-%d", s), tasks)
	}
	return hs
}

// decideJob adds a job of tasks tasks to h, submitted by a third owner's
// device, and has two devices compute every task alike.
func decideJob(t *testing.T, h *pooltest.Harness, name string, tasks int64) {
	t.Helper()
	alice, bob := h.Device("alice", name+"-a"), h.Device("bob", name+"-b")
	h.Job(name, tasks, pooltest.Policy{}, h.Device("carol", name+"-c"))
	for _, peer := range []string{alice, bob} {
		for _, l := range h.Lease(peer, int(tasks)) {
			h.Submit(l, good(l.Task))
		}
	}
}

// anchorRound publishes every shard's head to every other, as the
// coordinators do through the cluster's bucket, and returns how many
// anchors each shard appended.
func anchorRound(t *testing.T, hs []*pooltest.Harness) []int {
	t.Helper()
	heads := make([]pool.ChainHead, len(hs))
	for s, h := range hs {
		heads[s] = h.S.AnchorHead()
	}
	added := make([]int, len(hs))
	for s, h := range hs {
		n, err := h.S.Anchor(context.Background(), heads)
		if err != nil {
			t.Fatalf("shard %d: Anchor: %v", s, err)
		}
		added[s] = n
	}
	return added
}

func ledgersOf(hs []*pooltest.Harness) [][]pool.Entry {
	chains := make([][]pool.Entry, len(hs))
	for s, h := range hs {
		chains[s] = h.Ledger() // checked with VerifyLedger
	}
	return chains
}

// Each shard anchors the others' heads once they move, never its own,
// and never anchors again while nothing but anchors was added: an idle
// pool's ledgers stay as they are. The anchors verify against the
// ledgers they name.
func TestAnchorsTieTheShards(t *testing.T) {
	hs := dividedHarnesses(t, 3, 4)
	before := hs[1].S.AnchorHead()
	if before.Shard != 1 || before.Seq == 0 {
		t.Fatalf("shard 1's AnchorHead after a job: %+v, want shard 1 and an entry", before)
	}
	if got := anchorRound(t, hs); fmt.Sprint(got) != "[2 2 2]" {
		t.Fatalf("first round appended %v anchors, want 2 by each shard", got)
	}
	if after := hs[1].S.AnchorHead(); after != before {
		t.Fatalf("shard 1's AnchorHead moved with its anchors: %+v, was %+v", after, before)
	}
	for round := range 3 {
		if got := anchorRound(t, hs); fmt.Sprint(got) != "[0 0 0]" {
			t.Fatalf("idle round %d appended %v anchors, want none", round, got)
		}
	}
	chains := ledgersOf(hs)
	counts, err := pool.VerifyAnchors(chains)
	if err != nil || fmt.Sprint(counts) != "[2 2 2]" {
		t.Fatalf("VerifyAnchors: %v, %v; want 2 anchors in each ledger", counts, err)
	}
	a := chains[0][len(chains[0])-1]
	if a.Kind != pool.KindAnchor || a.Peer != "" || a.Cost != 0 || !strings.HasPrefix(a.Reason, "shard ") {
		t.Fatalf("shard 0's last entry: %+v, want an anchor naming no peer", a)
	}

	// New work on shard 2 only: the others anchor its new head, and
	// shard 2 anchors nothing new.
	decideJob(t, hs[2], "more", 2)
	if got := anchorRound(t, hs); fmt.Sprint(got) != "[1 1 0]" {
		t.Fatalf("round after shard 2's new job appended %v, want [1 1 0]", got)
	}
	if counts, err := pool.VerifyAnchors(ledgersOf(hs)); err != nil || fmt.Sprint(counts) != "[3 3 2]" {
		t.Fatalf("VerifyAnchors: %v, %v; want [3 3 2]", counts, err)
	}
}

// A shard that rewrites its own past, re-signing its whole chain with
// the pool's key so that its ledger verifies on its own, is caught by the
// anchors the other shards hold of it; a ledger read before the entry an
// anchor names is reported as behind, not as rewritten.
func TestAnchorsCatchARewrittenShard(t *testing.T) {
	hs := dividedHarnesses(t, 3, 3)
	anchorRound(t, hs)
	chains := ledgersOf(hs)

	forged := append([]pool.Entry(nil), chains[1]...)
	forged[0].Cost += 1000 // shard 1 pays itself more for its first receipt
	for i := range forged {
		forged[i].Tree, forged[i].Sig = nil, nil
	}
	pool.SignBatch(forged, [32]byte{}, hs[1].Key.Sign)
	if err := pool.VerifyLedger(forged, hs[1].S.PublicKey()); err != nil {
		t.Fatalf("the forged ledger does not verify on its own (the test forged it badly): %v", err)
	}
	_, err := pool.VerifyAnchors([][]pool.Entry{chains[0], forged, chains[2]})
	var ae *pool.AnchorError
	if !errors.As(err, &ae) || !errors.Is(err, pool.ErrLedger) || ae.Ahead || ae.Shard != 0 || ae.Of != 1 ||
		!strings.Contains(err.Error(), "rewritten") {
		t.Fatalf("VerifyAnchors over a rewritten shard 1: %v; want shard 0's anchor of shard 1 to fail", err)
	}

	// Shard 1's ledger as read before its anchored entry: behind.
	_, err = pool.VerifyAnchors([][]pool.Entry{chains[0], chains[1][:1], chains[2]})
	if ae, ok := pool.IsAnchorAhead(err); !ok || ae.Of != 1 || !errors.Is(err, pool.ErrLedger) {
		t.Fatalf("VerifyAnchors over a short shard 1: %v; want an anchor ahead of shard 1", err)
	}
}

// Anchors that name no other shard of the pool are refused by the
// Scheduler, and found by VerifyAnchors when a ledger holds them.
func TestAnchorsRefused(t *testing.T) {
	hs := dividedHarnesses(t, 2, 1)
	ctx := context.Background()
	for _, s := range []int{-1, 2} {
		if _, err := hs[0].S.Anchor(ctx, []pool.ChainHead{{Shard: s, Seq: 1}}); !errors.Is(err, pool.ErrBadRequest) {
			t.Errorf("Anchor of shard %d in a pool of 2: %v, want ErrBadRequest", s, err)
		}
	}
	if n, err := hs[0].S.Anchor(ctx, []pool.ChainHead{hs[0].S.AnchorHead(), {Shard: 1}}); n != 0 || err != nil {
		t.Errorf("Anchor of its own head and of an empty ledger: %d, %v; want nothing appended", n, err)
	}
	undivided := newHarness(t, pool.NewMemStore(), nil)
	if _, err := undivided.S.Anchor(ctx, []pool.ChainHead{hs[1].S.AnchorHead()}); !errors.Is(err, pool.ErrBadRequest) {
		t.Errorf("Anchor in an undivided pool: %v, want ErrBadRequest", err)
	}

	anchorRound(t, hs)
	chains := ledgersOf(hs)
	last := len(chains[0]) - 1
	for _, tc := range []struct {
		name string
		edit func(*pool.Entry)
		want string
	}{
		{"own shard", func(e *pool.Entry) { e.Task = 0 }, "its own ledger"},
		{"shard out of range", func(e *pool.Entry) { e.Task = 5 }, "pool of 2 shards"},
		{"entry 0", func(e *pool.Entry) { e.Work = 0 }, "entry 0"},
		{"names a peer", func(e *pool.Entry) { e.Peer = "someone" }, "naming a job, peer"},
	} {
		edited := append([]pool.Entry(nil), chains[0]...)
		tc.edit(&edited[last])
		_, err := pool.VerifyAnchors([][]pool.Entry{edited, chains[1]})
		if !errors.Is(err, pool.ErrLedger) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: VerifyAnchors: %v; want an error saying %q", tc.name, err, tc.want)
		}
	}
}

// After a restart the head offered is the ledger's head as loaded, and
// anchors appended before it verify.
func TestAnchorHeadAfterRestart(t *testing.T) {
	hs := dividedHarnesses(t, 2, 2)
	anchorRound(t, hs)
	es := hs[0].Ledger()
	hs[0].Restart()
	got := hs[0].S.AnchorHead()
	want := pool.ChainHead{Shard: 0, Seq: es[len(es)-1].Seq, Hash: es[len(es)-1].Hash()}
	if got != want {
		t.Fatalf("AnchorHead after a restart: %+v, want the loaded head %+v", got, want)
	}
}
