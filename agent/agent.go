package agent

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"idlepool/castore"
	"idlepool/coord/api"
	"idlepool/energy"
	"idlepool/home"
	"idlepool/identity"
	"idlepool/idle"
	"idlepool/job"
	"idlepool/offers"
	"idlepool/p2p"
	"idlepool/pool"
	"idlepool/store"
)

// Store is the agent's durable record of its contributions: a pending
// receipt for every result, written before the result is sent, kept with
// its bytes until the coordinator acknowledged it, then confirmed or
// rejected by the pool's signed ledger. *store.Local implements it.
//
// AddPending and AddAbandoned are idempotent by lease. MarkAcknowledged, Confirm and Reject
// wrap store.ErrNotFound for an unknown lease and store.ErrConflict for a
// transition the state does not allow. Methods are called concurrently.
type Store interface {
	AddPending(ctx context.Context, c store.Contribution) error
	Unacknowledged(ctx context.Context, pool string) ([]store.Contribution, error)
	MarkAcknowledged(ctx context.Context, lease string) error
	Confirm(ctx context.Context, lease string, e pool.Entry) error
	Reject(ctx context.Context, lease, reason string) error
	AddAbandoned(ctx context.Context, c store.Contribution, reason string) error
	LedgerCursor(ctx context.Context, pool string) (uint64, error)
	SetLedgerCursor(ctx context.Context, pool string, seq uint64) error
}

var _ Store = (*store.Local)(nil)

// Config configures an Agent. PoolURL, Home, DeviceKey, OwnerKey, Executor
// and Store are required; the rest have defaults.
type Config struct {
	// PoolURL is the coordinator's base URL, e.g. "http://127.0.0.1:7420".
	PoolURL string
	// Home holds the pinned pool key (Home.Config) and the job cache
	// (Home.Cache).
	Home home.Dirs
	// DeviceKey is this device's key: it signs every request.
	DeviceKey *identity.Key
	// OwnerKey is the key of the device's owner, which endorses DeviceKey
	// at registration. A person's devices share one.
	OwnerKey *identity.Key
	// Name labels the device for people (at most 64 bytes); optional.
	Name string
	// Invite is the pool's invite token; needed by invite-only pools that
	// do not allow the owner by key.
	Invite string
	// Slots is how many tasks run at once; default 1. The Executor must
	// have at least as many.
	Slots int
	// LeaseAhead is how many tasks each slot leases at once, 1 to
	// api.MaxLeases; 0 (the default) chooses: one at a time, and
	// while the slot's last task took under ShortTask (pools of short
	// tasks) as many as fit into ShortTask at that task's time, from
	// AutoLeaseAhead to MaxAutoLeaseAhead. With more, a slot computes its leases
	// one after the other and sends each result but the last without
	// waiting for the answer, so that its results (and other slots')
	// travel together in one request (POST /v1/work) and the pool
	// commits them together: fewer requests and signature checks per
	// task, for pools of short tasks. A lease that waits behind the
	// slot's others is extended (heartbeats) until its task starts, as
	// a running task's is.
	LeaseAhead int
	// Executor runs tasks in the sandbox (a *worker.Pool).
	Executor pool.Executor
	// Store records contributions durably (a *store.Local).
	Store Store
	// StorePath is the Store's file, named in Status when it takes no
	// writes (with its file system's free space on a full disk);
	// optional.
	StorePath string
	// FreeSpace returns the bytes free on the file system holding dir;
	// nil means home.FreeBytes. Tests give a fake.
	FreeSpace func(dir string) (uint64, error)
	// health is the store's state shared by a Donor's agents; nil: the
	// agent's own.
	health *storeHealth
	// gpuSlots gives each GPU task a GPU of its own, shared by a Donor's
	// agents; nil: the agent's own.
	gpuSlots *gpuSlots
	// changed, if set, is called when the agent's decision, tasks or
	// reachability change (a Donor's Changes).
	changed func()
	// HTTP is the client for the coordinator; nil means one with a 60 s
	// timeout per request.
	HTTP *http.Client
	// MaxBackoff caps the wait between retries while the coordinator is
	// away; default 10 s.
	MaxBackoff time.Duration
	// IdlePoll caps the wait between lease requests while the pool has no
	// work; default 2 s.
	IdlePoll time.Duration
	// ReceiptPoll is the wait between reads of this device's receipts;
	// default 5 s.
	ReceiptPoll time.Duration
	// Tamper, if set, replaces each task's outcome before it is recorded
	// and sent. It exists to test that lying peers are caught; production
	// code never sets it.
	Tamper func(pool.Lease, pool.TaskOutcome) pool.TaskOutcome
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
	// Energy, if set, meters each task (started under the Donor's or the
	// caller's Serve) and the agent records its Usage when Store is an
	// EnergyRecorder. The figures are the donor's own: they never enter
	// a result, a submission or a receipt's cost.
	Energy *energy.Meter
	// energyAdded, if set, is called after a task's energy was recorded
	// (the Donor's policy reads the caps' usage again).
	energyAdded func()

	// Signals, if set, is sampled every SamplePeriod and Decide turns the
	// signals into the decision the agent obeys (see Serve): run with
	// Decision.Cores slots (at most Slots) and Decision.GPUs, or wait.
	// Nil means always run on every slot.
	Signals Signaller
	// Decide is the owner's policy, e.g. idle.Decide with the settings
	// and the state it keeps between calls; now is the wall-clock time of
	// the sample. It is called from one goroutine at a time, so a closure
	// may keep state. Required with Signals.
	Decide func(sig idle.Signals, now time.Time) idle.Decision
	// GPUMemoryMiB, if set, gives the device-memory cap in MiB of a task
	// given the GPUs uuids (worker.Request.GPUMemoryLimitMiB), e.g.
	// idle.GPUMemoryMiB with the owner's settings and the latest signals;
	// !ok means no cap can be given and the task gets no GPU. Nil gives
	// tasks no cap but the devices' own memory.
	GPUMemoryMiB func(uuids []string) (mib int64, ok bool)
	// SamplePeriod is the wait between samples; DefaultSamplePeriod when
	// 0. Tasks stop within about SamplePeriod plus the Signaller's time to
	// answer after the owner comes back.
	SamplePeriod time.Duration
	// RestSamplePeriod is the wait between samples while the decision is
	// not to compute and no task is held (none suspended either);
	// DefaultRestSamplePeriod when 0, never shorter than SamplePeriod.
	RestSamplePeriod time.Duration
	// Offer is what the agent builds the signed capacity offer (package
	// offers) from that it publishes to the pool once it has joined, and
	// refreshes every third of OfferTTL and whenever the policy's state
	// changes, with offers.Build from Offer's capacity and preferences and
	// the governor's latest decision. The agent leases nothing until the
	// pool holds its offer (see docs/api.md, "Matchmaking"). Nil offers
	// this machine as idle.Defaults describes it, without GPUs, accepting
	// every job.
	Offer OfferSource
	// OfferTTL is how long each published offer is valid;
	// offers.DefaultTTL when 0. A device that vanishes drops out of the
	// pool's offer listing within it.
	OfferTTL time.Duration

	// AbandonAfter is the grace period after a running task's lease ran
	// out (by the last deadline the pool granted) while the pool cannot
	// be reached or refuses this device: then the task is stopped and
	// recorded as abandoned (Store.AddAbandoned), since the pool has
	// leased it elsewhere; default 5 minutes.
	AbandonAfter time.Duration
	// Now is this device's clock; nil means time.Now. Requests are signed
	// with it corrected by the offset measured from the pool's answers
	// (Client.PoolNow).
	Now func() time.Time

	// Cache is the job cache on disk, shared by the agents of one home
	// (a Donor makes one); nil makes one under Home.Cache with the
	// default cap.
	Cache *Cache
	// Peers returns the chunk source for another device of the pool, by
	// peer ID, or nil when it cannot be reached: the peer-to-peer data
	// plane's connection to it. Jobs' files are fetched in chunks from the
	// devices the pool's tracker names, the coordinator giving only what
	// they do not. Nil: the coordinator gives every chunk (the device
	// still keeps and announces what it holds).
	Peers func(peerID string) castore.Source
	// PeerToPeer runs this device's end of the peer-to-peer data plane
	// once joined, when the coordinator relays signals (GET /v1/ice
	// answers; an older coordinator leaves the coordinator the only
	// source): a p2p.Node that serves the chunks this device announced
	// to the pool and is the chunk source for the devices the tracker
	// names (see Peers, which it ignores when set). A pool on loopback
	// keeps ICE on loopback.
	PeerToPeer bool
	// P2P tunes that Node (limits, timeouts, RelayOnly); the agent sets
	// its Key, Signaller, Chunks and Logger.
	P2P p2p.Config
	// NoShare keeps this device from uploading: it announces no chunks to
	// the pool's tracker and runs no Node, and fetches every chunk from
	// the coordinator (the owner's share_peers=false).
	NoShare bool
	// CacheSweep is the wait between asks whether the jobs in the cache
	// of this pool are finished (Cache.Forget); default 10 minutes.
	CacheSweep time.Duration

	// Events, if set, is the event log the agent adds to: the pool
	// joined, unreachable and reachable again, tasks handed back or
	// abandoned, results rejected, the local store full and recovered.
	Events *EventLog

	// Pattern is the owner's pattern of pauses at the machine, from which
	// the length of a pause for the owner is predicted (see
	// PredictPause); a Donor gives its own, learnt and kept in its local
	// store. Nil: the defaults (DefaultActivePause).
	Pattern *OwnerPattern

	// LocalAPI, if set, is where the agent serves its Status for the tray
	// app and `idlepool status`: a Unix domain socket (mode 0600) on Linux
	// and macOS, a file naming a loopback address and a token on Windows.
	// Conventionally LocalAPIFile under the data directory. See ReadStatus.
	LocalAPI string
}

// Validate fills in defaults and checks the configuration.
func (c *Config) Validate() error {
	switch {
	case c.PoolURL == "":
		return errors.New("agent: config: no pool URL")
	case c.DeviceKey == nil || c.OwnerKey == nil:
		return errors.New("agent: config: device and owner keys are required")
	case c.Executor == nil:
		return errors.New("agent: config: no executor")
	case c.Store == nil:
		return errors.New("agent: config: no store")
	case c.Home.Config == "" || c.Home.Cache == "":
		return errors.New("agent: config: no home directories")
	case c.Slots < 0:
		return fmt.Errorf("agent: config: Slots %d is negative", c.Slots)
	case c.LeaseAhead < 0 || c.LeaseAhead > api.MaxLeases:
		return fmt.Errorf("agent: config: LeaseAhead %d: want 1 to %d tasks per slot, or 0 to choose by task time", c.LeaseAhead, api.MaxLeases)
	case c.Signals != nil && c.Decide == nil:
		return errors.New("agent: config: Signals without Decide")
	}
	if c.SamplePeriod <= 0 {
		c.SamplePeriod = DefaultSamplePeriod
	}
	if c.RestSamplePeriod <= 0 {
		c.RestSamplePeriod = DefaultRestSamplePeriod
	}
	c.RestSamplePeriod = max(c.RestSamplePeriod, c.SamplePeriod)
	if c.OfferTTL <= 0 {
		c.OfferTTL = offers.DefaultTTL
	}
	if c.Offer == nil {
		c.Offer = &machineOffer{}
	}
	if c.Slots == 0 {
		c.Slots = 1
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = 10 * time.Second
	}
	if c.IdlePoll <= 0 {
		c.IdlePoll = 2 * time.Second
	}
	if c.ReceiptPoll <= 0 {
		c.ReceiptPoll = 5 * time.Second
	}
	if c.AbandonAfter <= 0 {
		c.AbandonAfter = 5 * time.Minute
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.CacheSweep <= 0 {
		c.CacheSweep = 10 * time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Cache == nil {
		c.Cache = NewCache(CacheConfig{Dir: JobCache(c.Home), Compiled: WorkerCache(c.Home), ShareDir: ShareDir(c.Home), Logger: c.Logger})
	}
	return nil
}

// Agent is a donor device in one pool: it takes tasks whenever it has a
// free slot, computes them in the sandbox and returns their results, and
// follows its receipts. Create it with New and run it with Serve.
type Agent struct {
	cfg   Config
	c     *Client
	log   *slog.Logger
	cache *Cache
	gpus  *gpuSlots // which GPUs this donor's tasks hold

	// Set by join, before the components start.
	poolName string
	// shards is K of a pool divided into shards (api.PoolInfo.Shards), 0
	// or 1 for an undivided one: the receipts come from K ledgers.
	shards   int
	poolKey  ed25519.PublicKey
	verifier *pool.EntryVerifier // of the ledger entries signed with poolKey
	owner    string

	resend    chan struct{}                           // wakes the outbox: something is left to send
	offerNow  chan struct{}                           // wakes the offer loop: publish the offer again now
	heldKick  chan struct{}                           // wakes serveStore: a result is held in memory
	shareKick chan struct{}                           // wakes serveShare: files arrived
	peers     atomic.Pointer[peerPlane]               // the data plane's Node once it runs (peers.go)
	shared    atomic.Pointer[map[castore.Digest]bool] // the chunks announced to the tracker: what peers may fetch
	gov       *governor                               // the policy's decision and its effects (govern.go)
	health    *storeHealth                            // whether the store takes writes (localstore.go)

	mu         sync.Mutex
	offered    chan struct{}          // closed while the pool holds this device's offer, as far as the agent knows
	joinedAs   string                 // the pool's name once joined, for Status
	abandoned  []AbandonedTask        // the latest tasks abandoned, oldest first
	handedBack []HandedBackTask       // tasks handed back early in the current pause, oldest first
	running    map[string]pool.Lease  // leases whose tasks are running
	taskInfo   map[string]taskInfo    // what Status says of each running lease's task, by lease ID
	owners     map[job.ID]string      // job -> owner ID, for jobs seen
	held       map[string]*heldResult // results the store has not fully recorded, by lease
	byRef      map[job.ID]bool        // whether a job's results may be kept and sent by reference (results.go)
	inline     map[job.ID]time.Time   // until when a job's results go inline: its merger does not fetch kept ones (results.go)

	// ownerNames are the display names of the jobs' owners, and
	// notedJobs the jobs noted in the store for the history
	// (profile.go); made when first needed.
	ownerNames map[job.ID]ownerShown
	notedJobs  map[job.ID]string // job -> its name
}

// New checks cfg and returns an agent; it contacts nobody yet.
func New(cfg Config) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c, err := NewClient(cfg.PoolURL, cfg.DeviceKey, cfg.HTTP)
	if err != nil {
		return nil, err
	}
	c.SetClock(cfg.Now)
	log := cfg.Logger.With("pool", c.URL())
	c.UseOwnerProfile(cfg.Home, log)
	if cfg.health == nil {
		cfg.health = newStoreHealth(cfg.StorePath, cfg.FreeSpace, cfg.Logger)
		cfg.health.events = cfg.Events
	}
	if cfg.gpuSlots == nil {
		cfg.gpuSlots = newGPUSlots()
	}
	a := &Agent{
		cfg:       cfg,
		c:         c,
		log:       log,
		cache:     cfg.Cache,
		gpus:      cfg.gpuSlots,
		resend:    make(chan struct{}, 1),
		offerNow:  make(chan struct{}, 1),
		heldKick:  make(chan struct{}, 1),
		shareKick: make(chan struct{}, 1),
		gov:       newGovernor(log),
		health:    cfg.health,
		running:   map[string]pool.Lease{},
		taskInfo:  map[string]taskInfo{},
		owners:    map[job.ID]string{},
		offered:   make(chan struct{}),
		held:      map[string]*heldResult{},
	}
	c.watchReach(a.noteReach)
	c.OnTransfer(a.noteTransfer)
	return a, nil
}

// noteReach adds the coordinator's going away and coming back to the
// event log, with times in the local zone.
func (a *Agent) noteReach(reachable bool, since time.Time) {
	defer a.noteChange()
	if reachable {
		a.event("pool %s reachable again (unreachable since %s)", a.label(), since.Local().Format("15:04:05"))
		return
	}
	a.event("pool %s unreachable (retrying)", a.label())
}

// jobLabel names a job for people: its manifest's name, else its short ID.
func jobLabel(cj *cachedJob) string {
	if cj.j.Manifest.Name != "" {
		return cj.j.Manifest.Name
	}
	return shortJob(cj.j.ID.String())
}

// label names the pool for people: its name once joined, else its URL.
func (a *Agent) label() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.joinedAs != "" {
		return a.joinedAs
	}
	return a.c.URL()
}

// Client returns the agent's client of the pool, signing as its device.
func (a *Agent) Client() *Client { return a.c }

// Serve joins the pool (fetching and pinning its key, registering the
// device), then runs until ctx ends: Slots task loops that each pull a
// lease whenever they are free, an outbox that re-sends results the
// coordinator has not acknowledged (at start and whenever a send failed),
// and a receipt follower. While the coordinator is away, every part
// retries with bounded, jittered backoff. The slots lease nothing until
// the pool has accepted the device's capacity offer, which bounds what it
// may be leased (and again after the pool answers that it holds none, as
// after a coordinator restart).
//
// From the start it also obeys the owner's policy (Config.Signals and
// Decide), sampled at once and then every SamplePeriod. When the decision
// becomes "wait", it suspends the Executor's running tasks at once (if the
// Executor is a Suspender; otherwise it cancels them and hands their
// leases back) and leases nothing more; their leases are kept alive by
// heartbeats, and a task suspended for its job's lease timeout less a
// margin (pauseLimit) is cancelled and its lease handed back, so that the
// pool leases it elsewhere. When the decision becomes "run" again it
// resumes the tasks and leases again on Decision.Cores slots; when the
// cores allowed shrink, tasks running on the slots beyond them finish
// and those slots lease no more. With Config.LocalAPI it serves Status
// there; with Config.Offer it publishes and refreshes its capacity offer.
//
// Cancelling ctx stops it: running tasks are killed and their leases
// handed back (released) before Serve returns nil. Results finished but
// not yet acknowledged stay in the Store and are sent by the next Serve.
// Serve returns an error when the pool refuses the device (not invited)
// or its key changed since the device joined. A Store that takes no
// writes (a full disk, another process holding its lock, a damaged file)
// never ends it: results are held in memory and sent, leasing pauses and
// Status says why, until the store takes writes again (localstore.go).
// Results still held when Serve returns are logged as lost locally; those
// sent come back with their receipts.
func (a *Agent) Serve(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return a.serveGovernor(gctx) })
	if a.cfg.LocalAPI != "" {
		g.Go(func() error { return a.serveLocalAPI(gctx, a.cfg.LocalAPI) })
	}
	g.Go(func() error {
		if err := a.join(gctx); err != nil {
			return err
		}
		node, err := a.startPeers(gctx)
		if err != nil {
			return err
		}
		tasks, tctx := errgroup.WithContext(gctx)
		if node != nil {
			tasks.Go(func() error { return a.servePeers(tctx, node) })
		}
		tasks.Go(func() error { return a.serveOutbox(tctx) })
		tasks.Go(func() error { return a.serveStore(tctx) })
		tasks.Go(func() error { return a.serveReceipts(tctx) })
		tasks.Go(func() error { return a.serveCache(tctx) })
		tasks.Go(func() error { return a.serveShare(tctx) })
		tasks.Go(func() error { return a.serveKept(tctx) })
		tasks.Go(func() error { return a.serveOffers(tctx) })
		for slot := range a.cfg.Slots {
			tasks.Go(func() error { return a.serveSlot(tctx, slot) })
		}
		return tasks.Wait()
	})
	err := g.Wait()
	if ctx.Err() != nil && (err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		a.log.Info("Left pool; running tasks were handed back")
		return nil
	}
	return err
}

// join fetches the pool's key (pinning it) and registers the device,
// retrying while the coordinator is unreachable.
func (a *Agent) join(ctx context.Context) error {
	return a.retry(ctx, "join", func(ctx context.Context) error {
		info, err := PoolKey(ctx, a.c, a.cfg.Home.Config)
		if err != nil {
			return err
		}
		if err := CheckVersion(info); err != nil {
			return err
		}
		reg, err := a.c.Register(ctx, a.cfg.OwnerKey, a.cfg.Name, a.cfg.Invite)
		if err != nil {
			return fmt.Errorf("register with pool %s: %w", info.Pool, err)
		}
		a.poolName, a.poolKey, a.owner = info.Pool, ed25519.PublicKey(info.Key), reg.Owner
		a.shards = info.Shards
		a.verifier = pool.NewEntryVerifier(a.poolKey)
		a.mu.Lock()
		a.joinedAs = info.Pool
		a.mu.Unlock()
		a.log = a.log.With("poolName", info.Pool)
		a.log.Info("Joined pool", "peer", reg.Peer, "owner", reg.Owner)
		a.event("joined pool %s (%s)", info.Pool, a.c.URL())
		return nil
	})
}

// retry calls op until it succeeds, fails with an error that is not worth
// retrying (Retryable), or ctx ends.
func (a *Agent) retry(ctx context.Context, what string, op func(context.Context) error) error {
	b := backoff{Base: 100 * time.Millisecond, Max: a.cfg.MaxBackoff}
	for {
		err := op(ctx)
		if err == nil || !Retryable(err) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		d := b.after(err)
		switch {
		case what == "join":
			// Nothing happens until the device joins: say why it waits,
			// once a step of the backoff.
			attrs := []any{"reason", notJoinedWords(err), "retryIn", roundWait(d)}
			if h := joinHint(err); h != "" && b.failures() == 1 {
				attrs = append(attrs, "hint", h)
			}
			a.log.Warn("Cannot join the pool yet, retrying", attrs...)
		default:
			lvl := slog.LevelDebug
			if b.failures() == 3 {
				lvl = slog.LevelWarn
			}
			a.log.Log(ctx, lvl, "Coordinator unavailable, retrying", "op", what, "wait", d, "err", err)
		}
		if err := sleep(ctx, d); err != nil {
			return err
		}
	}
}

// notJoinedWords says in a few words why joining a pool failed in a way
// worth retrying (Retryable): the network's reason ("connection
// refused"), the server error the pool answered with, or its refusal of
// this device's clock.
func notJoinedWords(err error) string {
	var ae *APIError
	var na *NotAPIError
	switch {
	case errors.Is(err, ErrClockSkew):
		return "the pool refuses this device's clock"
	case errors.As(err, &ae):
		return fmt.Sprintf("the pool answered %d %s", ae.Status, http.StatusText(ae.Status))
	case errors.As(err, &na):
		return fmt.Sprintf("the URL served %d %s, an HTML page", na.Status, http.StatusText(na.Status))
	}
	return netCause(err)
}

// joinHint says, for a join that finds nothing at the pool's address
// (connection refused, no such host), what a person can check; "" for
// other failures, which say enough themselves.
func joinHint(err error) string {
	switch netCause(err) {
	case "connection refused":
		return "nothing answers at this address: check the pool's URL, or whether its coordinator (idlepool serve) is running"
	case "no such host", "the host's name cannot be looked up":
		return "check the pool's URL for a typing error"
	}
	return ""
}

// roundWait rounds a retry's wait for people: to a tenth of a second
// under a second, else to the second.
func roundWait(d time.Duration) time.Duration {
	if d < time.Second {
		return max(d.Round(100*time.Millisecond), 100*time.Millisecond)
	}
	return d.Round(time.Second)
}

// serveSlot is one task loop: whenever it is free it pulls the next lease
// (pull, not push) and runs it. It returns when ctx ends.
func (a *Agent) serveSlot(ctx context.Context, slot int) error {
	idle := backoff{Base: 50 * time.Millisecond, Max: a.cfg.IdlePoll}
	var next []pool.Lease     // granted with the slot's last result
	ahead := a.leaseAhead(-1) // how many leases the slot asks for at once
	// sending holds the deliveries of results that do not wait for their
	// answer (all of a lease-ahead batch's but the last).
	var sending sync.WaitGroup
	defer sending.Wait()
	defer func() {
		for _, l := range next { // stopped before computing them
			a.release(ctx, l, a.log.With("lease", l.ID))
		}
	}()
	for ctx.Err() == nil {
		leases := next // granted with the slot's last result, or asked for now
		next = nil
		if len(leases) == 0 {
			if err := a.gov.waitLease(ctx, slot); err != nil {
				return nil
			}
			if err := a.health.waitWritable(ctx); err != nil { // no new work while results cannot be recorded
				return nil
			}
			if err := a.waitOffered(ctx); err != nil {
				return nil
			}
			// A coordinator that does not know this device (anymore)
			// is sent its registration again by the client (Register).
			err := a.retry(ctx, "lease", func(ctx context.Context) error {
				var err error
				leases, err = a.c.Lease(ctx, ahead)
				return err
			})
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				if ae, ok := errors.AsType[*APIError](err); ok && ae.Code == CodeNoOffer {
					a.log.Info("The pool holds no offer of this device; publishing it before leasing", "slot", slot)
					a.offerLost()
					continue
				}
				a.log.Error("Lease request refused", "slot", slot, "err", err)
				if err := sleep(ctx, a.cfg.MaxBackoff); err != nil {
					return nil
				}
				continue
			}
			if len(leases) == 0 {
				if err := sleep(ctx, idle.next()); err != nil {
					return nil
				}
				continue
			}
			idle.reset()
		}
		if ok, _ := a.gov.mayLease(slot); !ok || a.health.faulty() {
			// The policy changed its mind, or the store failed, while the
			// lease was granted.
			for _, l := range leases {
				a.release(ctx, l, a.log.With("lease", l.ID))
			}
			continue
		}
		// The leases that wait behind the one computing are extended
		// meanwhile, so that none expires in the queue.
		queued := a.holdQueued(ctx, leases[1:])
		for i, l := range leases {
			if i > 0 {
				var err error
				if l, err = queued.start(l); err != nil {
					a.log.Info("A lease ended while it waited behind the slot's others; not computed",
						"jobID", l.Job.String(), "taskIndex", l.Task, "lease", l.ID, "err", err)
					continue
				}
			}
			got, err := a.runLease(ctx, l, slot, i == len(leases)-1, &ahead, &sending)
			if err != nil {
				queued.stopAll()
				return err
			}
			next = append(next, got...)
		}
		queued.stopAll()
		sending.Wait()
	}
	return nil
}

// Leasing ahead when Config.LeaseAhead is 0: a slot whose last task
// took under ShortTask leases as many tasks at once as that task's time
// fits into ShortTask, at least AutoLeaseAhead and at most
// MaxAutoLeaseAhead. Four short tasks per request took the benchmark's
// requests per task from 1.7 to 0.8, and sixteen tasks of milliseconds
// took them to about 0.25 and the coordinator's CPU per task down by a
// tenth (docs/benchmarks.md): each request costs the coordinator a
// signature check and an HTTP exchange whatever it carries. A second of
// task time keeps the queue behind a slot's running task short against
// a lease timeout and a job's tail (tasks of 250 ms to a second queue
// AutoLeaseAhead, up to 4 s), and the waiting leases are extended
// (queuedLeases).
const (
	// AutoLeaseAhead is how many tasks a slot leases at once after a
	// short task, at least.
	AutoLeaseAhead = 4
	// MaxAutoLeaseAhead is how many tasks a slot leases at once after
	// a task of ShortTask/MaxAutoLeaseAhead (62.5 ms) or less.
	MaxAutoLeaseAhead = 16
	// ShortTask is the task time under which a task is short.
	ShortTask = time.Second
)

// leaseAhead returns how many leases a slot asks for at once after a
// task that took took (negative: none yet).
func (a *Agent) leaseAhead(took time.Duration) int {
	switch {
	case a.cfg.LeaseAhead > 0:
		return a.cfg.LeaseAhead
	case took < 0 || took >= ShortTask:
		return 1
	case took <= ShortTask/MaxAutoLeaseAhead:
		return MaxAutoLeaseAhead
	}
	return max(AutoLeaseAhead, int(ShortTask/took))
}

// mayLeaseNow reports whether slot may ask for a new task at once: what
// serveSlot waits for before it asks (the policy, a store that takes
// writes, the offer published), without waiting.
func (a *Agent) mayLeaseNow(slot int) bool {
	if ok, _ := a.gov.mayLease(slot); !ok || a.health.faulty() {
		return false
	}
	a.mu.Lock()
	ch := a.offered
	a.mu.Unlock()
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// runLease computes one leased task of slot and hands its result to the
// pool; with last (no other lease of the slot waits) and the slot free to
// lease now, the result's request also asks for the slot's next tasks
// (Config.LeaseAhead), which runLease returns. A result that is not the
// last is handed over under sending, without waiting for the answer, so
// that the slot computes its next lease meanwhile and the results travel
// together. Its error is nil: a store that takes no writes holds the
// result in memory (keep), and every other problem ends in the lease
// being released or expiring.
func (a *Agent) runLease(ctx context.Context, l pool.Lease, slot int, last bool, ahead *int, sending *sync.WaitGroup) ([]pool.Lease, error) {
	log := a.log.With("jobID", l.Job.String(), "taskIndex", l.Task, "lease", l.ID)
	// A failure worth retrying (the pool answering 503 while the node
	// that serves the job's files changes hands) is tried again (retry)
	// for up to prepareRetry, well inside a lease of minutes, the lease
	// extended meanwhile where its shard answers: handed back at once,
	// and the hand-back refused by the same take-over, the task waited
	// out its whole lease. The bound is on the waits, not on a try: a
	// large job's files take what they take.
	var (
		cj   *cachedJob
		done func()
		err  error
	)
	rctx, stopRetry := context.WithTimeout(ctx, prepareRetry)
	_ = a.retry(rctx, "prepare job", func(context.Context) error {
		if err != nil {
			_, _ = a.c.Heartbeat(ctx, l.ID)
		}
		cj, done, err = a.cache.acquire(ctx, a.c, l.Job, a.peerSource())
		return err
	})
	stopRetry()
	if err == nil {
		defer done()
		a.kickShare()
	}
	if err != nil {
		if ctx.Err() != nil {
			a.release(ctx, l, log)
			return nil, nil
		}
		log.Error("Cannot prepare job, handing the task back", "err", err)
		a.release(ctx, l, log)
		if !Retryable(err) {
			// The pool would lease the same task again at once: pause
			// instead of spinning on a job this device cannot run.
			_ = sleep(ctx, a.cfg.MaxBackoff)
		}
		return nil, nil
	}
	if l.Task < 0 || l.Task >= cj.j.NumTasks() {
		log.Error("Lease names a task the job does not have", "tasks", cj.j.NumTasks())
		a.release(ctx, l, log)
		return nil, nil
	}
	if why := a.refusal(ctx, l.Job); why != "" {
		// The donor refused this job or its owner after the offer the pool
		// matched was published: hand the task back and renew the offer.
		log.Info("Handing back a task the owner of this device refused", "reason", why)
		a.release(ctx, l, log)
		a.renewOffer()
		return nil, nil
	}
	owner, ownerName := a.noteJob(ctx, cj.j)
	a.mu.Lock()
	a.taskInfo[l.ID] = taskInfo{jobName: cj.j.Manifest.Name, owner: owner, ownerName: ownerName,
		started: a.cfg.Now(), limit: cj.j.Manifest.Policy.TimeLimit.Duration}
	a.mu.Unlock()
	a.trackRunning(l, true)
	defer a.trackRunning(l, false)

	t := cj.j.Task(l.Task)
	taskCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// The heartbeat starts when its first beat is due: a task done
	// sooner, as most are, costs no goroutine and no ticker for it.
	hbDone := make(chan struct{})
	hbStart := a.cfg.Now()
	hbEvery := heartbeatInterval(cj.j, l, hbStart)
	hb := time.AfterFunc(hbEvery, func() {
		defer close(hbDone)
		a.heartbeat(taskCtx, cj.j, l, hbStart, hbEvery, cancel, log)
	})
	stopHeartbeat := func() { // after cancel
		if hb.Stop() { // it never started
			close(hbDone)
		}
		<-hbDone
	}
	pauseDone := make(chan struct{})
	limit := pauseLimit(cj.j.Manifest.Policy.LeaseTimeout.Duration)
	taken := time.Now()
	go func() {
		defer close(pauseDone)
		a.watchPause(taskCtx, limit, taken, cancel)
	}()
	gpus, gpuMiB, giveGPU, busy := a.taskGPUs(taskCtx, cj.j)
	defer giveGPU()
	if len(gpus) == 0 && cj.j.Manifest.Requirements.GPU.Required() && taskCtx.Err() == nil {
		// The offer the pool matched had a GPU that the policy no longer
		// allows, or this donor's other tasks held every GPU for longer
		// than the task may take: hand the task back instead of computing
		// it without one. (A wait for a GPU that ended with the task
		// itself goes on below, where its cause decides: the lease lost,
		// the job cancelled, the agent stopping.)
		cancel(nil)
		stopHeartbeat()
		<-pauseDone
		if busy {
			log.Info("Handing back a task that needs a GPU: this computer's GPUs stayed busy with other tasks")
			a.release(ctx, l, log)
			return nil, nil
		}
		log.Info("Handing back a task that needs a GPU: none is allowed now")
		a.release(ctx, l, log)
		a.renewOffer()
		_ = sleep(ctx, a.cfg.MaxBackoff)
		return nil, nil
	}
	gpuDone := make(chan struct{})
	if len(gpus) > 0 {
		go func() {
			defer close(gpuDone)
			a.watchGPUs(taskCtx, gpus, cancel)
		}()
	} else {
		close(gpuDone)
	}
	var metered *energy.Task
	if a.cfg.Energy != nil {
		metered = a.cfg.Energy.Start(gpus)
	}
	began := a.cfg.Now()
	out, err := a.runTask(taskCtx, cj, t, gpus, gpuMiB)
	*ahead = a.leaseAhead(a.cfg.Now().Sub(began))
	if metered != nil {
		a.recordEnergy(ctx, l, metered.Stop(out.PID), log)
	}
	cancel(nil)
	stopHeartbeat()
	<-pauseDone
	<-gpuDone
	switch {
	case ctx.Err() != nil:
		a.release(ctx, l, log)
		return nil, nil
	case errors.Is(context.Cause(taskCtx), ErrGPUReleased):
		log.Info("Task stopped to let go of its GPU; handed back to the pool", "cause", context.Cause(taskCtx))
		a.event("task %d of job %s handed back to pool %s: %v", l.Task, jobLabel(cj), a.label(), context.Cause(taskCtx))
		a.release(ctx, l, log)
		return nil, nil
	case errors.Is(context.Cause(taskCtx), ErrHandedBackEarly):
		a.handBackEarly(ctx, l, cj, context.Cause(taskCtx), log)
		return nil, nil
	case errors.Is(context.Cause(taskCtx), errHandedBack):
		logHandedBack(log, limit)
		a.event("task %d of job %s handed back to pool %s: suspended longer than its lease allows", l.Task, jobLabel(cj), a.label())
		a.release(ctx, l, log)
		return nil, nil
	case errors.Is(context.Cause(taskCtx), errTaskDecided):
		log.Info("The task was decided by other devices' results; stopped")
		return nil, nil
	case errors.Is(context.Cause(taskCtx), ErrLeaseExpired):
		if ae, ok := errors.AsType[*APIError](context.Cause(taskCtx)); ok && ae.Code == "job_cancelled" {
			log.Info("The job's owner cancelled it; task stopped")
			return nil, nil
		}
		log.Warn("Lease lost while the task ran; result dropped")
		return nil, nil
	case errors.Is(context.Cause(taskCtx), ErrAbandoned):
		return nil, a.abandon(ctx, l, cj, context.Cause(taskCtx), log)
	case err != nil:
		log.Error("Task could not run, handing it back", "err", err)
		a.event("task %d of job %s handed back to pool %s: it could not run: %v", l.Task, jobLabel(cj), a.label(), err)
		a.release(ctx, l, log)
		_ = sleep(ctx, time.Second) // do not spin on a broken executor
		return nil, nil
	case out.MachineDependent():
		a.reportMachineFailure(ctx, l, out, log)
		return nil, nil
	}
	if a.cfg.Tamper != nil {
		out = a.cfg.Tamper(l, out)
	}
	// The result goes with what the worker counted of the work the task
	// took; the receipt is expected to credit that, up to what the job
	// declared (a verified failure earns nothing).
	sub := out.Submission()
	c := store.Contribution{
		Pool: a.c.URL(), Job: l.Job, Task: l.Task, Lease: l.ID, Declared: cj.j.Cost(t),
		Digest: sub.Digest, Result: sub.Result, Failed: sub.Failed, Failure: sub.Reason, Work: sub.Work,
	}
	if !c.Failed {
		c.Cost = cj.j.WorkCost(t, out.Work)
	}
	if log.Enabled(ctx, slog.LevelDebug) { // its digest in hex is an allocation per task
		log.Debug("Task done", "failed", c.Failed, "digest", c.Digest.String())
	}
	a.noteByRef(cj.j)
	if !last {
		sending.Go(func() { a.keep(ctx, c, 0, log) })
		return nil, nil
	}
	want := 0
	if a.mayLeaseNow(slot) {
		want = *ahead
	}
	return a.keep(ctx, c, want, log), nil // recorded, or held in memory, and sent
}

// reportMachineFailure tells the pool that task l failed on this device
// for a reason of the device (a timeout, a dead worker process): not the
// task's outcome, so it earns no receipt and is not recorded as pending;
// the pool leases the task again, to other devices first. When the pool
// cannot be told, the lease is handed back, or expires.
func (a *Agent) reportMachineFailure(ctx context.Context, l pool.Lease, out pool.TaskOutcome, log *slog.Logger) {
	log.Warn("Task failed on this device for a reason of the device; the pool leases it again", "cause", out.Cause(), "reason", string(out.Body))
	reason := string(out.Body)
	sub := pool.Submission{Digest: pool.ReplicaDigest(nil, true, reason), Failed: true, Reason: reason, Machine: true}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := a.c.SendResult(sctx, l.ID, sub); err != nil {
		log.Debug("Could not report the failure", "err", err)
		a.release(ctx, l, log)
	}
}

// runTask prepares task t's chunk (if any) and runs it in the sandbox,
// given gpus and their device-memory cap gpuMiB (taskGPUs).
func (a *Agent) runTask(ctx context.Context, cj *cachedJob, t job.Task, gpus []string, gpuMiB int64) (pool.TaskOutcome, error) {
	if t.Chunk != nil {
		path, err := pool.WriteChunk(cj.j, cj.inputDir, *t.Chunk)
		if err != nil {
			return pool.TaskOutcome{}, err
		}
		defer os.Remove(path)
	}
	req := pool.TaskRequest(cj.j, t, cj.program, cj.inputDir)
	req.GPUs, req.GPUMemoryLimitMiB = gpus, gpuMiB
	return pool.RunTask(ctx, a.cfg.Executor, req, a.log)
}

// heartbeatInterval is a third of the job's lease timeout, or of the time
// left on the lease at now when the coordinator granted less (a device
// whose leases expired before, a task with a backup replica in its job's
// tail: see pool.TailConfig).
func heartbeatInterval(j *job.Job, l pool.Lease, now time.Time) time.Duration {
	d := j.Manifest.Policy.LeaseTimeout.Duration / 3
	if left := l.Deadline.Sub(now) / 3; left > 0 && left < d {
		d = left
	}
	return max(d, 100*time.Millisecond)
}

// heartbeat extends lease l of job j at once and then every interval
// (heartbeatInterval, as the task started at started), taken again from
// each new deadline, until ctx ends: its caller starts it when the first
// beat is due. When the coordinator grants less time (its task got a
// backup replica), the agent heartbeats more often, so that it hears
// within a third of that grant when the task is decided. When the
// coordinator says the lease is gone, it cancels the task with
// ErrLeaseExpired; when it says the task was decided without this
// replica (another device's result completed its verification first),
// it cancels it with errTaskDecided: the work is not needed. Failures to
// reach the coordinator are retried at the next tick: the task goes on,
// and its result is sent when the coordinator is back; but once the
// lease's last deadline is more than AbandonAfter past and the
// coordinator still cannot be reached (or refuses this device), the pool
// has leased the task elsewhere: the task is cancelled with an
// *AbandonedError.
func (a *Agent) heartbeat(ctx context.Context, j *job.Job, l pool.Lease, started time.Time, interval time.Duration,
	cancel context.CancelCauseFunc, log *slog.Logger) {
	deadline := l.Deadline
	if deadline.IsZero() {
		deadline = started.Add(3 * interval)
	}
	tick := time.NewTicker(interval) // from the first beat, however long it takes
	defer tick.Stop()
	for {
		if ctx.Err() != nil {
			return
		}
		dl, err := a.c.Heartbeat(ctx, l.ID)
		switch {
		case ctx.Err() != nil:
		case err == nil:
			if !dl.IsZero() {
				deadline = dl
				if d := heartbeatInterval(j, pool.Lease{Deadline: dl}, a.cfg.Now()); d != interval {
					interval = d
					tick.Reset(d)
				}
			}
		case isTaskDecided(err):
			cancel(fmt.Errorf("%w: %w", errTaskDecided, err))
			return
		case errors.Is(err, ErrLeaseExpired), errors.Is(err, ErrNotFound), errors.Is(err, ErrForbidden):
			cancel(fmt.Errorf("%w: %w", ErrLeaseExpired, err))
			return
		default:
			log.Debug("Heartbeat failed", "err", err)
			if now := a.cfg.Now(); now.After(deadline.Add(a.cfg.AbandonAfter)) {
				cancel(&AbandonedError{Deadline: deadline, UnreachableSince: a.c.UnreachableSince(),
					ClockRefused: errors.Is(err, ErrClockSkew), Err: err})
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// maxAbandoned is how many abandoned tasks Status lists.
const maxAbandoned = 16

// abandon records that the task of lease l was stopped without a result
// (see heartbeat): in the Store, so that no receipt is expected, and in
// Status. It returns an error only when the Store fails.
func (a *Agent) abandon(ctx context.Context, l pool.Lease, cj *cachedJob, cause error, log *slog.Logger) error {
	var ab *AbandonedError
	errors.As(cause, &ab)
	t := AbandonedTask{Pool: a.c.URL(), Job: l.Job.String(), JobName: cj.j.Manifest.Name, Task: l.Task, Lease: l.ID,
		At: a.cfg.Now(), Deadline: ab.Deadline, UnreachableSince: ab.UnreachableSince, ClockRefused: ab.ClockRefused}
	log.Warn("Task abandoned: its lease ran out while the pool could not be reached", "deadline", ab.Deadline,
		"unreachableSince", ab.UnreachableSince, "err", ab.Err)
	c := store.Contribution{Pool: a.c.URL(), Job: l.Job, Task: l.Task, Lease: l.ID, Created: t.At}
	a.event("%s", t.Words(time.Local))
	if err := a.cfg.Store.AddAbandoned(context.WithoutCancel(ctx), c, t.Words(time.Local)); err != nil {
		return fmt.Errorf("record abandoned task %d of job %s: %w", l.Task, l.Job, err)
	}
	a.mu.Lock()
	a.abandoned = append(a.abandoned, t)
	if len(a.abandoned) > maxAbandoned {
		a.abandoned = slices.Delete(a.abandoned, 0, len(a.abandoned)-maxAbandoned)
	}
	a.mu.Unlock()
	return nil
}

// maxHandedBack is how many tasks handed back early Status lists.
const maxHandedBack = 16

// handBackEarly hands back the lease l of a task stopped because its
// pause is expected to last (cause, an *EarlyHandBackError): its partial
// work is dropped unrecorded, the pool leases it again at once, and the
// event log and Status say so.
func (a *Agent) handBackEarly(ctx context.Context, l pool.Lease, cj *cachedJob, cause error, log *slog.Logger) {
	var eh *EarlyHandBackError
	errors.As(cause, &eh)
	a.release(ctx, l, log)
	h := HandedBackTask{Pool: a.c.URL(), Job: l.Job.String(), JobName: cj.j.Manifest.Name, Task: l.Task, Lease: l.ID,
		At: a.cfg.Now(), Why: eh.Prediction.Words, ExpectedMS: eh.Prediction.Left.Milliseconds()}
	log.Info("Task suspended for a pause expected to last; handed back at once", "why", h.Why, "expected", eh.Prediction.Left)
	a.event("%s, to pool %s (pause expected to last another %s)", h.Words(), a.label(), eh.Prediction.Left.Round(time.Second))
	a.mu.Lock()
	a.handedBack = append(a.handedBack, h)
	if len(a.handedBack) > maxHandedBack {
		a.handedBack = slices.Delete(a.handedBack, 0, len(a.handedBack)-maxHandedBack)
	}
	a.mu.Unlock()
	a.noteChange()
}

// prepareRetry is how long runLease tries again a job it could not
// prepare for a reason worth retrying, and release a hand-back refused
// so, at most.
const prepareRetry = 30 * time.Second

// release hands lease l back, also when ctx has ended (Serve is
// stopping): once, with a short deadline of its own, then; else a
// refusal worth retrying (a take-over's 503) is tried again (retry) for
// up to prepareRetry, so that the task need not wait out its lease.
func (a *Agent) release(ctx context.Context, l pool.Lease, log *slog.Logger) {
	stopping := ctx.Err() != nil
	limit := prepareRetry
	if stopping {
		limit = 5 * time.Second
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), limit)
	defer cancel()
	var err error
	op := func(rctx context.Context) error {
		if err = a.c.Release(rctx, l.ID); errors.Is(err, ErrLeaseExpired) {
			err = nil
		}
		return err
	}
	if stopping {
		_ = op(rctx)
	} else {
		_ = a.retry(rctx, "hand a lease back", op)
	}
	if err != nil {
		log.Warn("Could not hand the lease back; it will expire", "err", err)
		return
	}
	log.Debug("Lease released")
}

func (a *Agent) trackRunning(l pool.Lease, on bool) {
	defer a.noteChange() // after the unlock below: Status reads a.mu
	a.mu.Lock()
	defer a.mu.Unlock()
	if on {
		a.running[l.ID] = l
	} else {
		delete(a.running, l.ID)
		delete(a.taskInfo, l.ID)
	}
}

// taskInfo is what Status says of a running task besides its lease.
type taskInfo struct {
	jobName string
	started time.Time // by this device's clock
	limit   time.Duration

	owner, ownerName string // the job's owner ID and display name ("" when unknown)
}

// Running returns the leases whose tasks are running now.
func (a *Agent) Running() []pool.Lease {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]pool.Lease, 0, len(a.running))
	for _, l := range a.running {
		out = append(out, l)
	}
	return out
}
