package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"idlepool/pool"
)

// Buckets of the cluster's coordination in JetStream key-value stores.
const (
	// LeaderBucket holds the lease of the node in charge of scheduling
	// under the key "scheduler"; its TTL is the lease's length. A pool
	// divided into shards keeps each shard's lease here too, under the
	// shard's LeaderKey ("scheduler" for shard 0).
	LeaderBucket = "idlepool_leader"
	leaderKey    = "scheduler"
	// LeaseBucket is where shard 0 keeps its lease in a pool begun
	// with ShardLeases; shard S keeps its own in LeaseBucket + "_S"
	// (Shard.LeaseBucket), under the same key as in LeaderBucket.
	LeaseBucket = "idlepool_lease"
	// NodesBucket lists the live nodes, each under its name, refreshed by
	// the node and gone three lease lengths after it stops.
	NodesBucket = "idlepool_nodes"
)

// LeaseLayout says where a clustered pool keeps its shards' leader
// leases. The pool's rules record it when the pool begins
// (Rules.ClaimShards), and every node of the pool uses the same.
type LeaseLayout int

const (
	// SharedLeases keeps every shard's lease in the one bucket
	// LeaderBucket: the pools begun before ShardLeases. The death of
	// the node that leads that bucket's stream stalls every lease's
	// renewal until JetStream elects another leader for it (4 to 9
	// s), longer than a node in charge keeps a lease it cannot renew.
	SharedLeases LeaseLayout = iota
	// ShardLeases keeps each shard's lease in a bucket of its own
	// (Shard.LeaseBucket), whose stream the shard's node in charge
	// leads (Store.LeadStreams, Shard.Streams): a node's death stalls
	// the renewals of the leases of the shards it was in charge of,
	// which end anyway, and no other.
	ShardLeases
)

// String is "shared" or "per-shard".
func (ll LeaseLayout) String() string {
	if ll == ShardLeases {
		return "per-shard"
	}
	return "shared"
}

// LeaderInfo is the value of the leader lease: which node is in charge,
// where agents reach it and where the other nodes forward requests to it
// (Internal, empty until its coordinator is ready), and since when. Term
// counts the terms: it is the key's revision when the term began. Shard
// is the shard the lease is for (0, left out of the value, for the
// lease of an undivided pool, as before shards).
type LeaderInfo struct {
	Node     string    `json:"node"`
	URL      string    `json:"url"`
	Internal string    `json:"internal,omitempty"`
	Since    time.Time `json:"since"`
	Term     uint64    `json:"term,omitempty"`
	Shard    int       `json:"shard,omitempty"`
}

// Leadership elects the node in charge of a clustered pool with a lease
// in a JetStream key-value bucket (replicated like the pool's state, TTL
// = the lease's length; LeaseLayout says which): a node becomes leader by
// creating the key (JetStream refuses a create when the key exists, so
// at most one node holds it), keeps it by updating it with the revision
// it last wrote (optimistic concurrency) every quarter of the TTL, and
// gives it up when an update is refused (unless the lease still holds
// this term's value: an update of its own landed without its answer,
// and it goes on from that revision) or when three quarters of the
// TTL passed since the last update that was accepted — before JetStream
// can have let the key expire for anyone else, so two nodes never both
// believe they are in charge for long, and the pool's state stream
// fences the rare overlap (ErrFenced). A node cut off from the majority
// cannot update and so steps down. A pool divided into shards has one
// such lease per shard, each under its shard's key (TryLeadShard,
// Leaders, Campaign), in one bucket or one bucket per shard
// (LeaseLayout).
type Leadership struct {
	// kvs are the lease buckets: kvs[0] alone (LeaderBucket) with
	// SharedLeases, kvs[s] shard s's with ShardLeases.
	kvs    []jetstream.KeyValue
	layout LeaseLayout
	nodes  jetstream.KeyValue
	ttl    time.Duration
	now    func() time.Time
}

// NewLeadership creates (or opens) the buckets of a pool divided into k
// shards (1 to MaxShards) whose leases are laid out as layout (the
// pool's, from Rules.ClaimShards): the lease buckets (one, LeaderBucket,
// with SharedLeases; k, Shard.LeaseBucket, with ShardLeases) and the
// nodes bucket, each with replicas replicas, with the lease length ttl.
// Errors: one wrapping ErrShard for k out of range; one wrapping
// pool.ErrStoreUnavailable, naming the bucket, when JetStream did not
// answer.
func NewLeadership(ctx context.Context, js jetstream.JetStream, replicas int, ttl time.Duration, layout LeaseLayout, k int) (*Leadership, error) {
	if err := ValidateShardCount(k); err != nil {
		return nil, err
	}
	l := &Leadership{layout: layout, ttl: ttl, now: time.Now}
	if layout == ShardLeases {
		for s := range k {
			sh := Shard{Index: s, Count: k}
			kv, err := openKV(ctx, js, jetstream.KeyValueConfig{Bucket: sh.LeaseBucket(), Description: "idlepool: the node in charge of " + sh.String(),
				History: 1, TTL: ttl, Replicas: replicas, Storage: jetstream.FileStorage})
			if err != nil {
				return nil, fmt.Errorf("cluster: lease bucket %s: %w", sh.LeaseBucket(), unavailable(err))
			}
			l.kvs = append(l.kvs, kv)
		}
	} else {
		kv, err := openKV(ctx, js, jetstream.KeyValueConfig{Bucket: LeaderBucket, Description: "idlepool: the node in charge",
			History: 1, TTL: ttl, Replicas: replicas, Storage: jetstream.FileStorage})
		if err != nil {
			return nil, fmt.Errorf("cluster: leader bucket: %w", unavailable(err))
		}
		l.kvs = []jetstream.KeyValue{kv}
	}
	nodes, err := openKV(ctx, js, jetstream.KeyValueConfig{Bucket: NodesBucket, Description: "idlepool: live nodes",
		History: 1, TTL: 3 * ttl, Replicas: replicas, Storage: jetstream.FileStorage})
	if err != nil {
		return nil, fmt.Errorf("cluster: nodes bucket: %w", unavailable(err))
	}
	l.nodes = nodes
	return l, nil
}

// Layout returns where the leases are kept.
func (l *Leadership) Layout() LeaseLayout { return l.layout }

// bucket returns the bucket of shard s's lease, or an error wrapping
// ErrShard when s is outside 0..MaxShards-1, or (ShardLeases) outside
// the shards the buckets were opened for.
func (l *Leadership) bucket(s int) (jetstream.KeyValue, error) {
	if s < 0 || s >= MaxShards {
		return nil, fmt.Errorf("%w: shard %d: want 0 to %d", ErrShard, s, MaxShards-1)
	}
	if l.layout != ShardLeases {
		return l.kvs[0], nil
	}
	if s >= len(l.kvs) {
		return nil, fmt.Errorf("%w: shard %d: the pool has %d shards", ErrShard, s, len(l.kvs))
	}
	return l.kvs[s], nil
}

// openKV binds to the bucket of cfg, creating it when it does not exist
// (the first node to start makes it; the others bind).
func openKV(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	return openBucket(ctx, cfg.Bucket, js.KeyValue, func(ctx context.Context) (jetstream.KeyValue, error) {
		return js.CreateKeyValue(ctx, cfg)
	})
}

// openObjectStore is openKV for an object store.
func openObjectStore(ctx context.Context, js jetstream.JetStream, cfg jetstream.ObjectStoreConfig) (jetstream.ObjectStore, error) {
	return openBucket(ctx, cfg.Bucket, js.ObjectStore, func(ctx context.Context) (jetstream.ObjectStore, error) {
		return js.CreateObjectStore(ctx, cfg)
	})
}

// openBucket binds to bucket (bind), creating it when it does not exist
// (create). When create says it exists (another node made it meanwhile;
// JetStream says so when that node's configuration differs, an older
// version's say, and makes nothing twice), it binds again; "not found"
// then means that the server that answered has not applied the bucket
// yet, as a cluster's first start on a loaded machine showed for a
// bucket's stream: a wait (pool.ErrStoreUnavailable), on which the
// coordinator tries again, not a failure.
func openBucket[B any](ctx context.Context, bucket string, bind func(context.Context, string) (B, error), create func(context.Context) (B, error)) (B, error) {
	b, err := bind(ctx, bucket)
	if !notFound(err) {
		return b, err
	}
	b, err = create(ctx)
	if !errors.Is(err, jetstream.ErrBucketExists) && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return b, err
	}
	b, err = bind(ctx, bucket)
	if notFound(err) {
		err = fmt.Errorf("%w: bucket %s, made by another node a moment ago, is not known yet to the server that answered: %w",
			pool.ErrStoreUnavailable, bucket, err)
	}
	return b, err
}

// getCreated reads key, which a create just found to exist (another
// node wrote it a moment ago). "Not found" then means that the server
// that answered has not applied it yet, which a three-node first start
// on a loaded machine showed for the shard count (the node stopped
// serving, and its shards waited for it): a wait (pool.ErrStoreUnavailable),
// not a failure.
func getCreated(ctx context.Context, kv jetstream.KeyValue, key string) (jetstream.KeyValueEntry, error) {
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		err = fmt.Errorf("%w: %s, written by another node a moment ago, is not known yet to the server that answered: %w",
			pool.ErrStoreUnavailable, key, err)
	}
	return e, err
}

func notFound(err error) bool {
	return errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound)
}

// TTL returns the lease's length.
func (l *Leadership) TTL() time.Duration { return l.ttl }

// Leader returns the current lease's value; ok is false when no node
// holds it. An error means JetStream did not answer (this node is cut off
// or the cluster is electing). It is ShardLeader of shard 0.
func (l *Leadership) Leader(ctx context.Context) (info LeaderInfo, ok bool, err error) {
	return l.ShardLeader(ctx, 0)
}

// ShardLeader returns the value of shard s's lease (key Shard.LeaderKey);
// ok is false when no node holds it. Errors: one wrapping ErrShard when
// s is outside 0..MaxShards-1 (or the pool's shards, with ShardLeases);
// one wrapping pool.ErrStoreUnavailable when JetStream did not answer.
func (l *Leadership) ShardLeader(ctx context.Context, s int) (info LeaderInfo, ok bool, err error) {
	kv, err := l.bucket(s)
	if err != nil {
		return LeaderInfo{}, false, err
	}
	key := Shard{Index: s}.LeaderKey()
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return LeaderInfo{}, false, nil
	}
	if err != nil {
		return LeaderInfo{}, false, unavailable(err)
	}
	if err := json.Unmarshal(e.Value(), &info); err != nil {
		return LeaderInfo{}, false, fmt.Errorf("cluster: leader lease %s holds %q: %w", key, e.Value(), err)
	}
	if info.Term == 0 { // written at the term's start, before its revision was known
		info.Term = e.Revision()
	}
	info.Shard = s
	return info, true, nil
}

// Leaders returns the leases of shards 0 to k-1 that a node holds, by
// shard; a shard no node holds is absent. Errors: one wrapping ErrShard
// when k is outside 1..MaxShards; the first ShardLeader error otherwise
// (no partial answer).
func (l *Leadership) Leaders(ctx context.Context, k int) (map[int]LeaderInfo, error) {
	if err := ValidateShardCount(k); err != nil {
		return nil, err
	}
	out := make(map[int]LeaderInfo, k)
	for s := range k {
		info, ok, err := l.ShardLeader(ctx, s)
		if err != nil {
			return nil, fmt.Errorf("cluster: leader of shard %d: %w", s, err)
		}
		if ok {
			out[s] = info
		}
	}
	return out, nil
}

// Term is one node's time in charge. Lost is closed when it ends.
type Term struct {
	l     *Leadership
	kv    jetstream.KeyValue // the lease's bucket
	key   string             // the lease's key (the shard's LeaderKey)
	shard int
	mu    sync.Mutex // guards info
	info  LeaderInfo
	kick  chan struct{}
	rev   uint64
	lost  chan struct{}
	done  chan struct{}
	stop  context.CancelFunc
	// why says why the term ended; read after Lost is closed.
	why error
}

// TryLead takes the lease for info when no node holds it and returns the
// term, or nil when another node holds it. The term renews the lease in
// the background until Resign or until it is lost. It is TryLeadShard
// of shard 0.
func (l *Leadership) TryLead(ctx context.Context, info LeaderInfo) (*Term, error) {
	return l.TryLeadShard(ctx, 0, info)
}

// TryLeadShard takes shard s's lease (key Shard.LeaderKey, in the
// bucket LeaseLayout gives) for info when no node holds it and returns
// the term, or nil when another node holds it; info.Shard is set to s.
// The term renews the lease in the background until Resign or until it
// is lost, exactly as TryLead's. Errors: one wrapping ErrShard when s is
// outside 0..MaxShards-1 (or the pool's shards, with ShardLeases); one
// wrapping pool.ErrStoreUnavailable when JetStream did not answer.
func (l *Leadership) TryLeadShard(ctx context.Context, s int, info LeaderInfo) (*Term, error) {
	kv, err := l.bucket(s)
	if err != nil {
		return nil, err
	}
	key := Shard{Index: s}.LeaderKey()
	info.Shard = s
	info.Since = l.now().UTC()
	b, _ := json.Marshal(info)
	sent := l.now()
	rev, err := kv.Create(ctx, key, b)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return nil, nil
	}
	if err != nil {
		if s == 0 {
			return nil, fmt.Errorf("cluster: take the leader lease: %w", unavailable(err))
		}
		return nil, fmt.Errorf("cluster: take the leader lease of shard %d: %w", s, unavailable(err))
	}
	info.Term = rev
	tctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	t := &Term{l: l, kv: kv, key: key, shard: s, info: info, rev: rev, lost: make(chan struct{}), done: make(chan struct{}), stop: stop, kick: make(chan struct{}, 1)}
	go t.renew(tctx, sent)
	return t, nil
}

// Info returns the lease's value for this term.
func (t *Term) Info() LeaderInfo {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.info
}

// Shard returns the shard this term leads (0 for TryLead's).
func (t *Term) Shard() int { return t.shard }

// Lost is closed when the term ends (lease refused or not renewed in time,
// or Resign).
func (t *Term) Lost() <-chan struct{} { return t.lost }

// Err says why the term ended; nil before Lost is closed.
func (t *Term) Err() error {
	select {
	case <-t.lost:
		return t.why
	default:
		return nil
	}
}

// Publish sets the lease's Internal URL (once the coordinator listens);
// the renewal writes it at once.
func (t *Term) Publish(internal string) {
	t.mu.Lock()
	t.info.Internal = internal
	t.mu.Unlock()
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// ErrResigned is why a Term ends (Term.Err) that its node gave up itself
// (Term.Resign, or the campaign's context ended): a hand-over, not a
// failure.
var ErrResigned = errors.New("resigned")

func (t *Term) renew(ctx context.Context, lastOK time.Time) {
	defer close(t.done)
	tick := time.NewTicker(t.l.ttl / 4)
	defer tick.Stop()
	end := func(err error) {
		t.why = err
		close(t.lost)
	}
	for {
		select {
		case <-ctx.Done():
			end(ErrResigned)
			// Give the lease up at once so another node need not wait
			// for it to expire; only if it is still ours.
			dctx, cancel := context.WithTimeout(context.Background(), t.l.ttl/2)
			_ = t.kv.Delete(dctx, t.key, jetstream.LastRevision(t.rev))
			cancel()
			return
		case <-tick.C:
		case <-t.kick:
		}
		b, _ := json.Marshal(t.Info())
		sent := t.l.now()
		rctx, cancel := context.WithTimeout(ctx, t.l.ttl/4)
		rev, err := t.kv.Update(rctx, t.key, b, t.rev)
		cancel()
		switch {
		case err == nil:
			t.rev, lastOK = rev, sent
		case (isWrongLastSeq(err) || errors.Is(err, jetstream.ErrKeyExists)) && t.ownLanded(ctx):
			// An earlier update whose answer was lost (its time ran
			// out, the update landed): renewed again at once, from its
			// revision.
			select {
			case t.kick <- struct{}{}:
			default:
			}
		case isWrongLastSeq(err) || errors.Is(err, jetstream.ErrKeyExists):
			end(fmt.Errorf("another node holds the leader lease: %w", err))
			return
		case t.l.now().Sub(lastOK) > t.l.ttl*3/4:
			end(fmt.Errorf("leader lease not renewed for %s (cut off from the majority?): %w", t.l.now().Sub(lastOK).Round(time.Millisecond), err))
			return
		}
	}
}

// ownLanded reads the lease after an update of it was refused: when it
// still holds this term's value (its node and term: the revision of the
// create, which no other term has), an earlier update of this term
// landed without its answer reaching the node, and ownLanded takes that
// update's revision and says true. Anything else (another node's
// lease, none, or no answer) is false.
func (t *Term) ownLanded(ctx context.Context) bool {
	rctx, cancel := context.WithTimeout(ctx, t.l.ttl/4)
	defer cancel()
	e, err := t.kv.Get(rctx, t.key)
	if err != nil {
		return false
	}
	var got LeaderInfo
	if json.Unmarshal(e.Value(), &got) != nil {
		return false
	}
	own := t.Info()
	if got.Node != own.Node || got.Term != own.Term || e.Revision() <= t.rev {
		return false
	}
	t.rev = e.Revision()
	return true
}

// Resign ends the term and deletes the lease if it is still this term's.
// It is idempotent and returns once the renewal stopped.
func (t *Term) Resign() {
	t.stop()
	<-t.done
}

// NodeInfo is a live node as the nodes bucket lists it.
type NodeInfo struct {
	Name string    `json:"name"`
	URL  string    `json:"url"`
	Seen time.Time `json:"seen"`
}

// Announce writes this node into the nodes bucket; call it every quarter
// TTL (a node's announcement a lease length older than the newest, with
// no lease held, counts it gone: Campaign).
func (l *Leadership) Announce(ctx context.Context, n NodeInfo) error {
	n.Seen = l.now().UTC()
	b, _ := json.Marshal(n)
	if _, err := l.nodes.Put(ctx, n.Name, b); err != nil {
		return fmt.Errorf("cluster: announce node %s: %w", n.Name, unavailable(err))
	}
	return nil
}

// Retire removes node name from the nodes bucket, as a node that stops
// does on its way out: the others count it gone at their next round
// (Campaign) rather than once its entry lapses (three lease lengths),
// and take its shards over at once. A node that stops without it (a
// crash) lapses as before. It announces nothing: a node that Retires
// must not Announce again.
func (l *Leadership) Retire(ctx context.Context, name string) error {
	if err := l.nodes.Purge(ctx, name); err != nil {
		return fmt.Errorf("cluster: retire node %s: %w", name, unavailable(err))
	}
	return nil
}

// Nodes lists the live nodes by name. A list it could not read whole
// is an error (wrapping pool.ErrStoreUnavailable when JetStream did not
// answer in time), never a shorter list: a campaign that counted too
// few live nodes would lead more than its share (Campaign). (A key
// lister of the client ends its keys quietly when its time runs out,
// so the list is read from a watch of the bucket, which says when it
// has given every key.)
func (l *Leadership) Nodes(ctx context.Context) ([]NodeInfo, error) {
	entries, err := l.nodeEntries(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]NodeInfo, len(entries))
	for i, e := range entries {
		out[i] = e.NodeInfo
	}
	return out, nil
}

// nodeEntry is a node's announcement and when JetStream stored it (by
// the clock of the server that led the nodes bucket's stream then).
type nodeEntry struct {
	NodeInfo
	stored time.Time
}

// nodeEntries is Nodes with the time each announcement was stored.
//
// The watch's mark that it has given every key can come before the
// last of them when keys are written meanwhile (seen: a live node
// missing from the list, and a campaign that then counted itself alone
// took more than its share), so the keys it gave, deleted ones
// included, are counted against the bucket's messages (one per key, as
// it keeps no history), and the list is read again when it came short.
func (l *Leadership) nodeEntries(ctx context.Context) ([]nodeEntry, error) {
	for {
		out, keys, err := l.watchNodes(ctx)
		if err != nil {
			return nil, err
		}
		st, err := l.nodes.Status(ctx)
		if err != nil {
			return nil, unavailable(err)
		}
		if uint64(keys) >= st.Values() {
			sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, unavailable(ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// watchNodes reads the nodes bucket's announcements with a watch, one
// per key (the newest, should the watch give a key twice, as it may
// when the key is written meanwhile), and says how many keys the watch
// gave, those deleted (purged by Retire) included.
func (l *Leadership) watchNodes(ctx context.Context) (out []nodeEntry, keys int, err error) {
	w, err := l.nodes.WatchAll(ctx)
	if err != nil {
		return nil, 0, unavailable(err)
	}
	defer w.Stop()
	seen := map[string]jetstream.KeyValueEntry{}
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				if ctx.Err() != nil {
					return nil, 0, unavailable(ctx.Err())
				}
				return nil, 0, fmt.Errorf("%w: the nodes' watch ended before their last key", pool.ErrStoreUnavailable)
			}
			if e != nil {
				if was, ok := seen[e.Key()]; !ok || e.Revision() > was.Revision() {
					seen[e.Key()] = e
				}
				continue
			}
			// Every key given, the watch says.
			for _, e := range seen {
				if e.Operation() != jetstream.KeyValuePut {
					continue
				}
				var n NodeInfo
				if json.Unmarshal(e.Value(), &n) == nil {
					out = append(out, nodeEntry{NodeInfo: n, stored: e.Created()})
				}
			}
			return out, len(seen), nil
		case <-ctx.Done():
			return nil, 0, unavailable(ctx.Err())
		}
	}
}
