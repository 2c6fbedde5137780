package coord

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"idlepool/home"
	"idlepool/identity"
	"idlepool/job"
	"idlepool/p2p"
	"idlepool/pool"
	"idlepool/store"
)

// Files and directories under Config.DataDir.
const (
	dbFile   = "coordinator.db"
	keyFile  = "coordinator.key"
	blobsDir = "blobs"
)

// shutdownGrace is how long Serve lets requests in flight finish after its
// context is cancelled before it closes their connections.
const shutdownGrace = 10 * time.Second

// Server is a coordinator: the HTTP API of docs/api.md over a
// pool.Scheduler, its SQLite store, its key and its blob directory. Create
// it with New, run it with Serve. Its methods are safe for concurrent use.
//
// It bounds what clients may hold (Config: connections, header and body
// times, body bytes in memory and in temporary files): a request's
// signature and peer are checked before its body is read where the
// request allows, and a body not yet authenticated is kept mostly on disk.
type Server struct {
	cfg     Config
	log     *slog.Logger
	lock    *home.Lock // on DataDir, held until Close
	key     *identity.Key
	fwdKey  forwardKey   // the MAC key of forwarded requests, for a shard of a divided pool (forward.go)
	reqKeys *requestKeys // the devices' request keys, for requests with a MAC (auth.go)
	db      *store.DB
	blobs   *blobStore
	sched   *pool.Scheduler
	offers  *offerBook
	metrics *metrics
	handler http.Handler
	ln      *connLimiter
	url     string

	// Bytes of request bodies held in memory and in temporary files under
	// spoolDir, over all requests (Config.MaxBodyMemory, MaxSpoolBytes).
	bodyMem  *budget
	spool    *budget
	spoolDir string

	// profiles are the owners' signed profiles, shown beside their IDs
	// in listings, offers and job status.
	profiles *profileBook

	// tracker lists which devices hold which chunks; chunks is what the
	// coordinator knows of its own files' chunks (tracker.go).
	tracker *tracker
	chunks  *chunkIndex
	// transfers adds up what devices report of their fetches (transfers.go).
	transfers *transferBook
	// dash keeps what the pool's page needs beyond the scheduler
	// (dashboard.go).
	dash *dashboard
	// signals are the devices' signalling mailboxes; relay is the TURN
	// relay, nil when Config.Relay.Listen is empty (signal.go).
	signals *mailboxes
	relay   *p2p.Relay
	// taskCosts caches each job's planner cost of task 0 for listings
	// (job.ID → float64): a job never changes, and matchmaking lists
	// every job on every lease.
	taskCosts sync.Map

	// direct counts the requests a cluster node's public port hands
	// this Server without a hop through its listener (ServeDirect).
	direct *directRequests

	// excluded holds the exclusions the scheduler decided until the
	// cluster's board takes them; nil without ClusterHooks.Exclusions
	// (exclusions.go).
	excluded *outbox[pool.Exclusion]
	// deviated holds the deviations the scheduler decided until the
	// cluster's board takes them; nil without ClusterHooks.Deviations.
	deviated *outbox[pool.Deviation]
	// secrets holds the digests of the known-answers files of the jobs
	// the scheduler took until the cluster's board takes them; nil
	// without ClusterHooks.Secrets.
	secrets *outbox[job.Digest]

	served    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

// directRequests counts requests in flight through Server.ServeDirect
// and, once closed, refuses new ones, so that Serve's shutdown can wait
// for those it let in as it waits for its listener's.
type directRequests struct {
	mu     sync.RWMutex
	closed bool
	wg     sync.WaitGroup
	// cut ends the contexts of the requests still in flight when the
	// shutdown's grace is over (cutOff), as closing its listener's
	// connections ends the others.
	cut    context.Context
	cutOff context.CancelFunc
}

// newDirectRequests returns an open directRequests.
func newDirectRequests() *directRequests {
	d := &directRequests{}
	d.cut, d.cutOff = context.WithCancel(context.Background())
	return d
}

// enter counts one request in; it is false once closed.
func (d *directRequests) enter() bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return false
	}
	d.wg.Add(1)
	return true
}

// close refuses requests from now on.
func (d *directRequests) close() {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
}

// wait returns when the requests let in have ended or ctx ends,
// whichever is first; it is false in the second case.
func (d *directRequests) wait(ctx context.Context) bool {
	done := make(chan struct{})
	go func() { d.wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

// New locks cfg.DataDir for this process (home.CoordinatorLockFile: a
// second coordinator on the same directory is refused at once with an
// error wrapping home.ErrLocked that names the holder's PID), then opens
// (creating if needed) the coordinator's state there: the SQLite store
// coordinator.db, the key coordinator.key
// (identity.LoadOrCreate, mode 0600) and the blob directory blobs/; loads
// the pool's state into a Scheduler; and binds cfg.Listen, so URL is valid
// as soon as New returns and an address in use is reported here. ctx
// bounds loading only. cfg is validated (Config.Validate) on a copy.
//
// The caller must call Serve, which releases everything when it returns,
// or else Close.
func New(ctx context.Context, cfg Config) (_ *Server, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger, direct: newDirectRequests(), offers: newOfferBook(), tracker: newTracker(cfg.Now), chunks: newChunkIndex(), signals: newMailboxes(),
		bodyMem: newBudget("memory", cfg.MaxBodyMemory), spool: newBudget("temporary files", cfg.MaxSpoolBytes),
		spoolDir: filepath.Join(cfg.DataDir, spoolDir)}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	// Two coordinators on one directory would each lease and decide from
	// their own memory and both answer 200, until one's commit conflicts.
	s.lock, err = home.Acquire(filepath.Join(cfg.DataDir, home.CoordinatorLockFile), "idlepool serve")
	if errors.Is(err, errors.ErrUnsupported) {
		s.log.Warn("Cannot lock the data directory on this system; run one coordinator per directory", "dataDir", cfg.DataDir)
	} else if err != nil {
		return nil, fmt.Errorf("lock data directory %s: %w", cfg.DataDir, err)
	}
	if s.key, err = identity.LoadOrCreate(filepath.Join(cfg.DataDir, keyFile)); err != nil {
		return nil, fmt.Errorf("coordinator key: %w", err)
	}
	s.reqKeys = newRequestKeys(s.key)
	if cfg.Shards > 1 {
		s.fwdKey = newForwardKey(s.key)
	}
	if s.blobs, err = newBlobStore(filepath.Join(cfg.DataDir, blobsDir)); err != nil {
		return nil, err
	}
	if err := cleanSpool(s.spoolDir); err != nil {
		return nil, err
	}
	if s.db, err = store.Open(filepath.Join(cfg.DataDir, dbFile), store.WithBusyTimeout(cfg.StoreBusyTimeout)); err != nil {
		return nil, fmt.Errorf("open coordinator store: %w", err)
	}
	var st pool.Store = s.db
	if cfg.Cluster != nil {
		if cfg.Cluster.Store != nil {
			st = cfg.Cluster.Store
		}
		if cfg.Cluster.Blobs != nil {
			s.blobs.mirror = cfg.Cluster.Blobs
			n, err := s.blobs.fillFromMirror(ctx)
			if err != nil {
				return nil, err
			}
			s.log.Info("Files copied from the cluster", "files", n)
		}
	}
	var onExclude func(pool.Exclusion)
	if cfg.Cluster != nil && cfg.Cluster.Exclusions != nil {
		s.excluded = newOutbox[pool.Exclusion]()
		onExclude = s.excluded.add
	}
	var onDeviate func(pool.Deviation)
	if cfg.Cluster != nil && cfg.Cluster.Deviations != nil {
		s.deviated = newOutbox[pool.Deviation]()
		onDeviate = s.deviated.add
	}
	var onSecret func(job.Digest)
	if cfg.Cluster != nil && cfg.Cluster.Secrets != nil {
		s.secrets = newOutbox[job.Digest]()
		onSecret = s.secrets.add
	}
	s.sched, err = pool.NewScheduler(ctx, pool.SchedulerConfig{
		Pool:   cfg.Pool,
		Key:    s.key,
		Store:  st,
		Blobs:  s.blobs.path,
		Now:    cfg.Now,
		Logger: cfg.Logger.With("component", "scheduler"),
		Select: s.selectJobs,
		Fits:   s.fitsClass,
		Trust:  cfg.Trust,
		Present: func(peer string, now time.Time) bool {
			_, ok := s.offers.get(peer, now)
			return ok && !s.dash.silent(peer, now)
		},

		MaxTimeouts: cfg.MaxTimeouts,
		Tail:        cfg.Tail,
		Shard:       cfg.Shard,
		Shards:      cfg.Shards,
		OnExclude:   onExclude,
		OnDeviate:   onDeviate,
		OnSecret:    onSecret,
	})
	if err != nil {
		return nil, fmt.Errorf("load pool state: %w", err)
	}
	var profiles ProfileStore = s.db
	if cfg.Cluster != nil && cfg.Cluster.Profiles != nil {
		profiles = cfg.Cluster.Profiles
	}
	if s.profiles, err = loadProfiles(ctx, profiles); err != nil {
		return nil, fmt.Errorf("load owner profiles: %w", err)
	}
	s.metrics = newMetrics(s.sched.Jobs, s.sched.LedgerCounts, s.sched.CommitCounts)
	s.transfers = newTransferBook(func(id job.ID) (bool, bool) {
		st, err := s.sched.Status(id)
		return st.Complete, err == nil
	})
	s.metrics.reg.MustRegister(s.transfers.bytes)
	s.dash = newDashboard()
	s.metrics.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "idlepool_coord_offers_live", Help: "Capacity offers of peers that have not expired.",
	}, func() float64 { return float64(s.offers.count(s.cfg.Now())) }))
	s.metrics.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "idlepool_coord_tracker_chunks", Help: "Chunk holdings the tracker lists, over all devices.",
	}, func() float64 { return float64(s.tracker.entries()) }))
	s.metrics.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "idlepool_coord_signals_waiting", Help: "Signalling messages waiting in the devices' mailboxes.",
	}, func() float64 { return float64(s.signals.pending()) }))
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	if err := s.startRelay(); err != nil {
		ln.Close()
		return nil, err
	}
	s.ln = newConnLimiter(ln, cfg.MaxConns, cfg.Logger)
	s.metrics.limits(s.ln, s.bodyMem, s.spool)
	s.handler = s.routes()
	s.url = "http://" + s.ln.Addr().String()
	s.log.Info("Coordinator ready", "pool", cfg.Pool, "url", s.url, "key", identity.EncodePublic(s.key.Public()),
		"inviteOnly", cfg.InviteOnly(), "dataDir", cfg.DataDir, "maxConns", cfg.MaxConns)
	return s, nil
}

// URL returns the pool URL, "http://HOST:PORT" with the port actually
// bound (useful with port 0). Peers join and submit with it.
func (s *Server) URL() string { return s.url }

// PublicKey returns the coordinator's public key, which signs receipts.
func (s *Server) PublicKey() []byte { return s.key.Public() }

// Handler returns the HTTP handler of the API, for tests that serve it on
// their own listener (httptest.NewServer). It needs the scheduler running:
// call Serve as well, or requests that schedule fail with 503.
func (s *Server) Handler() http.Handler { return s.handler }

// ServeDirect answers r as if it had come in on the Server's own
// listener, for the public port of the cluster node this Server runs on
// while that node is in charge: the request skips a second HTTP hop
// through the loopback. It returns false, answering nothing, once Serve
// has begun to stop (the node's term is over) or before Serve began:
// the caller then forwards r to whichever node is in charge. Serve's
// shutdown waits for the requests it let in, within the same grace as
// its listener's.
func (s *Server) ServeDirect(w http.ResponseWriter, r *http.Request) bool {
	if !s.served.Load() || !s.direct.enter() {
		return false
	}
	defer s.direct.wg.Done()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(s.direct.cut, cancel)()
	s.handler.ServeHTTP(w, r.WithContext(ctx))
	return true
}

// Serve serves the API on the listener New bound and runs the scheduler
// (group commit, lease expiry), both under one errgroup, until ctx is
// cancelled or one of them fails. On cancellation it stops accepting
// connections, lets requests in flight finish for up to 10 seconds, then
// stops the scheduler and closes the store; it returns nil after such a
// clean stop and the first failure otherwise. Serve may be called once.
func (s *Server) Serve(ctx context.Context) error {
	if !s.served.CompareAndSwap(false, true) {
		return errors.New("coord: Serve called twice")
	}
	defer s.Close()
	defer s.direct.cutOff()
	// No ReadTimeout or WriteTimeout: they would bound whole requests,
	// and a large upload or download may take long. Bodies are bounded
	// by rate instead (slowBody), connections by connLimiter.
	hs := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ConnState:         s.ln.connState,
		ConnContext:       connContext,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	// The scheduler outlives the HTTP server by the shutdown grace, so
	// requests in flight can finish; it stops when HTTP is down.
	schedCtx, stopSched := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSched()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		err := s.sched.Serve(schedCtx)
		if schedCtx.Err() == nil {
			return fmt.Errorf("scheduler stopped: %w", errors.Join(err, pool.ErrStopped))
		}
		if err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("scheduler: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		if err := hs.Serve(s.ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve http: %w", err)
		}
		return nil
	})
	g.Go(func() error { return s.serveRelay(gctx) })
	if s.cfg.Cluster == nil || s.cfg.Cluster.Store == nil {
		g.Go(func() error { s.compactLoop(gctx); return nil })
	}
	if h := s.cfg.Cluster; h != nil && s.cfg.Shards > 1 {
		every := h.ExchangeEvery
		if every <= 0 {
			every = DefaultExchangeEvery
		}
		if h.LedgerHeads != nil {
			g.Go(func() error { s.exchangeLoop(gctx, every, s.anchorRound(h.LedgerHeads)); return nil })
		}
		if h.Usage != nil {
			g.Go(func() error { s.exchangeLoop(gctx, every, s.usageRound(h.Usage)); return nil })
		}
	}
	if s.excluded != nil {
		board := s.cfg.Cluster.Exclusions
		g.Go(func() error { publishAll(gctx, s, sharedExclusion, board.Publish, s.excluded); return nil })
		g.Go(func() error { applyAll(gctx, s, sharedExclusion, board.Watch, s.sched.Exclude); return nil })
	}
	if s.secrets != nil {
		// Every secret this shard holds is handed over again at each
		// start: one not handed over before a stop is not lost.
		for _, d := range s.sched.Secrets() {
			s.secrets.add(d)
		}
		board := s.cfg.Cluster.Secrets
		g.Go(func() error { publishAll(gctx, s, sharedSecret, board.Publish, s.secrets); return nil })
		g.Go(func() error { applyAll(gctx, s, sharedSecret, board.Watch, s.sched.AddSecret); return nil })
	}
	if s.deviated != nil {
		board := s.cfg.Cluster.Deviations
		g.Go(func() error { publishAll(gctx, s, sharedDeviation, board.Publish, s.deviated); return nil })
		g.Go(func() error { applyAll(gctx, s, sharedDeviation, board.Watch, s.sched.Deviated); return nil })
	}
	g.Go(func() error {
		<-gctx.Done()
		s.direct.close()     // ServeDirect lets no more requests in
		s.signals.shutdown() // long polls answer now
		if s.cfg.Cluster != nil {
			// A node that is no longer in charge may commit nothing
			// more: requests waiting on the scheduler are answered 503
			// now, and clients go to the node now in charge.
			stopSched()
		}
		sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		if err := hs.Shutdown(sctx); err != nil {
			s.log.Warn("Requests cut off at shutdown", "err", err)
			hs.Close()
		}
		if !s.direct.wait(sctx) {
			s.log.Warn("Requests through the node's public port cut off at shutdown")
			s.direct.cutOff()
		}
		stopSched()
		return nil
	})
	err := g.Wait()
	if err != nil {
		s.log.Error("Coordinator failed", "err", err)
	} else {
		s.log.Info("Coordinator stopped")
	}
	return errors.Join(err, s.Close())
}

// Close releases the listener, the store and the data directory's lock. Serve calls it; call it
// yourself only when Serve is never called. It is idempotent.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		var errs []error
		if s.ln != nil {
			if err := s.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
				errs = append(errs, err)
			}
		}
		if s.relay != nil {
			errs = append(errs, s.relay.Close())
		}
		if s.db != nil {
			errs = append(errs, s.db.Close())
		}
		errs = append(errs, s.lock.Release()) // after the store is closed
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// compactHoldBack is how long DB.Compact's mark waits at replicas in
// play before it passes them anyway, naming them in replicas_open
// (store.DB.Compact's before): longer than most tasks take, so that a
// replica is seldom named there only to leave it again.
const compactHoldBack = 10 * time.Minute

// compactLoop compacts coordinator.db every CompactEvery until ctx ends,
// so that a restart reads the work in play (store.DB.Compact). A
// compaction that fails (the store locked by another process, full) is
// logged and tried again at the next tick: it changes nothing a commit
// or a restart needs.
func (s *Server) compactLoop(ctx context.Context) {
	tick := time.NewTicker(s.cfg.CompactEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		start := time.Now()
		c, err := s.db.Compact(ctx, s.cfg.Now().Add(-compactHoldBack))
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			s.log.Warn("Cannot compact the pool's store; trying again later", "err", err, "every", s.cfg.CompactEvery)
		case c != (store.Compaction{}):
			s.log.Debug("Store compacted", "outcomesFolded", c.Outcomes, "replicasPassed", c.Replicas,
				"replicasOpened", c.Opened, "replicasClosed", c.Closed, "took", time.Since(start))
		}
	}
}
