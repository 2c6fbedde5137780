package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"

	"idlepool/job"
)

// MaxShards is the most shards a clustered pool's work may be divided
// into (RATIONALE.md, "Dividing the work among the nodes"): each shard
// is a state stream, an object store, two key-value buckets and a lease
// of its own (a third bucket, with ShardLeases), and 64 of each is well
// within what one JetStream cluster carries.
const MaxShards = 64

// ErrShard means a shard number or a shard count is out of range: a
// count is 1 to MaxShards, a shard 0 to count-1.
var ErrShard = errors.New("cluster: bad shard")

// Shard names one shard of a pool whose work is divided into Count
// shards (RATIONALE.md, "Dividing the work among the nodes"): a job
// belongs to shard ShardOf(its ID, Count), or in a pool that places its
// jobs by load (LoadPlacement) to the shard recorded for it
// (Placements), and each shard has its own
// state stream, snapshots, replica archive, ledger archive and leader
// lease, named by the methods below.
//
// The names depend on Index alone. Shard 0 has the names a pool had
// before it was divided (StateStream, "idlepool.state", SnapshotBucket,
// ArchiveBucket, LedgerBucket and the leader key "scheduler"), so a
// pool of one shard, and shard 0 of a divided one, reads what such a
// pool wrote. Shard s > 0 appends the suffix "_" and s in decimal to
// each of those names: IDLEPOOL_STATE_1, idlepool.state_1,
// idlepool_snapshots_1, idlepool_replicas_1, idlepool_ledger_1,
// scheduler_1. A pool begun with ShardLeases keeps each shard's lease
// in a bucket of its own, idlepool_lease and idlepool_lease_1 and so
// on (LeaseBucket). These are distinct from one another and from shard
// 0's (a stream's subjects and a bucket's keys never overlap another's).
//
// The zero Shard is shard 0 of 1: today's pool. A Shard is a value;
// Validate says whether it is in range.
type Shard struct {
	// Index is the shard's number, 0 to Count-1.
	Index int
	// Count is K, how many shards the pool's work is divided into, 1 to
	// MaxShards; 0 means 1.
	Count int
}

// NewShard returns shard s of k, or an error wrapping ErrShard that
// names what is out of range (k outside 1..MaxShards, s outside
// 0..k-1).
func NewShard(s, k int) (Shard, error) {
	sh := Shard{Index: s, Count: k}
	if err := sh.Validate(); err != nil {
		return Shard{}, err
	}
	return sh, nil
}

// Shards returns the k shards 0 to k-1 of a pool divided into k, or an
// error wrapping ErrShard when k is outside 1..MaxShards.
func Shards(k int) ([]Shard, error) {
	if err := ValidateShardCount(k); err != nil {
		return nil, err
	}
	out := make([]Shard, k)
	for i := range out {
		out[i] = Shard{Index: i, Count: k}
	}
	return out, nil
}

// ValidateShardCount returns nil when k is a valid shard count (1 to
// MaxShards) and an error wrapping ErrShard otherwise.
func ValidateShardCount(k int) error {
	if k < 1 || k > MaxShards {
		return fmt.Errorf("%w: %d shards: want 1 to %d", ErrShard, k, MaxShards)
	}
	return nil
}

// Validate returns nil when sh is in range (the zero Shard is: shard 0
// of 1) and an error wrapping ErrShard naming what is not otherwise.
func (sh Shard) Validate() error {
	k := sh.count()
	if err := ValidateShardCount(k); err != nil {
		return err
	}
	if sh.Index < 0 || sh.Index >= k {
		return fmt.Errorf("%w: shard %d of %d: want 0 to %d", ErrShard, sh.Index, k, k-1)
	}
	return nil
}

// count is Count, 0 read as 1.
func (sh Shard) count() int {
	if sh.Count == 0 {
		return 1
	}
	return sh.Count
}

// String is "shard S of K".
func (sh Shard) String() string {
	return "shard " + strconv.Itoa(sh.Index) + " of " + strconv.Itoa(sh.count())
}

// suffix is what shard s appends to shard 0's names: nothing for 0,
// "_" and s otherwise.
func shardSuffix(s int) string {
	if s == 0 {
		return ""
	}
	return "_" + strconv.Itoa(s)
}

// Stream is the name of the shard's state stream: StateStream for shard
// 0, StateStream + "_S" for shard S.
func (sh Shard) Stream() string { return StateStream + shardSuffix(sh.Index) }

// Subject is the one subject of the shard's state stream:
// "idlepool.state" for shard 0, "idlepool.state_S" for shard S.
func (sh Shard) Subject() string { return stateSubj + shardSuffix(sh.Index) }

// Snapshots is the name of the object store of the shard's snapshots:
// SnapshotBucket for shard 0, SnapshotBucket + "_S" for shard S.
func (sh Shard) Snapshots() string { return SnapshotBucket + shardSuffix(sh.Index) }

// Archive is the name of the key-value bucket of the shard's replicas
// that are done: ArchiveBucket for shard 0, ArchiveBucket + "_S" for
// shard S.
func (sh Shard) Archive() string { return ArchiveBucket + shardSuffix(sh.Index) }

// Ledger is the name of the key-value bucket of the shard's older
// ledger entries: LedgerBucket for shard 0, LedgerBucket + "_S" for
// shard S.
func (sh Shard) Ledger() string { return LedgerBucket + shardSuffix(sh.Index) }

// LeaderKey is the key of the shard's leader lease in its bucket
// (LeaseBucket, or LeaderBucket in a pool begun with SharedLeases):
// "scheduler" for shard 0, "scheduler_S" for shard S.
func (sh Shard) LeaderKey() string { return leaderKey + shardSuffix(sh.Index) }

// LeaseBucket is the name of the key-value bucket of the shard's leader
// lease in a pool begun with ShardLeases: LeaseBucket for shard 0,
// LeaseBucket + "_S" for shard S.
func (sh Shard) LeaseBucket() string { return LeaseBucket + shardSuffix(sh.Index) }

// ShardOf returns the shard a job belongs to in a pool divided into k
// shards that places jobs by hash (HashPlacement; in one that places
// them by load, the shard of a job that no placement names): the first
// eight bytes of its ID, read as a big-endian unsigned integer, modulo
// k. A job ID is a SHA-256 (job.ID), so jobs spread evenly over the
// shards in expectation (12 jobs of one benchmark fell 8, 2 and 2 on 3
// shards: why new pools place by load), and every node computes the
// same shard for a job from its ID alone. With k = 1 every job is in
// shard 0. It
// panics when k is outside 1..MaxShards (a count that Shards,
// NewShard or ValidateShardCount refuse): a caller checks k once,
// where it is configured.
func ShardOf(id job.ID, k int) int {
	if err := ValidateShardCount(k); err != nil {
		panic(err)
	}
	return int(binary.BigEndian.Uint64(id[:8]) % uint64(k))
}
