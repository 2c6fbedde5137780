package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

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
	fs := g.flagSet("idlepool join", "Usage: idlepool join POOL_URL... [--workers N] [--invite TOKEN | --invite POOL_URL=TOKEN...] [--owner-key FILE] [--name NAME] [--always] [--offer-ttl D]\n\nDonates this machine's compute to one or more pools until stopped (Ctrl-C or SIGTERM hands running tasks back).\nIt computes only when the owner's settings and the machine's state allow (see 'idlepool status'\nand 'idlepool settings'), and steps aside within a second when they stop allowing it.\nIt publishes a signed capacity offer to each pool (what this machine offers and accepts, see\n'idlepool jobs') and refreshes it while it runs; a pool leases it only tasks of jobs that match.\nWith several pools the workers are shared among them by the donor's pool weights (equal by default).\n\n")
	workers := fs.Int("workers", runtime.NumCPU(), "run `N` tasks at once, each in its own worker process; with several pools, shared among them")
	var invites stringList
	fs.Var(&invites, "invite", "the pool's invite `TOKEN` (invite-only pools); with several pools POOL_URL=TOKEN, repeated")
	ownerKey := fs.String("owner-key", "", "owner key `FILE` shared by a person's devices (default: owner.key in the config directory)")
	name := fs.String("name", hostname(), "a `NAME` for this device that the pools show")
	always := fs.Bool("always", false, "compute whenever the pool has work, ignoring the owner's settings and the machine's state (dedicated machines)")
	offerTTL := fs.Duration("offer-ttl", offers.DefaultTTL, "how long each capacity offer is valid, `D` from 1s to 10m; it is refreshed every third of it, and the pool forgets a vanished machine after it")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		fs.Usage()
		return &userError{Msg: "join needs a pool URL", Hint: "idlepool join http://127.0.0.1:7420", Cause: errUsage}
	}
	for i, u := range pos {
		if slices.Contains(pos[:i], u) {
			return &userError{Msg: fmt.Sprintf("pool %s is named twice", u), Cause: errUsage}
		}
	}
	if *workers < 1 {
		return &userError{Msg: fmt.Sprintf("--workers must be at least 1, got %d", *workers), Cause: errUsage}
	}
	if *offerTTL < time.Second || *offerTTL > maxOfferTTL {
		return &userError{Msg: fmt.Sprintf("--offer-ttl must be from 1s to %v, got %v", maxOfferTTL, *offerTTL), Cause: errUsage}
	}
	tokens, err := inviteTokens(pos, invites)
	if err != nil {
		return err
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
	for _, u := range pos {
		// Known pools are what `idlepool jobs` browses and what pool
		// weights are shared among.
		if err := local.AddPool(ctx, u, ""); err != nil {
			return err
		}
	}
	prefs, err := local.Preferences(ctx)
	if err != nil {
		return err
	}
	weights := make([]float64, len(pos))
	for i, u := range pos {
		pp, _ := prefs.Pool(u)
		weights[i] = pp.Weight
	}
	slots, err := []int{*workers}, error(nil)
	if len(pos) > 1 {
		slots, err = shareSlots(*workers, weights)
	}
	if err != nil {
		return &userError{Msg: err.Error(), Hint: "give more --workers, or change the pools' weights (idlepool jobs)", Cause: errUsage}
	}
	log := g.daemonLogger()
	wp, err := startWorkers(dirs, *workers, log)
	if err != nil {
		return err
	}
	defer wp.Close()
	lister := worker.NewGPULister()
	defer lister.Close()
	gpus := nvmlGPUs{l: lister, wp: wp}
	var pol *joinPolicy
	if !*always {
		pol = newJoinPolicy(local, gpus, log)
		defer pol.Close()
	}
	eg, ectx := errgroup.WithContext(ctx)
	for i, u := range pos {
		if slots[i] == 0 {
			fmt.Fprintf(g.stderr, "idlepool: not joining %s: its weight is 0\n", u)
			continue
		}
		cfg := agent.Config{
			PoolURL: u, Home: dirs, DeviceKey: dev, OwnerKey: owner, Name: *name, Invite: tokens[u],
			Slots: slots[i], Executor: wp, Store: local, Logger: log,
			Offer: &joinOffer{local: local, gpus: gpus, log: log.With("pool", u)}, OfferTTL: *offerTTL,
		}
		if i == slices.IndexFunc(slots, func(n int) bool { return n > 0 }) {
			cfg.LocalAPI = filepath.Join(dirs.Data, agent.LocalAPIFile) // the first pool's agent serves the status
		}
		if pol != nil {
			cfg.Signals, cfg.Decide = pol, pol.Decide
		}
		a, err := agent.New(cfg)
		if err != nil {
			return poolError(err, u, dirs)
		}
		fmt.Fprintf(g.stderr, "idlepool: joining %s as device %s (owner %s) with %d workers\n", u, dev.ID(), owner.ID(), slots[i])
		eg.Go(func() error {
			if err := a.Serve(ectx); err != nil {
				return poolError(err, u, dirs)
			}
			return nil
		})
	}
	return eg.Wait()
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// inviteTokens maps each pool URL to its invite token: POOL_URL=TOKEN
// values name their pool; a bare TOKEN is allowed with one pool only, so
// that no pool is sent another pool's token.
func inviteTokens(pools, invites []string) (map[string]string, error) {
	tokens := map[string]string{}
	for _, v := range invites {
		i := slices.IndexFunc(pools, func(u string) bool { return strings.HasPrefix(v, u+"=") })
		switch {
		case i >= 0:
			tokens[pools[i]] = strings.TrimPrefix(v, pools[i]+"=")
		case len(pools) == 1:
			tokens[pools[0]] = v
		default:
			return nil, &userError{Msg: "with several pools, give each invite as --invite POOL_URL=TOKEN",
				Hint: "idlepool join http://a:7420 http://b:7420 --invite http://b:7420=TOKEN", Cause: errUsage}
		}
	}
	return tokens, nil
}

// shareSlots divides workers among pools in proportion to their weights
// (negative counts as 0) by the largest remainder, with at least one for
// every pool of positive weight; a pool of weight 0 gets none. It fails
// when no pool has a positive weight or there are fewer workers than such
// pools.
func shareSlots(workers int, weights []float64) ([]int, error) {
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
// is the Signaller and Decide of the agents of every pool joined: calls
// are serialised by mu, and a sample or decision younger than
// policyShare is shared by the agents instead of being made again, so
// they all obey one decision.
type joinPolicy struct {
	mu sync.Mutex

	lastSample   time.Time // monotonic
	lastSig      idle.Signals
	lastDecided  time.Time // monotonic
	lastDecision idle.Decision

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

// policyShare is how old a sample or decision may be and still be shared
// by the agents of several pools: less than agent.DefaultSamplePeriod.
const policyShare = 100 * time.Millisecond

// Sample reads the settings again when due, (re)makes the sampler when
// the programs to pause for changed, and samples the signals (or returns
// a sample younger than policyShare).
func (p *joinPolicy) Sample(ctx context.Context) idle.Signals {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.lastSample.IsZero() && time.Since(p.lastSample) < policyShare {
		return p.lastSig
	}
	p.lastSig = p.sample(ctx)
	p.lastSample = time.Now()
	return p.lastSig
}

func (p *joinPolicy) sample(ctx context.Context) idle.Signals {
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

// Decide applies the policy (or returns a decision younger than
// policyShare). When the owner's pause has run out by the monotonic clock
// it clears Settings.PausedUntil in the store.
func (p *joinPolicy) Decide(sig idle.Signals, now time.Time) idle.Decision {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.lastDecided.IsZero() && time.Since(p.lastDecided) < policyShare {
		return p.lastDecision
	}
	p.lastDecision, p.lastDecided = p.decide(sig, now), time.Now()
	return p.lastDecision
}

func (p *joinPolicy) decide(sig idle.Signals, now time.Time) idle.Decision {
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
	p.mu.Lock()
	defer p.mu.Unlock()
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

var (
	_ agent.Signaller   = (*joinPolicy)(nil)
	_ agent.OfferSource = (*joinOffer)(nil)
)
