package cluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"idlepool/job"
	"idlepool/pool"
)

// PlacementsBucket is the JetStream key-value bucket that says which
// shard each job of a divided pool belongs to, in a pool that places
// its jobs by load (LoadPlacement): key the job's ID in hex (64
// digits), value the shard's index in decimal. A key is written once,
// by the first node that places the job (a create, never an update),
// and never changes: the job's shard for its whole life. Only the key
// of a job its shard refused as malformed is removed (Forget).
const PlacementsBucket = "idlepool_placements"

// JobPlacement says how a divided pool chooses a job's shard; every node
// of the pool uses the same (Rules.ClaimShards records it with the
// shard count).
type JobPlacement int

const (
	// HashPlacement puts a job in ShardOf(its ID, K): no record, every
	// node computes it. The pools begun before LoadPlacement, and every
	// undivided one.
	HashPlacement JobPlacement = iota
	// LoadPlacement puts a new job in the shard with the fewest tasks
	// waiting when it is added, as the node that adds it knows them,
	// and records the choice in PlacementsBucket (Placements). A job no
	// record names is in its ShardOf shard, as with HashPlacement.
	LoadPlacement
)

// String is "hash" or "load".
func (p JobPlacement) String() string {
	if p == LoadPlacement {
		return "load"
	}
	return "hash"
}

// Placements keeps the shard of each job of a pool that places its jobs
// by load (LoadPlacement) in a replicated key-value bucket
// (PlacementsBucket), and remembers each it read or wrote: a placement
// never changes (Forget removes one that named a job no shard can add),
// so a node asks JetStream once per job. It is safe for concurrent use.
type Placements struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	shards int
	mu     sync.Mutex
	known  map[job.ID]int
}

// maxKnownPlacements bounds what a Placements remembers, about 64 MiB of
// IDs and shards; past it, it forgets them all and asks again.
const maxKnownPlacements = 1 << 20

// OpenPlacements creates (or opens) the bucket of a pool of shards
// shards (2 to MaxShards) with replicas replicas (the node's
// NodeConfig.Replicas). An error that JetStream did not answer matches
// pool.ErrStoreUnavailable; a shard count out of range wraps
// pool.ErrBadRequest.
func OpenPlacements(ctx context.Context, js jetstream.JetStream, shards, replicas int) (*Placements, error) {
	if shards < 2 || shards > MaxShards {
		return nil, fmt.Errorf("cluster: job placements of %d shards: %w: 2 to %d", shards, pool.ErrBadRequest, MaxShards)
	}
	kv, err := openKV(ctx, js, jetstream.KeyValueConfig{Bucket: PlacementsBucket, Description: "idlepool: the shard of each job, chosen by load when it was added",
		History: 1, Replicas: replicas, Storage: jetstream.FileStorage})
	if err != nil {
		return nil, fmt.Errorf("cluster: job placements bucket: %w", unavailable(err))
	}
	return &Placements{js: js, kv: kv, shards: shards, known: map[job.ID]int{}}, nil
}

// Place records shard as job id's shard unless the job has one already,
// and returns the job's shard: shard, or the one recorded before (by
// this node or another: the first to record wins, so two nodes adding
// the same job at once send it to the same shard). Errors: one wrapping
// pool.ErrBadRequest for a shard out of range; one matching
// pool.ErrStoreUnavailable when JetStream did not answer (nothing is
// known to be recorded: place it again); one naming the value when the
// one recorded is not a shard of the pool.
func (p *Placements) Place(ctx context.Context, id job.ID, shard int) (int, error) {
	if shard < 0 || shard >= p.shards {
		return 0, fmt.Errorf("cluster: place job %s in shard %d: %w: shards 0 to %d", id, shard, pool.ErrBadRequest, p.shards-1)
	}
	if s, ok := p.Known(id); ok {
		return s, nil
	}
	_, err := p.kv.Create(ctx, id.String(), strconv.AppendInt(nil, int64(shard), 10))
	switch {
	case err == nil:
		p.remember(id, shard)
		return shard, nil
	case errors.Is(err, jetstream.ErrKeyExists):
		// Read from the leader, which made the create fail: a replica
		// may not have the record yet.
		s, ok, err := p.leaderShard(ctx, id)
		if err == nil && !ok {
			err = fmt.Errorf("%w: the placement of job %s exists, but its stream's leader read none", pool.ErrStoreUnavailable, id)
		}
		if err != nil {
			return 0, fmt.Errorf("cluster: read the placement of job %s: %w", id, err)
		}
		return s, nil
	default:
		return 0, fmt.Errorf("cluster: place job %s: %w", id, unavailable(err))
	}
}

// Shard returns job id's recorded shard, and false when no placement
// names the job (a job added before the pool placed jobs by load, or no
// job at all: its shard is then ShardOf's). A record a replica does not
// have yet (placed a moment ago through another node) is read from the
// bucket stream's leader. Errors: one matching pool.ErrStoreUnavailable
// when JetStream did not answer; one wrapping ErrPlacement when the
// value recorded is not a shard of the pool.
func (p *Placements) Shard(ctx context.Context, id job.ID) (int, bool, error) {
	if s, ok := p.Known(id); ok {
		return s, true, nil
	}
	e, err := p.kv.Get(ctx, id.String())
	switch {
	case err == nil:
		s, err := p.parse(id, e.Value())
		return s, err == nil, err
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return p.leaderShard(ctx, id)
	default:
		return 0, false, fmt.Errorf("cluster: read the placement of job %s: %w", id, unavailable(err))
	}
}

// Known returns job id's shard if this Placements read or recorded it,
// asking JetStream nothing.
func (p *Placements) Known(id job.ID) (int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.known[id]
	return s, ok
}

// Forget removes job id's placement, which must name a job that no
// shard can add (one its shard refused as malformed): a later
// submission places it anew. Other nodes' Placements may remember it
// still, and send the job to the shard that refused it, which refuses
// it again. Errors match pool.ErrStoreUnavailable.
func (p *Placements) Forget(ctx context.Context, id job.ID) error {
	p.mu.Lock()
	delete(p.known, id)
	p.mu.Unlock()
	if err := p.kv.Delete(ctx, id.String()); err != nil {
		return fmt.Errorf("cluster: forget the placement of job %s: %w", id, unavailable(err))
	}
	return nil
}

// ErrPlacement means a job's recorded placement is not a shard of the
// pool: the bucket holds what no node of this pool wrote.
var ErrPlacement = errors.New("cluster: a job's placement is not a shard of the pool")

// leaderShard reads job id's placement from the bucket stream's leader
// (lastKVMsg).
func (p *Placements) leaderShard(ctx context.Context, id job.ID) (int, bool, error) {
	m, err := lastKVMsg(ctx, p.js, PlacementsBucket, id.String())
	if err != nil || m == nil || m.deleted {
		return 0, false, err
	}
	s, err := p.parse(id, m.data)
	return s, err == nil, err
}

// parse reads a recorded placement and remembers it.
func (p *Placements) parse(id job.ID, v []byte) (int, error) {
	s, err := strconv.Atoi(string(v))
	if err != nil || s < 0 || s >= p.shards {
		return 0, fmt.Errorf("%w: job %s is placed in %q, not one of shards 0 to %d", ErrPlacement, id, v, p.shards-1)
	}
	p.remember(id, s)
	return s, nil
}

func (p *Placements) remember(id job.ID, s int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.known) >= maxKnownPlacements {
		clear(p.known)
	}
	p.known[id] = s
}
