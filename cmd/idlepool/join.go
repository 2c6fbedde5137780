package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"idlepool/agent"
	"idlepool/home"
	"idlepool/identity"
	"idlepool/idle"
	"idlepool/offers"
	"idlepool/store"
	"idlepool/worker"
)

// Key files under the config directory.
const (
	deviceKeyFile = "device.key"
	ownerKeyFile  = "owner.key"
)

func cmdJoin(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("idlepool join", flag.ContinueOnError)
	fs.SetOutput(g.stderr)
	fs.Usage = func() {
		fmt.Fprintf(g.stderr, "Usage: idlepool join POOL_URL [--workers N] [--invite TOKEN] [--owner-key FILE] [--name NAME] [--always] [--offer-ttl D]\n\nDonates this machine's compute to a pool until stopped (Ctrl-C or SIGTERM hands running tasks back).\nIt computes only when the owner's settings and the machine's state allow (see 'idlepool status'\nand 'idlepool settings'), and steps aside within a second when they stop allowing it.\nIt publishes a signed capacity offer to the pool (what this machine offers and accepts, see\n'idlepool jobs') and refreshes it while it runs; the pool leases it only tasks of jobs that match.\n\n")
		fs.PrintDefaults()
	}
	g.register(fs)
	workers := fs.Int("workers", runtime.NumCPU(), "run `N` tasks at once, each in its own worker process")
	invite := fs.String("invite", "", "the pool's invite `TOKEN` (invite-only pools)")
	ownerKey := fs.String("owner-key", "", "owner key `FILE` shared by a person's devices (default: owner.key in the config directory)")
	name := fs.String("name", hostname(), "a `NAME` for this device that the pool shows")
	always := fs.Bool("always", false, "compute whenever the pool has work, ignoring the owner's settings and the machine's state (dedicated machines)")
	offerTTL := fs.Duration("offer-ttl", offers.DefaultTTL, "how long each capacity offer is valid, `D` from 1s to 10m; it is refreshed every third of it, and the pool forgets a vanished machine after it")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return &userError{Msg: "join needs exactly one pool URL", Hint: "idlepool join http://127.0.0.1:7420", Cause: errUsage}
	}
	if *workers < 1 {
		return &userError{Msg: fmt.Sprintf("--workers must be at least 1, got %d", *workers), Cause: errUsage}
	}
	if *offerTTL < time.Second || *offerTTL > maxOfferTTL {
		return &userError{Msg: fmt.Sprintf("--offer-ttl must be from 1s to %v, got %v", maxOfferTTL, *offerTTL), Cause: errUsage}
	}
	dirs, err := g.dirs()
	if err != nil {
		return err
	}
	dev, owner, err := loadKeys(dirs, *ownerKey)
	if err != nil {
		return err
	}
	local, err := openLocal(dirs)
	if err != nil {
		return err
	}
	defer local.Close()
	log := g.daemonLogger()
	wp, err := startWorkers(dirs, *workers, log)
	if err != nil {
		return err
	}
	defer wp.Close()
	lister := worker.NewGPULister()
	defer lister.Close()
	gpus := poolGPUs{l: lister, wp: wp}
	cfg := agent.Config{
		PoolURL: pos[0], Home: dirs, DeviceKey: dev, OwnerKey: owner, Name: *name, Invite: *invite,
		Slots: *workers, Executor: wp, Store: local, Logger: log,
		LocalAPI: filepath.Join(dirs.Data, agent.LocalAPIFile),
		Offer:    &joinOffer{local: local, gpus: gpus, log: log}, OfferTTL: *offerTTL,
	}
	if !*always {
		pol := newJoinPolicy(local, gpus, log)
		defer pol.Close()
		cfg.Signals, cfg.Decide = pol, pol.Decide
	}
	a, err := agent.New(cfg)
	if err != nil {
		return poolError(err, pos[0], dirs)
	}
	fmt.Fprintf(g.stderr, "idlepool: joining %s as device %s (owner %s) with %d workers\n", pos[0], dev.ID(), owner.ID(), *workers)
	if err := a.Serve(ctx); err != nil {
		return poolError(err, pos[0], dirs)
	}
	return nil
}

func hostname() string {
	h, _ := os.Hostname()
	if len(h) > 64 {
		h = h[:64]
	}
	return h
}

// loadKeys loads (creating on first use, mode 0600) the device key and the
// owner key: ownerFile when given, else owner.key beside the device key.
func loadKeys(dirs home.Dirs, ownerFile string) (dev, owner *identity.Key, err error) {
	dev, err = identity.LoadOrCreate(filepath.Join(dirs.Config, deviceKeyFile))
	if err != nil {
		return nil, nil, keyError(err)
	}
	if ownerFile == "" {
		ownerFile = filepath.Join(dirs.Config, ownerKeyFile)
		owner, err = identity.LoadOrCreate(ownerFile)
	} else {
		owner, err = identity.Load(ownerFile)
	}
	if err != nil {
		return nil, nil, keyError(err)
	}
	return dev, owner, nil
}

func keyError(err error) error {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return &userError{Msg: err.Error(), Hint: "give --owner-key the owner.key file copied from the config directory of your first device", Cause: err}
	case errors.Is(err, identity.ErrBadKey):
		return &userError{Msg: err.Error(), Hint: "a key file holds one base64 line and must be private: chmod 600 FILE", Cause: err}
	}
	return err
}

// openLocal opens this device's contribution store.
func openLocal(dirs home.Dirs) (*store.Local, error) {
	l, err := store.OpenLocal(filepath.Join(dirs.Data, "local.db"))
	if err != nil {
		return nil, fmt.Errorf("open the local contribution store: %w", err)
	}
	return l, nil
}

// startWorkers starts the pool of sandboxed worker processes.
func startWorkers(dirs home.Dirs, n int, log *slog.Logger) (*worker.Pool, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own executable to start workers: %w", err)
	}
	cache := filepath.Join(dirs.Cache, "wazero")
	wp, err := worker.NewPool(worker.Config{
		Command:  []string{self, "worker", "--cache", cache},
		Slots:    n,
		CacheDir: cache,
		Logger:   log,
	})
	if err != nil {
		return nil, fmt.Errorf("start workers: %w", err)
	}
	return wp, nil
}

// daemonLogger is the log of the long-running commands (serve, join):
// informational messages by default, everything with -v.
func (g *globals) daemonLogger() *slog.Logger {
	lvl := slog.LevelInfo
	if g.verbose {
		lvl = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(g.stderr, &slog.HandlerOptions{Level: lvl}))
}

// poolError explains for people what went wrong talking to the pool at
// url.
func poolError(err error, url string, dirs home.Dirs) error {
	var ue *userError
	switch {
	case err == nil, errors.As(err, &ue):
		return err
	case errors.Is(err, agent.ErrPoolKeyChanged):
		return &userError{Msg: err.Error(), Hint: "if the pool was set up anew on purpose, delete " + agent.PinFile(dirs.Config, url) + "; otherwise someone else answers at that address", Cause: err}
	case errors.Is(err, agent.ErrUnavailable):
		return &userError{Msg: fmt.Sprintf("cannot reach the pool at %s: %v", url, err), Hint: "check the URL, and that `idlepool serve` runs there", Cause: err}
	case errors.Is(err, agent.ErrForbidden):
		return &userError{Msg: err.Error(), Hint: "the pool is invite-only or refuses this device: ask its operator for an invite token (--invite TOKEN)", Cause: err}
	case errors.Is(err, agent.ErrUnauthorized):
		return &userError{Msg: err.Error(), Hint: "the pool does not know this device: check this machine's clock, then join again", Cause: err}
	case errors.Is(err, agent.ErrBadRequest) && !errors.As(err, new(*agent.APIError)):
		return &userError{Msg: err.Error(), Hint: "a pool URL looks like http://127.0.0.1:7420", Cause: errors.Join(err, errUsage)}
	}
	return err
}

// settingsReload is how often an agent reads the owner's settings again,
// so that 'idlepool settings set' takes effect in a running agent.
const settingsReload = 2 * time.Second

// joinPolicy is what an agent started by join obeys: the owner's settings
// from the local store (read again every settingsReload), the machine's
// signals from an idle.Sampler over the platform's probes and NVML, and
// an idle.Policy (idle.Decide with its state, on the monotonic clock). It
// is the agent's Signaller and Decide: the agent's governor calls them
// one at a time, so it needs no lock of its own.
type joinPolicy struct {
	local  *store.Local
	gpus   idle.GPUSource
	log    *slog.Logger
	policy *idle.Policy

	settings idle.Settings
	loaded   time.Time
	sampler  *idle.Sampler
	programs []string // the PauseFor list sampler was made for
}

func newJoinPolicy(local *store.Local, gpus idle.GPUSource, log *slog.Logger) *joinPolicy {
	return &joinPolicy{local: local, gpus: gpus, log: log,
		policy: idle.NewPolicy(idle.Defaults()), settings: idle.Defaults()}
}

// Sample reads the settings again when due, (re)makes the sampler when
// the programs to pause for changed, and samples the signals.
func (p *joinPolicy) Sample(ctx context.Context) idle.Signals {
	if p.loaded.IsZero() || time.Since(p.loaded) >= settingsReload {
		p.loaded = time.Now()
		if s, err := p.local.Settings(ctx); err != nil {
			p.log.Warn("Cannot read the owner's settings, keeping the last ones", "err", err)
		} else {
			p.settings = s
			p.policy.SetSettings(s)
		}
	}
	if p.sampler == nil || !slices.Equal(p.programs, p.settings.PauseFor) {
		if p.sampler != nil {
			_ = p.sampler.Close()
		}
		sources := idle.DefaultSources()
		sources.GPU = p.gpus
		p.programs = slices.Clone(p.settings.PauseFor)
		p.sampler = idle.NewSampler(idle.SamplerConfig{Sources: sources, Programs: p.programs})
	}
	return p.sampler.Sample(ctx)
}

// Decide applies the policy. When the owner's pause has run out by the
// monotonic clock it clears Settings.PausedUntil in the store.
func (p *joinPolicy) Decide(sig idle.Signals, now time.Time) idle.Decision {
	d := p.policy.Decide(sig, now)
	if st := p.policy.State(); st.PauseOver && !p.settings.PausedUntil.IsZero() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		from := st.PauseFrom
		s, err := p.local.UpdateSettings(ctx, func(s *idle.Settings) error {
			if s.PausedUntil.Equal(from) {
				s.PausedUntil = time.Time{}
			}
			return nil
		})
		if err != nil {
			p.log.Warn("Cannot clear the owner's pause that ran out", "err", err)
		} else {
			p.settings = s
			p.policy.SetSettings(s)
		}
	}
	return d
}

// Close stops the sampler's probes. NVML is shut down by whoever made
// the GPU source.
func (p *joinPolicy) Close() error {
	if p.sampler != nil {
		return p.sampler.Close()
	}
	return nil
}

// maxOfferTTL is the longest offer lifetime a coordinator takes.
const maxOfferTTL = 10 * time.Minute

// joinOffer is the agent.OfferSource of a joined agent: this machine
// (idle.ReadMachine, read once), the owner's settings and preferences
// from the local store (read at every refresh, so that 'idlepool
// settings' and 'idlepool jobs accept|refuse' reach the pool with the
// next offer), and the GPUs NVML found: the governor's latest reading,
// or, with --always (no sampler), a reading of its own. The agent calls
// it from one goroutine at a time.
type joinOffer struct {
	local *store.Local
	gpus  idle.GPUSource
	log   *slog.Logger

	machine  *idle.Machine
	settings idle.Settings
	loaded   bool // settings were read once
}

// Capacity is idle.NewCapacity of the machine, the settings and the GPUs.
func (o *joinOffer) Capacity(ctx context.Context, sig idle.Signals) idle.Capacity {
	if o.machine == nil {
		m, err := idle.ReadMachine(ctx)
		if err != nil {
			o.log.Info("Part of the machine is unknown to its offer", "err", err)
		}
		o.machine = &m
	}
	if s, err := o.local.Settings(ctx); err == nil {
		o.settings, o.loaded = s, true
	} else {
		if !o.loaded {
			o.settings, o.loaded = idle.Defaults(), true
		}
		o.log.Warn("Cannot read the owner's settings for the offer, keeping the last ones", "err", err)
	}
	gpus := sig.GPUs
	if !gpus.Known && gpus.Err == "" { // not sampled: no policy (--always)
		gs, err := o.gpus.GPUs(ctx)
		gpus = idle.Reading[[]idle.GPU]{Value: gs, Known: err == nil, Source: "nvml"}
		if err != nil {
			gpus.Err = err.Error()
		}
	}
	return idle.NewCapacity(*o.machine, o.settings, gpus)
}

// Preferences reads the donor's preferences; on failure none (defaults).
func (o *joinOffer) Preferences(ctx context.Context) offers.Preferences {
	p, err := o.local.Preferences(ctx)
	if err != nil {
		o.log.Warn("Cannot read the donor's preferences for the offer, offering with the defaults", "err", err)
		return offers.Preferences{Global: offers.PoolPreferences{Weight: 1}}
	}
	return p
}

// poolGPUs is the idle.GPUSource of a joined agent: like nvmlGPUs, with
// this process and its worker processes counted as ours.
type poolGPUs struct {
	l  *worker.GPULister
	wp *worker.Pool
}

func (p poolGPUs) GPUs(context.Context) ([]idle.GPU, error) {
	ours := map[int]bool{os.Getpid(): true}
	for _, pid := range p.wp.PIDs() {
		ours[pid] = true
	}
	gs, err := p.l.List(ours)
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
			ComputeCapability: g.ComputeCapability, OtherProcesses: g.OtherPIDs(), OtherMemoryMiB: g.OtherMemoryMiB()})
	}
	return out, nil
}

var (
	_ agent.Signaller   = (*joinPolicy)(nil)
	_ agent.OfferSource = (*joinOffer)(nil)
	_ idle.GPUSource    = poolGPUs{}
)
