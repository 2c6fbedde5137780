package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"idlepool/agent"
	"idlepool/home"
	"idlepool/identity"
	"idlepool/idle"
	"idlepool/offers"
	"idlepool/store"
	"idlepool/worker"
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
	for i, u := range pos {
		// One pool, one URL: "http://host:7420/" is "http://host:7420",
		// and a cluster's nodes in any order are one pool.
		c, err := agent.CanonicalPoolURL(u)
		if err != nil {
			return poolError(err, u, home.Dirs{}) // a malformed URL: no directory is named
		}
		pos[i] = c
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
	lock, err := lockAgent(dirs, "idlepool join")
	if err != nil {
		return err
	}
	defer lock.Release()
	dev, owner, err := loadKeys(dirs, *ownerKey)
	if err != nil {
		return err
	}
	local, err := openLocalRepairing(dirs, g.stderr)
	if err != nil {
		return err
	}
	defer local.Close()
	var pools []store.JoinedPool
	for _, u := range pos {
		// Joined pools are what the tray app computes for, what a later
		// plain `idlepool join` joins again and what `idlepool jobs`
		// browses; their weights share the workers.
		if err := local.JoinPool(ctx, u, tokens[u]); store.Transient(err) {
			// A full disk or a locked store is waited out while computing
			// (see agent.StoreStatus); only the record of the pool waits.
			fmt.Fprintf(g.stderr, "idlepool: %s is not recorded as joined yet (%v); computing for it all the same\n", u, err)
		} else if err != nil {
			return err
		}
		pools = append(pools, store.JoinedPool{URL: u, Invite: tokens[u]})
	}
	if len(pos) == 0 {
		if pools, err = local.JoinedPools(ctx); err != nil {
			return err
		}
		if len(pools) == 0 {
			fs.Usage()
			return &userError{Msg: "join needs a pool URL: this machine has joined none yet", Hint: "idlepool join http://127.0.0.1:7420", Cause: errUsage}
		}
	}
	slots := []int{*workers} // what the donor will give each pool, to say so
	if len(pools) > 1 {
		prefs, err := local.Preferences(ctx)
		if err != nil {
			return err
		}
		weights := make([]float64, len(pools))
		for i, p := range pools {
			pp, _ := prefs.Pool(p.URL)
			weights[i] = pp.Weight
		}
		if slots, err = agent.ShareSlots(*workers, weights); err != nil {
			return &userError{Msg: err.Error(), Hint: "give more --workers, or change the pools' weights (idlepool jobs)", Cause: errUsage}
		}
	}
	log := g.daemonLogger()
	wp, err := startWorkers(dirs, *workers, log)
	if err != nil {
		return err
	}
	defer wp.Close()
	lister := worker.NewGPULister()
	defer lister.Close()
	d, err := agent.NewDonor(agent.DonorConfig{
		Home: dirs, DeviceKey: dev, OwnerKey: owner, Name: *name, Workers: *workers,
		Executor: wp, Store: local, GPUs: agent.NVMLGPUs{Lister: lister, Workers: wp},
		Energy: agent.NewEnergyMeter(lister, wp, ratedW(ctx, local), local),
		Always: *always, OfferTTL: *offerTTL, Logger: log, Pools: pools,
		LocalAPI:  filepath.Join(dirs.Data, agent.LocalAPIFile),
		StorePath: filepath.Join(dirs.Data, localDBFile),
		Events:    agent.NewEventLog(filepath.Join(dirs.Data, agent.EventsFile), 0, nil),
	})
	if err != nil {
		return err
	}
	for i, p := range pools {
		if slots[i] == 0 {
			fmt.Fprintf(g.stderr, "idlepool: not joining %s: its weight is 0\n", p.URL)
			continue
		}
		fmt.Fprintf(g.stderr, "idlepool: joining %s as device %s (owner %s) with %s\n", p.URL, dev.ID(), owner.ID(), plural(int64(slots[i]), "worker"))
	}
	if !*always {
		jctx, stop := context.WithCancel(ctx)
		defer stop()
		go hintUnknownIdle(jctx, g.stderr, d, local)
	}
	if err := d.ServeUpdating(ctx); err != nil {
		if errors.Is(err, agent.ErrRestart) {
			fmt.Fprintln(g.stderr, "idlepool: a new version is installed: restarting")
			return agent.Restart()
		}
		if pe, ok := errors.AsType[*agent.PoolError](err); ok {
			return poolError(pe.Err, pe.URL, dirs)
		}
		return err
	}
	return nil
}

// unknownIdleWatch is how long after it starts a donor's decisions are
// looked at for a wait on an input idle time nobody can tell.
const unknownIdleWatch = time.Minute

// hintUnknownIdle says once, on w, when the donor d waits for an input
// idle time that no source of this machine can tell (a headless machine
// with the default idle_for): without it the donor waits for ever, and
// the pool shows it only as waiting for its owner. It watches d's
// decisions for unknownIdleWatch or until ctx ends.
func hintUnknownIdle(ctx context.Context, w io.Writer, d *agent.Donor, local *store.Local) {
	ctx, cancel := context.WithTimeout(ctx, unknownIdleWatch)
	defer cancel()
	for {
		st := d.Status()
		if st.Decision.State == idle.StateWaiting && !st.Signals.InputIdle.Known { // else no need to read the settings
			s, err := local.Settings(ctx)
			if err == nil && waitsForUnknownIdle(s, st.Signals, st.Decision) {
				fmt.Fprintf(w, "idlepool: %s\nhint: %s,\n      or 'idlepool join --always' on a machine dedicated to the pool\n", st.Decision.Reason, unknownIdleHint)
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-d.Changes():
		case <-time.After(time.Second):
		}
	}
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

func hostname() string {
	h, _ := os.Hostname()
	if len(h) > 64 {
		h = h[:64]
	}
	return h
}

// loadKeys loads (creating on first use) the device key and the owner
// key (agent.LoadKeys), with errors for people.
func loadKeys(dirs home.Dirs, ownerFile string) (dev, owner *identity.Key, err error) {
	dev, owner, err = agent.LoadKeys(dirs, ownerFile)
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
		hint := agent.KeyHint(err)
		if hint == "" {
			hint = "a key file holds one base64 line and must be private: chmod 600 FILE"
		}
		return &userError{Msg: err.Error(), Hint: hint, Cause: err}
	}
	return err
}

// lockAgent makes this process the only agent of the home dirs (the tray
// app takes the same lock): two agents of one device would lease twice
// and write one store. The commands that only read or change settings
// (status, history, settings, jobs) take no lock and work beside it.
func lockAgent(dirs home.Dirs, command string) (*home.Lock, error) {
	l, err := home.Acquire(filepath.Join(dirs.Data, home.AgentLockFile), command)
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		return nil, nil // Release of a nil *Lock is nil
	case err != nil:
		if le, ok := errors.AsType[*home.LockedError](err); ok {
			return nil, &userError{Msg: fmt.Sprintf("this device already computes with the data directory %s: %s", dirs.Data, holderWords(le)),
				Hint: "'idlepool status' shows what it does; stop it first, or run this one with its own --home", Cause: err}
		}
		return nil, err
	}
	return l, nil
}

// holderWords names the process holding a lock for people: "idlepool
// join runs as PID 4242".
func holderWords(le *home.LockedError) string {
	who := le.Command
	if who == "" {
		who = "another idlepool"
	}
	if le.PID > 0 {
		return fmt.Sprintf("%s runs as PID %d", who, le.PID)
	}
	return who + " runs"
}

// localDBFile is the local store's file under the data directory.
const localDBFile = "local.db"

// openLocal opens this device's contribution store. A damaged one is
// reported with what to do: only the agent (join, the tray app) repairs
// it, since this command may run beside it.
func openLocal(dirs home.Dirs) (*store.Local, error) {
	path := filepath.Join(dirs.Data, localDBFile)
	l, err := store.OpenLocal(path)
	if errors.Is(err, store.ErrCorrupt) {
		return nil, &userError{Msg: fmt.Sprintf("the local store %s is damaged: %v", path, err),
			Hint:  "start 'idlepool join' (or the tray app): it moves the damaged file aside, starts a new one and fetches this device's receipts from its pools again",
			Cause: err}
	}
	if err != nil {
		return nil, fmt.Errorf("open the local contribution store: %w", err)
	}
	return l, nil
}

// storeHint is the hint for an error of a local database that the
// machine caused (see store.Transient); "" for other errors.
func storeHint(err error) string {
	switch {
	case errors.Is(err, store.ErrBusy):
		return "another program holds the database's write lock (an 'sqlite3' shell, a backup tool?); nothing was changed: try again once it is done"
	case errors.Is(err, store.ErrFull):
		return "the disk is full; nothing was changed: free some space and try again"
	}
	return ""
}

// openLocalRepairing opens this device's contribution store for the
// agent, which holds the agent lock: a damaged store is moved aside and
// a new one started (store.OpenLocalRepairing), and the person is told
// on stderr.
func openLocalRepairing(dirs home.Dirs, stderr io.Writer) (*store.Local, error) {
	l, err := store.OpenLocalRepairing(filepath.Join(dirs.Data, localDBFile))
	if err != nil {
		return nil, fmt.Errorf("open the local contribution store: %w", err)
	}
	if r := l.Recovery(); r != nil {
		fmt.Fprintf(stderr, "idlepool: %s\n", r)
	}
	return l, nil
}

// startWorkers starts the pool of sandboxed worker processes: this
// program's `worker` command.
func startWorkers(dirs home.Dirs, n int, log *slog.Logger) (*worker.Pool, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own executable to start workers: %w", err)
	}
	return agent.WorkerPool(dirs, []string{self, "worker", "--cache", agent.WorkerCache(dirs)}, n, log)
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
	case errors.Is(err, agent.ErrNotCoordinator) && !errors.Is(err, agent.ErrUnavailable):
		return &userError{Msg: err.Error(), Hint: "check the pool URL: it is the address `idlepool serve` printed, such as http://10.0.0.5:7420", Cause: err}
	case agent.InTakeOver(err):
		return &userError{Msg: fmt.Sprintf("the pool at %s has no node in charge of part of its work: %v", url, err),
			Hint: "another node takes over a stopped node's work within seconds: try again; if this lasts, fewer than a majority of the pool's nodes may be up (docs/operator.md, \"When a node dies\")", Cause: err}
	case errors.Is(err, agent.ErrUnavailable):
		return &userError{Msg: fmt.Sprintf("cannot reach the pool at %s: %v", url, err), Hint: "check the URL, and that `idlepool serve` runs there", Cause: err}
	case errors.Is(err, agent.ErrForbidden):
		return &userError{Msg: err.Error(), Hint: "the pool is invite-only or refuses this device: ask its operator for an invite token (--invite TOKEN)", Cause: err}
	case errors.Is(err, agent.ErrClockSkew):
		var ae *agent.APIError
		msg := "the pool refuses this device's requests: this device's clock is more than 5 minutes off the pool's"
		if errors.As(err, &ae) && agent.ClockWords(ae.Offset) != "" {
			msg = "the pool refuses this device's requests: " + agent.ClockWords(ae.Offset)
		}
		return &userError{Msg: msg, Hint: "set this machine's clock right (turn on network time), then try again", Cause: err}
	case errors.Is(err, agent.ErrUnauthorized):
		return &userError{Msg: err.Error(), Hint: "the pool does not know this device: check this machine's clock, then join again", Cause: err}
	case errors.Is(err, agent.ErrBadRequest) && !errors.As(err, new(*agent.APIError)):
		return &userError{Msg: err.Error(), Hint: "a pool URL looks like http://127.0.0.1:7420; a cluster's is its nodes' URLs separated by commas", Cause: errors.Join(err, errUsage)}
	}
	return err
}

// maxOfferTTL is the longest offer lifetime a coordinator takes.
const maxOfferTTL = 10 * time.Minute

// ratedW is the owner's rated power of the processor (cpu_rated_w), 0
// when unset or unreadable (the meter's default).
func ratedW(ctx context.Context, local *store.Local) float64 {
	s, err := local.Settings(ctx)
	if err != nil {
		return 0
	}
	return s.CPURatedW
}
