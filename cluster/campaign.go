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

// Successor returns the node of live, other than leader, that stands by
// for shard s: the one that keeps its memory of the shard's state
// current while leader is in charge (a warm standby), and takes the
// shard first when leader is gone (Campaign). It is rendezvous hashing
// (highest random weight; Thaler and Ravishankar, "Using name-based
// mappings to increase hit rates", IEEE/ACM ToN 1998): each node's
// weight for s is the FNV-1a 64 hash of the shard's number and the
// node's name, and the heaviest wins, so that every node that knows
// the same leader and live nodes names the same successor, the shards
// of one leader are spread over the others, and a node that comes or
// goes moves only the shards it wins or held. It returns "" when live
// names no node but leader. It is pure.
func Successor(s int, leader string, live []string) string {
	best, bestW := "", uint64(0)
	for _, n := range live {
		if n == leader {
			continue
		}
		h := fnv.New64a()
		fmt.Fprintf(h, "%d\x00%s", s, n)
		if w := h.Sum64(); best == "" || w > bestW || w == bestW && n < best {
			best, bestW = n, w
		}
	}
	return best
}

// successorGrace is CampaignConfig.Grace's default.
const successorGrace = 2

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
	// Standby, if not nil, is called with the shards this node keeps
	// warm whenever that set changes, first after the first round that
	// read the leaders: the shards it leads, those another node leads
	// of which this node is the Successor among the live nodes (it
	// stands by for them), and those it led or stood by for that have
	// no leader now (until it or another takes them: it takes them
	// first). It is called from the campaign's goroutine, one call at a
	// time, with a map of its own.
	Standby func(shards map[int]bool)
	// Grace is how many rounds in a row a node that may lead another
	// shard sees one without a leader before it tries for it, when it
	// has seen that shard led by another node and is not that node's
	// Successor for it: the successor, whose memory is warm, takes it
	// first, and the others after that, should the successor not (it
	// is gone too). A successor that leads its share already will not
	// take it, so then nobody waits. Default 2 (half a lease's TTL at
	// the default Every).
	Grace int
}

// Campaign keeps this node leading its fair share of cfg.Shards shards
// until ctx ends. Every cfg.Every it:
//
//   - ends (Resign) the terms it lost, so that a lost lease is never
//     kept;
//   - counts the live nodes L (Nodes, this node counted even when its
//     announcement is not listed yet, a node that holds no lease and
//     has not announced itself for a lease length while others did
//     counted gone) and, while it leads fewer than
//     FairShare(K, L) shards (ShouldCampaign), tries the shards no node
//     leads (Leaders) with TryLeadShard, starting from a place that
//     depends on this node's name so that nodes starting together try
//     different shards first;
//   - comes back 4 times as often (every cfg.Every/4) while it may
//     lead another shard and another node is about to give one up: so
//     that the shard handed over waits less for a node to take it;
//   - gives up one term when it leads more than FairShare(K, L), or
//     when it leads the most and some node fewer than K/L rounded down
//     (sheds), for a second round in a row (the first gives a node that
//     joins its own first round, which reads the leases and starts to
//     follow the shards it stands by for), so that a node that joins (L
//     grows) gets its share from the others, one shard per round: one
//     whose Successor leads less than its share, which stood by for it
//     and takes it at its next round, else the highest shard (giveUp).
//     It leaves a shard it gave up to the others for cfg.Grace rounds.
//
// A shard it has seen led by another node and then without a leader is
// tried at once by that leader's Successor, which stood by for it
// (cfg.Standby), and by the others only once they have seen it without
// one for cfg.Grace rounds in a row in which they might lead another, or
// at once when that Successor leads its share already (it would not take
// it); a shard never seen led (a pool starting) is tried by any node at
// once.
//
// A round whose node list does not answer changes no term but the lost
// ones. The live nodes are those announced in NodesBucket (Announce,
// every quarter TTL) but the gone ones (liveNames): a node should be
// announced exactly while it campaigns, or the others hold back for a
// node that takes nothing.
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
	if cfg.Grace <= 0 {
		cfg.Grace = successorGrace
	}
	h := fnv.New32a()
	h.Write([]byte(cfg.Info.Node))
	first := int(h.Sum32() % uint32(k))
	held := map[int]*Term{}
	cs := &campaignState{first: first, lastLeader: map[int]string{}, unled: map[int]int{}, shed: map[int]bool{}}
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
		if l.campaignRound(ctx, cfg, cs, held, onErr) {
			report()
		}
		var soon <-chan time.Time
		if cs.handBack {
			soon = time.After(cfg.Every / 4)
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		case <-soon:
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

// campaignState is what Campaign remembers from one round to the next.
type campaignState struct {
	first      int            // the shard this node tries first
	lastLeader map[int]string // the node last seen leading each shard
	unled      map[int]int    // rounds in a row each shard was seen without a leader, this node free to lead another
	over       int            // rounds in a row this node led more than its share
	handBack   bool           // this node may lead another shard while a node is to give one up (sheds): rounds come 4 times as often
	shed       map[int]bool   // the shards this node gave up, not seen led since: left to others for the grace
	standby    map[int]bool   // the shards this node keeps warm (nil before the first report)
}

// campaignRound is one round of Campaign on held (shard → term); it
// says whether held changed. Each call to JetStream is bounded by half
// the lease's TTL.
func (l *Leadership) campaignRound(ctx context.Context, cfg CampaignConfig, cs *campaignState, held map[int]*Term, onErr func(error)) (changed bool) {
	k := cfg.Shards
	cs.handBack = false
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
	nodes, err := l.nodeEntries(rctx)
	cancel()
	if err != nil {
		onErr(fmt.Errorf("cluster: campaign: list the live nodes: %w", err))
		return changed
	}
	// The leases are read before the live count, which leaves out the
	// nodes that hold none and stopped announcing.
	rctx, cancel = context.WithTimeout(ctx, l.ttl/2)
	leaders, lerr := l.Leaders(rctx, k)
	cancel()
	names := liveNames(nodes, leaders, lerr == nil, cfg.Info.Node, l.ttl)
	live := len(names)
	share := FairShare(k, live)
	var counts map[string]int // nil while the leases cannot be read
	if lerr == nil {
		counts = map[string]int{}
		for _, info := range leaders {
			counts[info.Node]++
		}
	}
	fresh := freshNames(nodes, l.ttl)
	if !sheds(cfg.Info.Node, len(held), names, counts, fresh, k) {
		cs.over = 0
	} else {
		if cs.over++; cs.over < 2 {
			// A node that joins is counted from its announcement,
			// which may come before its own first round: give it that
			// round to read the leases and follow the shards it stands
			// by for, so that the shard handed to it is warm.
			return changed
		}
		top := giveUp(held, cfg.Info.Node, names, counts, share)
		held[top].Resign()
		delete(held, top)
		cs.shed[top] = true
		if cfg.Standby != nil {
			// What it leads is warm, and what it gave up stays warm
			// until another takes it (the round after next reads the
			// leaders again).
			warm := map[int]bool{top: true}
			maps.Copy(warm, cs.standby)
			for s := range held {
				warm[s] = true
			}
			cs.lastLeader[top] = cfg.Info.Node
			if cs.standby == nil || !maps.Equal(warm, cs.standby) {
				cfg.Standby(maps.Clone(warm))
			}
			cs.standby = warm
		}
		return true
	}
	if !ShouldCampaign(len(held), k, live) && cfg.Standby == nil {
		return changed
	}
	if lerr != nil {
		onErr(fmt.Errorf("cluster: campaign: %w", lerr))
		return changed
	}
	// The shards this node keeps warm: those it leads, those of which
	// it is its node in charge's Successor, and those it kept warm (led,
	// or stood by for) that have no leader now, until one takes them.
	standby := map[int]bool{}
	for s := range k {
		info, led := leaders[s]
		switch {
		case held[s] != nil:
			cs.lastLeader[s], cs.unled[s] = cfg.Info.Node, 0
			standby[s] = true
		case led:
			cs.lastLeader[s], cs.unled[s] = info.Node, 0
			delete(cs.shed, s)
			if info.Node != cfg.Info.Node && Successor(s, info.Node, names) == cfg.Info.Node {
				standby[s] = true
			}
		default:
			cs.unled[s]++
			if !ShouldCampaign(len(held), k, live) {
				// The grace counts from when this node may take it.
				cs.unled[s] = 0
			}
			if cs.standby[s] || cs.lastLeader[s] == cfg.Info.Node {
				standby[s] = true
			}
		}
	}
	if cfg.Standby != nil && (cs.standby == nil || !maps.Equal(standby, cs.standby)) {
		cfg.Standby(maps.Clone(standby))
	}
	cs.standby = standby
	// A node over its share gives a shard up soon (for this node, or
	// one like it): the next rounds come sooner, so that the shard
	// waits for this node's round a sixteenth of a TTL at most, not a
	// quarter.
	if ShouldCampaign(len(held), k, live) {
		for _, n := range names {
			cs.handBack = cs.handBack || n != cfg.Info.Node && sheds(n, counts[n], names, counts, fresh, k)
		}
	}
	for i := range k {
		if !ShouldCampaign(len(held), k, live) || ctx.Err() != nil {
			break
		}
		s := (cs.first + i) % k
		if _, led := leaders[s]; led || held[s] != nil {
			continue
		}
		if cs.unled[s] < cfg.Grace && (cs.shed[s] || !standby[s] && leavesToSuccessor(s, cs.lastLeader[s], cfg.Info.Node, names, counts, share)) {
			continue // given up for another, or its successor's to take first
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

// giveUp returns the shard of held that a node over its share gives up:
// the highest one whose Successor among names (this node, self, being
// its leader) leads fewer than share shards by counts (node → shards it
// leads, by the leases), since that node stood by for it (its memory is
// warm) and takes it at its next round; else the highest shard held.
// A node that joins is such a node for some of the shards of each node
// over its share (rendezvous hashing spreads them), so a shard handed
// to it mostly needs no load. It is pure.
func giveUp(held map[int]*Term, self string, names []string, counts map[string]int, share int) int {
	top, warm := -1, -1
	for s := range held {
		top = max(top, s)
		if succ := Successor(s, self, names); succ != "" && counts[succ] < share {
			warm = max(warm, s)
		}
	}
	if warm >= 0 {
		return warm
	}
	return top
}

// sheds reports whether self, which leads held of k shards, gives one
// up, by counts (node → shards it leads, by the leases; nil when they
// could not be read) over names (the live nodes, self among them): when
// held is more than FairShare(k, live), rounded up; or, when another live
// node that announced itself lately (fresh) leads fewer than k/live
// rounded down, when self leads more than that and the most of the live
// nodes (a tie to the greatest name), so that one node gives one up per
// round. Without the second rule the shards handed out at the rounded-up
// share stayed there: 4 shards over 3 nodes stayed 2, 2 and 0, a node
// that joined leading nothing. A node that died leads nothing either
// once its leases lapse, before it counts gone; fresh leaves it out, so
// that nobody gives a shard up for it. It is pure.
func sheds(self string, held int, names []string, counts map[string]int, fresh map[string]bool, k int) bool {
	live := max(len(names), 1)
	if held > FairShare(k, live) {
		return true
	}
	floor := k / live
	if counts == nil || held <= floor {
		return false
	}
	needy := false
	for _, n := range names {
		if n == self {
			continue
		}
		if counts[n] < floor && fresh[n] {
			needy = true
		}
		if c := counts[n]; c > held || c == held && n > self {
			return false // another gives one up first
		}
	}
	return needy
}

// leavesToSuccessor reports whether self, which may lead another shard
// and does not stand by for shard s, leaves s (seen without a leader,
// last led by last, "" when never seen led) to the last leader's
// Successor among names while the grace lasts: when that successor is
// another node that leads fewer than share shards by counts, and so
// takes it. It is pure.
func leavesToSuccessor(s int, last, self string, names []string, counts map[string]int, share int) bool {
	if last == "" || last == self {
		return false
	}
	succ := Successor(s, last, names)
	return succ != self && succ != "" && counts[succ] < share
}

// freshNames returns the nodes of nodes whose announcement JetStream
// stored at most half of ttl before the newest one: those that announced
// themselves at one of their last two turns (every quarter TTL). The
// stored times are compared with one another, never with a node's
// clock. It is pure.
func freshNames(nodes []nodeEntry, ttl time.Duration) map[string]bool {
	var newest time.Time
	for _, n := range nodes {
		if n.stored.After(newest) {
			newest = n.stored
		}
	}
	out := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		if newest.Sub(n.stored) <= ttl/2 {
			out[n.Name] = true
		}
	}
	return out
}

// liveNames returns the names of the nodes a campaign counts live, self
// always among them: every node of nodes (the nodes bucket's
// announcements) but those that are gone, and self when it is not
// listed yet. A node is gone when it holds no lease (known is whether
// leaders, the leases, could be read: if not, none is gone) and
// JetStream stored its announcement more than ttl before the newest
// one: it has not announced itself (every quarter TTL) for a lease
// length while others did. A node that died stops renewing its leases
// and announcing at once, so it is counted gone about a lease length
// after it died, rather than when its announcement expires (three
// lease lengths); a live node that holds a lease counts however late
// its announcement (a busy machine), so it is never counted out of the
// shards it leads, and the stored times are compared with one another,
// never with a node's clock.
func liveNames(nodes []nodeEntry, leaders map[int]LeaderInfo, known bool, self string, ttl time.Duration) []string {
	holds := map[string]bool{}
	for _, info := range leaders {
		holds[info.Node] = true
	}
	var newest time.Time
	for _, n := range nodes {
		if n.stored.After(newest) {
			newest = n.stored
		}
	}
	names := make([]string, 0, len(nodes)+1)
	listed := false
	for _, n := range nodes {
		switch {
		case n.Name == self:
			listed = true
		case known && !holds[n.Name] && newest.Sub(n.stored) > ttl:
			continue // gone
		}
		names = append(names, n.Name)
	}
	if !listed {
		names = append(names, self)
	}
	return names
}
