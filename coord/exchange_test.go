package coord

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"idlepool/pool"
)

// memHeads is a HeadBoard in memory that behaves as cluster.LedgerHeads
// does: a head never goes back.
type memHeads struct {
	mu    sync.Mutex
	heads map[int]pool.ChainHead
}

func (m *memHeads) Publish(_ context.Context, h pool.ChainHead) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h.Seq > m.heads[h.Shard].Seq {
		m.heads[h.Shard] = h
	}
	return nil
}

func (m *memHeads) Heads(context.Context) ([]pool.ChainHead, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []pool.ChainHead
	for _, h := range m.heads {
		out = append(out, h)
	}
	return out, nil
}

// memUsage is a UsageBoard in memory that behaves as cluster.Usage does:
// a shard's figures replace its figures before.
type memUsage struct {
	mu    sync.Mutex
	usage map[int]pool.ShardUsage
}

func (m *memUsage) Publish(_ context.Context, u pool.ShardUsage) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.usage[u.Shard] = u
	return nil
}

func (m *memUsage) Read(context.Context) ([]pool.ShardUsage, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []pool.ShardUsage
	for _, u := range m.usage {
		out = append(out, u)
	}
	return out, nil
}

// Two shards of a pool, each coordinator wired to one board of heads and
// one of fair-share figures: once a job is decided on shard 0, shard 1's
// ledger anchors shard 0's head (and the anchors verify over both
// ledgers), and shard 1's scheduler counts the job's owner's use of
// shard 0 in its fair share.
func TestShardsExchangeHeadsAndUsage(t *testing.T) {
	heads := &memHeads{heads: map[int]pool.ChainHead{}}
	usage := &memUsage{usage: map[int]pool.ShardUsage{}}
	shards := startShardsWith(t, 2, func(_ int, c *Config) {
		c.Cluster.LedgerHeads, c.Cluster.Usage, c.Cluster.ExchangeEvery = heads, usage, 20*time.Millisecond
	})
	zero := shards[0]
	alice, bob, carol := newPeer(t, nil), newPeer(t, nil), newPeer(t, nil)
	for _, p := range []*testPeer{alice, bob, carol} {
		zero.register(t, p, "", http.StatusCreated)
	}
	j := testJob(t, "exchange", 2)
	zero.upload(t, alice, programBytes(t, j))
	if a := zero.do(t, alice, "POST", "/v1/jobs", JobRequest{Canonical: j.Canonical}); a.status != http.StatusCreated {
		t.Fatalf("submit job: %d %s", a.status, a.body)
	}
	for _, p := range []*testPeer{bob, carol} {
		zero.offer(t, p)
		for _, l := range zero.leaseSome(t, p, 2) {
			zero.returnResult(t, p, l, "same bytes")
		}
	}
	owner := alice.owner.ID()
	z := zero.downloadLedger(t, "") // every task is decided: shard 0's ledger stays so
	head := z[len(z)-1]
	var o []pool.Entry
	waitUntil(t, patience(t), "shard 1 to anchor shard 0's head and count alice's use", func() bool {
		o = shards[1].downloadLedger(t, "")
		if len(o) == 0 || o[len(o)-1].Kind != pool.KindAnchor || o[len(o)-1].Work != head.Seq {
			return false
		}
		return shards[1].sched.OwnerUse(owner).Usage > 0 // alice has no job on shard 1
	})
	if n, err := pool.VerifyAnchors([][]pool.Entry{z, o}); err != nil || n[0] != 0 || n[1] == 0 {
		t.Fatalf("VerifyAnchors: %v, %v; want shard 1's anchors of shard 0 to hold, and none in shard 0", n, err)
	}
	if a := o[len(o)-1]; a.Task != 0 || a.Digest != head.Hash() {
		t.Fatalf("shard 1's anchor %+v does not name shard 0's head, entry %d", a, head.Seq)
	}
	// Shard 1's metrics count its anchors.
	fams, err := shards[1].metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var anchors float64
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			if f.GetName() == "idlepool_coord_ledger_entries_total" && m.GetLabel()[0].GetValue() == pool.KindAnchor {
				anchors = m.GetCounter().GetValue()
			}
		}
	}
	want := 0
	for _, e := range o {
		if e.Kind == pool.KindAnchor {
			want++
		}
	}
	if int(anchors) != want {
		t.Errorf("idlepool_coord_ledger_entries_total{kind=\"anchor\"} of shard 1: %v, want its %d anchors", anchors, want)
	}
}
