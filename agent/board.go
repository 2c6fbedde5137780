package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"idlepool/home"
	"idlepool/identity"
	"idlepool/idle"
	"idlepool/offers"
	"idlepool/store"
)

// PoolBoard is one pool's job board as this machine sees it: the jobs
// seeking compute there, each matched against this machine's offer to
// the pool, or why the pool could not be read.
type PoolBoard struct {
	// URL is the pool's URL as the donor gave it; Name what it reports.
	URL  string `json:"url"`
	Name string `json:"name,omitempty"`
	// Error says, for people, why the pool's board could not be read;
	// "" when it was.
	Error string `json:"error,omitempty"`
	// Offer is this machine's offer to the pool (unsigned), what the jobs
	// were matched against; nil when Error is set.
	Offer *offers.Offer `json:"offer,omitempty"`
	// Jobs are the pool's listings, best first (offers.RankJobs), those
	// that match this machine before those that do not.
	Jobs []BoardJob `json:"jobs"`
}

// BoardJob is one listing on a PoolBoard.
type BoardJob struct {
	Listing offers.Listing `json:"listing"`
	// Match reports whether this machine's offer and the job match
	// (offers.Match); Why says why not, one reason per item.
	Match bool     `json:"match"`
	Why   []string `json:"why"`
}

// BoardConfig is what Board reads the job boards with: this device's
// directories and keys (as an agent has them), the pools joined, what the
// machine offers and the donor's preferences.
type BoardConfig struct {
	// Home holds the pinned pool keys (Home.Config/pools).
	Home home.Dirs
	// DeviceKey signs requests; OwnerKey endorses the device when it
	// registers with a pool.
	DeviceKey, OwnerKey *identity.Key
	// Name is the device's name the pools show (the host name).
	Name string
	// Pools are the pools joined (store.Local.JoinedPools), with their
	// invite tokens.
	Pools []store.JoinedPool
	// Capacity is what this machine offers (idle.NewCapacity).
	Capacity idle.Capacity
	// Preferences are the donor's choices (store.Local.Preferences).
	Preferences offers.Preferences
	// HTTP is the client the requests go through; nil means one with a
	// 60 s timeout.
	HTTP *http.Client
}

// Board reads the job board of every pool in cfg.Pools, one PoolBoard
// per pool in the same order. For each it connects as an agent does
// (pinning the pool's key, registering this device with the owner key,
// the name and the pool's invite token), reads the pool's listings and
// matches each against this machine's offer to the pool (offers.Build,
// unsigned): jobs ranked by offers.RankJobs, those that match first. A
// pool that cannot be read has its Error set, in words for people
// ("cannot reach the pool at http://...: ..."), and no jobs; the others
// are still read. Pools are read concurrently; Board returns when all
// have answered or ctx ended (the pools not read by then say so in
// Error). It is safe for concurrent use.
func Board(ctx context.Context, cfg BoardConfig) []PoolBoard {
	out := make([]PoolBoard, len(cfg.Pools))
	var wg sync.WaitGroup
	for i, p := range cfg.Pools {
		wg.Go(func() { out[i] = readBoard(ctx, cfg, p) })
	}
	wg.Wait()
	return out
}

// readBoard reads one pool's board for Board.
func readBoard(ctx context.Context, cfg BoardConfig, p store.JoinedPool) PoolBoard {
	b := PoolBoard{URL: p.URL, Name: p.Name, Jobs: []BoardJob{}}
	fail := func(err error) PoolBoard {
		b.Error = boardError(err, p.URL, cfg.Home)
		return b
	}
	c, err := NewClient(p.URL, cfg.DeviceKey, cfg.HTTP)
	if err != nil {
		return fail(err)
	}
	c.UseOwnerProfile(cfg.Home, nil)
	info, err := PoolKey(ctx, c, cfg.Home.Config)
	if err != nil {
		return fail(err)
	}
	b.Name = info.Pool
	if _, err := c.Register(ctx, cfg.OwnerKey, cfg.Name, p.Invite); err != nil {
		return fail(fmt.Errorf("register with pool %s: %w", info.Pool, err))
	}
	ls, err := c.Listings(ctx)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			b.Error = fmt.Sprintf("the pool at %s lists no jobs for donors: its coordinator runs an idlepool from before job listings", p.URL)
			return b
		}
		return fail(err)
	}
	now := time.Now()
	o := offers.Build(offers.Spec{Pool: info.Pool, PoolURL: p.URL, Peer: cfg.DeviceKey.ID(), Owner: cfg.OwnerKey.ID(),
		Capacity: cfg.Capacity, Preferences: cfg.Preferences, Issued: now})
	b.Offer = &o
	var no []BoardJob
	for _, l := range offers.RankJobs(o, ls) {
		ok, why := offers.Match(o, l, now)
		if why == nil {
			why = []string{}
		}
		j := BoardJob{Listing: l, Match: ok, Why: why}
		if ok {
			b.Jobs = append(b.Jobs, j)
		} else {
			no = append(no, j)
		}
	}
	b.Jobs = append(b.Jobs, no...)
	return b
}

// boardError writes err, met reading the board of the pool at url, for
// people, as `idlepool jobs` does.
func boardError(err error, url string, dirs home.Dirs) string {
	switch {
	case errors.Is(err, ErrPoolKeyChanged):
		return fmt.Sprintf("%v: if the pool was set up anew on purpose, delete %s; otherwise someone else answers at that address",
			err, PinFile(dirs.Config, url))
	case errors.Is(err, ErrUnavailable):
		return fmt.Sprintf("cannot reach the pool at %s: %v", url, err)
	case errors.Is(err, ErrForbidden):
		return fmt.Sprintf("the pool at %s refuses this device (%v): it may be invite-only; ask its operator for an invite token", url, err)
	case errors.Is(err, ErrUnauthorized):
		return fmt.Sprintf("the pool at %s does not know this device (%v): check this machine's clock, then join again", url, err)
	case errors.Is(err, ErrBadRequest) && !errors.As(err, new(*APIError)):
		return fmt.Sprintf("%q is not a pool URL: a pool URL looks like http://127.0.0.1:7420, or a cluster's nodes' URLs separated by commas", url)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Sprintf("the pool at %s did not answer in time", url)
	}
	return fmt.Sprintf("cannot read the jobs of the pool at %s: %v", url, err)
}
