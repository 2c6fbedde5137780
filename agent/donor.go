package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"idlepool/energy"
	"idlepool/home"
	"idlepool/identity"
	"idlepool/idle"
	"idlepool/offers"
	"idlepool/p2p"
	"idlepool/pool"
	"idlepool/store"
	"idlepool/worker"
)

// Key files under the config directory.
const (
	DeviceKeyFile = "device.key" // this device's key
	OwnerKeyFile  = "owner.key"  // the owner's key, shared by a person's devices
)

// DonorConfig configures a Donor. Home, DeviceKey, OwnerKey, Executor and
// Store are required.
type DonorConfig struct {
	// Home holds the pinned pool keys and the job cache.
	Home home.Dirs
	// DeviceKey signs this device's requests; OwnerKey endorses it.
	DeviceKey, OwnerKey *identity.Key
	// Name labels the device for people (at most 64 bytes); optional.
	Name string
	// Workers is how many tasks run at once (Executor's slots), shared
	// among the pools by the donor's pool weights; default 1.
	Workers int
	// Executor runs tasks in the sandbox (a *worker.Pool).
	Executor pool.Executor
	// Store is the local store: the owner's settings and preferences,
	// the joined pools and the contributions. When it was repaired at
	// open (store.OpenLocalRepairing), Status says so.
	Store *store.Local
	// StorePath is Store's file, named in Status when it takes no writes;
	// optional. FreeSpace is as Config.FreeSpace.
	StorePath string
	FreeSpace func(dir string) (uint64, error)
	// GPUs lists the GPUs NVML finds (NVMLGPUs); nil: none.
	GPUs idle.GPUSource
	// Always computes whenever a pool has work, ignoring the owner's
	// settings and the machine's state (dedicated machines).
	Always bool
	// OfferTTL is how long each capacity offer is valid;
	// offers.DefaultTTL when 0.
	OfferTTL time.Duration
	// LocalAPI, if set, is where the donor serves its Status (see
	// Config.LocalAPI and ReadStatus) and takes Reload (AskReload).
	LocalAPI string
	// SettingsReload is how often the owner's settings are read again
	// without a Reload (another program changed them); default 10 s.
	SettingsReload time.Duration
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
	// Events, if set, is the event log (see EventLog) the donor and its
	// agents add to; conventionally EventsFile in the data directory,
	// written only by the process that holds its lock.
	Events *EventLog
	// HTTP is the client for the coordinators; nil: each agent's default.
	HTTP *http.Client
	// Pools, if set, are the pools to compute for as long as Serve runs,
	// and an agent that fails ends Serve with a *PoolError (`idlepool
	// join URL...`). Nil follows the store's joined pools
	// (store.Local.JoinedPools), read again on Reload and every
	// PoolReload: an agent that fails is started again after RetryAfter,
	// and its error is in Status meanwhile (the tray app).
	Pools []store.JoinedPool
	// PoolReload is how often the joined pools and weights are read
	// again when following the store (Reload reads them at once); default
	// 15 s.
	PoolReload time.Duration
	// RetryAfter is the wait before an agent that failed is started
	// again when following the store; default 1 minute.
	RetryAfter time.Duration
	// Adjust, if set, changes each agent's configuration before the agent
	// is made (tests shorten its polls and backoff).
	Adjust func(*Config)
	// Energy, if set, meters the energy of every task (NewEnergyMeter);
	// Serve runs it, the agents record each task's Usage in Store, Status
	// says the power drawn now, and the owner's energy caps count it.
	Energy *energy.Meter
	// ProgramDir is where this installation's programs are, which the
	// self-update (ServeUpdating) replaces and whose release root it
	// trusts; "": the running program's directory (release.ProgramDir).
	ProgramDir string
}

// PoolError is why the agent for one pool of a Donor stopped.
type PoolError struct {
	URL string // the pool's URL
	Err error
}

func (e *PoolError) Error() string { return e.Err.Error() }
func (e *PoolError) Unwrap() error { return e.Err }

// Donor is the donor engine shared by `idlepool join` and the tray app: one
// Agent per pool, sharing the worker pool (by the donor's pool weights),
// one policy (the owner's settings, read again every few seconds, applied
// to the machine's signals by idle.Policy) and the local store. Create it
// with NewDonor and run it with Serve; Status and Reload are safe to call
// from any goroutine.
type Donor struct {
	cfg    DonorConfig
	log    *slog.Logger
	policy *donorPolicy  // nil with Always
	always *alwaysPolicy // with Always; nil otherwise
	offer  *donorOffer
	reload chan struct{}
	wake   chan struct{}
	health *storeHealth // shared by the agents
	gpus   *gpuSlots    // which GPUs the agents' tasks hold
	cache  *Cache       // the job cache, shared by the agents
	// noShare is the owner's share_peers=false as last read (sync).
	noShare bool
	// upload is the owner's share_upload cap, shared by every agent's
	// data plane (sync sets it from the settings).
	upload *p2p.UploadLimit
	// plane is the device's data-plane lock once held (dataPlane);
	// planeBusy is set while another process holds it.
	plane     *home.Lock
	planeBusy bool
	// throttleErr is the last error of applying the owner's CPU time and
	// priority to the executor (throttle), so that it is logged once.
	throttleErr string
	// gpuShare is the workers' share of time that keeps the GPUs of
	// running tasks under the owner's gpu_power ceiling (throttle); 1
	// with no ceiling or no GPU task.
	gpuShare float64
	// gpuStepAt is when (on the meter's clock) the last step of
	// gpuShare was applied to the workers (throttle): the next step
	// waits for a reading taken after it, which the step can have
	// changed (a reading taken before would be counted as the new
	// share's draw, and the share stepped twice).
	gpuStepAt time.Time
	// gpuLimits are the power limits the GPUs' driver holds for the
	// ceiling (limitGPUs), by UUID; gpuRefused why it took none, by
	// UUID, until the ceiling changes; gpuLimitW the ceiling they are
	// for. Serve's goroutine only.
	gpuLimits  map[string]worker.PowerLimit
	gpuRefused map[string]string
	gpuLimitW  float64

	changes *changeNotifier // Changes
	// updateNow wakes the self-update (ServeUpdating) when a pool says
	// it needs a newer idlepool.
	updateNow chan struct{}

	mu      sync.Mutex
	gpuHeld *GPUHold               // the ceiling's hold on the workers (gpuDuty); nil while none
	agents  map[string]*donorAgent // running, by URL
	pools   []PoolState            // the pools wanted, in order
	retryAt map[string]time.Time   // failed pools (follow mode), by URL
}

// donorAgent is one running agent of a Donor.
type donorAgent struct {
	pool  store.JoinedPool
	slots int
	// noShare is Donor.noShare when the agent was made.
	noShare bool
	a       *Agent
	cancel  context.CancelFunc
	done    chan struct{}
	err     error // Serve's, once done is closed
}

// NewDonor checks cfg and returns a donor; it contacts nobody yet.
func NewDonor(cfg DonorConfig) (*Donor, error) {
	switch {
	case cfg.DeviceKey == nil || cfg.OwnerKey == nil:
		return nil, errors.New("agent: donor: device and owner keys are required")
	case cfg.Executor == nil:
		return nil, errors.New("agent: donor: no executor")
	case cfg.Store == nil:
		return nil, errors.New("agent: donor: no store")
	case cfg.Home.Config == "" || cfg.Home.Cache == "":
		return nil, errors.New("agent: donor: no home directories")
	case cfg.Workers < 0:
		return nil, fmt.Errorf("agent: donor: Workers %d is negative", cfg.Workers)
	}
	if cfg.Workers == 0 {
		cfg.Workers = 1
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.PoolReload <= 0 {
		cfg.PoolReload = 15 * time.Second
	}
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = time.Minute
	}
	if cfg.GPUs == nil {
		cfg.GPUs = noGPUs{}
	}
	d := &Donor{cfg: cfg, log: cfg.Logger,
		reload: make(chan struct{}, 1), wake: make(chan struct{}, 1), updateNow: make(chan struct{}, 1),
		agents: map[string]*donorAgent{}, retryAt: map[string]time.Time{}, changes: newChangeNotifier()}
	if !cfg.Always {
		d.policy = newDonorPolicy(cfg.Store, cfg.GPUs, cfg.Logger)
		if cfg.SettingsReload > 0 {
			d.policy.reloadEvery = cfg.SettingsReload
		}
		d.policy.events = cfg.Events
		d.policy.held = d.tasksHeld
		d.policy.changed = d.changed
	} else {
		d.always = newAlwaysPolicy(cfg.Store, cfg.GPUs, cfg.Logger)
	}
	d.offer = &donorOffer{local: cfg.Store, gpus: cfg.GPUs, log: cfg.Logger, always: cfg.Always, workers: cfg.Workers}
	d.health = newStoreHealth(cfg.StorePath, cfg.FreeSpace, cfg.Logger)
	d.gpus = newGPUSlots()
	d.upload = p2p.NewUploadLimit(idle.Defaults().ShareUploadBytesPerSecond()) // until Serve reads the owner's
	d.health.events = cfg.Events
	if r := cfg.Store.Recovery(); r != nil {
		d.health.recovered = r.String()
		// Recorded here, where a process that opened the store for the
		// donor first has an event log, so that it stays in the events
		// after a restart clears it from the status.
		if err := cfg.Events.Addf("%s", r); err != nil {
			cfg.Logger.Warn("Cannot write the event log", "err", err)
		}
	}
	d.cache = NewCache(CacheConfig{Dir: JobCache(cfg.Home), Compiled: WorkerCache(cfg.Home), ShareDir: ShareDir(cfg.Home), Logger: cfg.Logger})
	return d, nil
}

// Reload makes Serve read the joined pools, their weights and the owner's
// settings now instead of at the next periodic read.
func (d *Donor) Reload() {
	if d.policy != nil {
		d.policy.reloadSettings()
	}
	if d.always != nil {
		d.always.reloadSettings()
	}
	select {
	case d.reload <- struct{}{}:
	default:
	}
	// The agents decide again now (an owner's Resume resumes the tasks
	// at once), not at the end of their rest period.
	d.mu.Lock()
	for _, da := range d.agents {
		da.a.wakeGovernor()
	}
	d.mu.Unlock()
}

// Serve computes for the pools until ctx ends, then stops every agent
// (running tasks are handed back) and returns nil. With fixed
// DonorConfig.Pools it returns the first agent's failure as a *PoolError,
// after stopping the others.
func (d *Donor) Serve(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait() // after cancel, below
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if d.cfg.LocalAPI != "" {
		wg.Go(func() { _ = serveStatus(ctx, d.cfg.LocalAPI, d.log, d.Status, d.Reload) })
	}
	if d.policy != nil {
		defer d.policy.Close()
	}
	if d.cfg.Energy != nil {
		wg.Go(func() { _ = d.cfg.Energy.Serve(ctx) })
	}
	defer func() { _ = d.plane.Release() }() // deferred first, so it runs after stopAll: no agent's data plane is left
	defer d.restoreGPULimits()               // after stopAll: the GPUs' power limits as they were
	d.recoverGPULimits()                     // those a donor killed before left set
	defer d.stopAll()
	if s, err := d.cfg.Store.Settings(ctx); err == nil {
		d.cache.SetCap(s.CacheBytes())
		d.cache.SetShareCap(s.ShareDiskBytes())
		d.upload.Set(s.ShareUploadBytesPerSecond())
		d.throttle(s)
	}
	d.cache.Trim()
	reload := time.NewTicker(d.cfg.PoolReload)
	defer reload.Stop()
	sample := time.NewTicker(2 * time.Second)
	defer sample.Stop()
	d.sampleIfIdle(ctx)
	for {
		if err := d.sync(ctx); err != nil {
			return err
		}
		if !d.waitSync(ctx, reload.C, sample.C) {
			return nil
		}
	}
}

// waitSync waits until the pools should be synced again (Reload, the
// periodic read, an agent that ended), sampling while no agent runs; it
// returns false when ctx ends. A sample changes no pool, so it does not
// make Serve read the store.
func (d *Donor) waitSync(ctx context.Context, reload, sample <-chan time.Time) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case <-d.reload:
			d.sampleIfIdle(ctx) // the owner's change shows at once in Status
			return true
		case <-reload:
			return true
		case <-d.wake:
			return true
		case <-sample:
			d.sampleIfIdle(ctx)
		}
	}
}

// sampleIfIdle applies the policy while no agent runs (no pool joined, or
// none reachable), so that Status says what the machine would do and an
// owner's pause that ran out is cleared.
func (d *Donor) sampleIfIdle(ctx context.Context) {
	d.mu.Lock()
	idle := len(d.agents) == 0
	d.mu.Unlock()
	if idle && d.policy != nil {
		d.policy.Decide(d.policy.Sample(ctx), time.Now())
	}
}

// wanted returns the pools to compute for and the workers each gets.
func (d *Donor) wanted(ctx context.Context) ([]store.JoinedPool, []int, error) {
	pools := d.cfg.Pools
	if pools == nil {
		var err error
		if pools, err = d.cfg.Store.JoinedPools(ctx); err != nil {
			return nil, nil, err
		}
	}
	if len(pools) == 0 {
		return nil, nil, nil
	}
	prefs, err := d.cfg.Store.Preferences(ctx)
	if err != nil {
		return nil, nil, err
	}
	weights := make([]float64, len(pools))
	for i, p := range pools {
		pp, _ := prefs.Pool(p.URL)
		weights[i] = pp.Weight
		if _, known := prefs.Pool(p.URL); !known {
			weights[i] = 1
		}
	}
	if len(pools) == 1 {
		if weights[0] <= 0 {
			return pools, []int{0}, nil
		}
		return pools, []int{d.cfg.Workers}, nil
	}
	slots, err := ShareSlots(d.cfg.Workers, weights)
	return pools, slots, err
}

// dataPlane takes the device's data-plane lock (home.DataPlaneLockFile)
// if it does not hold it yet, and reports whether the agents may run a
// data plane: not while another process of this device (`submit
// --follow` offering its files) holds the lock; they fetch from the
// coordinator meanwhile and get theirs at a later sync. Where locks
// cannot be taken, they may.
func (d *Donor) dataPlane() bool {
	if d.plane != nil || d.cfg.Home.Data == "" {
		return true
	}
	l, err := home.Acquire(filepath.Join(d.cfg.Home.Data, home.DataPlaneLockFile), "idlepool donor")
	switch {
	case errors.Is(err, home.ErrLocked):
		if !d.planeBusy {
			d.log.Info("Another process of this device runs its data plane; fetching files from the coordinator until it ends", "err", err)
		}
		d.planeBusy = true
		return false
	case err != nil:
		d.log.Warn("Cannot take the data-plane lock; running the data plane anyway", "err", err)
		return true
	}
	if d.planeBusy {
		d.log.Info("This device's data plane is free again")
	}
	d.plane, d.planeBusy = l, false
	return true
}

// Throttler is an executor whose workers' CPU time and priority the
// owner's settings bound (Settings.CPUTimeShare, NoIdlePriority).
// *worker.Pool implements it. Both methods are safe for concurrent use;
// SetCPUShare takes worker.MinCPUShare..1 (1: no bound) and may return
// errors.ErrUnsupported where processes cannot be suspended.
type Throttler interface {
	SetCPUShare(share float64) error
	SetPriority(p worker.Priority) error
}

var _ Throttler = (*worker.Pool)(nil)

// throttle applies the owner's CPU time share and priority to the
// executor when it is a Throttler, also with Always (they say how hard
// to work, not when), and the GPU power ceiling (Settings.GPUPowerW):
// while tasks run on GPUs whose board draws more than it (or less, after
// a step down), the workers' duty cycle runs a share of the time that
// brings the draw to the ceiling (energy.DutyShare), the smaller of it
// and the CPU time share. A failure is logged once until it changes.
func (d *Donor) throttle(s idle.Settings) {
	t, ok := d.cfg.Executor.(Throttler)
	if !ok {
		return
	}
	prio := worker.PriorityIdle
	if s.NoIdlePriority {
		prio = worker.PriorityLow
	}
	share := s.CPUTime()
	before := d.gpuShare
	if g := d.gpuDuty(s.GPUPowerW); g < share {
		share = g
	}
	err := errors.Join(t.SetCPUShare(share), t.SetPriority(prio))
	if d.gpuShare != before && d.cfg.Energy != nil {
		d.gpuStepAt = d.cfg.Energy.Now() // readings from now on see the new share
	}
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if msg != d.throttleErr && err != nil {
		d.log.Warn("Cannot apply the owner's CPU time and priority to the workers", "cpuTime", s.CPUTime(), "priority", prio.String(), "err", err)
	}
	d.throttleErr = msg
}

// gpuDuty keeps the GPUs of running tasks under ceilingW watts: it asks
// each GPU's driver to hold the ceiling as its power limit (limitGPUs),
// and for the GPUs whose driver refused (or whose lowest limit is above
// the ceiling) steps the share of time from their board power at the
// meter's last reading, and returns it: the least over those GPUs; 1
// with no ceiling, no meter or no GPU task, when the limits set are
// restored. While the driver or the share holds a GPU back, Status
// says which (EnergyStatus.GPUHeld).
func (d *Donor) gpuDuty(ceilingW float64) float64 {
	var hold *GPUHold
	defer func() {
		d.mu.Lock()
		d.gpuHeld = hold
		d.mu.Unlock()
	}()
	if d.gpuShare <= 0 {
		d.gpuShare = 1
	}
	if ceilingW <= 0 || d.cfg.Energy == nil {
		d.gpuShare = 1
		d.restoreGPULimits()
		return 1
	}
	draws := d.cfg.Energy.GPUPower()
	if len(draws) == 0 {
		d.gpuShare = 1 // no GPU task (or its power cannot be read): CPU tasks run freely
		d.restoreGPULimits()
		return 1
	}
	d.limitGPUs(ceilingW, draws)
	var readAt time.Time
	for _, g := range draws {
		if g.At.After(readAt) {
			readAt = g.At
		}
	}
	if !readAt.After(d.gpuStepAt) {
		// No reading since the last step: hold what it set.
		d.mu.Lock()
		hold = d.gpuHeld
		d.mu.Unlock()
		return d.gpuShare
	}
	next, fullW, driverW, refused := 1.0, 0.0, 0.0, ""
	heldW := 0.0 // the driver's limit of the GPU the share holds
	for uuid, g := range draws {
		if pl, ok := d.gpuLimits[uuid]; ok {
			driverW = max(driverW, pl.LimitW)
			if pl.LimitW <= ceilingW {
				continue // its driver holds it under the ceiling
			}
		}
		s := energy.DutyShare(d.gpuShare, ceilingW, g.PowerW, g.IdleW, worker.MinCPUShare)
		full := 0.0
		if g.IdleW > 0 && g.PowerW > g.IdleW { // the model's draw at full speed
			full = g.IdleW + (g.PowerW-g.IdleW)/max(d.gpuShare, worker.MinCPUShare)
		}
		switch {
		case s < next:
			next, fullW, refused, heldW = s, full, d.gpuRefused[uuid], d.gpuLimits[uuid].LimitW
		case s == next:
			fullW = max(fullW, full) // GPUs held alike: the hungriest
		}
	}
	d.gpuShare = next
	switch {
	case next < 1:
		hold = &GPUHold{CeilingW: ceilingW, Share: next, FullW: fullW, DriverW: heldW, Refused: refused}
	case driverW > 0:
		hold = &GPUHold{CeilingW: ceilingW, Share: 1, DriverW: driverW}
	}
	return next
}

// sync stops the agents no longer wanted (or whose share or invite
// changed), collects those that ended, and starts the missing ones.
func (d *Donor) sync(ctx context.Context) error {
	if ctx.Err() != nil {
		return nil
	}
	pools, slots, err := d.wanted(ctx)
	if s, serr := d.cfg.Store.Settings(ctx); serr == nil {
		if d.cache.SetCap(s.CacheBytes()) {
			d.cache.Trim() // the owner changed the cap
		}
		d.cache.SetShareCap(s.ShareDiskBytes())
		d.upload.Set(s.ShareUploadBytesPerSecond())
		d.noShare = s.NoSharePeers || !d.dataPlane()
		d.throttle(s)
	}
	if err == nil && d.cfg.Pools == nil {
		// Following the joined pools: the jobs of a pool left are needed
		// by no agent of this home.
		urls := make([]string, len(pools))
		for i, p := range pools {
			urls[i] = p.URL
		}
		d.cache.ForgetPoolsExcept(urls)
	}
	var shareErr string
	if err != nil {
		if d.cfg.Pools == nil {
			d.log.Warn("Cannot read the joined pools, keeping the running ones", "err", err)
			return nil
		}
		shareErr = err.Error()
		slots = make([]int, len(pools))
	}
	want := map[string]int{}
	for i, p := range pools {
		want[p.URL] = i
	}
	d.mu.Lock()
	var stop []*donorAgent
	for u, da := range d.agents {
		select {
		case <-da.done:
			delete(d.agents, u)
			if errors.Is(da.err, ErrTooOld) {
				// Not this pool's fault nor this device's: the pool
				// moved on. Said in words, the self-update is woken,
				// and the pool is tried again (the pending receipts
				// stay in the store until then).
				words := d.tooOldWords(ctx, da.err)
				d.log.Warn("The pool needs a newer idlepool", "pool", u, "err", da.err, "after", d.cfg.RetryAfter)
				d.event("pool %s: %s", u, words)
				d.retryAt[u] = time.Now().Add(d.cfg.RetryAfter)
				d.setError(u, words)
				select {
				case d.updateNow <- struct{}{}:
				default:
				}
				continue
			}
			if da.err != nil {
				if d.cfg.Pools != nil {
					d.mu.Unlock()
					return &PoolError{URL: u, Err: da.err}
				}
				d.log.Warn("Stopped computing for a pool; will try again", "pool", u, "err", da.err, "after", d.cfg.RetryAfter)
				d.event("stopped computing for pool %s: %v; trying again in %s", u, da.err, d.cfg.RetryAfter)
				d.retryAt[u] = time.Now().Add(d.cfg.RetryAfter)
				d.setError(u, da.err.Error())
			}
			continue
		default:
		}
		i, ok := want[u]
		switch {
		case !ok || pools[i].Invite != da.pool.Invite:
			stop = append(stop, da)
			delete(d.agents, u)
			if !ok {
				d.event("left pool %s", da.a.label())
			}
		case da.noShare != d.noShare && len(da.a.Running()) == 0:
			// The owner turned uploading to peers on or off: made again
			// (with or without its Node) once it holds no task.
			stop = append(stop, da)
			delete(d.agents, u)
		case slots[i] != da.slots && len(da.a.Running()) == 0:
			// Its share of the workers changed (a pool joined or left):
			// it is made again with the new share, but only while it
			// holds no task, so that no work is thrown away; until then
			// the pools may hold more tasks than there are workers for a
			// while, and the extra ones wait for a worker.
			stop = append(stop, da)
			delete(d.agents, u)
		}
	}
	// A pool left is gone from Status at once, not only once its agent
	// has handed its tasks back: the tray no longer names it.
	d.pools = slices.DeleteFunc(slices.Clone(d.pools), func(s PoolState) bool {
		_, ok := want[s.URL]
		return !ok
	})
	d.mu.Unlock()
	for _, da := range stop {
		da.cancel()
		<-da.done
	}

	states := make([]PoolState, len(pools))
	var start []*donorAgent
	d.mu.Lock()
	old := d.pools
	for i, p := range pools {
		states[i] = PoolState{URL: p.URL, Name: p.Name, Slots: slots[i]}
		if j := slices.IndexFunc(old, func(s PoolState) bool { return s.URL == p.URL }); j >= 0 {
			states[i].Error = old[j].Error
		}
		switch {
		case shareErr != "":
			states[i].Error = shareErr
		case slots[i] == 0:
			states[i].Error = "its weight is 0: this machine offers it nothing"
		}
		if slots[i] == 0 || d.agents[p.URL] != nil || time.Now().Before(d.retryAt[p.URL]) {
			continue
		}
		a, err := New(d.agentConfig(p, slots[i]))
		if err != nil {
			if d.cfg.Pools != nil {
				d.mu.Unlock()
				return &PoolError{URL: p.URL, Err: err}
			}
			states[i].Error = err.Error()
			d.retryAt[p.URL] = time.Now().Add(d.cfg.RetryAfter)
			continue
		}
		states[i].Error = ""
		delete(d.retryAt, p.URL)
		da := &donorAgent{pool: p, slots: slots[i], noShare: d.noShare, a: a, done: make(chan struct{})}
		d.agents[p.URL] = da
		start = append(start, da)
	}
	poolsChanged := !slices.EqualFunc(d.pools, states, func(x, y PoolState) bool {
		return x.URL == y.URL && x.Name == y.Name && x.Error == y.Error && x.Slots == y.Slots
	})
	d.pools = states
	d.mu.Unlock()
	if poolsChanged {
		d.changed()
	}
	if d.cfg.Pools != nil && shareErr == "" && len(pools) > 0 && !slices.ContainsFunc(slots, func(n int) bool { return n > 0 }) {
		shareErr = "every pool has weight 0: this machine would offer nothing"
	}
	if shareErr != "" && len(pools) > 0 && d.cfg.Pools != nil {
		return &PoolError{URL: pools[0].URL, Err: errors.New(shareErr)}
	}
	for _, da := range start {
		actx, cancel := context.WithCancel(ctx)
		da.cancel = cancel
		d.log.Info("Computing for pool", "pool", da.pool.URL, "workers", da.slots, "device", d.cfg.DeviceKey.ID())
		go func() {
			defer close(da.done)
			da.err = da.a.Serve(actx)
			if actx.Err() != nil && ctx.Err() == nil && da.err == nil {
				return // stopped by sync
			}
			select {
			case d.wake <- struct{}{}:
			default:
			}
		}()
	}
	return nil
}

// setError records why pool u has no agent; d.mu is held.
func (d *Donor) setError(u, msg string) {
	for i := range d.pools {
		if d.pools[i].URL == u {
			d.pools[i].Error = msg
		}
	}
}

// agentConfig is the configuration of the agent for pool p with slots
// workers.
func (d *Donor) agentConfig(p store.JoinedPool, slots int) Config {
	cfg := Config{
		PoolURL: p.URL, Home: d.cfg.Home, DeviceKey: d.cfg.DeviceKey, OwnerKey: d.cfg.OwnerKey,
		Name: d.cfg.Name, Invite: p.Invite, Slots: slots, Executor: d.cfg.Executor,
		Store: d.cfg.Store, HTTP: d.cfg.HTTP, Logger: d.log,
		Offer: d.offer, OfferTTL: d.cfg.OfferTTL, Cache: d.cache,
		StorePath: d.cfg.StorePath, FreeSpace: d.cfg.FreeSpace, health: d.health, gpuSlots: d.gpus,
		Events: d.cfg.Events, PeerToPeer: !d.noShare, NoShare: d.noShare,
	}
	cfg.P2P.Upload = d.upload
	if d.policy != nil {
		cfg.Signals, cfg.Decide = d.policy, d.policy.Decide
		cfg.GPUMemoryMiB = d.policy.gpuMemoryMiB
		cfg.Pattern = d.policy.pattern
	}
	if d.always != nil {
		cfg.Signals, cfg.Decide = d.always, d.always.decider(slots)
		cfg.GPUMemoryMiB = d.always.gpuMemoryMiB
	}
	cfg.changed = d.changed
	cfg.Energy = d.cfg.Energy
	if d.policy != nil {
		cfg.energyAdded = d.policy.energyAdded
	}
	if d.cfg.Adjust != nil {
		d.cfg.Adjust(&cfg)
	}
	return cfg
}

// event adds an event to DonorConfig.Events; a failure is logged.
func (d *Donor) event(format string, args ...any) {
	if err := d.cfg.Events.Addf(format, args...); err != nil {
		d.log.Warn("Cannot write the event log", "err", err)
	}
}

// stopAll stops every agent and waits until each has handed its tasks
// back.
func (d *Donor) stopAll() {
	d.mu.Lock()
	all := make([]*donorAgent, 0, len(d.agents))
	for u, da := range d.agents {
		all = append(all, da)
		delete(d.agents, u)
	}
	d.mu.Unlock()
	for _, da := range all {
		da.cancel()
	}
	for _, da := range all {
		<-da.done
	}
}

// Status is what the donor does now: the policy's latest decision and
// signals, every task held, and each pool wanted with its share of the
// workers and, when no agent computes for it, why. Pool is the first
// pool's URL ("" with none), for readers of a lone agent's status.
func (d *Donor) Status() AgentStatus {
	usage := d.cache.Usage()
	st := AgentStatus{Slots: d.cfg.Workers, Running: []RunningTask{}, Cache: &usage, Energy: energyStatus(d.cfg.Energy), Always: d.cfg.Always}
	if d.policy != nil {
		st.Decision, st.DecidedAt, st.Signals = d.policy.latest()
	}
	d.mu.Lock()
	if st.Energy != nil && d.gpuHeld != nil {
		held := *d.gpuHeld
		st.Energy.GPUHeld = &held
	}
	st.Pools = slices.Clone(d.pools)
	agents := make(map[string]*donorAgent, len(d.agents))
	for u, da := range d.agents {
		agents[u] = da
	}
	d.mu.Unlock()
	if len(st.Pools) > 0 {
		st.Pool = st.Pools[0].URL
	}
	held := 0
	for i := range st.Pools {
		da := agents[st.Pools[i].URL]
		if da == nil {
			continue
		}
		as := da.a.Status()
		if st.Pools[i].Name == "" {
			st.Pools[i].Name = as.PoolName
		}
		st.Pools[i].Running = len(as.Running)
		held += as.Store.Held
		st.Pools[i].ClockOffsetMS, st.Pools[i].ClockRefused = as.ClockOffsetMS, as.ClockRefused
		st.Pools[i].UnreachableSince = as.UnreachableSince
		st.Pools[i].Peers = as.Peers
		st.Abandoned = append(st.Abandoned, as.Abandoned...)
		st.HandedBack = append(st.HandedBack, as.HandedBack...)
		st.Running = append(st.Running, as.Running...)
		st.ActiveSlots += as.ActiveSlots
		if as.Suspended {
			st.Suspended = true
			if st.SuspendedSince.IsZero() || as.SuspendedSince.Before(st.SuspendedSince) {
				st.SuspendedSince = as.SuspendedSince
			}
		}
		if d.policy == nil || as.DecidedAt.After(st.DecidedAt) {
			st.Decision, st.DecidedAt, st.Signals = as.Decision, as.DecidedAt, as.Signals
		}
	}
	st.Store = d.health.status(held)
	return st
}

// ShareSlots divides workers among pools in proportion to their weights
// (negative counts as 0) by the largest remainder method, with at least
// one for every pool of positive weight; a pool of weight 0 gets none. It
// fails when no pool has a positive weight or there are fewer workers
// than such pools.
func ShareSlots(workers int, weights []float64) ([]int, error) {
	var total float64
	positive := 0
	for _, w := range weights {
		if w > 0 {
			total += w
			positive++
		}
	}
	switch {
	case positive == 0:
		return nil, errors.New("every pool has weight 0: this machine would offer nothing")
	case workers < positive:
		return nil, fmt.Errorf("%d workers cannot be shared among %d pools: each needs one", workers, positive)
	}
	out := make([]int, len(weights))
	rest := make([]float64, len(weights))
	left := workers - positive
	for i, w := range weights {
		if w > 0 {
			exact := float64(workers-positive) * w / total
			out[i] = 1 + int(exact)
			rest[i] = exact - float64(int(exact))
			left -= int(exact)
		}
	}
	for ; left > 0; left-- {
		best := -1
		for i, w := range weights {
			if w > 0 && (best < 0 || rest[i] > rest[best]) {
				best = i
			}
		}
		out[best]++
		rest[best] = -1
	}
	return out, nil
}

// LoadKeys loads (creating on first use, mode 0600) the device key
// (DeviceKeyFile under dirs.Config) and the owner key: ownerFile when
// given (which must exist), else OwnerKeyFile beside the device key.
// Errors wrap os.ErrNotExist or identity.ErrBadKey.
func LoadKeys(dirs home.Dirs, ownerFile string) (dev, owner *identity.Key, err error) {
	dev, err = identity.LoadOrCreate(filepath.Join(dirs.Config, DeviceKeyFile))
	if err != nil {
		return nil, nil, err
	}
	if ownerFile == "" {
		owner, err = identity.LoadOrCreate(filepath.Join(dirs.Config, OwnerKeyFile))
	} else {
		owner, err = identity.Load(ownerFile)
	}
	if err != nil {
		return nil, nil, err
	}
	return dev, owner, nil
}

// KeyHint is the hint for people for an error of LoadKeys about a key file
// (an *identity.KeyFileError): the mode to set when others may read it;
// for a damaged file, restoring it from a backup, or moving it aside so
// that a new identity is made, and what a new identity means for the
// device's receipts or for the owner's devices. It returns "" for other
// errors.
func KeyHint(err error) string {
	kf, ok := errors.AsType[*identity.KeyFileError](err)
	if !ok {
		return ""
	}
	if kf.Exposed {
		return fmt.Sprintf("make it private: chmod 600 %s", kf.Path)
	}
	aside := fmt.Sprintf("mv %s %s.damaged", kf.Path, kf.Path)
	if filepath.Base(kf.Path) == DeviceKeyFile {
		return fmt.Sprintf("restore it from a backup; or move it aside (%s) and start again to make a new device identity: "+
			"the pools then know this machine as a new device, and the receipts of the old one stay in their ledgers, "+
			"where this machine can no longer collect them or those still pending", aside)
	}
	return fmt.Sprintf("restore it from a backup, or copy %s from the config directory of another of your devices; "+
		"moving it aside (%s) makes a new owner identity at the next start, and this device then no longer counts "+
		"as one of your devices", OwnerKeyFile, aside)
}

// WorkerPool starts n sandboxed worker processes, each running command
// (this program's worker mode, e.g. {self, "worker", "--cache", dir}),
// with the compilation cache under dirs.Cache.
func WorkerPool(dirs home.Dirs, command []string, n int, log *slog.Logger) (*worker.Pool, error) {
	wp, err := worker.NewPool(worker.Config{
		Command:  command,
		Slots:    n,
		CacheDir: WorkerCache(dirs),
		Logger:   log,
	})
	if err != nil {
		return nil, fmt.Errorf("start workers: %w", err)
	}
	return wp, nil
}

// WorkerCache is the workers' compilation cache directory under dirs.
func WorkerCache(dirs home.Dirs) string { return filepath.Join(dirs.Cache, "wazero") }

// JobCache is the job cache directory under dirs (see Cache).
func JobCache(dirs home.Dirs) string { return filepath.Join(dirs.Cache, "pools") }

// CheckPool contacts the pool at url as the donor cfg describes: it
// fetches and pins the pool's key (PoolKey) and registers this device
// with the invite token, so that joining it afterwards works. It returns
// the pool's name, or an error in words for people ("cannot reach the
// pool at URL: connection refused") that wraps ErrUnavailable,
// ErrForbidden, ErrPoolKeyChanged or ErrBadRequest.
func CheckPool(ctx context.Context, cfg DonorConfig, url, invite string) (string, error) {
	c, err := NewClient(url, cfg.DeviceKey, cfg.HTTP)
	if err != nil {
		return "", &wordsError{fmt.Sprintf("%q is not a pool address; one looks like http://192.168.1.10:7420", url), err}
	}
	c.UseOwnerProfile(cfg.Home, cfg.Logger)
	info, err := PoolKey(ctx, c, cfg.Home.Config)
	if err != nil {
		return "", poolWords(err, url, invite, cfg.Home)
	}
	if _, err := c.Register(ctx, cfg.OwnerKey, cfg.Name, invite); err != nil {
		return "", poolWords(err, url, invite, cfg.Home)
	}
	return info.Pool, nil
}

// wordsError is an error for people that keeps the error it explains for
// errors.Is and errors.As.
type wordsError struct {
	msg string
	err error
}

func (e *wordsError) Error() string { return e.msg }
func (e *wordsError) Unwrap() error { return e.err }

// poolWords explains err from the pool at url for people, in one sentence
// without the protocol's details.
func poolWords(err error, url, invite string, dirs home.Dirs) error {
	var msg string
	switch {
	case errors.Is(err, ErrPoolKeyChanged):
		msg = fmt.Sprintf("the pool at %s answers with another key than when this machine first met it: someone else may answer there (if the pool was set up anew on purpose, delete %s)",
			url, PinFile(dirs.Config, url))
	case errors.Is(err, ErrNotCoordinator) && !errors.Is(err, ErrUnavailable):
		msg = fmt.Sprintf("%s is not an idlepool pool: it serves a web page there; check the address", url)
	case errors.Is(err, ErrUnavailable):
		msg = fmt.Sprintf("cannot reach the pool at %s: %s", url, netCause(err))
	case errors.Is(err, ErrForbidden) && invite != "":
		msg = fmt.Sprintf("the pool at %s refused the invite token: check it with the pool's operator", url)
	case errors.Is(err, ErrForbidden):
		msg = fmt.Sprintf("the pool at %s is invite-only: ask its operator for an invite token", url)
	case errors.Is(err, ErrClockSkew):
		var ae *APIError
		off := ""
		if errors.As(err, &ae) {
			off = ClockWords(ae.Offset)
		}
		if off == "" {
			off = "this device's clock is more than 5 minutes off the pool's"
		}
		msg = fmt.Sprintf("the pool at %s refuses this device's requests: %s; set the clock right", url, off)
	case errors.Is(err, ErrUnauthorized):
		msg = fmt.Sprintf("the pool at %s does not accept this device's signature: check this machine's clock", url)
	default:
		msg = fmt.Sprintf("pool %s: %v", url, err)
	}
	return &wordsError{msg, err}
}

// netCause is the network's own reason inside err, for people:
// "connection refused", "no such host", "no answer in time".
func netCause(err error) string {
	var dns *net.DNSError
	var op *net.OpError
	switch {
	case errors.As(err, &dns):
		if dns.IsNotFound {
			return "no such host"
		}
		return "the host's name cannot be looked up"
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded):
		return "no answer in time"
	case errors.As(err, &op) && op.Err != nil:
		var sys *os.SyscallError
		if errors.As(op.Err, &sys) {
			return sys.Err.Error()
		}
		return op.Err.Error()
	}
	return "no answer"
}

// NVMLGPUs is the idle.GPUSource over worker's NVML lister: the GPUs with
// the use of this process and of Workers' processes (when set) counted as
// ours, and worker's reason in words when there is no usable GPU ("no
// NVIDIA driver (NVML not found)").
type NVMLGPUs struct {
	Lister  *worker.GPULister
	Workers *worker.Pool
}

// GPUs lists the GPUs now.
func (n NVMLGPUs) GPUs(context.Context) ([]idle.GPU, error) {
	ours := map[int]bool{os.Getpid(): true}
	if n.Workers != nil {
		for _, pid := range n.Workers.PIDs() {
			ours[pid] = true
		}
	}
	gs, err := n.Lister.List(ours)
	if ne, ok := errors.AsType[*worker.NoGPUError](err); ok {
		return nil, errors.New(ne.Reason)
	}
	if err != nil && len(gs) == 0 {
		return nil, err
	}
	out := make([]idle.GPU, 0, len(gs))
	for _, g := range gs {
		out = append(out, idle.GPU{Index: g.Index, UUID: g.UUID, Name: g.Name,
			MemoryTotalMiB: g.MemoryTotalMiB, MemoryFreeMiB: g.MemoryFreeMiB,
			UtilisationShare: g.UtilisationShare, TemperatureC: g.TemperatureC, PowerW: g.PowerW,
			ComputeCapability: g.ComputeCapability, OtherProcesses: g.OtherPIDs(), OtherMemoryMiB: g.OtherMemoryMiB(),
			OurProcesses: g.OurPIDs()})
	}
	return out, nil
}

// noGPUs is the GPU source of a donor configured without one.
type noGPUs struct{}

func (noGPUs) GPUs(context.Context) ([]idle.GPU, error) {
	return nil, errors.New("no GPU source configured")
}

var (
	_ idle.GPUSource = NVMLGPUs{}
	_ OfferSource    = (*donorOffer)(nil)
	_ Signaller      = (*donorPolicy)(nil)
)

// offersDefault are the preferences used when the store cannot be read.
var offersDefault = offers.Preferences{Global: offers.PoolPreferences{Weight: 1}}

// Board reads the job boards of the joined pools (Board), matched against
// what this machine offers now: its capacity under the owner's settings
// with the policy's latest GPU reading, and the donor's preferences. An
// error means the store could not be read; a pool that fails has its
// PoolBoard.Error.
func (d *Donor) Board(ctx context.Context) ([]PoolBoard, error) {
	pools := d.cfg.Pools
	if pools == nil {
		var err error
		if pools, err = d.cfg.Store.JoinedPools(ctx); err != nil {
			return nil, err
		}
	}
	prefs, err := d.cfg.Store.Preferences(ctx)
	if err != nil {
		return nil, err
	}
	var sig idle.Signals
	if d.policy != nil {
		_, _, sig = d.policy.latest()
	}
	return Board(ctx, BoardConfig{
		Home: d.cfg.Home, DeviceKey: d.cfg.DeviceKey, OwnerKey: d.cfg.OwnerKey, Name: d.cfg.Name,
		Pools: pools, Capacity: d.offer.Capacity(ctx, sig), Preferences: prefs, HTTP: d.cfg.HTTP,
	}), nil
}

// tasksHeld is how many tasks the donor's agents hold: running or
// suspended, or with a result not yet recorded in the local store.
// Busy reports whether the donor holds a task now (running, suspended
// or waiting to report its result): the self-update installs a new
// version only when it does not.
func (d *Donor) Busy() bool { return d.tasksHeld() > 0 }

func (d *Donor) tasksHeld() int {
	d.mu.Lock()
	agents := make([]*donorAgent, 0, len(d.agents))
	for _, da := range d.agents {
		agents = append(agents, da)
	}
	d.mu.Unlock()
	n := 0
	for _, da := range agents {
		n += len(da.a.Running()) + da.a.heldCount()
	}
	return n
}
