package coord

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"idlepool/cluster"
	"idlepool/identity"
)

// A pool whose work is divided into K > 1 shards (cluster.NodeConfig.Shards,
// RATIONALE.md "Dividing the work among the nodes"): every node campaigns
// for its fair share of the shards (cluster.Leadership.Campaign) and runs
// one coordinator per shard it leads, each over that shard's state
// (cluster.StoreConfig.Shard) and in a data directory of its own
// (shardCoordDir); its public port puts the shards' coordinators behind
// one API (ShardRouter), forwarding each request to the node in charge of
// the shard it concerns, wherever that is.

// divided is what a node of a divided pool keeps beside the fields of an
// undivided one; all of it is guarded by front.mu but router.
type divided struct {
	// leaders are the shards' leases as last read (watch), by shard,
	// when leadersChecked; nil while this node cannot tell (no read
	// answered within a lease's TTL).
	leaders        map[int]cluster.LeaderInfo
	leadersChecked time.Time
	// leadersRead is when the read that gave leaders began: a read that
	// began earlier (watch's, slower than a refresh) does not replace
	// them.
	leadersRead time.Time
	// stale wakes refreshLeaders: the router missed a shard's
	// coordinator (missedShard).
	stale chan struct{}
	// locals are this node's coordinators, by the shard each is in
	// charge of.
	locals map[int]*Server
	// running serialises the terms of one shard on this node: a term
	// won again starts its coordinator once the last one's has stopped
	// and released the shard's state.
	running []sync.Mutex
	// router answers the public API (forward).
	router *ShardRouter
}

// initShards prepares f for a pool of f.shards shards: the router over
// the shards' coordinators, signing what it forwards with key, placing
// new jobs by load with placements (nil: by hash).
func (f *front) initShards(key *identity.Key, placements JobPlacements) error {
	f.locals = map[int]*Server{}
	f.running = make([]sync.Mutex, f.shards)
	f.stale = make(chan struct{}, 1)
	r, err := NewShardRouter(ShardRouterConfig{Shards: f.shards, Key: key, Target: f.shardTarget, Transport: f.transport, Logger: f.log,
		Local: f.serveLocal, Public: f.shardPublic, Here: f.shardHere, Missed: f.missedShard, Placements: placements})
	if err != nil {
		return err
	}
	f.router = r
	return nil
}

// shardTarget is where shard s's coordinator answers now: this node's
// own, or the internal URL the node in charge of s published with its
// lease; ok is false while no node is in charge of s or its coordinator
// is loading.
func (f *front) shardTarget(s int) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if srv := f.locals[s]; srv != nil {
		return srv.URL(), true
	}
	info, ok := f.leaders[s]
	if !ok || info.Internal == "" {
		return "", false
	}
	return info.Internal, true
}

// missedShard is the router's word that a request for a shard found no
// coordinator where this node's last read of the leases said (or no
// node in charge at all): it wakes refreshLeaders, without waiting.
func (f *front) missedShard(int) {
	select {
	case f.stale <- struct{}{}:
	default: // a refresh is due already
	}
}

// refreshEvery is, in lease TTLs, how often refreshLeaders reads the
// leases at most: 94 ms at the default TTL of 3 s.
const refreshEvery = 32

// refreshLeaders reads the shards' leases again whenever the router
// missed a shard's coordinator (missedShard), at most once per
// TTL/refreshEvery, until ctx ends. After a hand-over or a take-over
// the node in charge was otherwise known only at watch's next read, up
// to a quarter TTL later, and every request for that shard meanwhile
// was answered 503 (0.3 to 0.7 s of a returning node's hand-back, in a
// trial).
func (f *front) refreshLeaders(ctx context.Context) {
	ttl := f.lead.TTL()
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.stale:
		}
		began := time.Now()
		rctx, cancel := context.WithTimeout(ctx, ttl/4)
		leaders, err := f.lead.Leaders(rctx, f.shards)
		cancel()
		if err == nil {
			f.setLeaders(leaders, began)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(ttl / refreshEvery):
		}
	}
}

// setLeaders keeps leaders, the shards' leases as a read that began at
// began gave them, unless a read that began later gave some already.
func (f *front) setLeaders(leaders map[int]cluster.LeaderInfo, began time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keepLeaders(leaders, began)
}

// keepLeaders is setLeaders with f.mu held.
func (f *front) keepLeaders(leaders map[int]cluster.LeaderInfo, began time.Time) {
	if !began.Before(f.leadersRead) {
		f.leaders, f.leadersChecked, f.leadersRead = leaders, time.Now(), began
	}
}

// shardPublic is the public URL of the node in charge of shard s: this
// node's own when it runs s, the one the node in charge published with
// its lease otherwise; "" while no node is known to be in charge.
func (f *front) shardPublic(s int) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.locals[s] != nil {
		return f.node.Config().URL
	}
	return f.leaders[s].URL
}

// shardHere reports whether this node runs shard s's coordinator.
func (f *front) shardHere(s int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.locals[s] != nil
}

// serveLocal answers r with this node's coordinator of shard s
// (Server.ServeDirect), in process; false when there is none here or it
// is stopping.
func (f *front) serveLocal(s int, w http.ResponseWriter, r *http.Request) bool {
	f.mu.Lock()
	srv := f.locals[s]
	f.mu.Unlock()
	return srv != nil && srv.ServeDirect(w, r)
}

// campaignShards keeps this node in charge of its fair share of the
// shards until ctx ends, running a coordinator for each shard it leads
// (runTerm) while its term lasts.
func (f *front) campaignShards(ctx context.Context, base Config) error {
	nc := f.node.Config()
	var wg sync.WaitGroup
	defer wg.Wait()
	started := map[*cluster.Term]bool{}
	err := f.lead.Campaign(ctx, cluster.CampaignConfig{
		Shards: f.shards,
		Info:   cluster.LeaderInfo{Node: nc.Name, URL: nc.URL},
		Report: func(terms map[int]*cluster.Term) {
			for t := range started {
				if terms[t.Shard()] != t {
					delete(started, t) // lost or given up: runTerm sees Lost
				}
			}
			for s, t := range terms {
				if started[t] {
					continue
				}
				started[t] = true
				wg.Go(func() {
					f.running[s].Lock()
					defer f.running[s].Unlock()
					select {
					case <-t.Lost():
						return // ended while the last term's coordinator stopped
					default:
					}
					f.runTerm(ctx, base, t)
					// A coordinator that stopped while its term lasts
					// (its store fenced by a batch that a node which had
					// lost the shard still wrote, or another failure)
					// must not keep the lease with nothing behind it: the
					// shard would answer 503 for good while every node
					// saw it led. Resigned, the shard is taken again
					// (by this node, which led it, first) and its state
					// loaded afresh, as the undivided campaign does.
					t.Resign()
				})
			}
		},
		OnErr:   func(err error) { f.log.Debug("Cannot campaign for the shards", "err", err) },
		Standby: f.standby,
	})
	if err != nil {
		return err
	}
	return nil
}

// standby is the campaign's report of the shards this node keeps warm
// (cluster.CampaignConfig.Standby: those it leads, those it stands by
// for, and those it led or stood by for that have no leader yet):
// unless the node is a cold standby, its stores of those shards follow
// their streams and the others rest and hold no state
// (cluster.Store.SetFollowing), so that each node applies its own
// shards' batches and its share of the others', not every shard's: a
// warm node applying all of them spent more per task than one node
// alone (docs/benchmarks.md, "Dividing the work among the nodes").
func (f *front) standby(shards map[int]bool) {
	if f.node.Config().ColdStandby {
		return
	}
	for s, st := range f.states {
		st.SetFollowing(shards[s])
	}
	f.log.Info("Keeping these shards' state warm", "shards", slices.Sorted(maps.Keys(shards)))
}

// shardCoordDir is the data directory of a node's coordinator of shard
// s under the node's dataDir: "coord" for shard 0 (the directory an
// undivided pool's coordinator has), "coord_S" for shard S > 0. Each
// holds the coordinator's lock, its files and the pool key
// (shardKeyFile).
func shardCoordDir(dataDir string, s int) string {
	if s == 0 {
		return filepath.Join(dataDir, filepath.Dir(cluster.PoolKeyFile))
	}
	return filepath.Join(dataDir, filepath.Dir(cluster.PoolKeyFile)+"_"+strconv.Itoa(s))
}

// shardKeyFile gives shard s's coordinator directory (shardCoordDir) the
// pool key of shard 0's: a copy of cluster.PoolKeyFile, mode 0600,
// written where missing. A key there that is another is an error
// wrapping cluster.ErrPoolKey: every shard signs with the pool's key.
func shardKeyFile(dataDir string, s int) error {
	src := filepath.Join(dataDir, cluster.PoolKeyFile)
	key, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", cluster.ErrPoolKey, src, err)
	}
	dir := shardCoordDir(dataDir, s)
	dst := filepath.Join(dir, filepath.Base(cluster.PoolKeyFile))
	have, err := os.ReadFile(dst)
	switch {
	case err == nil && bytes.Equal(have, key):
		return nil
	case err == nil:
		return fmt.Errorf("%w: %s holds another key than %s: remove it, and shard %d's coordinator gets a copy of the pool's",
			cluster.ErrPoolKey, dst, src, s)
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: %s: %w", cluster.ErrPoolKey, dst, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp := dst + ".new"
	if err := os.WriteFile(tmp, key, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// shardGatherer adds the label shard="S" to every metric g gathers, so
// that the metrics of a node's coordinators of several shards, which
// share their names, are told apart in one answer of GET /metrics.
type shardGatherer struct {
	g     prometheus.Gatherer
	shard int
}

// Gather gathers g's metrics and labels each with the shard.
func (sg shardGatherer) Gather() ([]*dto.MetricFamily, error) {
	mfs, err := sg.g.Gather()
	name, value := "shard", strconv.Itoa(sg.shard)
	for _, mf := range mfs {
		for _, m := range mf.Metric {
			m.Label = append(m.Label, &dto.LabelPair{Name: proto.String(name), Value: proto.String(value)})
		}
	}
	return mfs, err
}
