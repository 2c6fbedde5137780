package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/pool"
)

// Ledger heads published on a one-node JetStream: a head never goes back,
// whichever is published last; Heads lists each shard that published one,
// in shard order; a head of no shard of the pool, or of no entry, is
// refused; a value that does not parse is left out.
func TestLedgerHeadsPublish(t *testing.T) {
	nodes := startNodes(t, testConfigs(t, t.TempDir(), 1))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := OpenLedgerHeads(ctx, nodes[0].JetStream(), 1, 1); !errors.Is(err, pool.ErrBadRequest) {
		t.Fatalf("OpenLedgerHeads of 1 shard: %v, want ErrBadRequest", err)
	}
	l, err := OpenLedgerHeads(ctx, nodes[0].JetStream(), 3, 1)
	if err != nil {
		t.Fatalf("OpenLedgerHeads: %v", err)
	}
	if hs, err := l.Heads(ctx); err != nil || len(hs) != 0 {
		t.Fatalf("Heads of a new bucket: %v, %v; want none", hs, err)
	}
	newer := pool.ChainHead{Shard: 2, Seq: 40, Hash: [32]byte{40}}
	older := pool.ChainHead{Shard: 2, Seq: 12, Hash: [32]byte{12}}
	first := pool.ChainHead{Shard: 0, Seq: 7, Hash: [32]byte{7}}
	for _, h := range []pool.ChainHead{newer, older, first} {
		if err := l.Publish(ctx, h); err != nil {
			t.Fatalf("Publish %+v: %v", h, err)
		}
	}
	hs, err := l.Heads(ctx)
	if err != nil {
		t.Fatalf("Heads: %v", err)
	}
	if diff := cmp.Diff([]pool.ChainHead{first, newer}, hs); diff != "" {
		t.Fatalf("Heads (-want +got):\n%s", diff)
	}
	for _, h := range []pool.ChainHead{{Shard: 3, Seq: 1}, {Shard: -1, Seq: 1}, {Shard: 1, Seq: 0}} {
		if err := l.Publish(ctx, h); !errors.Is(err, pool.ErrBadRequest) {
			t.Errorf("Publish %+v: %v, want ErrBadRequest", h, err)
		}
	}
	if _, err := l.kv.Put(ctx, shardKey(1), []byte(`{"seq":"x"}`)); err != nil {
		t.Fatalf("Put: %v", err)
	}
	if hs, err := l.Heads(ctx); err != nil || len(hs) != 2 {
		t.Fatalf("Heads with shard 1's value broken: %v, %v; want shards 0 and 2 only", hs, err)
	}
	// A node that reopens the bucket sees what was published.
	again, err := OpenLedgerHeads(ctx, nodes[0].JetStream(), 3, 1)
	if err != nil {
		t.Fatalf("OpenLedgerHeads again: %v", err)
	}
	if hs, err := again.Heads(ctx); err != nil || len(hs) != 2 || hs[1] != newer {
		t.Fatalf("Heads after reopening: %v, %v", hs, err)
	}
}
