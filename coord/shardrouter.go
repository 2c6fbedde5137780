package coord

import (
	"bytes"
	"cmp"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
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
	"sync/atomic"
	"time"

	"idlepool/cluster"
	"idlepool/identity"
	"idlepool/job"
	"idlepool/offers"
	"idlepool/pool"
)

// ShardRouterConfig configures a ShardRouter.
type ShardRouterConfig struct {
	// Shards is K, the number of shards of the pool: 1 to 64
	// (cluster.ValidateShardCount).
	Shards int
	// Key is the pool's key (coordinator.key), which every shard's
	// coordinator holds too: the router derives from it the key of the
	// MACs of the requests it forwards in parts (ForwardedHeader).
	// Required.
	Key *identity.Key
	// Target names where shard s's coordinator answers now, a base URL
	// such as "http://10.0.0.2:7420" (no trailing slash); ok false when
	// no coordinator is in charge of s (the request is answered 503
	// "no_leader", as a cluster node's public port answers). It is called
	// for every request, and must be safe for concurrent use. Required.
	Target func(shard int) (baseURL string, ok bool)
	// Transport carries the requests to the shards; nil:
	// http.DefaultTransport.
	Transport http.RoundTripper
	// Local, if not nil, answers a request meant for shard in the same
	// process (a node's own coordinator of that shard:
	// Server.ServeDirect), skipping an HTTP hop; it returns false,
	// answering nothing, when it cannot (no coordinator of that shard
	// here, or it is stopping): the router then sends the request to
	// Target's URL.
	Local func(shard int, w http.ResponseWriter, r *http.Request) bool
	// Public, if not nil, names the public URL of the node in charge of
	// shard ("" when not known): the router names it in InChargeHeader
	// on its answers to requests for leases, whose shard it chooses per
	// device (leaseShard), so that the device's next requests go to that
	// node and are answered there without a forward, as a client of an
	// undivided cluster goes to the node in charge. nil: no node is
	// named.
	Public func(shard int) string
	// Here, if not nil, reports whether shard's coordinator runs in
	// this process (a node's own shard): when a device's preferred
	// shard has no work, the router gives it this node's shards' work
	// first (leaseShard).
	Here func(shard int) bool
	// Placements, if not nil, records and answers each job's shard in a
	// pool that places its jobs by load (cluster.LoadPlacement): a new
	// job goes to the shard with the fewest tasks waiting (placeJob),
	// and the requests of a job to the shard recorded for it. nil, or a
	// job with no record: the job's shard is cluster.ShardOf(its ID, K).
	Placements JobPlacements
	// Missed, if not nil, is told of each request the router could not
	// pass to shard's coordinator: Target named none, or what it named
	// did not answer (a hand-over or a take-over moved the shard, and
	// Target's knowledge is stale). A node then reads the shards' leases
	// again at once. It is called on the request's goroutine and must
	// not block.
	Missed func(shard int)
	// Logger receives the router's logs; nil discards them.
	Logger *slog.Logger
	// Now is the clock of the forwarded requests' times and of the
	// check of device signatures the router makes; nil: time.Now.
	Now func() time.Time
	// MaxBodyMemory bounds the bytes of request bodies the router holds
	// in memory at once, over all requests (those it must read to route
	// or split: POST /v1/jobs, /v1/peers, /v1/offers, /v1/leases,
	// /v1/work); a request that would pass it is answered 503 "busy". It
	// also bounds one body, as Config.MaxBodyMemory does. Default
	// DefaultMaxBodyMemory; at least 1 MiB.
	MaxBodyMemory int64
}

// JobPlacements records and answers the shard of each job of a divided
// pool (cluster.Placements): Place records shard as job id's unless one
// is recorded, and returns the job's recorded shard (the first
// recorded wins); Shard returns it, ok false for a job no record names;
// Known returns it when it is at hand without asking anyone; Forget
// removes the record of a job no shard can add. Errors: JetStream did
// not answer (pool.ErrStoreUnavailable), or a record that names no
// shard (cluster.ErrPlacement). Safe for concurrent use.
type JobPlacements interface {
	Place(ctx context.Context, id job.ID, shard int) (int, error)
	Shard(ctx context.Context, id job.ID) (shard int, ok bool, err error)
	Known(id job.ID) (shard int, ok bool)
	Forget(ctx context.Context, id job.ID) error
}

// placementTimeout bounds a read or a record of a job's placement: a
// request does not wait longer on JetStream for its route.
const placementTimeout = 2 * time.Second

// ShardRouter is an http.Handler that makes the coordinators of a pool
// divided into K shards (each a Server with Config.Shard and
// Config.Shards) look like one coordinator to devices: agents, browser
// tabs and the CLI speak the API of docs/api.md to it unchanged.
//
// Routes:
//   - /v1/jobs/{id}/... and GET /v1/jobs/{id}: to the job's shard
//     (jobShard): the one recorded for it (Placements), else
//     cluster.ShardOf(id, K). POST /v1/jobs to the shard of the job's
//     ID (the SHA-256 of its canonical encoding): with Placements, the
//     one recorded for it, or else, once the router checked the
//     device's signature, the shard with the fewest tasks waiting,
//     recorded (placeJob); without, ShardOf's. Unchanged: the device's
//     signature is checked by the shard too.
//   - /v1/leases/{lease}/...: to the lease's shard, pool.LeaseShard (a
//     lease ID no shard could have minted goes to shard 0, which answers
//     it as an unknown lease).
//   - POST /v1/peers and POST /v1/offers: to every shard, unchanged; the
//     answer is the first refusal in shard order, else the first shard's
//     that took it (a shard that did not answer holds none up:
//     everyShard).
//   - POST /v1/leases: unchanged, to the device's shard of the moment
//     (leaseShard: one per device for five seconds, the same on every
//     node), then to the shards with tasks waiting first (as each said
//     in QueuedHeader on its last answer), the next when one grants
//     none, K tries at most. The answer names the node in charge of the
//     shard that granted the leases (InChargeHeader, from
//     ShardRouterConfig.Public), so that the device's next requests go
//     there and are answered without a forward.
//   - POST /v1/work: unchanged to one shard when its results, its
//     transfer reports and its lease request all go there; otherwise the
//     router checks the device's signature itself, splits it (results
//     by their lease's shard, transfers by their job's, the lease
//     request to the device's shard of the moment, whose node the
//     answer names as POST /v1/leases's does), forwards each part with a MAC
//     (ForwardedHeader), and merges the answers into one WorkResponse,
//     the results' answers in the request's order, in JSON or CBOR as
//     the device asked. A request for leases that one shard answers
//     with none is asked of the others that may have tasks waiting, in
//     turn (moreLeases).
//   - GET /v1/jobs and GET /v1/listings: to every shard, unchanged; the
//     answer is the shards' lists merged oldest first over the pool, as
//     one coordinator lists them, by the times each shard says its jobs
//     were added (AddedHeader, mergeAdded).
//   - GET /v1/ledger and GET /v1/receipts: to the shard their "shard"
//     parameter names (shard 0 without one). The ledger is K hash
//     chains, each numbered from 1 and signed with the pool key: a
//     client reads K of them (api.PoolInfo.Shards says K), as `idlepool
//     ledger verify` and an agent's receipts do.
//   - GET /v1/dashboard: every shard's, merged (mergeDashboards), so
//     that the pool's page shows every shard's jobs; a shard that does
//     not answer is left out and named.
//   - GET /v1/offers: every shard's live offers, one per device
//     (mergeOffers).
//   - GET / and GET /web/{file}: the pool's page, answered here (page).
//   - everything else to shard 0, unchanged, so far: the signals,
//     /v1/ice, /v1/chunks/..., /v1/blobs/... (uploads go to shard 0,
//     which mirrors them; a job's shard copies what it lacks from the
//     mirror when the job is submitted), POST /v1/results/held,
//     /v1/pool and /join.
//
// Bodies are bounded per route as a coordinator bounds them
// (frontBodyLimits), and those the router reads by MaxBodyMemory over
// all requests; the pace of bodies and answers and the connections are
// the bounds of whoever serves the router (frontLimits). Requests that
// claim to be forwarded (ForwardedHeader) lose that header here: only
// the router forwards. A ShardRouter is safe for concurrent use.
type ShardRouter struct {
	cfg    ShardRouterConfig
	fwd    forwardKey
	log    *slog.Logger
	mem    *budget
	client *http.Client
	mux    *http.ServeMux
	limits Config // MaxBodyMemory, for frontBodyLimit

	// reqKeys are the devices' request keys, for the requests with a
	// MAC it splits (checkSignature).
	reqKeys *requestKeys

	mu      sync.Mutex
	proxies map[string]*httputil.ReverseProxy // by shard and base URL

	queued   []atomic.Int64 // per shard: tasks waiting as last told, -1 unknown
	queuedAt []atomic.Int64 // per shard: when queued was told, unix milliseconds
	turn     atomic.Uint32  // where the next choice among equals begins
	placing  sync.Mutex     // one new job's shard chosen at a time (placeJob)

	absentMu   sync.Mutex
	absent     map[job.ID]time.Time // jobs no placement named, when a transfer report named them (transferShard)
	absentFor  time.Duration        // absentFor; a test's own
	placeStale time.Duration        // placeStale; a test's own
	keys       peerKeys

	passedHere, passedThere atomic.Int64 // requests passed to a shard's coordinator on this node, on another
	workSplit               atomic.Int64 // POST /v1/work split among shards
}

// RouterCounts counts what a ShardRouter did since it started: the
// requests it passed to a shard's coordinator running on this node
// (Here) and to one on another node over HTTP (There; a request sent to
// several shards counts once for each), and the POST /v1/work it split
// among shards, checking the device's signature itself (Split).
type RouterCounts struct {
	Here, There, Split int64
}

// Counts returns what rt did since it started.
func (rt *ShardRouter) Counts() RouterCounts {
	return RouterCounts{Here: rt.passedHere.Load(), There: rt.passedThere.Load(), Split: rt.workSplit.Load()}
}

// NewShardRouter returns a router over cfg's shards. The error wraps
// ErrConfig and names the field at fault.
func NewShardRouter(cfg ShardRouterConfig) (*ShardRouter, error) {
	if err := cluster.ValidateShardCount(cfg.Shards); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if cfg.Key == nil || cfg.Target == nil {
		return nil, fmt.Errorf("%w: a shard router needs the pool's Key and a Target", ErrConfig)
	}
	if cfg.Transport == nil {
		cfg.Transport = http.DefaultTransport
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxBodyMemory == 0 {
		cfg.MaxBodyMemory = DefaultMaxBodyMemory
	}
	if cfg.MaxBodyMemory < maxJSONBody {
		return nil, fmt.Errorf("%w: body memory of %d bytes is below %d (the largest JSON body)", ErrConfig, cfg.MaxBodyMemory, maxJSONBody)
	}
	rt := &ShardRouter{cfg: cfg, fwd: newForwardKey(cfg.Key), reqKeys: newRequestKeys(cfg.Key), log: cfg.Logger, mem: newBudget("memory", cfg.MaxBodyMemory),
		client: &http.Client{Transport: cfg.Transport, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		limits: Config{MaxBodyMemory: cfg.MaxBodyMemory}, proxies: map[string]*httputil.ReverseProxy{},
		queued: make([]atomic.Int64, cfg.Shards), queuedAt: make([]atomic.Int64, cfg.Shards), keys: peerKeys{m: map[string]ed25519.PublicKey{}},
		absent: map[job.ID]time.Time{}, absentFor: absentFor, placeStale: placeStale}
	for i := range rt.queued {
		rt.queued[i].Store(-1)
	}
	m := http.NewServeMux()
	m.HandleFunc("POST /v1/jobs", rt.addJob)
	m.HandleFunc("GET /v1/jobs/{id}", rt.byJob)
	m.HandleFunc("/v1/jobs/{id}/{rest...}", rt.byJob)
	m.HandleFunc("/v1/leases/{lease}/{rest...}", rt.byLease)
	m.HandleFunc("POST /v1/leases", rt.lease)
	m.HandleFunc("POST /v1/work", rt.work)
	m.HandleFunc("POST /v1/peers", rt.everyShard)
	m.HandleFunc("POST /v1/offers", rt.everyShard)
	m.HandleFunc("GET /v1/jobs", rt.mergeLists)
	m.HandleFunc("GET /v1/listings", rt.mergeLists)
	m.HandleFunc("GET /v1/offers", rt.mergeOffers)
	m.HandleFunc("GET /v1/ledger", rt.byShardParam)
	m.HandleFunc("GET /v1/receipts", rt.byShardParam)
	m.HandleFunc("GET /v1/dashboard", rt.mergeDashboards)
	m.HandleFunc("GET /{$}", rt.page)
	m.HandleFunc("GET /web/{file}", rt.page)
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { rt.proxy(w, r, 0) })
	rt.mux = m
	return rt, nil
}

// ServeHTTP routes r to the shards (see ShardRouter).
func (rt *ShardRouter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	r.Header.Del(ForwardedHeader)
	limit := frontBodyLimit(&rt.limits, r)
	if r.ContentLength > limit {
		w.Header().Set("Connection", "close") // the body is not read
		writeJSON(w, http.StatusRequestEntityTooLarge, ErrorBody{Code: "too_large",
			Error: fmt.Sprintf("request body larger than the limit of %d bytes for %s", limit, r.URL.Path)})
		return
	}
	if r.ContentLength < 0 && r.Body != nil {
		r.Body = http.MaxBytesReader(w, r.Body, limit)
	}
	if rt.cfg.Shards == 1 {
		rt.proxy(w, r, 0)
		return
	}
	rt.mux.ServeHTTP(w, r)
}

// proxy passes r to shard's coordinator unchanged, streaming both ways:
// in process when it runs here (Local).
func (rt *ShardRouter) proxy(w http.ResponseWriter, r *http.Request, shard int) {
	if rt.cfg.Local != nil && rt.cfg.Local(shard, &queuedWriter{ResponseWriter: w, rt: rt, shard: shard}, r) {
		rt.passedHere.Add(1)
		return
	}
	base, ok := rt.cfg.Target(shard)
	if !ok {
		rt.missed(shard)
		noLeader(w, fmt.Sprintf("no coordinator is in charge of shard %d of the pool right now; try again shortly", shard))
		return
	}
	rt.passedThere.Add(1)
	rt.proxyTo(base, shard).ServeHTTP(w, r)
}

// missed tells Missed, if set, that a request for shard found no
// coordinator to answer it.
func (rt *ShardRouter) missed(shard int) {
	if rt.cfg.Missed != nil {
		rt.cfg.Missed(shard)
	}
}

// proxyTo returns the reverse proxy to base, the coordinator of shard.
func (rt *ShardRouter) proxyTo(base string, shard int) *httputil.ReverseProxy {
	k := strconv.Itoa(shard) + " " + base
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if p := rt.proxies[k]; p != nil {
		return p
	}
	u, err := url.Parse(base)
	p := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			if err == nil {
				pr.SetURL(u)
			}
			pr.Out.Host = pr.In.Host
			pr.SetXForwarded()
		},
		Transport:     rt.cfg.Transport,
		FlushInterval: -1, // long polls and streams pass through at once
		ModifyResponse: func(resp *http.Response) error {
			rt.noteQueued(shard, resp.Header)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			rt.log.Debug("Forwarding to a shard failed", "shard", shard, "to", base, "path", r.URL.Path, "err", err)
			rt.missed(shard)
			noLeader(w, fmt.Sprintf("the coordinator of shard %d of the pool did not answer; try again shortly", shard))
		},
	}
	if len(rt.proxies) > 4*rt.cfg.Shards { // coordinators moved: forget the old
		clear(rt.proxies)
	}
	rt.proxies[k] = p
	return p
}

// noteQueued remembers what shard said of its waiting tasks in h, and
// takes the header off.
func (rt *ShardRouter) noteQueued(shard int, h http.Header) {
	if v := h.Get(QueuedHeader); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
			rt.queued[shard].Store(n)
			rt.queuedAt[shard].Store(rt.cfg.Now().UnixMilli())
		}
		h.Del(QueuedHeader)
	}
}

// queuedStale is how long a shard's word that it has no task waiting
// holds: past it, the router asks that shard again as one not heard
// from (a job submitted there meanwhile would otherwise wait until every
// other shard ran dry, since a shard says what it has waiting only in
// its answers to this router).
const queuedStale = time.Second

// queuedNow returns what shard said last of its waiting tasks: -1 when
// it said nothing yet, or said none more than queuedStale ago.
func (rt *ShardRouter) queuedNow(shard int) int64 {
	n := rt.queued[shard].Load()
	if n == 0 && rt.cfg.Now().UnixMilli()-rt.queuedAt[shard].Load() >= queuedStale.Milliseconds() {
		return -1
	}
	return n
}

// mayHaveWork reports whether shard may have tasks waiting: it said so
// last, or said nothing (queuedNow).
func (rt *ShardRouter) mayHaveWork(shard int) bool { return rt.queuedNow(shard) != 0 }

// order returns the shards in the order to ask for work: those known to
// have tasks waiting, then those not heard from (or that had none more
// than queuedStale ago), then those that had none, each group from a
// turn that moves on with every call.
//
// This node's own shards are not preferred: a device's requests reach
// whichever node it chose, and preferring that node's shards would give
// the jobs of the shards its devices happen to reach all of them first,
// and the others' jobs only what they leave.
func (rt *ShardRouter) order() []int {
	k := rt.cfg.Shards
	start := int(rt.turn.Add(1) % uint32(k))
	out := make([]int, 0, k)
	for _, pick := range []func(int64) bool{
		func(n int64) bool { return n > 0 }, func(n int64) bool { return n < 0 }, func(n int64) bool { return n == 0 },
	} {
		for i := range k {
			s := (start + i) % k
			if pick(rt.queuedNow(s)) {
				out = append(out, s)
			}
		}
	}
	return out
}

// queuedWriter is the ResponseWriter of a request a local shard answers
// in process (ShardRouter.proxy): it reads the shard's QueuedHeader off
// the answer, as the reverse proxy does off a remote shard's.
type queuedWriter struct {
	http.ResponseWriter
	rt     *ShardRouter
	shard  int
	headed bool
}

// WriteHeader notes and removes the shard's QueuedHeader, then writes
// the status.
func (q *queuedWriter) WriteHeader(code int) {
	if !q.headed {
		q.headed = true
		q.rt.noteQueued(q.shard, q.Header())
	}
	q.ResponseWriter.WriteHeader(code)
}

// Write writes the status first (200) if not written yet.
func (q *queuedWriter) Write(b []byte) (int, error) {
	if !q.headed {
		q.WriteHeader(http.StatusOK)
	}
	return q.ResponseWriter.Write(b)
}

// Unwrap gives http.ResponseController the writer underneath (flushes,
// deadlines).
func (q *queuedWriter) Unwrap() http.ResponseWriter { return q.ResponseWriter }

// answerRecorder is the ResponseWriter of a request a local shard
// answers in process for ShardRouter.send: it keeps the status, header
// and body (at most maxShardAnswer bytes; err past that).
type answerRecorder struct {
	header http.Header
	status int
	body   bytes.Buffer
	err    error
}

// Header is the answer's header.
func (a *answerRecorder) Header() http.Header { return a.header }

// WriteHeader keeps the first status.
func (a *answerRecorder) WriteHeader(code int) {
	if a.status == 0 {
		a.status = code
	}
}

// Write keeps b, up to maxShardAnswer bytes in all.
func (a *answerRecorder) Write(b []byte) (int, error) {
	if a.status == 0 {
		a.status = http.StatusOK
	}
	if a.body.Len()+len(b) > maxShardAnswer {
		a.err = fmt.Errorf("an answer of more than %d bytes", maxShardAnswer)
		return 0, a.err
	}
	return a.body.Write(b)
}

// byJob sends a request of /v1/jobs/{id} to the job's shard; an ID that
// is not one goes to shard 0, which says so.
func (rt *ShardRouter) byJob(w http.ResponseWriter, r *http.Request) {
	shard := 0
	if id, err := job.ParseDigest(r.PathValue("id")); err == nil {
		if shard, err = rt.jobShard(r.Context(), id); err != nil {
			rt.fail(w, err)
			return
		}
	}
	rt.proxy(w, r, shard)
}

// jobShard returns job id's shard: the one Placements recorded for it,
// else cluster.ShardOf(id, K) (a job added before the pool placed jobs
// by load, or no job: that shard says so). An error is an apiError:
// 503 when the records cannot be read now, 500 when the job's record
// names no shard.
func (rt *ShardRouter) jobShard(ctx context.Context, id job.ID) (int, error) {
	if rt.cfg.Placements == nil {
		return cluster.ShardOf(id, rt.cfg.Shards), nil
	}
	ctx, cancel := context.WithTimeout(ctx, placementTimeout)
	defer cancel()
	s, ok, err := rt.cfg.Placements.Shard(ctx, id)
	if err != nil {
		return 0, rt.placementError(id, "read", err)
	}
	if !ok || s >= rt.cfg.Shards {
		return cluster.ShardOf(id, rt.cfg.Shards), nil
	}
	return s, nil
}

// placementError logs err, a failure to read or record (what) job id's
// placement, and returns the apiError to answer.
func (rt *ShardRouter) placementError(id job.ID, what string, err error) error {
	if errors.Is(err, cluster.ErrPlacement) {
		rt.log.Error("A job's recorded shard is not one of the pool's", "job", id.String(), "err", err)
		return &apiError{http.StatusInternalServerError, "internal",
			"the pool's record of which shard holds job " + id.String() + " is damaged; its operator must look at the bucket " + cluster.PlacementsBucket, nil}
	}
	// JetStream not answering, which its own logs and health say.
	rt.log.Debug("Could not "+what+" a job's shard", "job", id.String(), "err", err)
	return &apiError{http.StatusServiceUnavailable, CodeNoLeader,
		"the pool cannot " + what + " which of its shards holds job " + id.String() + " now; try again shortly", nil}
}

// placeStale is how long a shard's word on its waiting tasks counts when
// a router places a job (placeJob): a router that placed a large job
// there and sent it no request since would otherwise keep away from it
// for good, though other nodes' devices emptied it.
const placeStale = time.Minute

// placeJob returns the shard for new job id, before it is recorded: of
// the shards with a node in charge (Target), the one with the fewest
// tasks waiting as each said on its last answer to this router
// (QueuedHeader; one not heard from, or not for placeStale, counts
// none), ties going to the first from the job's ShardOf shard on. The shard chosen counts one
// task more waiting until its answer to the job's POST /v1/jobs says
// how many it has, so that jobs submitted at once through one node
// spread (choices are made one at a time). Jobs placed through other
// nodes at the same moment may land on the same shard: each router
// knows the waiting tasks it was told.
func (rt *ShardRouter) placeJob(id job.ID) int {
	rt.placing.Lock()
	defer rt.placing.Unlock()
	k := rt.cfg.Shards
	first := cluster.ShardOf(id, k)
	now := rt.cfg.Now().UnixMilli()
	// waiting is shard s's word q on its waiting tasks, 0 when stale.
	waiting := func(s int, q int64) int64 {
		if now-rt.queuedAt[s].Load() >= rt.placeStale.Milliseconds() {
			return 0
		}
		return max(q, 0)
	}
	best, bestQueued, bestUp := first, int64(-1), false
	for i := range k {
		s := (first + i) % k
		_, up := rt.cfg.Target(s)
		q := waiting(s, rt.queued[s].Load())
		if bestQueued < 0 || up && !bestUp || up == bestUp && q < bestQueued {
			best, bestQueued, bestUp = s, q, up
		}
	}
	q := &rt.queued[best]
	for { // one task more, unless the shard's answer came meanwhile
		old := q.Load()
		if q.CompareAndSwap(old, waiting(best, old)+1) {
			break
		}
	}
	rt.queuedAt[best].Store(now)
	return best
}

// byLease sends a request of /v1/leases/{lease} to the lease's shard.
func (rt *ShardRouter) byLease(w http.ResponseWriter, r *http.Request) {
	shard, err := pool.LeaseShard(r.PathValue("lease"), rt.cfg.Shards)
	if err != nil {
		shard = 0 // it answers for an ID no shard minted
	}
	rt.proxy(w, r, shard)
}

// byShardParam sends a request for a ledger's pages (GET /v1/ledger, GET
// /v1/receipts) to the shard its "shard" parameter names, shard 0 when
// it names none; a parameter that is not a shard goes to shard 0, which
// answers why (Server.ledgerQuery).
func (rt *ShardRouter) byShardParam(w http.ResponseWriter, r *http.Request) {
	shard := 0
	if v := r.URL.Query().Get("shard"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 && n < rt.cfg.Shards {
			shard = n
		}
	}
	rt.proxy(w, r, shard)
}

// errNoShard is a shard without a coordinator to forward to.
var errNoShard = errors.New("coord: no coordinator in charge of the shard")

// shardAnswer is a shard's answer read in full, or err when none came.
type shardAnswer struct {
	shard  int
	status int
	header http.Header
	body   []byte
	err    error
}

// ok reports whether the shard took the request (2xx).
func (a *shardAnswer) ok() bool { return a.err == nil && a.status/100 == 2 }

// maxShardAnswer bounds an answer the router reads in full (to leases,
// work, registrations and offers): far more than any of them takes.
const maxShardAnswer = 16 << 20

// readBody reads r's body, bounded by its route's limit, holding the
// bytes against the router's memory budget until release is called.
// A failure has been answered.
func (rt *ShardRouter) readBody(w http.ResponseWriter, r *http.Request) (body []byte, release func(), ok bool) {
	limit := frontBodyLimit(&rt.limits, r)
	hold := limit
	if r.ContentLength >= 0 {
		hold = r.ContentLength
	}
	if err := rt.mem.take(hold); err != nil {
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusServiceUnavailable, ErrorBody{Code: "busy", Error: "the pool is busy: retry shortly"})
		return nil, nil, false
	}
	release = func() { rt.mem.give(hold) }
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	switch {
	case int64(len(body)) > limit || errors.As(err, new(*http.MaxBytesError)):
		release()
		w.Header().Set("Connection", "close")
		writeJSON(w, http.StatusRequestEntityTooLarge, ErrorBody{Code: "too_large",
			Error: fmt.Sprintf("request body larger than the limit of %d bytes for %s", limit, r.URL.Path)})
		return nil, nil, false
	case err != nil:
		release()
		writeJSON(w, http.StatusBadRequest, ErrorBody{Code: "bad_request", Error: "the request body could not be read: " + err.Error()})
		return nil, nil, false
	}
	return body, release, true
}

// hopHeaders are the headers of one connection, never passed on.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Upgrade", "Te", "Trailer",
	"Proxy-Authenticate", "Proxy-Authorization", "Content-Length"}

// outHeader is the header of a request the router sends on for in: in's
// own less the connection's, with the client's address added to
// X-Forwarded-For as a reverse proxy adds it.
func outHeader(in *http.Request) http.Header {
	h := in.Header.Clone()
	for _, k := range hopHeaders {
		h.Del(k)
	}
	if ip, _, err := net.SplitHostPort(in.RemoteAddr); err == nil {
		if prior := h.Values("X-Forwarded-For"); len(prior) > 0 {
			ip = joinComma(prior) + ", " + ip
		}
		h.Set("X-Forwarded-For", ip)
	}
	return h
}

func joinComma(vs []string) string {
	var b bytes.Buffer
	for i, v := range vs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(v)
	}
	return b.String()
}

// send sends method uri with header h and body to shard's coordinator
// and reads its answer (at most maxShardAnswer bytes).
func (rt *ShardRouter) send(ctx context.Context, in *http.Request, shard int, method, uri string, h http.Header, body []byte) shardAnswer {
	a := shardAnswer{shard: shard}
	base, ok := rt.cfg.Target(shard)
	if !ok {
		rt.missed(shard)
		a.err = errNoShard
		return a
	}
	req, err := http.NewRequestWithContext(ctx, method, base+uri, bytes.NewReader(body))
	if err != nil {
		a.err = err
		return a
	}
	req.Header = h
	req.Host = in.Host
	if rt.cfg.Local != nil {
		// In process when the shard's coordinator runs here.
		in := req.Clone(ctx)
		in.RequestURI, in.RemoteAddr, in.ContentLength = uri, "127.0.0.1:0", int64(len(body))
		in.Body = io.NopCloser(bytes.NewReader(body))
		rec := &answerRecorder{header: http.Header{}}
		if rt.cfg.Local(shard, rec, in) {
			rt.passedHere.Add(1)
			if rec.err != nil {
				a.err = rec.err
				return a
			}
			rt.noteQueued(shard, rec.header)
			a.status, a.header, a.body = cmp.Or(rec.status, http.StatusOK), rec.header, rec.body.Bytes()
			return a
		}
	}
	rt.passedThere.Add(1)
	resp, err := rt.client.Do(req)
	if err != nil {
		rt.log.Debug("Forwarding to a shard failed", "shard", shard, "to", base, "path", uri, "err", err)
		rt.missed(shard)
		a.err = err
		return a
	}
	defer resp.Body.Close()
	a.body, err = io.ReadAll(io.LimitReader(resp.Body, maxShardAnswer+1))
	if err == nil && len(a.body) > maxShardAnswer {
		err = fmt.Errorf("an answer of more than %d bytes", maxShardAnswer)
	}
	if err != nil {
		a.err = err
		return a
	}
	rt.noteQueued(shard, resp.Header)
	a.status, a.header = resp.StatusCode, resp.Header
	return a
}

// write passes answer a on to w; an answer that did not come is 503
// "no_leader".
func (rt *ShardRouter) write(w http.ResponseWriter, a shardAnswer) {
	if a.err != nil {
		noLeader(w, fmt.Sprintf("the coordinator of shard %d of the pool did not answer; try again shortly", a.shard))
		return
	}
	h := w.Header()
	for k, vs := range a.header {
		h[k] = vs
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
	h.Set("Content-Length", strconv.Itoa(len(a.body)))
	w.WriteHeader(a.status)
	w.Write(a.body)
}

// addJob is POST /v1/jobs: to the shard of the job's ID, the SHA-256 of
// the canonical encoding the body carries; a body that names none goes
// to shard 0, which says what is wrong with it.
func (rt *ShardRouter) addJob(w http.ResponseWriter, r *http.Request) {
	body, release, ok := rt.readBody(w, r)
	if !ok {
		return
	}
	defer release()
	shard := 0
	if req, err := decodeJobRequest(body); err == nil {
		id := job.ID(sha256.Sum256(req.Canonical))
		shard = cluster.ShardOf(id, rt.cfg.Shards)
		if p := rt.cfg.Placements; p != nil {
			// Recorded before the shard adds it, so that the job is
			// only ever added in one shard: a request not signed by a
			// device the pool knows records nothing.
			if _, err := rt.checkSignature(r, body); err != nil {
				rt.fail(w, err)
				return
			}
			pctx, cancel := context.WithTimeout(r.Context(), placementTimeout)
			shard, err = p.Place(pctx, id, rt.placeJob(id))
			cancel()
			if err != nil {
				rt.fail(w, rt.placementError(id, "record", err))
				return
			}
			a := rt.send(r.Context(), r, shard, r.Method, r.URL.RequestURI(), outHeader(r), body)
			if a.err == nil && a.status == http.StatusBadRequest && answerCode(a.body) == "bad_job" {
				// A manifest no shard can plan: its record goes, so that
				// a refused submission leaves nothing behind.
				if err := p.Forget(r.Context(), id); err != nil {
					rt.log.Debug("Could not forget a refused job's shard", "job", id.String(), "err", err)
				}
			}
			rt.write(w, a)
			return
		}
	}
	rt.write(w, rt.send(r.Context(), r, shard, r.Method, r.URL.RequestURI(), outHeader(r), body))
}

// answerCode returns the code of an error answer's body (ErrorBody), ""
// when it has none.
func answerCode(body []byte) string {
	var e ErrorBody
	if json.Unmarshal(body, &e) != nil {
		return ""
	}
	return e.Code
}

// everyShard is POST /v1/peers and POST /v1/offers: the request goes to
// every shard unchanged, at once. A refusal by a shard (an answer of 400
// or more but 503) is the answer, the first in shard order. Otherwise
// the answer is the first shard's that took it: a shard that did not
// answer (no node in charge of it for the moment, its node gone) does
// not hold the others up. The device learns of such a shard when it asks
// it for something: a registration it lacks is answered 401, and the
// agent registers again; an offer it lacks, 409 no_offer, and the agent
// publishes it again. When no shard took it, the first failure is the
// answer. A registration a shard took teaches the router the device's
// key (splitting work requests needs it).
func (rt *ShardRouter) everyShard(w http.ResponseWriter, r *http.Request) {
	body, release, ok := rt.readBody(w, r)
	if !ok {
		return
	}
	defer release()
	answers := rt.fanOut(r, body)
	var took, missed *shardAnswer
	for i, a := range answers {
		switch {
		case a.ok():
			if took == nil {
				took = &answers[i]
			}
		case a.err == nil && a.status != http.StatusServiceUnavailable:
			rt.write(w, a) // refused: the device is told why
			return
		case missed == nil:
			missed = &answers[i]
		}
	}
	if took == nil {
		rt.write(w, *missed)
		return
	}
	if missed != nil {
		rt.log.Info("A shard did not answer a request every shard should take; the device repeats it when that shard asks",
			"path", r.URL.Path, "shard", missed.shard)
	}
	if r.URL.Path == "/v1/peers" {
		if reg, err := decodeRegistration(body); err == nil {
			rt.keys.put(identity.IDOf(reg.Key), reg.Key)
		}
	}
	rt.write(w, *took)
}

// fanOut sends r, with body, to every shard at once.
func (rt *ShardRouter) fanOut(r *http.Request, body []byte) []shardAnswer {
	answers := make([]shardAnswer, rt.cfg.Shards)
	var wg sync.WaitGroup
	for s := range answers {
		wg.Go(func() { answers[s] = rt.send(r.Context(), r, s, r.Method, r.URL.RequestURI(), outHeader(r), body) })
	}
	wg.Wait()
	return answers
}

// mergeLists is GET /v1/jobs and GET /v1/listings: the request goes to
// every shard unchanged, at once, and the answer is their lists merged
// oldest first over the pool (each shard's list is oldest first, and
// says when its jobs were added: mergeAdded), when every shard
// answered; else the first refusal in shard order. The headers are
// shard 0's.
func (rt *ShardRouter) mergeLists(w http.ResponseWriter, r *http.Request) {
	answers := rt.fanOut(r, nil)
	lists := make([][]json.RawMessage, len(answers))
	added := make([][]int64, len(answers))
	for i, a := range answers {
		if !a.ok() {
			rt.write(w, a)
			return
		}
		if err := json.Unmarshal(a.body, &lists[i]); err != nil {
			a.err = fmt.Errorf("shard %d answered %s with no list: %w", a.shard, r.URL.Path, err)
			rt.write(w, a)
			return
		}
		added[i] = rt.addedTimes(a, len(lists[i]))
	}
	all, _ := mergeAdded(lists, added, false)
	for k, vs := range answers[0].header {
		w.Header()[k] = vs
	}
	w.Header().Del(AddedHeader)
	writeJSON(w, http.StatusOK, all)
}

// addedTimes reads the times shard answer a says the n jobs it lists were
// added (AddedHeader); nil when it does not say n of them (a coordinator
// of a version before AddedHeader).
func (rt *ShardRouter) addedTimes(a shardAnswer, n int) []int64 {
	if n == 0 {
		return nil
	}
	out := make([]int64, 0, n)
	for f := range strings.SplitSeq(a.header.Get(AddedHeader), ",") {
		ms, err := strconv.ParseInt(f, 10, 64)
		if err != nil || len(out) == n {
			out = nil
			break
		}
		out = append(out, ms)
	}
	if len(out) != n {
		rt.log.Debug("A shard did not say when the jobs it lists were added; the shards' lists are joined in shard order",
			"shard", a.shard)
		return nil
	}
	return out
}

// mergeAdded merges lists, one per shard in shard order, each in its
// shard's order, oldest first (newest first with newest), into one list
// in that order over the pool: the order of one coordinator of the whole
// pool. added[s][i] is when lists[s][i] was added, in unix milliseconds
// (AddedHeader). The next job is always the earliest added (the latest,
// with newest) of the shards' next ones; of those added in the same
// millisecond, the lower shard's first oldest first and the higher
// shard's first newest first (one order is the other reversed). Each
// shard's own order (the order its Scheduler took its jobs in) is kept
// whatever its clock did. When a shard did not say its times (added[s]
// nil: a coordinator of an earlier version), the lists are joined in
// shard order instead, and merged is false. The list is never nil.
func mergeAdded[T any](lists [][]T, added [][]int64, newest bool) (out []T, merged bool) {
	n := 0
	merged = true
	for s, l := range lists {
		n += len(l)
		merged = merged && len(added[s]) == len(l)
	}
	out = make([]T, 0, n)
	if !merged {
		for _, l := range lists {
			out = append(out, l...)
		}
		return out, false
	}
	first := func(a, b int64) bool { return a < b } // ties: the shard met first, the lower
	if newest {
		first = func(a, b int64) bool { return a >= b } // ties: the shard met last, the higher
	}
	next := make([]int, len(lists))
	for len(out) < n {
		pick := -1
		for s, l := range lists {
			if next[s] < len(l) && (pick < 0 || first(added[s][next[s]], added[pick][next[pick]])) {
				pick = s
			}
		}
		out = append(out, lists[pick][next[pick]])
		next[pick]++
	}
	return out, true
}

// lease is POST /v1/leases: to the device's shard (leaseShard), then
// the others in order (ShardRouter.order) until one grants leases, K
// tries at most; a grant names the node of its shard (nameNode). The answer is the first
// grant; else a shard's 401 (it does not know the device: the agent
// registers again); else the last "none now" (200 with no leases); else
// the first refusal.
func (rt *ShardRouter) lease(w http.ResponseWriter, r *http.Request) {
	body, release, ok := rt.readBody(w, r)
	if !ok {
		return
	}
	defer release()
	var empty, refused, unknown *shardAnswer
	order := rt.order()
	first := rt.leaseShard(claimedPeer(r), order)
	order = append([]int{first}, slices.DeleteFunc(order, func(s int) bool { return s == first })...)
	for _, s := range order {
		a := rt.send(r.Context(), r, s, r.Method, r.URL.RequestURI(), outHeader(r), body)
		if a.ok() {
			var lr LeaseResponse
			if json.Unmarshal(a.body, &lr) == nil && len(lr.Leases) == 0 {
				empty = &a
				continue
			}
			rt.nameNode(w, s)
			rt.write(w, a)
			return
		}
		if refused == nil {
			refused = &a
		}
		if unknown == nil && a.err == nil && a.status == http.StatusUnauthorized {
			unknown = &a
		}
		if r.Context().Err() != nil {
			break
		}
	}
	switch {
	case unknown != nil:
		// A shard that does not know the device (its registration came
		// while that shard had no node in charge: everyShard) says so
		// rather than the others' "none now": the agent registers again
		// on a 401, and that shard's tasks then reach it.
		rt.write(w, *unknown)
	case empty != nil:
		rt.write(w, *empty)
	case refused != nil:
		rt.write(w, *refused)
	default:
		noLeader(w, "no coordinator of the pool's shards answered; try again shortly")
	}
}

// peerKeys are the devices' public keys the router learnt, for checking
// the signatures of the work requests it splits. It holds at most
// maxPeerKeys; past that, an arbitrary one is forgotten (asked of shard 0
// again when needed).
type peerKeys struct {
	mu sync.Mutex
	m  map[string]ed25519.PublicKey
}

// maxPeerKeys bounds peerKeys: 32 MiB or so of keys and IDs.
const maxPeerKeys = 1 << 18

func (k *peerKeys) get(id string) (ed25519.PublicKey, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	key, ok := k.m[id]
	return key, ok
}

func (k *peerKeys) put(id string, key ed25519.PublicKey) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.m[id]; !ok && len(k.m) >= maxPeerKeys {
		for old := range k.m {
			delete(k.m, old)
			break
		}
	}
	k.m[id] = key
}

// peerKey returns device id's public key: as learnt from its
// registration, or else as shard 0's coordinator holds it (GET
// /v1/peers/{id}/key, forwarded). ok is false for a device no shard 0
// knows, or when shard 0 does not answer (err then).
func (rt *ShardRouter) peerKey(ctx context.Context, in *http.Request, id string) (ed25519.PublicKey, bool, error) {
	if key, ok := rt.keys.get(id); ok {
		return key, true, nil
	}
	uri := "/v1/peers/" + id + "/key"
	req, _ := http.NewRequest(http.MethodGet, uri, nil)
	h := outHeader(in)
	for _, k := range []string{"Authorization", "Content-Type", "Content-Encoding", "Accept"} {
		h.Del(k)
	}
	req.Header = h
	rt.fwd.sign(req, 0, id, rt.cfg.Now(), nil)
	a := rt.send(ctx, in, 0, http.MethodGet, uri, req.Header, nil)
	switch {
	case a.err != nil:
		return nil, false, a.err
	case a.status == http.StatusUnauthorized:
		return nil, false, nil
	case a.status != http.StatusOK:
		return nil, false, fmt.Errorf("shard 0 answered %d to the key of peer %s: %s", a.status, id, a.body)
	}
	var pk PeerKey
	if err := json.Unmarshal(a.body, &pk); err != nil || len(pk.Key) != ed25519.PublicKeySize || identity.IDOf(pk.Key) != id {
		return nil, false, fmt.Errorf("shard 0 answered a key of peer %s that is not its", id)
	}
	rt.keys.put(id, pk.Key)
	return pk.Key, true, nil
}

// PeerKey is the answer to GET /v1/peers/{id}/key, which a shard's
// coordinator answers only to a request a ShardRouter forwarded
// (ForwardedHeader) acting for that device: the device's Ed25519 public
// key, for the router to check the signatures of requests it splits.
type PeerKey struct {
	Peer string `json:"peer"`
	Key  []byte `json:"key"` // 32 bytes, base64 in JSON
}

// checkSignature checks r's device signature over body as a coordinator
// does (signed): its Authorization header, its time, a device shard 0
// knows, and the signature with that device's key. It returns the
// device's ID; a failure is an error for errorStatus (401, or 503 when
// shard 0 cannot be asked).
func (rt *ShardRouter) checkSignature(r *http.Request, body []byte) (string, error) {
	a, err := parseAuthorization(r.Header.Get("Authorization"))
	if err != nil {
		return "", err
	}
	if err := a.checkTime(rt.cfg.Now()); err != nil {
		return "", err
	}
	key, ok, err := rt.peerKey(r.Context(), r, a.Peer)
	if err != nil {
		return "", &apiError{http.StatusServiceUnavailable, CodeNoLeader, "the pool cannot check the request's signature now (its first shard does not answer); try again shortly", nil}
	}
	if !ok {
		return "", unauthorized(fmt.Errorf("unknown peer %s: register first (POST /v1/peers)", a.Peer))
	}
	return a.Peer, a.verify(rt.reqKeys, key, r.Method, r.URL.RequestURI(), sha256.Sum256(body))
}

// fail answers err as a coordinator answers it.
func (rt *ShardRouter) fail(w http.ResponseWriter, err error) {
	status, code := errorStatus(err)
	msg := err.Error()
	var ae *apiError
	if errors.As(err, &ae) {
		msg = ae.msg
	}
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, status, ErrorBody{Error: msg, Code: code})
}

// mergeDashboards is GET /v1/dashboard of a divided pool: every shard's
// Dashboard joined into one, as one coordinator would show the pool.
// Jobs are the shards' lists merged newest first over the pool (by when
// each was added: mergeAdded), the newest dashboardMaxJobs of them (each
// shard lists its newest that many, so those are all there); a device
// is one row (it registered with every shard) holding the leases of all
// shards, silent only when every shard found it silent, and its
// connection the one that says most of its transfers ("relayed" over
// "direct" over "coordinator"); an owner's receipts and cost are summed
// over the shards' ledgers, ordered as one coordinator orders them. The
// ledger's entries are summed; its head names each shard's chain's head,
// "shard S: HEAD" joined by "; " (the ledger is one hash chain per
// shard).
func (rt *ShardRouter) mergeDashboards(w http.ResponseWriter, r *http.Request) {
	answers := rt.fanOut(r, nil)
	var out Dashboard
	jobs := make([][]DashboardJob, len(answers)) // each shard's, newest first
	added := make([][]int64, len(answers))
	peers := map[string]int{} // peer -> its index in out.Peers
	owners := map[string]*DashboardOwner{}
	var heads []string
	// A shard that does not answer (a take-over under way) is left out
	// and named, so that the page shows the others: one missing shard
	// made the whole page "Cannot reach the coordinator". When none
	// answers, the answer is the first shard's.
	dashes, n := decodeAnswered[Dashboard](answers, r.URL.Path, "dashboard")
	if n == 0 {
		rt.write(w, answers[0])
		return
	}
	for i, d := range dashes {
		a := &answers[i]
		if d == nil {
			reason := "no coordinator is in charge of it right now"
			if a.err == nil && a.status != http.StatusServiceUnavailable {
				reason = fmt.Sprintf("it answered %d", a.status)
			}
			out.Unanswered = append(out.Unanswered, DashboardShard{Shard: a.shard, Reason: reason})
			heads = append(heads, fmt.Sprintf("shard %d: (did not answer)", a.shard))
			continue
		}
		if out.Key == "" {
			out.Pool, out.Key = d.Pool, d.Key
		}
		jobs[a.shard], added[a.shard] = d.Jobs, rt.addedTimes(*a, len(d.Jobs))
		for _, p := range d.Peers {
			i, ok := peers[p.Peer]
			if !ok {
				peers[p.Peer] = len(out.Peers)
				out.Peers = append(out.Peers, p)
				continue
			}
			q := &out.Peers[i]
			q.Kind = cmp.Or(q.Kind, p.Kind)
			if q.State == "" {
				q.State, q.Hold = p.State, p.Hold
			}
			q.Leases += p.Leases
			q.Silent = q.Silent && p.Silent
			if connectionRank(p.Connection) > connectionRank(q.Connection) {
				q.Connection = p.Connection
			}
		}
		for _, o := range d.Owners {
			if m := owners[o.Owner]; m != nil {
				m.Receipts += o.Receipts
				m.Cost += o.Cost
				m.Name = cmp.Or(m.Name, o.Name)
				continue
			}
			c := o
			owners[o.Owner] = &c
		}
		out.Ledger.Entries += d.Ledger.Entries
		heads = append(heads, fmt.Sprintf("shard %d: %s", a.shard, cmp.Or(d.Ledger.Head, "(empty)")))
	}
	var merged bool
	if out.Jobs, merged = mergeAdded(jobs, added, true); merged {
		out.Jobs = out.Jobs[:min(len(out.Jobs), dashboardMaxJobs)]
	}
	if out.Ledger.Entries > 0 || len(out.Unanswered) > 0 {
		out.Ledger.Head = strings.Join(heads, "; ")
	}
	for _, o := range owners {
		out.Owners = append(out.Owners, *o)
	}
	slices.SortFunc(out.Owners, func(a, b DashboardOwner) int {
		return cmp.Or(cmp.Compare(b.Receipts, a.Receipts), cmp.Compare(a.Owner, b.Owner))
	})
	out.Owners = out.Owners[:min(len(out.Owners), dashboardMaxOwners)]
	if out.Peers == nil {
		out.Peers = []DashboardPeer{}
	}
	if out.Owners == nil {
		out.Owners = []DashboardOwner{}
	}
	writeJSON(w, http.StatusOK, out)
}

// decodeAnswered decodes as T the body of each of answers that took the
// request (2xx), by shard, and counts them; where an answer did not (no
// answer, another status, or a body that is not a T, which sets its err
// naming what, the thing T is, and path) it is nil.
func decodeAnswered[T any](answers []shardAnswer, path, what string) (vals []*T, n int) {
	vals = make([]*T, len(answers))
	for i := range answers {
		a := &answers[i]
		if !a.ok() {
			continue
		}
		v := new(T)
		if err := json.Unmarshal(a.body, v); err != nil {
			a.err = fmt.Errorf("shard %d answered %s with no %s: %w", a.shard, path, what, err)
			continue
		}
		vals[i], n = v, n+1
	}
	return vals, n
}

// mergeOffers is GET /v1/offers: every shard's live offers, one per
// device (the newest issued; silent only where every shard that answered
// says so), by peer ID as one coordinator lists them. A device posts its
// offer to every shard, but each keeps them in memory: a shard whose node
// in charge changed lists none until each device posts again (a third of
// its offer's TTL later), and the list was shard 0's alone, so that a
// follow said "no donor offers compute" while donors computed. A shard
// that does not answer is left out; when none does, the answer is the
// first shard's.
func (rt *ShardRouter) mergeOffers(w http.ResponseWriter, r *http.Request) {
	answers := rt.fanOut(r, nil)
	lists, n := decodeAnswered[[]offers.Offer](answers, r.URL.Path, "list of offers")
	if n == 0 {
		rt.write(w, answers[0])
		return
	}
	by := map[string]offers.Offer{}
	for _, list := range lists {
		if list == nil {
			continue
		}
		for _, o := range *list {
			if had, ok := by[o.Peer]; ok {
				if had.Issued.After(o.Issued) {
					o, had = had, o // o is the newest
				}
				o.Silent = o.Silent && had.Silent
				o.OwnerProfile = cmp.Or(o.OwnerProfile, had.OwnerProfile)
			}
			by[o.Peer] = o
		}
	}
	out := make([]offers.Offer, 0, len(by))
	for _, o := range by {
		out = append(out, o)
	}
	slices.SortFunc(out, func(a, b offers.Offer) int { return cmp.Compare(a.Peer, b.Peer) })
	writeJSON(w, http.StatusOK, out)
}

// page answers the pool's page and its files (pageFiles) here, from the
// binary: they are the same on every shard, and a page asked of shard 0
// failed to load while shard 0 had no node in charge, the other shards'
// jobs with it. Another path goes to shard 0.
func (rt *ShardRouter) page(w http.ResponseWriter, r *http.Request) {
	f, ok := pageFiles[r.URL.Path]
	if !ok {
		rt.proxy(w, r, 0)
		return
	}
	if err := writePageFile(w, f.name, f.typ); err != nil {
		rt.log.Warn("Cannot serve the pool's page", "path", r.URL.Path, "err", err)
		http.Error(w, "the pool's page is missing from this build", http.StatusInternalServerError)
	}
}

// connectionRank orders DashboardPeer.Connection's words by how much of a
// device's transfers they tell: "relayed" (some bytes through the relay)
// over "direct" over "coordinator" over "" (nothing reported).
func connectionRank(c string) int {
	switch c {
	case "relayed":
		return 3
	case "direct":
		return 2
	case "coordinator":
		return 1
	}
	return 0
}
