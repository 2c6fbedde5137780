package cluster

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"idlepool/job"
	"idlepool/pool"
)

// HeadsBucket is the JetStream key-value bucket where the shards of a
// divided pool publish the heads of their ledgers for one another to
// anchor (pool.KindAnchor): key "shard.S" holds shard S's head as JSON,
// {"seq": N, "hash": "64 hex digits"}, the newest entry of its ledger
// that is not an anchor (pool.Scheduler.AnchorHead) and that was
// committed before it was published.
const HeadsBucket = "idlepool_ledger_heads"

// headValue is a pool.ChainHead as the bucket stores it.
type headValue struct {
	Seq  uint64 `json:"seq"`
	Hash string `json:"hash"`
}

// LedgerHeads keeps the heads of a divided pool's ledgers in a replicated
// key-value bucket (HeadsBucket): each shard's node in charge publishes
// its shard's, and reads the others' to anchor them in its own ledger
// (RATIONALE.md, "Dividing the work among the nodes"). It is safe for
// concurrent use.
type LedgerHeads struct {
	kv     jetstream.KeyValue
	shards int
}

// OpenLedgerHeads creates (or opens) the bucket of a pool of shards
// shards (2 to MaxShards) with replicas replicas (the node's
// NodeConfig.Replicas). An error that JetStream did not answer matches
// pool.ErrStoreUnavailable.
func OpenLedgerHeads(ctx context.Context, js jetstream.JetStream, shards, replicas int) (*LedgerHeads, error) {
	if shards < 2 || shards > MaxShards {
		return nil, fmt.Errorf("cluster: ledger heads of %d shards: %w: 2 to %d", shards, pool.ErrBadRequest, MaxShards)
	}
	kv, err := openKV(ctx, js, jetstream.KeyValueConfig{Bucket: HeadsBucket, Description: "idlepool: the head of each shard's ledger, anchored by the others",
		History: 1, Replicas: replicas, Storage: jetstream.FileStorage})
	if err != nil {
		return nil, fmt.Errorf("cluster: ledger heads bucket: %w", unavailable(err))
	}
	return &LedgerHeads{kv: kv, shards: shards}, nil
}

// Publish stores h as its shard's head unless the head stored there has
// as high a Seq or higher: a head never goes back, whichever node
// publishes last (compare-and-set on the key's revision, read again on
// a conflict). Errors: one wrapping pool.ErrBadRequest for a shard out
// of range or Seq 0; one matching pool.ErrStoreUnavailable when
// JetStream did not answer (publish again).
func (l *LedgerHeads) Publish(ctx context.Context, h pool.ChainHead) error {
	if h.Shard < 0 || h.Shard >= l.shards || h.Seq == 0 {
		return fmt.Errorf("cluster: publish ledger head of shard %d at entry %d: %w: shards 0 to %d, entries from 1", h.Shard, h.Seq, pool.ErrBadRequest, l.shards-1)
	}
	b, err := json.Marshal(headValue{Seq: h.Seq, Hash: h.Hash.String()})
	if err != nil {
		return fmt.Errorf("cluster: publish ledger head of shard %d: %w", h.Shard, err)
	}
	keep := func(old []byte) bool {
		have, ok := parseHead(h.Shard, old)
		return ok && have.Seq >= h.Seq
	}
	if err := putUnlessKept(ctx, l.kv, shardKey(h.Shard), b, keep); err != nil {
		return fmt.Errorf("cluster: publish ledger head of shard %d: %w", h.Shard, err)
	}
	return nil
}

// Heads returns the head each shard published, in shard order; a shard
// that published none yet, or whose value does not parse, is left out.
// Errors: one matching pool.ErrStoreUnavailable when JetStream did not
// answer.
func (l *LedgerHeads) Heads(ctx context.Context) ([]pool.ChainHead, error) {
	return readShards(ctx, l.kv, l.shards, "ledger head", parseHead)
}

// parseHead reads shard's head from the bucket's value b.
func parseHead(shard int, b []byte) (pool.ChainHead, bool) {
	var v headValue
	if json.Unmarshal(b, &v) != nil || v.Seq == 0 {
		return pool.ChainHead{}, false
	}
	d, err := job.ParseDigest(v.Hash)
	if err != nil {
		return pool.ChainHead{}, false
	}
	return pool.ChainHead{Shard: shard, Seq: v.Seq, Hash: d}, true
}
