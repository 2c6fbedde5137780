package cluster

import (
	"context"
	"fmt"
	"hash/fnv"
	"maps"
	"time"
)

// FairShare returns how many of k shards one of live nodes leads at
// most under a balanced campaign: ceil(k / live). A live count below 1
// is read as 1 (the node asking is live itself), so one node alone
// leads every shard.
func FairShare(k, live int) int {
	live = max(live, 1)
	k = max(k, 0)
	return (k + live - 1) / live
}

// ShouldCampaign is the rule of a balanced campaign (RATIONALE.md,
// "Dividing the work among the nodes"): a node that leads led of k
// shards, with live nodes live (itself included), tries for another
// only while led < ceil(k / live) (FairShare). Since ceil(k/live) ×
// live ≥ k, the live nodes together can lead every shard; since no node
// goes past its share, the shards spread over the nodes: with k = 6 and
// 3 nodes each leads 2, and when one of them is gone (its entry in
// NodesBucket expired) the other two may lead 3 each and take its
// shards over. It is pure: the same arguments give the same answer.
func ShouldCampaign(led, k, live int) bool {
	return led < FairShare(k, live)
}

// CampaignConfig configures Leadership.Campaign.
type CampaignConfig struct {
	// Shards is K, how many shards the pool's work is divided into, 1
	// to MaxShards.
	Shards int
	// Info is this node's lease value (Node and URL; Shard, Since and
	// Term are set per term). Node must not be empty: it is how the node
	// counts itself among the live ones.
	Info LeaderInfo
	// Every is the time between two rounds of the campaign. Default: a
	// quarter of the lease's TTL, as the single-leader campaign of
	// package coord.
	Every time.Duration
	// Report, if not nil, is called with this node's current terms by
	// shard whenever they change (a term won, lost or given up), and
	// with an empty map when the campaign ends holding some. It is
	// called from the campaign's goroutine, one call at a time, with a
	// map of its own; a slow Report delays the campaign.
	Report func(terms map[int]*Term)
	// OnErr, if not nil, is told of errors the campaign retries (the
	// node list or a lease did not answer).
	OnErr func(error)
}

// Campaign keeps this node leading its fair share of cfg.Shards shards
// until ctx ends. Every cfg.Every it:
//
//   - ends (Resign) the terms it lost, so that a lost lease is never
//     kept;
//   - counts the live nodes L (Nodes, this node counted even when its
//     announcement is not listed yet) and, while it leads fewer than
//     FairShare(K, L) shards (ShouldCampaign), tries the shards no node
//     leads (Leaders) with TryLeadShard, starting from a place that
//     depends on this node's name so that nodes starting together try
//     different shards first;
//   - gives up one term (the one of the highest shard) when it leads
//     more than FairShare(K, L), so that a node that joins (L grows)
//     gets its share from the others, one shard per round and node.
//
// A round whose node list does not answer changes no term but the lost
// ones. The live nodes are those announced in NodesBucket (Announce):
// a node should be announced exactly while it campaigns, or the others
// hold back for a node that takes nothing.
//
// When ctx ends, Campaign resigns every term it holds (each deleting
// its lease if still its own), reports an empty map and returns nil.
// Errors: one wrapping ErrShard when cfg.Shards is out of range, or
// when cfg.Info.Node is empty (ErrConfig), before anything is tried.
func (l *Leadership) Campaign(ctx context.Context, cfg CampaignConfig) error {
	k := cfg.Shards
	if err := ValidateShardCount(k); err != nil {
		return fmt.Errorf("cluster: campaign: %w", err)
	}
	if cfg.Info.Node == "" {
		return fmt.Errorf("%w: campaign: no node name", ErrConfig)
	}
	if cfg.Every <= 0 {
		cfg.Every = l.ttl / 4
	}
	h := fnv.New32a()
	h.Write([]byte(cfg.Info.Node))
	first := int(h.Sum32() % uint32(k))
	held := map[int]*Term{}
	report := func() {
		if cfg.Report != nil {
			cfg.Report(maps.Clone(held))
		}
	}
	onErr := func(err error) {
		if cfg.OnErr != nil && ctx.Err() == nil {
			cfg.OnErr(err)
		}
	}
	tick := time.NewTicker(cfg.Every)
	defer tick.Stop()
	for {
		if ctx.Err() != nil {
			break
		}
		if l.campaignRound(ctx, cfg, first, held, onErr) {
			report()
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	if len(held) > 0 {
		for s, t := range held {
			t.Resign()
			delete(held, s)
		}
		report()
	}
	return nil
}

// campaignRound is one round of Campaign on held (shard → term); it
// says whether held changed. Each call to JetStream is bounded by half
// the lease's TTL.
func (l *Leadership) campaignRound(ctx context.Context, cfg CampaignConfig, first int, held map[int]*Term, onErr func(error)) (changed bool) {
	k := cfg.Shards
	for s, t := range held {
		select {
		case <-t.Lost():
			t.Resign()
			delete(held, s)
			changed = true
		default:
		}
	}
	rctx, cancel := context.WithTimeout(ctx, l.ttl/2)
	nodes, err := l.Nodes(rctx)
	cancel()
	if err != nil {
		onErr(fmt.Errorf("cluster: campaign: list the live nodes: %w", err))
		return changed
	}
	live := len(nodes)
	if !listed(nodes, cfg.Info.Node) {
		live++
	}
	share := FairShare(k, live)
	if len(held) > share {
		top := -1
		for s := range held {
			top = max(top, s)
		}
		held[top].Resign()
		delete(held, top)
		return true
	}
	if !ShouldCampaign(len(held), k, live) {
		return changed
	}
	rctx, cancel = context.WithTimeout(ctx, l.ttl/2)
	leaders, err := l.Leaders(rctx, k)
	cancel()
	if err != nil {
		onErr(fmt.Errorf("cluster: campaign: %w", err))
		return changed
	}
	for i := range k {
		if !ShouldCampaign(len(held), k, live) || ctx.Err() != nil {
			break
		}
		s := (first + i) % k
		if _, led := leaders[s]; led || held[s] != nil {
			continue
		}
		tctx, cancel := context.WithTimeout(ctx, l.ttl/2)
		t, err := l.TryLeadShard(tctx, s, cfg.Info)
		cancel()
		if err != nil {
			onErr(fmt.Errorf("cluster: campaign: %w", err))
			continue
		}
		if t != nil {
			held[s] = t
			changed = true
		}
	}
	return changed
}

// listed says whether nodes names node.
func listed(nodes []NodeInfo, node string) bool {
	for _, n := range nodes {
		if n.Name == node {
			return true
		}
	}
	return false
}
