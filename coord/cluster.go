package coord

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"

	"idlepool/cluster"
	"idlepool/pool"
)

// ClusterState is the answer to GET /v1/cluster on any node of a
// clustered pool: which node answers, which is in charge of scheduling
// (empty when none is, or this node cannot tell), the live nodes, and the
// replication of the pool's state stream as JetStream reports it.
type ClusterState struct {
	Node   string             `json:"node"`
	Leader cluster.LeaderInfo `json:"leader"`
	// LeaderKnown is false while no node holds the lease or this node
	// cannot reach the majority.
	LeaderKnown bool               `json:"leader_known"`
	Nodes       []cluster.NodeInfo `json:"nodes"`
	// NodesListed is when this node last read the live nodes (every
	// lease TTL); NodesStale is true when that was more than three TTLs
	// ago (this node cannot reach the majority, which keeps the list):
	// Nodes is then the last list read, and may name nodes that are
	// gone.
	NodesListed time.Time `json:"nodes_listed"`
	NodesStale  bool      `json:"nodes_stale"`
	Routes      int       `json:"routes"`
	// State is the state stream's RAFT group: its leader and each
	// replica's currency and lag (operations behind); in a pool of
	// several shards, shard 0's stream's.
	State StreamHealth `json:"state"`
	// Shards, in a pool whose work is divided into several shards
	// (cluster.NodeConfig.Shards), says who is in charge of each, in
	// shard order; absent in a pool of one shard.
	Shards []ShardState `json:"shards,omitempty"`
	// Leases is where the pool keeps its leader leases
	// (cluster.LeaseLayout): "per-shard", a bucket for each shard's
	// lease, or "shared", one bucket for all (a pool begun before
	// leases were kept per shard).
	Leases string `json:"leases"`
}

// ShardState is one shard of a divided pool as a node sees it: the node
// in charge of it (LeaderKnown false while none is, or this node cannot
// tell), and whether that is this node (Local: its coordinator of the
// shard is running here).
//
// State is the replication health of the shard's state stream, which
// its node in charge leads once it could take the stream's leadership
// (cluster.Store.LeadStreams).
type ShardState struct {
	Shard       int                `json:"shard"`
	Leader      cluster.LeaderInfo `json:"leader"`
	LeaderKnown bool               `json:"leader_known"`
	Local       bool               `json:"local,omitempty"`
	State       StreamHealth       `json:"state"`
}

// StreamHealth is a JetStream stream's replication health.
type StreamHealth struct {
	Leader   string          `json:"leader"`
	Messages uint64          `json:"messages"`
	Replicas []ReplicaHealth `json:"replicas"`
	Error    string          `json:"error,omitempty"`
}

// ReplicaHealth is one replica of a stream: its node, whether it is
// current with the leader, and how many operations it is behind.
type ReplicaHealth struct {
	Node    string `json:"node"`
	Current bool   `json:"current"`
	Offline bool   `json:"offline,omitempty"`
	Lag     uint64 `json:"lag,omitempty"`
}

// ServeCluster runs one node of a clustered pool until ctx ends: its
// public HTTP API on the node's Listen address and, while this node holds
// the leader lease (cluster.Leadership), the pool's coordinator — a
// Server built from base with its state in the replicated stream
// (cluster.Store), its files mirrored (cluster.Blobs) and its data under
// DataDir/coord (the pool key, shared by the nodes, is there). Every
// request to the public API is forwarded to the coordinator of the node
// in charge (a reverse proxy: streams and long polls pass through);
// while no node is in charge, or this node cannot reach the majority,
// requests are answered 503 with code "no_leader" and clients try
// another node. GET /healthz, GET /metrics and GET /v1/cluster are this
// node's own. When the lease is lost (not renewed in time, or another
// node took it) the coordinator is stopped at once; the node campaigns
// again. base's Listen, DataDir, Pool and Cluster are set here, but for
// Cluster.ExchangeEvery, which a divided pool's shards use (0: the
// default, DefaultExchangeEvery). The
// versions the pool accepts are the cluster's (cluster.Rules): a node
// whose base names any (MinAgentVersion, MinAPIVersion,
// LatestAgentVersion) stores them for every node as it starts, and the
// coordinator in charge applies what is stored, whichever node it is on.
//
// The public port applies base's limits on clients itself, whichever
// node is in charge: MaxConns, the pace of bodies and answers
// (BodyTimeout, MinBodyRate), ReadHeaderTimeout, IdleTimeout and each
// route's body size (bounded by MaxBodyMemory). Every node must hold the
// pool's key (cluster.PoolKeyFile under the node's DataDir, the same on
// every node): a node whose key is missing or is not the one the first
// node recorded (cluster.ClaimPoolKey) returns an error wrapping
// cluster.ErrPoolKey before it serves anything.
//
// Before it listens, the node opens the cluster's buckets and the state
// stream, making those that do not exist yet; while JetStream does not
// answer, or cannot place a new bucket's replicas yet, it tries again
// about every second, logging what it waits for, until ctx ends (then it
// returns nil).
func ServeCluster(ctx context.Context, node *cluster.Node, base Config) error {
	nc := node.Config()
	log := base.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// This node's public port applies the limits a coordinator applies to
	// its own (frontLimits, limitFront), whichever node is in charge.
	lim := base
	lim.Logger = log
	if err := lim.validateLimits(); err != nil {
		return err
	}
	// Every node signs with the pool's one key (checked by
	// clusterParts.open).
	poolKey, err := loadPoolKey(nc.DataDir)
	if err != nil {
		return err
	}
	// A new cluster places its buckets' replicas while the nodes are
	// still meeting, and JetStream leaves some requests unanswered while
	// a stream is being created: retry what did not answer until ctx
	// ends, saying what this node waits for.
	parts := &clusterParts{node: node, poolKey: poolKey.Public(), versions: base.versions(), shards: nc.Shards}
	if err := openAll(ctx, log, nc, parts.open); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return nil
	}
	lead, blobs, profiles, rules, state := parts.lead, parts.blobs, parts.profiles, parts.rules, parts.state
	for s := 1; s < nc.Shards; s++ {
		if err := shardKeyFile(nc.DataDir, s); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", nc.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	f := &front{node: node, lead: lead, blobs: blobs, profiles: profiles, rules: rules, versions: base.versions(), state: state, log: log, proxies: map[string]*httputil.ReverseProxy{},
		transport: &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second, ResponseHeaderTimeout: 0},
		shards:    nc.Shards, states: append([]*cluster.Store{state}, parts.states...), exclusions: parts.exclusions, deviations: parts.deviations, secrets: parts.secrets, heads: parts.heads, usage: parts.usage}
	if f.shards > 1 {
		var placements JobPlacements
		if parts.placements != nil {
			placements = parts.placements // a nil *cluster.Placements is not a nil interface
		}
		log.Info("Jobs are placed in shards", "node", nc.Name, "placement", parts.layout.Jobs.String())
		if err := f.initShards(poolKey, placements); err != nil {
			return err
		}
	}
	f.initMetrics()
	cl := limitFront(ln, &lim, f.reg)
	hs := &http.Server{Handler: frontLimits(&lim, f.routes()), ReadHeaderTimeout: lim.ReadHeaderTimeout, IdleTimeout: lim.IdleTimeout,
		MaxHeaderBytes: 64 << 10, ConnState: cl.connState, ConnContext: connContext, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	log.Info("Cluster node ready", "node", nc.Name, "pool", nc.Pool, "url", nc.URL, "routes", nc.Routes, "replicas", nc.Replicas, "leases", lead.Layout().String())
	if base.Listening != nil {
		base.Listening(nc.URL)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := hs.Serve(cl); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve http: %w", err)
		}
		return nil
	})
	g.Go(func() error { f.watch(gctx); return nil })
	if f.shards > 1 {
		g.Go(func() error { f.refreshLeaders(gctx); return nil })
	}
	for _, state := range f.states {
		// A cold standby's stores rest, and a divided pool's until the
		// campaign names the shards this node stands by for
		// (front.standby): they hold no state while another node is in
		// charge.
		state.SetFollowing(f.shards == 1 && !nc.ColdStandby)
	}
	if !nc.ColdStandby {
		for s, state := range f.states {
			g.Go(func() error {
				state.Follow(gctx, nc.LeaderTTL.Duration/4, func(err error) { log.Debug("Cannot follow the pool's state", "shard", s, "err", err) })
				return nil
			})
		}
	}
	if f.shards > 1 {
		g.Go(func() error { return f.campaignShards(gctx, base) })
	} else {
		g.Go(func() error { return f.campaign(gctx, base) })
	}
	g.Go(func() error {
		<-gctx.Done()
		log.Info("Cluster node stopping: giving up what it is in charge of", "node", nc.Name)
		if f.shards > 1 {
			// Gone from the live nodes at once: the others take this
			// node's shards over at their next round, not once its entry
			// lapses (Leadership.Retire).
			rctx, cancel := context.WithTimeout(context.Background(), f.lead.TTL()/2)
			if err := f.lead.Retire(rctx, nc.Name); err != nil {
				log.Debug("Cannot withdraw this node from the live nodes", "err", err)
			}
			cancel()
		}
		sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		if err := hs.Shutdown(sctx); err != nil {
			hs.Close()
		}
		return nil
	})
	err = g.Wait()
	f.transport.CloseIdleConnections()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// clusterParts are what a node opens before it serves: the cluster's
// buckets, the pool key's check, the version rules it was given and the
// pool's state stream. Each is opened once; open takes up again at the
// first one not yet open (openAll calls it until all are).
type clusterParts struct {
	node     *cluster.Node
	poolKey  ed25519.PublicKey
	versions Versions
	shards   int // NodeConfig.Shards

	lead        *cluster.Leadership
	blobs       *cluster.Blobs
	profiles    *cluster.Profiles
	keyChecked  bool
	rules       *cluster.Rules
	versionsSet bool
	claimed     bool                 // the shard count checked (Rules.ClaimShards)
	layout      cluster.ShardLayout  // where the pool keeps its leases and how it places jobs, as ClaimShards said
	placements  *cluster.Placements  // a divided pool's job placements, with cluster.LoadPlacement
	exclusions  *cluster.Exclusions  // a divided pool's, shared by its shards
	deviations  *cluster.Deviations  // a divided pool's, counted by every shard
	secrets     *cluster.Secrets     // a divided pool's known-answers digests, refused by every shard
	heads       *cluster.LedgerHeads // a divided pool's ledger heads, anchored by its shards
	usage       *cluster.Usage       // a divided pool's fair-share figures, by shard
	state       *cluster.Store
	states      []*cluster.Store // shards 1 to shards-1's, in order
}

// Pacing of openAll: at most one try every openWait, each bounded by a
// timeout that starts at firstTryTimeout and doubles, up to
// maxTryTimeout, after each try that ran out of it. JetStream leaves
// some requests unanswered (one about a stream that another node is
// creating at that moment): a short first timeout retries those soon,
// and a node too starved of CPU to get its answers within it gets longer
// ones.
const (
	openWait        = time.Second
	firstTryTimeout = 2 * time.Second
	maxTryTimeout   = 16 * time.Second
)

// openAll calls open (clusterParts.open: it returns what it was opening
// when it fails) until it succeeds, trying again while JetStream does not
// answer (an error wrapping pool.ErrStoreUnavailable), and logs each wait
// with what node nc waits for. It returns nil when open succeeded or ctx
// ended (the caller checks ctx), and any other error at once.
func openAll(ctx context.Context, log *slog.Logger, nc cluster.NodeConfig, open func(context.Context) (what string, err error)) error {
	start := time.Now()
	timeout := firstTryTimeout
	for {
		began := time.Now()
		tctx, cancel := context.WithTimeout(ctx, timeout)
		what, err := open(tctx)
		cancel()
		if err == nil || ctx.Err() != nil {
			return nil
		}
		if !errors.Is(err, pool.ErrStoreUnavailable) {
			return err
		}
		if errors.Is(err, context.DeadlineExceeded) {
			timeout = min(2*timeout, maxTryTimeout)
		}
		need := "an answer from a majority of the nodes (are they up and routed to this one?)"
		if errors.Is(err, cluster.ErrTooFewNodes) {
			need = fmt.Sprintf("%d nodes up and routed to this one: the bucket is new and keeps a replica on each of %d nodes", nc.Replicas, nc.Replicas)
		}
		log.Info("Waiting for the cluster's JetStream", "node", nc.Name, "waitingFor", what, "need", need,
			"waited", time.Since(start).Round(time.Second).String(), "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(openWait - time.Since(began)):
		}
	}
}

// open opens, in order, the parts not open yet and returns at the first
// error, with the name of the part it was opening. Each try starts from
// no error: a part that failed once is tried again, never taken to have
// failed for good (a node once waited forever so, every try answered by
// the error of the first, while the cluster was up).
func (p *clusterParts) open(ctx context.Context) (what string, err error) {
	nc := p.node.Config()
	js := p.node.JetStream()
	if p.blobs == nil {
		if p.blobs, err = cluster.OpenBlobs(ctx, js, nc.Replicas); err != nil {
			return "the file store (" + cluster.BlobBucket + ")", err
		}
	}
	if p.profiles == nil {
		if p.profiles, err = cluster.OpenProfiles(ctx, js, nc.Replicas); err != nil {
			return "the profiles bucket (" + cluster.ProfilesBucket + ")", err
		}
	}
	if !p.keyChecked {
		// Every node signs with the pool's one key: one with another
		// refuses to start (cluster.ClaimPoolKey).
		if err = cluster.ClaimPoolKey(ctx, js, nc.Replicas, p.poolKey); err != nil {
			return "the pool key bucket (" + cluster.PoolKeyBucket + ")", err
		}
		p.keyChecked = true
	}
	if p.rules == nil {
		if p.rules, err = cluster.OpenRules(ctx, js, nc.Replicas); err != nil {
			return "the rules bucket (" + cluster.RulesBucket + ")", err
		}
	}
	if !p.versionsSet && !p.versions.IsZero() {
		// This node was given the pool's versions: they are every
		// node's from now on, whichever is in charge.
		v := p.versions
		if err = p.rules.PutVersions(ctx, cluster.VersionRules{MinAgent: v.MinAgent, MinAPI: v.MinAPI, LatestAgent: v.LatestAgent, Set: nc.Name}); err != nil {
			return "the rules bucket (" + cluster.RulesBucket + ")", err
		}
		p.versionsSet = true
	}
	if !p.claimed {
		// Every node divides the work into the same shards: one with
		// another count refuses to start (cluster.ErrShards). The
		// record says where the leases are, so it comes before them.
		if p.layout, err = p.rules.ClaimShards(ctx, max(p.shards, 1)); err != nil {
			return "the rules bucket (" + cluster.RulesBucket + ")", err
		}
		p.claimed = true
	}
	if p.lead == nil {
		if p.lead, err = cluster.NewLeadership(ctx, js, nc.Replicas, nc.LeaderTTL.Duration, p.layout.Leases, max(p.shards, 1)); err != nil {
			what := cluster.LeaderBucket
			if p.layout.Leases == cluster.ShardLeases {
				what = cluster.LeaseBucket + "…"
			}
			return "the leader lease's buckets (" + what + ", " + cluster.NodesBucket + ")", err
		}
	}
	if p.shards > 1 && p.layout.Jobs == cluster.LoadPlacement && p.placements == nil {
		if p.placements, err = cluster.OpenPlacements(ctx, js, p.shards, nc.Replicas); err != nil {
			return "the job placements bucket (" + cluster.PlacementsBucket + ")", err
		}
	}
	if p.shards > 1 && p.heads == nil {
		if p.heads, err = cluster.OpenLedgerHeads(ctx, js, p.shards, nc.Replicas); err != nil {
			return "the ledger heads bucket (" + cluster.HeadsBucket + ")", err
		}
	}
	if p.shards > 1 && p.usage == nil {
		if p.usage, err = cluster.OpenUsage(ctx, js, p.shards, nc.Replicas); err != nil {
			return "the fair-share bucket (" + cluster.UsageBucket + ")", err
		}
	}
	if p.shards > 1 && p.secrets == nil {
		if p.secrets, err = cluster.OpenSecrets(ctx, js, nc.Replicas); err != nil {
			return "the secrets bucket (" + cluster.SecretsBucket + ")", err
		}
	}
	if p.shards > 1 && p.deviations == nil {
		if p.deviations, err = cluster.OpenDeviations(ctx, js, nc.Replicas); err != nil {
			return "the deviations bucket (" + cluster.DeviationsBucket + ")", err
		}
	}
	if p.shards > 1 && p.exclusions == nil {
		if p.exclusions, err = cluster.OpenExclusions(ctx, js, nc.Replicas); err != nil {
			return "the exclusions bucket (" + cluster.ExclusionsBucket + ")", err
		}
	}
	if p.state == nil {
		if p.state, err = cluster.OpenStore(ctx, js, cluster.StoreConfig{Replicas: nc.Replicas}); err != nil {
			return "the pool's state (stream " + cluster.StateStream + ", snapshots " + cluster.SnapshotBucket + ")", err
		}
	}
	for s := len(p.states) + 1; s < p.shards; s++ {
		sh, err := cluster.NewShard(s, p.shards)
		if err != nil {
			return "", err
		}
		st, err := cluster.OpenStore(ctx, js, cluster.StoreConfig{Replicas: nc.Replicas, Shard: sh})
		if err != nil {
			return "the state of shard " + strconv.Itoa(s) + " (stream " + sh.Stream() + ", snapshots " + sh.Snapshots() + ")", err
		}
		p.states = append(p.states, st)
	}
	return "", nil
}

// front is a node's public API: its own health and metrics, and a
// reverse proxy to the coordinator in charge.
type front struct {
	node     *cluster.Node
	lead     *cluster.Leadership
	blobs    *cluster.Blobs
	profiles *cluster.Profiles
	rules    *cluster.Rules
	state    *cluster.Store // followed while another node is in charge
	log      *slog.Logger
	// shards is how many shards the pool's work is divided into
	// (NodeConfig.Shards), and states each one's state (states[0] is
	// state). With one shard the node campaigns for the one lease and
	// forwards to the node in charge; with more, see cluster_shards.go.
	shards int
	states []*cluster.Store
	// exclusions are the devices and owners a shard excluded, which
	// every shard applies (nil with one shard).
	exclusions *cluster.Exclusions
	// deviations are the deviations each shard decided, which every
	// shard counts (nil with one shard).
	deviations *cluster.Deviations
	// secrets are the digests of the jobs' known-answers files, which
	// no shard serves (nil with one shard).
	secrets *cluster.Secrets
	// heads are the heads of the shards' ledgers, which each shard
	// anchors in its own (nil with one shard).
	heads *cluster.LedgerHeads
	// usage are the shards' owners' fair-share figures, which each shard
	// adds to its own (nil with one shard).
	usage     *cluster.Usage
	transport *http.Transport

	mu      sync.Mutex
	leader  cluster.LeaderInfo
	known   bool      // leader holds a live lease's value
	checked time.Time // when the lease was last read successfully
	nodes   []cluster.NodeInfo
	listed  time.Time // when nodes was last read
	// versions are the cluster's version rules as last read (rules),
	// which this node's coordinator applies while it is in charge.
	versions Versions
	local    *Server // this node's coordinator while it is in charge
	terms    int     // terms this node has held
	proxies  map[string]*httputil.ReverseProxy
	reg      *prometheus.Registry

	divided // the state of a pool of several shards
}

func (f *front) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", f.healthz)
	mux.HandleFunc("GET /metrics", f.metrics)
	mux.HandleFunc("GET /v1/cluster", f.clusterState)
	mux.HandleFunc("/", f.forward)
	return mux
}

// watch reads the leader lease and announces this node every quarter
// TTL (a node that holds no lease and has not announced itself for a
// TTL is counted gone: cluster.Leadership.Campaign), and reads the live
// nodes every TTL, until ctx ends.
func (f *front) watch(ctx context.Context) {
	nc := f.node.Config()
	ttl := f.lead.TTL()
	tick := time.NewTicker(ttl / 4)
	defer tick.Stop()
	var listed time.Time
	for {
		// The announcement first, on a context of its own: a lease
		// bucket that elects a leader (its node died) must not keep
		// this node from saying it lives.
		actx, cancel := context.WithTimeout(ctx, ttl/4)
		_ = f.lead.Announce(actx, cluster.NodeInfo{Name: nc.Name, URL: nc.URL})
		cancel()
		rctx, cancel := context.WithTimeout(ctx, ttl/2)
		info, ok, err := f.lead.Leader(rctx)
		var leaders map[int]cluster.LeaderInfo
		var lerr error
		began := time.Now()
		if f.shards > 1 {
			leaders, lerr = f.lead.Leaders(rctx, f.shards)
		}
		var nodes []cluster.NodeInfo
		if time.Since(listed) >= ttl {
			if nodes, _ = f.lead.Nodes(rctx); nodes != nil {
				listed = time.Now()
			}
		}
		cancel()
		// The version rules are read last, on a context of their own: a
		// slow rules bucket (its replicas cut off) must not hold up this
		// node's view of who is in charge.
		vctx, cancel := context.WithTimeout(ctx, ttl/4)
		rules, rulesOK, rerr := f.rules.Versions(vctx)
		cancel()
		f.mu.Lock()
		if err == nil {
			f.leader, f.known, f.checked = info, ok, time.Now()
		} else if time.Since(f.checked) > ttl {
			f.known = false // cut off: stop forwarding to what may be gone
		}
		// A divided pool's shards are told apart: a shard without a
		// node in charge (shard 0's included) holds no other up.
		if f.shards > 1 && lerr == nil {
			f.keepLeaders(leaders, began) // unless refreshLeaders read later
		} else if f.shards > 1 && time.Since(f.leadersChecked) > ttl {
			f.leaders = nil
		}
		if nodes != nil {
			// This node is live whatever the list says: its announcement
			// may not be in it yet (the nodes bucket just came back with
			// the majority, its entries lapsed meanwhile).
			if !slices.ContainsFunc(nodes, func(n cluster.NodeInfo) bool { return n.Name == nc.Name }) {
				nodes = append(nodes, cluster.NodeInfo{Name: nc.Name, URL: nc.URL, Seen: time.Now().UTC()})
			}
			f.nodes, f.listed = nodes, listed
		}
		if rerr == nil {
			v := Versions{MinAgent: rules.MinAgent, MinAPI: rules.MinAPI, LatestAgent: rules.LatestAgent}
			if verr := v.Validate(); !rulesOK || verr == nil {
				f.versions = v
			} else if f.versions != v {
				f.log.Warn("The cluster's version rules are not valid: keeping the last ones", "setBy", rules.Set, "err", verr)
			}
		}
		f.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// campaign tries to take the leader lease and, while it holds it, runs
// the coordinator.
func (f *front) campaign(ctx context.Context, base Config) error {
	nc := f.node.Config()
	ttl := f.lead.TTL()
	for ctx.Err() == nil {
		tctx, cancel := context.WithTimeout(ctx, ttl/2)
		term, err := f.lead.TryLead(tctx, cluster.LeaderInfo{Node: nc.Name, URL: nc.URL})
		cancel()
		if err != nil {
			f.log.Debug("Cannot campaign for the leader lease", "err", err)
		}
		if term != nil {
			f.runTerm(ctx, base, term)
			term.Resign()
			continue
		}
		select {
		case <-ctx.Done():
		case <-time.After(ttl / 4):
		}
	}
	return nil
}

// firstLoadTimeout bounds a new term's tries to load the pool's state
// and start its coordinator (coord.New); after shortLoadTries tries that
// ran out of it, each try gets twice as long as the one before. A
// request to a stream whose leader has just died goes unanswered, until
// its own timeout (5 s), however soon the stream's replicas elect a new
// leader, and a request after the election is answered at once: so a
// take-over after a kill -9 waited up to 5 s more than the election.
// Short tries catch the election's end within a second; loading a large
// pool's state (10^6 tasks: under half a second) or copying many new
// files may take longer tries, which follow.
const (
	firstLoadTimeout = time.Second
	shortLoadTries   = 4
)

// leadStreamsWait bounds how long a node taking charge of a shard waits
// for the shard's streams to elect it their leader
// (cluster.Store.LeadStreams) before it loads the state: a leader moves
// within tens of milliseconds, and one that does not move in time (the
// node is behind, or a node just died) is left where it is.
const leadStreamsWait = time.Second

// leadStreamsAgain is how often a node in charge of a shard looks again
// at who leads the shard's streams, and asks for those it does not lead
// (one it could not move when it took charge, one an election moved
// since).
const leadStreamsAgain = 10 * time.Second

// streamLead asks for the leadership of a shard's streams for a node
// (cluster.Store.LeadStreams) and logs what came of it when that
// differs from what it logged last: at a term's start, and then each
// leadStreamsAgain while the term lasts, a line each time something
// changed, not every ten seconds.
type streamLead struct {
	log   *slog.Logger
	state *cluster.Store
	node  string
	last  string // what the last look found, in words
}

// try is one ask; see streamLead.
func (sl *streamLead) try(ctx context.Context) {
	lctx, cancel := context.WithTimeout(ctx, 2*leadStreamsWait)
	led, of, all, err := sl.state.LeadStreams(lctx, sl.node, leadStreamsWait)
	cancel()
	if ctx.Err() != nil {
		return
	}
	said := fmt.Sprintf("%d %d %d %v", led, of, all, err != nil)
	if said == sl.last {
		return
	}
	sl.last = said
	switch {
	case led < of:
		sl.log.Info("Some of the shard's streams are led from another node", "led", led, "of", of, "streams", all, "err", err)
	case of < all:
		// Fewer replicas than nodes: nothing to move here.
		sl.log.Info("This node holds a copy of some of the shard's streams only; it leads those, other nodes the rest", "led", led, "streams", all)
	default:
		sl.log.Info("The shard's streams are led from this node", "streams", all)
	}
}

// runTerm runs this node's coordinator of term's shard while term lasts.
func (f *front) runTerm(ctx context.Context, base Config, term *cluster.Term) {
	nc := f.node.Config()
	start := time.Now()
	shard := term.Shard()
	state := f.states[shard]
	log := f.log
	if f.shards > 1 {
		log = f.log.With("shard", shard)
	}
	if f.shards > 1 {
		log.Info("This node is in charge of a shard of the pool", "node", nc.Name, "term", term.Info().Term)
	} else {
		log.Info("This node is in charge of the pool", "node", nc.Name, "term", term.Info().Term)
	}
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-term.Lost():
			level := slog.LevelWarn
			if errors.Is(term.Err(), cluster.ErrResigned) {
				level = slog.LevelInfo // given up by this node: a hand-over or a stop
			}
			log.Log(context.Background(), level, "This node is no longer in charge", "node", nc.Name, "why", term.Err())
			cancel()
		case <-tctx.Done():
		}
	}()
	defer state.Release()
	lead := &streamLead{log: log, state: state, node: nc.Name}
	if nc.Replicas > 1 {
		lead.try(tctx)
	}
	cfg := base
	cfg.Listen, cfg.DataDir, cfg.Pool = nc.Internal, shardCoordDir(nc.DataDir, shard), nc.Pool
	cfg.Cluster = &ClusterHooks{Store: state, Blobs: f.blobs, Nodes: f.nodeURLs, Profiles: f.profiles, Versions: f.clusterVersions}
	if f.shards > 1 {
		cfg.Logger = log
		cfg.Shard, cfg.Shards = shard, f.shards
		cfg.Cluster.Exclusions = f.exclusions
		cfg.Cluster.Deviations = f.deviations
		cfg.Cluster.Secrets = f.secrets
		cfg.Cluster.LedgerHeads = f.heads
		cfg.Cluster.Usage = f.usage
		if base.Cluster != nil {
			cfg.Cluster.ExchangeEvery = base.Cluster.ExchangeEvery
		}
	}
	var srv *Server
	for try, cuts := firstLoadTimeout, 0; ; {
		lctx, lcancel := context.WithTimeout(tctx, try)
		var err error
		srv, err = New(lctx, cfg)
		cut := errors.Is(lctx.Err(), context.DeadlineExceeded)
		lcancel()
		if err == nil {
			break
		}
		state.Release()
		// Right after a node died JetStream elects new leaders for its
		// streams: what did not answer is tried again while the term
		// lasts.
		if !errors.Is(err, pool.ErrStoreUnavailable) && !cut || tctx.Err() != nil {
			log.Error("Cannot start the coordinator", "err", err)
			return
		}
		if cut {
			if cuts++; cuts >= shortLoadTries {
				try *= 2
			}
		}
		log.Info("Waiting for the cluster's state to answer", "err", err, "nextTry", try)
		select {
		case <-tctx.Done():
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
	f.mu.Lock()
	f.setLocal(shard, srv)
	f.terms++
	f.mu.Unlock()
	term.Publish(srv.URL())
	log.Info("Coordinator in charge", "node", nc.Name, "internal", srv.URL(), "loaded", time.Since(start).Round(time.Millisecond))
	// The node in charge snapshots the state it keeps current, so that a
	// node starting from nothing loads the snapshot and a short tail.
	var snaps sync.WaitGroup
	if nc.Replicas > 1 {
		// A stream whose leader was unknown (a node just died) has one
		// by now, and an election may move one later: the commits in
		// flight while one moves back are retried.
		snaps.Go(func() {
			tick := time.NewTicker(leadStreamsAgain)
			defer tick.Stop()
			for {
				select {
				case <-tick.C:
					lead.try(tctx)
				case <-tctx.Done():
					return
				}
			}
		})
	}
	snaps.Go(func() {
		state.Snapshots(tctx, nc.SnapshotEvery, nc.LeaderTTL.Duration,
			func(err error) { log.Warn("Cannot snapshot the pool's state", "err", err) },
			func(st cluster.SnapshotStats) {
				log.Info("Snapshot of the pool's state", "seq", st.Seq, "trimmedBefore", st.Trimmed,
					"copy", st.Copy.Round(time.Microsecond), "archived", st.Archived, "entries", st.Entries, "archive", st.Archive.Round(time.Millisecond),
					"write", st.Write.Round(time.Millisecond))
			})
	})
	if err := srv.Serve(tctx); err != nil {
		log.Warn("Coordinator stopped", "node", nc.Name, "err", err)
	}
	cancel()
	snaps.Wait()
	f.mu.Lock()
	f.clearLocal(shard, srv)
	f.mu.Unlock()
}

// setLocal records srv as this node's coordinator of shard; f.mu is
// held.
func (f *front) setLocal(shard int, srv *Server) {
	if f.shards <= 1 {
		f.local = srv
		return
	}
	f.locals[shard] = srv
}

// clearLocal forgets srv as this node's coordinator of shard, unless a
// later term's took its place; f.mu is held.
func (f *front) clearLocal(shard int, srv *Server) {
	if f.shards <= 1 {
		if f.local == srv {
			f.local = nil
		}
		return
	}
	if f.locals[shard] == srv {
		delete(f.locals, shard)
	}
}

// clusterVersions returns the cluster's version rules as last read.
func (f *front) clusterVersions() Versions {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.versions
}

// nodeURLs returns the live nodes' URLs, for GET /v1/pool.
func (f *front) nodeURLs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, 0, len(f.nodes))
	for _, n := range f.nodes {
		out = append(out, n.URL)
	}
	return out
}

// target returns where to forward to: the coordinator in charge.
func (f *front) target() (*httputil.ReverseProxy, string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.known || f.leader.Internal == "" {
		return nil, "", false
	}
	in := f.leader.Internal
	p := f.proxies[in]
	if p == nil {
		u, err := url.Parse(in)
		if err != nil {
			return nil, "", false
		}
		p = &httputil.ReverseProxy{
			Rewrite: func(r *httputil.ProxyRequest) {
				r.SetURL(u)
				r.Out.Host = r.In.Host
				r.SetXForwarded()
			},
			Transport:     f.transport,
			FlushInterval: -1, // long polls and streams pass through at once
			ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
				f.log.Debug("Forwarding failed", "to", in, "path", r.URL.Path, "err", err)
				noLeader(w, "the node in charge of the pool did not answer; try another node")
			},
		}
		f.proxies[in] = p
	}
	return p, f.leader.Node, true
}

// forward answers a request of the pool's API: this node's coordinator
// answers it directly while this node is in charge, and the node in
// charge answers it through a reverse proxy otherwise. Every answer
// names the node in charge's public URL in InChargeHeader, so that a
// client given several nodes sends its next requests there.
func (f *front) forward(w http.ResponseWriter, r *http.Request) {
	if f.shards > 1 {
		f.router.ServeHTTP(w, r)
		return
	}
	f.mu.Lock()
	local, leaderURL := f.local, ""
	if f.known {
		leaderURL = f.leader.URL
	}
	f.mu.Unlock()
	if leaderURL != "" {
		w.Header().Set(InChargeHeader, leaderURL)
	}
	if local != nil && local.ServeDirect(w, r) {
		return
	}
	p, _, ok := f.target()
	if !ok {
		noLeader(w, "no node of this cluster is in charge of the pool right now (an election is under way, or this node is cut off from the majority); try another node")
		return
	}
	p.ServeHTTP(w, r)
}

func noLeader(w http.ResponseWriter, msg string) {
	w.Header().Set("Retry-After", "1")
	writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": msg, "code": CodeNoLeader})
}

// snapshot reads this node's view of the cluster; each shard's state
// stream health (ShardState.State) only with shardStreams, one request
// to JetStream per shard.
func (f *front) snapshot(ctx context.Context, shardStreams bool) ClusterState {
	nc := f.node.Config()
	f.mu.Lock()
	st := ClusterState{Node: nc.Name, Leader: f.leader, LeaderKnown: f.known, Nodes: append([]cluster.NodeInfo{}, f.nodes...),
		NodesListed: f.listed, Leases: f.lead.Layout().String()}
	// The list is read every TTL; one not read for three (this node
	// cut off from the majority, which holds the nodes bucket) may name
	// nodes that are gone.
	st.NodesStale = !f.listed.IsZero() && time.Since(f.listed) > 3*f.lead.TTL()
	if f.shards > 1 {
		st.Shards = make([]ShardState, f.shards)
		for s := range st.Shards {
			info, ok := f.leaders[s]
			st.Shards[s] = ShardState{Shard: s, Leader: info, LeaderKnown: ok, Local: f.locals[s] != nil}
		}
	}
	f.mu.Unlock()
	st.Routes = f.node.Server().NumRoutes()
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i := range st.Shards {
		if !shardStreams {
			break // GET /v1/cluster's alone: /healthz and /metrics, polled often, read shard 0's
		}
		sh := cluster.Shard{Index: i, Count: f.shards}
		wg.Go(func() { st.Shards[i].State = streamHealth(sctx, f.node, sh.Stream()) })
	}
	st.State = streamHealth(sctx, f.node, cluster.StateStream)
	wg.Wait()
	return st
}

// streamHealth is the replication health of stream name on node's
// JetStream, or its Error.
func streamHealth(ctx context.Context, node *cluster.Node, name string) (h StreamHealth) {
	s, err := node.JetStream().Stream(ctx, name)
	if err == nil {
		info, ierr := s.Info(ctx)
		if err = ierr; err == nil {
			h.Messages = info.State.Msgs
			if c := info.Cluster; c != nil {
				h.Leader = c.Leader
				if c.Leader != "" {
					h.Replicas = append(h.Replicas, ReplicaHealth{Node: c.Leader, Current: true})
				}
				for _, p := range c.Replicas {
					h.Replicas = append(h.Replicas, ReplicaHealth{Node: p.Name, Current: p.Current, Offline: p.Offline, Lag: p.Lag})
				}
			}
		}
	}
	if err != nil {
		h.Error = err.Error()
	}
	return h
}

func (f *front) clusterState(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, f.snapshot(r.Context(), true))
}

// healthz is 200 when this node can forward to a coordinator in charge
// (or is it), 503 otherwise; the text says which node leads and how the
// pool's state is replicated.
func (f *front) healthz(w http.ResponseWriter, r *http.Request) {
	code, text := health(f.snapshot(r.Context(), false))
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	io.WriteString(w, text)
}

// health is GET /healthz's status and line for a node whose view of the
// cluster is st: 200 while a node in charge answers, 503 while none does
// (none holds the lease, or the one that took it is loading the pool's
// state, or this node cannot tell). In a pool of several shards, 200
// while every shard has a node in charge that answers.
func health(st ClusterState) (int, string) {
	code := http.StatusOK
	var b strings.Builder
	var unled []string
	for _, sh := range st.Shards {
		if !sh.LeaderKnown || sh.Leader.Internal == "" {
			unled = append(unled, strconv.Itoa(sh.Shard))
		}
	}
	switch {
	case len(st.Shards) > 0 && len(unled) == 0:
		fmt.Fprintf(&b, "ok: node %s; each of the %d shards has a node in charge", st.Node, len(st.Shards))
	case len(st.Shards) > 0:
		// A shard's lease is free, or its coordinator is loading: its
		// jobs wait until a node takes it.
		code = http.StatusServiceUnavailable
		fmt.Fprintf(&b, "no leader yet: node %s; no node is in charge of shard %s of %d (or it is loading the shard's state)",
			st.Node, strings.Join(unled, ", "), len(st.Shards))
	case st.LeaderKnown && st.Leader.Internal != "":
		fmt.Fprintf(&b, "ok: node %s; %s is in charge (term %d)", st.Node, st.Leader.Node, st.Leader.Term)
	case st.LeaderKnown && st.Leader.Node != "":
		// The lease is held, and its coordinator is loading the pool's
		// state: not answering yet, but not lost either.
		code = http.StatusServiceUnavailable
		fmt.Fprintf(&b, "no leader yet: node %s; %s took charge (term %d) and is loading the pool's state", st.Node, st.Leader.Node, st.Leader.Term)
	default:
		code = http.StatusServiceUnavailable
		fmt.Fprintf(&b, "no leader: node %s cannot reach a node in charge", st.Node)
	}
	if st.NodesStale {
		fmt.Fprintf(&b, "; live nodes unknown (the list was last read at %s, with %s), %s",
			st.NodesListed.UTC().Format(time.TimeOnly), counted(len(st.Nodes), "node"), counted(st.Routes, "route"))
	} else {
		fmt.Fprintf(&b, "; %s live, %s", counted(len(st.Nodes), "node"), counted(st.Routes, "route"))
	}
	if st.State.Error != "" {
		fmt.Fprintf(&b, "; state stream: %s", st.State.Error)
	} else {
		cur := 0
		for _, p := range st.State.Replicas {
			if p.Current {
				cur++
			}
		}
		if st.State.Leader == "" {
			fmt.Fprintf(&b, "; state stream without a leader (electing one), %d of %d replicas current", cur, len(st.State.Replicas))
		} else {
			fmt.Fprintf(&b, "; state stream led by %s, %d of %d replicas current", st.State.Leader, cur, len(st.State.Replicas))
		}
	}
	b.WriteString("\n")
	return code, b.String()
}

// counted is n and word, plural unless n is 1: "1 node", "3 nodes".
func counted(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

func (f *front) initMetrics() {
	f.reg = prometheus.NewRegistry()
	gauge := func(name, help string, fn func() float64) {
		f.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, fn))
	}
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	gauge("idlepool_cluster_in_charge", "1 while this node's coordinator is in charge of the pool; in a pool of several shards, how many shards this node is in charge of.", func() float64 {
		f.mu.Lock()
		defer f.mu.Unlock()
		return b2f(f.local != nil) + float64(len(f.locals))
	})
	gauge("idlepool_cluster_leader_known", "1 while this node knows a node in charge it can forward to.", func() float64 {
		f.mu.Lock()
		defer f.mu.Unlock()
		return b2f(f.known && f.leader.Internal != "")
	})
	gauge("idlepool_cluster_terms", "Terms in charge this node has begun since it started.", func() float64 {
		f.mu.Lock()
		defer f.mu.Unlock()
		return float64(f.terms)
	})
	gauge("idlepool_cluster_nodes_live", "Nodes announced in the last three lease lengths.", func() float64 {
		f.mu.Lock()
		defer f.mu.Unlock()
		return float64(len(f.nodes))
	})
	const appliedHelp = "The state stream's sequence up to which this node's memory has applied the pool's state: it follows the stream's end on a warm standby and on the node in charge, and is 0 on a cold standby (cold_standby), which holds none of the state while another node is in charge; in a pool divided into shards, one per shard (label shard), 0 for a shard this node neither leads nor keeps warm."
	if f.shards == 1 {
		gauge("idlepool_cluster_state_applied", appliedHelp, func() float64 { return float64(f.state.Applied()) })
	} else {
		for i, st := range f.states {
			f.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "idlepool_cluster_state_applied", Help: appliedHelp,
				ConstLabels: prometheus.Labels{"shard": strconv.Itoa(i)}}, func() float64 { return float64(st.Applied()) }))
		}
	}
	gauge("idlepool_cluster_routes", "NATS routes to other nodes.", func() float64 { return float64(f.node.Server().NumRoutes()) })
	if f.router != nil {
		const passedHelp = "Requests of the pool's API this node's router passed to a shard's coordinator, by where it runs (to: here, other_node; a request sent to several shards counts once for each)."
		for _, to := range []string{"here", "other_node"} {
			f.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "idlepool_router_passed_total", Help: passedHelp,
				ConstLabels: prometheus.Labels{"to": to}}, func() float64 {
				c := f.router.Counts()
				if to == "here" {
					return float64(c.Here)
				}
				return float64(c.There)
			}))
		}
		f.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "idlepool_router_work_split_total",
			Help: "POST /v1/work requests this node's router split among shards (results and lease request for different shards), checking the device's signature itself."},
			func() float64 { return float64(f.router.Counts().Split) }))
	}
}

// metrics serves this node's cluster gauges, and the coordinator's own
// metrics while this node is in charge.
func (f *front) metrics(w http.ResponseWriter, r *http.Request) {
	st := f.snapshot(r.Context(), false)
	reg := prometheus.NewRegistry()
	cur := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "idlepool_cluster_state_replica_current",
		Help: "1 when a replica of the pool's state stream is current with its leader."}, []string{"node"})
	lag := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "idlepool_cluster_state_replica_lag",
		Help: "Operations a replica of the pool's state stream is behind its leader."}, []string{"node"})
	for _, p := range st.State.Replicas {
		v := 0.0
		if p.Current {
			v = 1
		}
		cur.WithLabelValues(p.Node).Set(v)
		lag.WithLabelValues(p.Node).Set(float64(p.Lag))
	}
	reg.MustRegister(cur, lag)
	gs := prometheus.Gatherers{f.reg, reg}
	f.mu.Lock()
	local := f.local
	for s, srv := range f.locals {
		gs = append(gs, shardGatherer{srv.metrics.reg, s})
	}
	f.mu.Unlock()
	if local != nil {
		gs = append(gs, local.metrics.reg)
	}
	promhttp.HandlerFor(gs, promhttp.HandlerOpts{}).ServeHTTP(w, r)
}
