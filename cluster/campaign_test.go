package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"

	"idlepool/pool"
)

func TestFairShare(t *testing.T) {
	for _, tc := range []struct {
		led, k, live int
		share        int
		campaign     bool
	}{
		{0, 1, 1, 1, true},
		{1, 1, 1, 1, false},
		{0, 1, 3, 1, true}, // one shard, three nodes: whoever is first
		{5, 6, 1, 6, true},
		{6, 6, 1, 6, false},
		{1, 6, 3, 2, true},
		{2, 6, 3, 2, false},
		{2, 6, 2, 3, true}, // a node of three gone: the others take 3 each
		{3, 6, 2, 3, false},
		{2, 7, 3, 3, true}, // ceil(7/3) = 3
		{3, 7, 3, 3, false},
		{0, 6, 0, 6, true}, // no node listed yet: the node itself counts
		{1, 64, 64, 1, false},
		{0, 2, 5, 1, true}, // more nodes than shards: at most one each
	} {
		t.Run(fmt.Sprintf("%d of %d, %d live", tc.led, tc.k, tc.live), func(t *testing.T) {
			if got := FairShare(tc.k, tc.live); got != tc.share {
				t.Errorf("FairShare(%d, %d) = %d, want %d", tc.k, tc.live, got, tc.share)
			}
			if got := ShouldCampaign(tc.led, tc.k, tc.live); got != tc.campaign {
				t.Errorf("ShouldCampaign(%d, %d, %d) = %v, want %v", tc.led, tc.k, tc.live, got, tc.campaign)
			}
		})
	}
}

// newLeadership opens the leader buckets of k shards laid out as layout
// on n, retrying while the cluster is not ready yet, with a patience of
// two minutes.
func newLeadership(t testing.TB, n *Node, replicas int, ttl time.Duration, layout LeaseLayout, k int) *Leadership {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for {
		l, err := NewLeadership(ctx, n.JetStream(), replicas, ttl, layout, k)
		if err == nil {
			return l
		}
		if !errors.Is(err, pool.ErrStoreUnavailable) || ctx.Err() != nil {
			t.Fatalf("NewLeadership: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Each shard's lease is a key of its own, in the one leader bucket
// (SharedLeases) or in its shard's bucket (ShardLeases): shard 0's is
// "scheduler", written as before shards (no shard in its value); a
// shard one node leads is refused to another; Leaders lists who leads
// which; a resigned lease is free at once.
func TestShardLeases(t *testing.T) {
	t.Parallel()
	for _, layout := range []LeaseLayout{SharedLeases, ShardLeases} {
		t.Run(layout.String(), func(t *testing.T) {
			t.Parallel()
			shardLeases(t, layout)
		})
	}
}

func shardLeases(t *testing.T, layout LeaseLayout) {
	node := startNodes(t, testConfigs(t, t.TempDir(), 1))[0]
	ctx := context.Background()
	a := newLeadership(t, node, 1, 5*time.Second, layout, 4)
	b := newLeadership(t, node, 1, 5*time.Second, layout, 4) // as another node would
	if _, err := a.TryLeadShard(ctx, 4, LeaderInfo{Node: "a"}); layout == ShardLeases && !errors.Is(err, ErrShard) {
		t.Errorf("shard 4 of 4: %v, want ErrShard", err)
	}
	lead := func(l *Leadership, s int, name string) *Term {
		t.Helper()
		term, err := l.TryLeadShard(ctx, s, LeaderInfo{Node: name})
		if err != nil {
			t.Fatalf("%s leads shard %d: %v", name, s, err)
		}
		if term != nil {
			t.Cleanup(term.Resign)
		}
		return term
	}
	t0, err := a.TryLead(ctx, LeaderInfo{Node: "a"})
	if err != nil || t0 == nil {
		t.Fatalf("TryLead: %v, %v", t0, err)
	}
	defer t0.Resign()
	t1 := lead(a, 1, "a")
	if t1 == nil || t1.Shard() != 1 || t1.Info().Shard != 1 || t0.Shard() != 0 {
		t.Fatalf("terms of shards 0 and 1: %+v, %+v", t0, t1)
	}
	if got := lead(b, 1, "b"); got != nil {
		t.Fatalf("b took shard 1 from a: %+v", got.Info())
	}
	if lead(b, 2, "b") == nil {
		t.Fatal("b could not lead shard 2, which no node led")
	}
	bucket := map[string]string{"scheduler": "idlepool_leader", "scheduler_1": "idlepool_leader", "scheduler_2": "idlepool_leader"}
	if layout == ShardLeases {
		bucket = map[string]string{"scheduler": "idlepool_lease", "scheduler_1": "idlepool_lease_1", "scheduler_2": "idlepool_lease_2"}
		if _, err := node.JetStream().KeyValue(ctx, "idlepool_leader"); !errors.Is(err, jetstream.ErrBucketNotFound) {
			t.Errorf("the shared bucket with leases per shard: %v, want none", err)
		}
	}
	for key, want := range map[string]string{"scheduler": `"node":"a"`, "scheduler_1": `"shard":1`, "scheduler_2": `"node":"b"`} {
		kv, err := node.JetStream().KeyValue(ctx, bucket[key])
		if err != nil {
			t.Fatalf("bucket %s: %v", bucket[key], err)
		}
		e, err := kv.Get(ctx, key)
		if err != nil || !strings.Contains(string(e.Value()), want) {
			t.Fatalf("key %s of %s: %v; want a value with %s", key, bucket[key], err, want)
		}
		if key == "scheduler" && strings.Contains(string(e.Value()), "shard") {
			t.Errorf("shard 0's lease names its shard: %s", e.Value())
		}
	}
	who := func() map[int]string {
		t.Helper()
		ls, err := b.Leaders(ctx, 4)
		if err != nil {
			t.Fatal(err)
		}
		out := map[int]string{}
		for s, info := range ls {
			if info.Shard != s || info.Term == 0 {
				t.Errorf("shard %d's lease says shard %d, term %d", s, info.Shard, info.Term)
			}
			out[s] = info.Node
		}
		return out
	}
	if d := cmp.Diff(map[int]string{0: "a", 1: "a", 2: "b"}, who()); d != "" {
		t.Fatalf("leaders (-want +got):\n%s", d)
	}
	if info, ok, err := b.Leader(ctx); err != nil || !ok || info.Node != "a" || info.Shard != 0 {
		t.Fatalf("Leader: %+v, %v, %v", info, ok, err)
	}
	t1.Resign()
	if d := cmp.Diff(map[int]string{0: "a", 2: "b"}, who()); d != "" {
		t.Fatalf("leaders after a resigned shard 1 (-want +got):\n%s", d)
	}
	if lead(b, 1, "b") == nil {
		t.Fatal("b could not lead shard 1 once a resigned it")
	}
}

// campaignWatch records the terms each node's campaign reports and
// checks, at every report, that no shard is led by two nodes at once:
// a node reporting a term of shard s while another node's term of s has
// not ended (its Lost not closed) is a double leadership, and so is a
// node past its limit.
type campaignWatch struct {
	limit   int
	mu      sync.Mutex
	terms   []map[int]*Term // by node
	standby []map[int]bool  // by node: the shards it stands by for
	bad     []string
}

func (w *campaignWatch) standbyOf(i int) func(map[int]bool) {
	return func(shards map[int]bool) {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.standby[i] = shards
	}
}

func (w *campaignWatch) report(i int) func(map[int]*Term) {
	return func(terms map[int]*Term) {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.terms[i] = terms
		if len(terms) > w.limit {
			w.bad = append(w.bad, fmt.Sprintf("node %d leads %d shards, more than %d", i+1, len(terms), w.limit))
		}
		for s, t := range terms {
			for j, other := range w.terms {
				if o := other[s]; j != i && o != nil && !ended(o) && !ended(t) {
					w.bad = append(w.bad, fmt.Sprintf("shard %d led by node %d (term %d) and node %d (term %d)", s, i+1, t.Info().Term, j+1, o.Info().Term))
				}
			}
		}
	}
}

func ended(t *Term) bool {
	select {
	case <-t.Lost():
		return true
	default:
		return false
	}
}

// counts returns how many shards each node reports leading.
func (w *campaignWatch) counts() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]int, len(w.terms))
	for i, ts := range w.terms {
		out[i] = len(ts)
	}
	return out
}

// Three nodes campaign for six shards: they settle at two each, as the
// leases say too; when one stops, the other two take its shards over,
// three each at most; at no report does a shard have two leaders. The
// deadlines are patience only.
func TestCampaignThreeNodes(t *testing.T) {
	t.Parallel() // long: runs beside the package's other long tests
	const k, ttl = 6, 3 * time.Second
	nodes := startNodes(t, testConfigs(t, t.TempDir(), 3))
	leads := make([]*Leadership, len(nodes))
	for i, n := range nodes {
		leads[i] = newLeadership(t, n, 3, ttl, ShardLeases, k)
	}
	w := &campaignWatch{limit: 3, terms: make([]map[int]*Term, len(nodes)), standby: make([]map[int]bool, len(nodes))}
	name := func(i int) string { return fmt.Sprintf("node%d", i+1) }
	names := []string{name(0), name(1), name(2)}
	// Every node is announced before any campaigns, as a node is
	// announced once it starts: each then counts three.
	for i, l := range leads {
		patience(t, 2*time.Minute, "announce "+name(i), func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), ttl)
			defer cancel()
			return l.Announce(ctx, NodeInfo{Name: name(i)}) == nil
		})
	}
	stops := make([]context.CancelFunc, len(nodes))
	var wg sync.WaitGroup
	stopped := make([]chan struct{}, len(nodes))
	for i, l := range leads {
		ctx, cancel := context.WithCancel(context.Background())
		stops[i], stopped[i] = cancel, make(chan struct{})
		wg.Go(func() { // the announcement, every half TTL
			tick := time.NewTicker(ttl / 2)
			defer tick.Stop()
			for {
				actx, cancel := context.WithTimeout(ctx, ttl/2)
				_ = l.Announce(actx, NodeInfo{Name: name(i)})
				cancel()
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		})
		wg.Go(func() {
			defer close(stopped[i])
			// A grace of 20 rounds (15 s) gives the successor of a
			// shard whose node stopped the time to take it even on a
			// busy machine: it is patience, not a verdict on speed.
			if err := l.Campaign(ctx, CampaignConfig{Shards: k, Info: LeaderInfo{Node: name(i)}, Report: w.report(i),
				Standby: w.standbyOf(i), Grace: 20}); err != nil {
				t.Errorf("campaign of %s: %v", name(i), err)
			}
		})
	}
	t.Cleanup(func() {
		for _, stop := range stops {
			stop()
		}
		wg.Wait()
	})
	// leasesSay returns how many shards each node leads by the leases,
	// read through node1, and checks each lease against the terms the
	// nodes report: a lease's node never sees another node's live term
	// of its shard.
	leasesSay := func() []int {
		ctx, cancel := context.WithTimeout(context.Background(), ttl)
		defer cancel()
		ls, err := leads[0].Leaders(ctx, k)
		if err != nil {
			return nil // an election: try again
		}
		out := make([]int, len(nodes))
		w.mu.Lock()
		defer w.mu.Unlock()
		for s, info := range ls {
			for i := range nodes {
				if name(i) == info.Node {
					out[i]++
				} else if o := w.terms[i][s]; o != nil && !ended(o) && o.Info().Term < info.Term {
					w.bad = append(w.bad, fmt.Sprintf("shard %d's lease is %s's (term %d), but %s's term %d has not ended", s, info.Node, info.Term, name(i), o.Info().Term))
				}
			}
		}
		return out
	}
	settled := func(want []int) func() bool {
		return func() bool {
			return cmp.Equal(w.counts(), want) && cmp.Equal(leasesSay(), want)
		}
	}
	began := time.Now()
	patience(t, 2*time.Minute, "two shards each", settled([]int{2, 2, 2}))
	t.Logf("settled at two shards each after %s", time.Since(began).Round(time.Millisecond))

	// Each node keeps warm the shards it leads and those it stands by
	// for: each shard has one standby, its leader's Successor.
	leaderOf := func() map[int]string {
		w.mu.Lock()
		defer w.mu.Unlock()
		out := map[int]string{}
		for i, ts := range w.terms {
			for s, t := range ts {
				if !ended(t) {
					out[s] = name(i)
				}
			}
		}
		return out
	}
	led := leaderOf()
	wantStandby := func() []map[int]bool {
		out := []map[int]bool{{}, {}, {}}
		for s := range k {
			succ := Successor(s, led[s], names)
			for i := range nodes {
				if name(i) == succ || name(i) == led[s] {
					out[i][s] = true
				}
			}
		}
		return out
	}()
	patience(t, 2*time.Minute, "each node standing by for its shards", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return cmp.Equal(w.standby, wantStandby)
	})
	var node3s []int
	for s, n := range led {
		if n == name(2) {
			node3s = append(node3s, s)
		}
	}

	// node3 stops: its campaign resigns its terms, then its server goes.
	stops[2]()
	<-stopped[2]
	if n := w.counts()[2]; n != 0 {
		t.Fatalf("node3 stopped still reporting %d terms", n)
	}
	nodes[2].Close()
	began = time.Now()
	patience(t, 2*time.Minute, "three shards each on node1 and node2", settled([]int{3, 3, 0}))
	t.Logf("node3's shards taken over %s after it stopped (it counts gone once its leases are gone and it has not announced itself for %s; a shard its successor cannot take waits for the grace of 20 rounds, %s)",
		time.Since(began).Round(time.Millisecond), ttl, 20*ttl/4)
	// Its shards went to their successors, the nodes that stood by,
	// as far as each could take them: each may take one more (share 3),
	// so where both had one successor the other went to the other node,
	// after the grace.
	after := leaderOf()
	got := map[string]int{}
	for _, s := range node3s {
		got[after[s]]++
	}
	for _, s := range node3s {
		if want := Successor(s, name(2), names); after[s] != want && got[want] == 0 {
			t.Errorf("node3's shard %d went to %s, and its successor %s took none of node3's %v", s, after[s], want, node3s)
		}
	}

	for _, stop := range stops {
		stop()
	}
	wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, b := range w.bad {
		t.Error(b)
	}
}

// patience polls ok every 100 ms until it holds, failing the test when
// it has not held within limit: a bound on waiting, never a verdict on
// speed.
func patience(t *testing.T, limit time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not so after %s", what, limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// On one node, as two would: a campaign alone leads every shard; when a
// second node is announced and campaigns, the first gives shards up
// until each leads its share; a term taken from under a node (its lease
// overwritten) is ended and reported gone; when the campaigns end, their
// leases are deleted.
func TestCampaignSharesAndLoses(t *testing.T) {
	t.Parallel()
	const k, ttl = 4, 2 * time.Second
	node := startNodes(t, testConfigs(t, t.TempDir(), 1))[0]
	ctx := context.Background()
	leads := []*Leadership{newLeadership(t, node, 1, ttl, ShardLeases, k), newLeadership(t, node, 1, ttl, ShardLeases, k),
		newLeadership(t, node, 1, ttl, ShardLeases, k)}
	w := &campaignWatch{limit: k, terms: make([]map[int]*Term, 3)}
	var wg sync.WaitGroup
	stops := make([]context.CancelFunc, 3)
	start := func(i int) {
		name := fmt.Sprintf("node%d", i+1)
		if err := leads[i].Announce(ctx, NodeInfo{Name: name}); err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithCancel(ctx)
		stops[i] = cancel
		wg.Go(func() {
			if err := leads[i].Campaign(cctx, CampaignConfig{Shards: k, Info: LeaderInfo{Node: name}, Every: ttl / 8, Report: w.report(i)}); err != nil {
				t.Errorf("campaign of %s: %v", name, err)
			}
		})
	}
	t.Cleanup(func() {
		for _, stop := range stops {
			if stop != nil {
				stop()
			}
		}
		wg.Wait()
	})
	leaders := func() map[int]string {
		lctx, cancel := context.WithTimeout(ctx, ttl)
		defer cancel()
		ls, err := leads[0].Leaders(lctx, k)
		if err != nil {
			return nil
		}
		out := map[int]string{}
		for s, info := range ls {
			out[s] = info.Node
		}
		return out
	}
	start(0)
	patience(t, 2*time.Minute, "node1 alone leads every shard", func() bool {
		return cmp.Equal(w.counts(), []int{k, 0, 0}) && len(leaders()) == k
	})
	start(1)
	patience(t, 2*time.Minute, "two shards each", func() bool {
		ls := leaders()
		n := map[string]int{}
		for _, name := range ls {
			n[name]++
		}
		return cmp.Equal(w.counts(), []int{2, 2, 0}) && n["node1"] == 2 && n["node2"] == 2
	})
	// A third node: each of the others leads the rounded-up share of 4
	// over 3 already (2), but the third would lead none; node2 (the
	// greatest name of the two) gives it one.
	start(2)
	patience(t, 2*time.Minute, "2, 1 and 1 shards", func() bool {
		ls := leaders()
		n := map[string]int{}
		for _, name := range ls {
			n[name]++
		}
		return cmp.Equal(w.counts(), []int{2, 1, 1}) && n["node1"] == 2 && n["node2"] == 1 && n["node3"] == 1
	})

	// Another writer overwrites one of node1's leases: node1's term of
	// that shard is refused at its next renewal and ended, and nobody
	// campaigns for a shard that is led.
	w.mu.Lock()
	var taken int
	for s := range w.terms[0] {
		taken = s
	}
	w.mu.Unlock()
	kv, err := node.JetStream().KeyValue(ctx, Shard{Index: taken}.LeaseBucket())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, Shard{Index: taken}.LeaderKey(), []byte(`{"node":"intruder"}`)); err != nil {
		t.Fatal(err)
	}
	patience(t, 2*time.Minute, "node1's overwritten term ended", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.terms[0][taken] == nil
	})
	if got := leaders()[taken]; got != "intruder" {
		t.Fatalf("shard %d is led by %q, want the intruder", taken, got)
	}

	for _, stop := range stops {
		stop()
	}
	wg.Wait()
	if c := w.counts(); !cmp.Equal(c, []int{0, 0, 0}) {
		t.Fatalf("campaigns ended reporting %v terms", c)
	}
	if ls := leaders(); !cmp.Equal(ls, map[int]string{taken: "intruder"}) {
		t.Fatalf("leases after the campaigns ended: %v, want only the intruder's", ls)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, b := range w.bad {
		t.Error(b)
	}
}

// Successor never names the leader, names "" when no other node is live,
// names the same node whatever the order of the live nodes, spreads the
// shards of one leader over the others, and moves only the shards a node
// won when that node goes (rendezvous hashing's property).
func TestSuccessor(t *testing.T) {
	live := []string{"node1", "node2", "node3", "node4", "node5"}
	if got := Successor(0, "node1", []string{"node1"}); got != "" {
		t.Errorf("only the leader live: %q, want \"\"", got)
	}
	if got := Successor(0, "node1", nil); got != "" {
		t.Errorf("no node live: %q, want \"\"", got)
	}
	per := map[string]int{}
	for s := range MaxShards {
		got := Successor(s, "node1", live)
		if got == "" || got == "node1" {
			t.Fatalf("shard %d: successor %q of node1", s, got)
		}
		per[got]++
		rev := slices.Clone(live)
		slices.Reverse(rev)
		if again := Successor(s, "node1", rev); again != got {
			t.Errorf("shard %d: %s, and %s with the live nodes in another order", s, got, again)
		}
		// A node that is not the successor goes: nothing moves.
		for _, gone := range live[1:] {
			if gone == got {
				continue
			}
			left := slices.DeleteFunc(slices.Clone(live), func(n string) bool { return n == gone })
			if again := Successor(s, "node1", left); again != got {
				t.Errorf("shard %d: %s, and %s once %s is gone", s, got, again, gone)
			}
		}
	}
	for _, n := range live[1:] {
		if per[n] < MaxShards/8 { // 16 each on average
			t.Errorf("node1's %d shards spread as %v: %s stands by for %d", MaxShards, per, n, per[n])
		}
	}
}

// A renewal whose answer was lost but which landed (its time ran out on
// a loaded machine) does not end the term: the next renewal, refused for
// its stale revision, finds the lease still holding this term's value
// and goes on from the revision that landed. A lease another node wrote
// still ends it.
func TestTermSurvivesALandedRenewal(t *testing.T) {
	t.Parallel()
	// A lease of a minute, renewed every 15 s and given up after 45 s
	// without a renewal: a loaded machine cannot end the term on its
	// own. Publish makes the term renew at once, so nothing waits.
	const ttl = time.Minute
	node := startNodes(t, testConfigs(t, t.TempDir(), 1))[0]
	l := newLeadership(t, node, 1, ttl, ShardLeases, 2)
	ctx := t.Context()
	term, err := l.TryLeadShard(ctx, 1, LeaderInfo{Node: "a"})
	if err != nil || term == nil {
		t.Fatalf("TryLeadShard: %v, %v", term, err)
	}
	defer term.Resign()
	key := Shard{Index: 1}.LeaderKey()
	revision := func() uint64 {
		e, err := term.kv.Get(ctx, key)
		if err != nil {
			return 0
		}
		return e.Revision()
	}
	// Once the term renewed (its value then names its term), as the
	// node's own lost update would: the same value, written over the
	// lease's newest revision.
	term.Publish("http://127.0.0.1:1")
	patience(t, time.Minute, "the term's first renewal", func() bool { return revision() > term.Info().Term })
	e, err := term.kv.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	landed, err := term.kv.Update(ctx, key, e.Value(), e.Revision())
	if err != nil {
		t.Fatal(err)
	}
	term.Publish("http://127.0.0.1:2")
	patience(t, time.Minute, "the term to renew past the update that landed", func() bool { return revision() > landed })
	if ended(term) {
		t.Fatalf("the term ended: %v", term.Err())
	}
	// Another node's value over it ends the term at its next renewal.
	if _, err := term.kv.Update(ctx, key, []byte(`{"node":"b","term":1}`), revision()); err != nil {
		t.Fatal(err)
	}
	term.Publish("http://127.0.0.1:3")
	select {
	case <-term.Lost():
	case <-time.After(time.Minute): // the renewal comes at once; a bound, not a verdict on speed
		t.Fatal("a lease another node wrote did not end the term")
	}
	if !strings.Contains(term.Err().Error(), "another node holds the leader lease") {
		t.Errorf("the term ended with %v", term.Err())
	}
}

// Nodes gives the whole list or an error, never part of it: a list cut
// short by its time running out counted too few live nodes, and each
// node's campaign then took more than its share.
func TestNodesWholeOrError(t *testing.T) {
	t.Parallel()
	node := startNodes(t, testConfigs(t, t.TempDir(), 1))[0]
	l := newLeadership(t, node, 1, 5*time.Second, ShardLeases, 1)
	ctx := t.Context()
	for _, n := range []string{"a", "b", "c"} {
		if err := l.Announce(ctx, NodeInfo{Name: n}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := l.Nodes(ctx)
	if err != nil || len(got) != 3 || got[0].Name != "a" || got[2].Name != "c" {
		t.Fatalf("Nodes: %+v, %v; want a, b, c", got, err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if got, err := l.Nodes(done); err == nil {
		t.Errorf("Nodes with its time run out: %+v, no error; want an error", got)
	}
	// A bucket that gives one node's key and then nothing (its stream
	// stalled mid-list): the time runs out, and Nodes says so.
	e, err := l.nodes.Get(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	stalled := &Leadership{nodes: &oneKeyWatch{first: e}, ttl: time.Second, now: time.Now}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if got, err := stalled.Nodes(short); !errors.Is(err, pool.ErrStoreUnavailable) {
		t.Errorf("Nodes of a list cut short: %+v, %v; want an error wrapping pool.ErrStoreUnavailable", got, err)
	}
	// A watch that says it gave every key after one of three (its mark
	// came early, as JetStream's may while keys are written): Nodes
	// reads again rather than answer one node, and says its time ran
	// out.
	early := &Leadership{nodes: &oneKeyWatch{KeyValue: l.nodes, first: e, end: true}, ttl: time.Second, now: time.Now}
	short, cancel = context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if got, err := early.Nodes(short); !errors.Is(err, pool.ErrStoreUnavailable) {
		t.Errorf("Nodes of a watch whose end came early: %+v, %v; want an error wrapping pool.ErrStoreUnavailable", got, err)
	}
}

// oneKeyWatch is a key-value bucket whose watch gives one entry and
// then, with end, says it gave every key (its mark came early), or,
// without, gives nothing until its context ends (its stream stalled
// mid-list).
type oneKeyWatch struct {
	jetstream.KeyValue
	first jetstream.KeyValueEntry
	end   bool
}

func (s *oneKeyWatch) WatchAll(ctx context.Context, _ ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	ch := make(chan jetstream.KeyValueEntry, 2)
	ch <- s.first
	if s.end {
		ch <- nil
	}
	return &stalledWatcher{ch: ch}, nil
}

type stalledWatcher struct{ ch chan jetstream.KeyValueEntry }

func (w *stalledWatcher) Updates() <-chan jetstream.KeyValueEntry { return w.ch }
func (w *stalledWatcher) Stop() error                             { return nil }

// A campaign counts gone a node that holds no lease and whose
// announcement was stored more than a lease length before the newest
// one; a node that holds a lease, whatever its announcement's age, and
// this node are always counted; nothing is counted gone when the leases
// could not be read.
func TestLiveNames(t *testing.T) {
	const ttl = 3 * time.Second
	at := func(s float64) time.Time { return time.Unix(1000, 0).Add(time.Duration(s * float64(time.Second))) }
	nodes := []nodeEntry{
		{NodeInfo{Name: "a"}, at(10)},  // the newest
		{NodeInfo{Name: "b"}, at(8)},   // within a lease length
		{NodeInfo{Name: "c"}, at(6.9)}, // older, holds a lease
		{NodeInfo{Name: "d"}, at(6.9)}, // older, holds none: gone
		{NodeInfo{Name: "e"}, at(7)},   // exactly a lease length older: live
	}
	leaders := map[int]LeaderInfo{0: {Node: "a"}, 1: {Node: "c"}}
	for _, tc := range []struct {
		name  string
		self  string
		known bool
		want  []string
	}{
		{"leases read", "a", true, []string{"a", "b", "c", "e"}},
		{"leases not read", "a", false, []string{"a", "b", "c", "d", "e"}},
		{"self late and leaseless", "d", true, []string{"a", "b", "c", "d", "e"}},
		{"self not listed yet", "f", true, []string{"a", "b", "c", "e", "f"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, liveNames(nodes, leaders, tc.known, tc.self, ttl)); d != "" {
				t.Errorf("live (-want +got):\n%s", d)
			}
		})
	}
	if got := liveNames(nil, nil, true, "a", ttl); !slices.Equal(got, []string{"a"}) {
		t.Errorf("no announcements: %v, want this node alone", got)
	}
}

// A node over its share gives up a shard whose successor leads less
// than its share (it stood by for it, and takes it at once), the
// highest such; else its highest shard.
func TestGiveUp(t *testing.T) {
	names := []string{"a", "b", "c"}
	// The successors of node a's shards among a, b and c.
	succ := map[int]string{}
	for s := range 8 {
		succ[s] = Successor(s, "a", names)
	}
	var toB, toC []int
	for s := range 8 {
		if succ[s] == "b" {
			toB = append(toB, s)
		} else {
			toC = append(toC, s)
		}
	}
	if len(toB) < 2 || len(toC) < 2 {
		t.Fatalf("successors of shards 0-7 of a: %v; the test needs two of each", succ)
	}
	held := func(ss ...int) map[int]*Term {
		m := map[int]*Term{}
		for _, s := range ss {
			m[s] = nil
		}
		return m
	}
	tests := []struct {
		name   string
		held   map[int]*Term
		counts map[string]int
		share  int
		want   int
	}{
		{"c joined: a gives c a shard c stood by for", held(toB[0], toB[1], toC[0]), map[string]int{"a": 3, "b": 2}, 2, toC[0]},
		{"the highest of those", held(toC[0], toC[1], toB[0]), map[string]int{"a": 3, "b": 2}, 2, max(toC[0], toC[1])},
		{"b joined", held(toB[0], toC[0], toC[1]), map[string]int{"a": 3, "c": 2}, 2, toB[0]},
		{"every successor at its share: the highest", held(toB[0], toC[0], toB[1]), map[string]int{"a": 3, "b": 2, "c": 2}, 2, max(toB[0], toB[1], toC[0])},
		{"the leases unread (no counts): the highest successor's", held(toB[0], toC[0]), map[string]int{}, 1, max(toB[0], toC[0])},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := giveUp(tt.held, "a", names, tt.counts, tt.share); got != tt.want {
				t.Errorf("giveUp = %d, want %d", got, tt.want)
			}
		})
	}
}

// A node that may lead another shard waits for the grace only while the
// shard's successor would take it: not when the successor leads its
// share already, nor when it is the successor itself.
func TestLeavesToSuccessor(t *testing.T) {
	names := []string{"a", "b", "c"}
	s := 0
	succ := Successor(s, "a", names) // a led shard 0
	other := "b"
	if succ == "b" {
		other = "c"
	}
	tests := []struct {
		name   string
		last   string
		self   string
		counts map[string]int
		want   bool
	}{
		{"the successor under its share takes it first", "a", other, map[string]int{succ: 0}, true},
		{"the successor at its share would not", "a", other, map[string]int{succ: 1}, false},
		{"this node is the successor", "a", succ, map[string]int{succ: 0}, false},
		{"never seen led", "", other, map[string]int{}, false},
		{"this node led it", other, other, map[string]int{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := leavesToSuccessor(s, tt.last, tt.self, names, tt.counts, 1); got != tt.want {
				t.Errorf("leavesToSuccessor(%d, %q, %q, %v) = %v, want %v", s, tt.last, tt.self, tt.counts, got, tt.want)
			}
		})
	}
}

// A node gives a shard up when it leads more than the rounded-up share,
// or when it leads the most while another leads fewer than the
// rounded-down share: one node a round, the one with the most shards
// and the greatest name.
func TestSheds(t *testing.T) {
	names := []string{"a", "b", "c"}
	fresh := map[string]bool{"a": true, "b": true, "c": true}
	tests := []struct {
		name   string
		self   string
		held   int
		counts map[string]int
		k      int
		want   bool
	}{
		{"over the rounded-up share", "a", 3, map[string]int{"a": 3, "b": 1}, 4, true},
		{"over it, the leases unread", "a", 3, nil, 4, true},
		{"4 over 3 at 2, 2, 0: the greatest name gives", "b", 2, map[string]int{"a": 2, "b": 2}, 4, true},
		{"4 over 3 at 2, 2, 0: the other waits", "a", 2, map[string]int{"a": 2, "b": 2}, 4, false},
		{"4 over 3 at 2, 1, 1: balanced", "a", 2, map[string]int{"a": 2, "b": 1, "c": 1}, 4, false},
		{"7 over 3 at 3, 3, 1: one gives", "b", 3, map[string]int{"a": 3, "b": 3, "c": 1}, 7, true},
		{"7 over 3 at 3, 2, 2: balanced", "a", 3, map[string]int{"a": 3, "b": 2, "c": 2}, 7, false},
		{"the one that leads the most gives", "a", 3, map[string]int{"a": 3, "b": 2, "c": 0}, 5, true},
		{"not one that leads less", "b", 2, map[string]int{"a": 3, "b": 2, "c": 0}, 5, false},
		{"the leases unread: only the rounded-up share", "b", 2, nil, 4, false},
		{"at the rounded-down share", "a", 1, map[string]int{"a": 1, "b": 1, "c": 0}, 3, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := sheds(tt.self, tt.held, names, tt.counts, fresh, tt.k); got != tt.want {
				t.Errorf("sheds(%q, %d, %v, k=%d) = %v, want %v", tt.self, tt.held, tt.counts, tt.k, got, tt.want)
			}
		})
	}
}

// A node that leads nothing because it died (its leases lapsed, its
// announcement growing old) gets no shard given up for it: only a node
// that announced itself lately counts as one that leads too few.
func TestShedsForFreshNodesOnly(t *testing.T) {
	const ttl = 3 * time.Second
	base := time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC)
	nodes := []nodeEntry{
		{NodeInfo: NodeInfo{Name: "a"}, stored: base.Add(2 * ttl)},
		{NodeInfo: NodeInfo{Name: "b"}, stored: base.Add(2*ttl - ttl/4)},
		{NodeInfo: NodeInfo{Name: "c"}, stored: base.Add(ttl)}, // died a lease length ago
	}
	fresh := freshNames(nodes, ttl)
	if diff := cmp.Diff(map[string]bool{"a": true, "b": true}, fresh); diff != "" {
		t.Fatalf("fresh nodes (-want +got):\n%s", diff)
	}
	names := []string{"a", "b", "c"}
	counts := map[string]int{"a": 2, "b": 2}
	if sheds("b", 2, names, counts, fresh, 4) {
		t.Error("b gives a shard up for c, which died")
	}
	fresh["c"] = true // c joined instead
	if !sheds("b", 2, names, counts, fresh, 4) {
		t.Error("b gives no shard up for c, which joined")
	}
}
