package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"idlepool/agent"
	"idlepool/home"
	"idlepool/job"
	"idlepool/pool"
)

func cmdSubmit(ctx context.Context, g *globals, args []string) error {
	fs := g.flagSet("idlepool submit", "Usage: idlepool submit MANIFEST --pool URL [--follow] [--json] [--wait D] [--invite TOKEN] [--owner-key FILE]\n\nHands a job to a pool. With --follow this device merges the verified results as they arrive, like `idlepool run`.\n\n")
	pc := poolFlags(fs)
	pc.waitFlag(fs)
	follow := fs.Bool("follow", false, "merge the verified results as they arrive and print the result at the end")
	asJSON := fs.Bool("json", false, "with --follow, print one JSON document with the result on stdout (the shape of run --json)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return &userError{Msg: "submit needs exactly one manifest", Hint: "idlepool submit examples/pi/pi.toml --pool http://127.0.0.1:7420 --follow", Cause: errUsage}
	}
	if err := pc.check(); err != nil {
		return err
	}
	m, err := job.LoadManifest(pos[0])
	if err != nil {
		return manifestError(err, "submit")
	}
	j, err := job.Plan(m)
	if err != nil {
		return manifestError(err, "submit")
	}
	s, err := pc.connect(ctx, g)
	if err != nil {
		return err
	}
	if done, err := mergedHere(s, j); err != nil {
		return err
	} else if done {
		// Queued, donors would compute results that nobody merges.
		fmt.Fprintf(g.stderr, "job %s (%s): not submitted to pool %s: this device already merged its result (under %s)\n",
			m.Name, j.ID.String()[:12], s.pool, mergeDir(s, j))
		// Queued there earlier, it is withdrawn.
		if st, err := s.c.Status(ctx, j.ID); err == nil && !st.Complete && !st.Cancelled {
			if _, err := s.c.Cancel(ctx, j.ID); err != nil {
				return poolError(fmt.Errorf("withdraw job %s, which this device already merged: %w", j.ID, err), pc.url, s.dirs)
			}
			fmt.Fprintf(g.stderr, "job %s (%s): withdrawn from pool %s, where it was still queued\n", m.Name, j.ID.String()[:12], s.pool)
		}
		if !*follow {
			fmt.Fprintln(g.stdout, j.ID)
			return nil
		}
		out, err := pool.OpenFolder(j, pool.FoldConfig{Dir: mergeDir(s, j)})
		if err != nil {
			return err
		}
		res, err := out.Finish()
		if err != nil && !errors.Is(err, pool.ErrAllFailed) {
			return err
		}
		if perr := printOutcome(g, m, res, *asJSON); perr != nil {
			return perr
		}
		return outcomeError(err, res, "submit", *asJSON)
	}
	// Followed, the job's files are offered from here before any device
	// can lease a task of it, so the first devices fetch them from this
	// device rather than from the coordinator.
	var seeder *agent.Seeder
	if *follow {
		seeder = seedJob(ctx, g, s, j)
		select {
		case <-seeder.Offered():
		case <-ctx.Done():
		}
	}
	// A pool of several nodes may answer 503 for a moment (a node died
	// and its work is being taken over): the job and its files are sent
	// again, which the pool takes as once (a job's ID is its manifest's
	// digest, a file's its content's).
	if err := pc.untilAnswered(ctx, g, func() error { return s.c.Submit(ctx, j) }); err != nil {
		seeder.Stop()
		var ue *userError
		switch {
		case ctx.Err() != nil:
			return &userError{Msg: "interrupted before the pool had the job", Hint: "run the same command again", Cause: err}
		case errors.As(err, &ue):
			return err
		}
		return poolError(fmt.Errorf("submit job: %w", err), pc.url, s.dirs)
	}
	fmt.Fprintf(g.stderr, "job %s (%s): %s submitted to pool %s\n", m.Name, j.ID.String()[:12], plural(j.NumTasks(), "task"), s.pool)
	if !*follow {
		// stdout is the ID alone, for scripts; what to do next goes to
		// stderr. The result is merged by this device: the same home.
		cmd := "idlepool"
		if g.home != "" {
			cmd += " --home " + shellWord(g.home)
		}
		short, url := j.ID.String()[:12], shellWord(pc.url)
		fmt.Fprintf(g.stderr, "follow it with `%s status %s --pool %s`; merge its result with `%s result %s --pool %s`\n", cmd, short, url, cmd, short, url)
		fmt.Fprintln(g.stdout, j.ID)
		return nil
	}
	return followJob(ctx, g, "idlepool submit --follow", s, j, *asJSON, seeder)
}

// poolConn holds what the flags --pool, --invite and --owner-key say,
// and --wait where the command has it.
type poolConn struct {
	url, invite, ownerKey string
	// wait bounds how long connect waits for a coordinator that does not
	// answer; 0 fails at once.
	wait time.Duration
}

// defaultConnectWait is --wait's default: how long submit and result wait
// for a coordinator that does not answer as they start (one restarting,
// or started a moment later).
const defaultConnectWait = 3 * time.Minute

// waitFlag adds --wait to a command that connects to a pool.
func (pc *poolConn) waitFlag(fs *flag.FlagSet) {
	fs.DurationVar(&pc.wait, "wait", defaultConnectWait, "wait up to `D` for a coordinator that does not answer, or answers that it cannot serve now (503), retrying with backoff (0: fail at once)")
}

func poolFlags(fs *flag.FlagSet) *poolConn {
	pc := &poolConn{}
	fs.StringVar(&pc.url, "pool", "", "the pool's `URL`, as `idlepool serve` printed it")
	fs.StringVar(&pc.invite, "invite", "", "the pool's invite `TOKEN` (invite-only pools)")
	fs.StringVar(&pc.ownerKey, "owner-key", "", "owner key `FILE` (default: owner.key in the config directory)")
	return pc
}

func (pc *poolConn) check() error {
	if pc.url == "" {
		return &userError{Msg: "no pool given", Hint: "add --pool URL, the address `idlepool serve` printed", Cause: errUsage}
	}
	return nil
}

// session is this device's connection to a pool.
type session struct {
	c     *agent.Client
	dirs  home.Dirs
	pool  string // the pool's name
	owner string // this device's owner ID (identity.Key.ID of the owner key)
}

// connect loads the device's keys, checks the pool's key against the
// pinned one and registers the device (harmless when it already is).
// While the coordinator does not answer (down, restarting, overloaded) it
// tries again with backoff, saying so on stderr, for up to pc.wait.
func (pc *poolConn) connect(ctx context.Context, g *globals) (*session, error) {
	var s *session
	err := pc.untilAnswered(ctx, g, func() (err error) {
		s, err = pc.connectOnce(ctx, g)
		return err
	})
	return s, err
}

// untilAnswered calls try until it succeeds or fails for a reason other
// than the coordinator not answering (notAnswering), trying again with
// backoff and saying so on stderr, for up to pc.wait in all (0: once).
// A take-over's no_leader is returned at once: the session's client
// waited it out already (waitOutTakeOvers).
// It returns try's last error, or a *userError when the wait ran out
// or ctx ended.
func (pc *poolConn) untilAnswered(ctx context.Context, g *globals, try func() error) error {
	if pc.wait <= 0 {
		return try()
	}
	deadline := time.Now().Add(pc.wait)
	delay := connectBackoffBase
	for {
		err := try()
		if err == nil || !notAnswering(err) || agent.InTakeOver(err) {
			// A take-over (no_leader) was waited out already, by the
			// client (waitOutTakeOvers, for at least pc.wait).
			return err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return &userError{
				Msg:   fmt.Sprintf("the coordinator at %s did not answer within %s (%s)", pc.url, pc.wait, agent.UnansweredWords(err)),
				Hint:  "check the URL, and that `idlepool serve` runs there; --wait D waits longer",
				Cause: err,
			}
		}
		d := min(delay, left)
		shown := d.Round(time.Second)
		if d < time.Second {
			shown = d.Round(100 * time.Millisecond)
		}
		fmt.Fprintf(g.stderr, "idlepool: coordinator at %s not answering (%s); retrying in %s…\n", pc.url, agent.UnansweredWords(err), shown)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return &userError{Msg: "interrupted while waiting for the coordinator at " + pc.url, Hint: "run the same command again", Cause: ctx.Err()}
		case <-t.C:
		}
		delay = min(2*delay, connectBackoffMax)
	}
}

// takeOverWait is how long a command's request waits for a clustered
// pool's node to take charge of what it asks about (503 no_leader): a
// take-over after a node's death measures 4 to 9 s (docs/benchmarks.md).
const takeOverWait = 30 * time.Second

// waitOutTakeOvers makes c's requests wait out a clustered pool's
// take-over (agent.Client.WaitOutTakeOvers) for up to max each (a
// command's --wait where it has one, else takeOverWait), saying so on
// stderr once per command.
func waitOutTakeOvers(g *globals, c *agent.Client, url string, max time.Duration) {
	var said atomic.Bool
	c.WaitOutTakeOvers(max, func(err error) {
		if said.CompareAndSwap(false, true) {
			fmt.Fprintf(g.stderr, "idlepool: the pool at %s has no node in charge of part of its work right now (%s); waiting up to %s for one to take charge…\n",
				url, agent.UnansweredWords(err), max)
		}
	})
}

// The backoff of connect: the first wait, doubling up to the longest.
const (
	connectBackoffBase = time.Second
	connectBackoffMax  = 30 * time.Second
)

// notAnswering reports whether err says that the coordinator did not
// answer, or answered that it cannot serve now (5xx, 429): worth waiting
// for. A refusal (4xx, a changed pool key, a skewed clock) is not.
func notAnswering(err error) bool {
	if errors.Is(err, agent.ErrClockSkew) || errors.Is(err, agent.ErrPoolKeyChanged) {
		return false
	}
	return agent.Retryable(err)
}

func (pc *poolConn) connectOnce(ctx context.Context, g *globals) (*session, error) {
	dirs, err := g.dirs()
	if err != nil {
		return nil, err
	}
	dev, owner, err := loadKeys(dirs, pc.ownerKey)
	if err != nil {
		return nil, err
	}
	c, err := agent.NewClient(pc.url, dev, nil)
	if err != nil {
		return nil, poolError(err, pc.url, dirs)
	}
	waitOutTakeOvers(g, c, pc.url, max(takeOverWait, pc.wait))
	c.UseOwnerProfile(dirs, g.logger())
	info, err := agent.PoolKey(ctx, c, dirs.Config)
	if err != nil {
		return nil, poolError(err, pc.url, dirs)
	}
	if _, err := c.Register(ctx, owner, hostname(), pc.invite); err != nil {
		return nil, poolError(fmt.Errorf("register with pool %s: %w", info.Pool, err), pc.url, dirs)
	}
	return &session{c: c, dirs: dirs, pool: info.Pool, owner: owner.ID()}, nil
}

// lockMerge takes the lock of job j's merge on this device (a file in
// the data directory's merge-locks, apart from the merge directories),
// so that two processes of one home (a
// `submit --follow` and a `result`) never merge the same job at once:
// both would append to its journal, and the pool answers the slower one
// 409, its results acknowledged by the other. The lock is a no-op where
// the system has no file locks.
func lockMerge(s *session, j *job.Job, command string) (interface{ Release() error }, error) {
	dir := filepath.Join(s.dirs.Data, "merge-locks")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	l, err := home.Acquire(filepath.Join(dir, j.ID.String()+".lock"), command)
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		return noLock{}, nil
	case errors.Is(err, home.ErrLocked):
		return nil, &userError{Msg: fmt.Sprintf("job %s is being merged on this device already: %v", j.ID.String()[:12], err),
			Hint: fmt.Sprintf("wait for it to finish, or stop it; then 'idlepool result %s --pool %s' prints the result", j.ID.String()[:12], s.c.URL()), Cause: err}
	case err != nil:
		return nil, err
	}
	return l, nil
}

// noLock is lockMerge's lock where the system has none.
type noLock struct{}

func (noLock) Release() error { return nil }

// mergeDir is where this device merges job j (journal and outputs).
func mergeDir(s *session, j *job.Job) string {
	return filepath.Join(s.dirs.Data, "merges", j.ID.String())
}

// mergedHere reports whether this device's merge journal of job j holds
// every task's outcome already (the job finished here, through this pool
// or another).
func mergedHere(s *session, j *job.Job) (bool, error) {
	dir := mergeDir(s, j)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	f, err := pool.OpenFolder(j, pool.FoldConfig{Dir: dir})
	if err != nil {
		return false, fmt.Errorf("read the merge journal under %s: %w", dir, err)
	}
	done := f.Complete()
	if err := f.Close(); err != nil {
		return false, err
	}
	return done, nil
}

// seedJob runs this device's data plane while job j is followed
// (agent.Seed): it offers j's files to the pool's devices, unless the
// owner turned sharing off (share_peers=false), and fetches the results
// the devices kept. It has none where another process of this device
// runs its data plane (a donor in this home, another follow: the
// coordinator relays a device's signals to one mailbox, so they hold the
// data-plane lock, home.DataPlaneLockFile, and a donor that starts
// meanwhile waits for it). Its Seeder is nil then; why is logged.
func seedJob(ctx context.Context, g *globals, s *session, j *job.Job) *agent.Seeder {
	log := g.logger()
	st, err := loadSettings(ctx, s.dirs)
	if err != nil {
		log.Debug("Not offering the job's files to the pool's devices", "err", err)
		return nil
	}
	if err := os.MkdirAll(s.dirs.Data, 0o700); err != nil {
		log.Debug("Not offering the job's files to the pool's devices", "err", err)
		return nil
	}
	lock, err := home.Acquire(filepath.Join(s.dirs.Data, home.DataPlaneLockFile), "idlepool submit --follow")
	if err != nil {
		log.Info("Another process of this device runs its data plane: the job's files are not offered from here", "err", err)
		return nil
	}
	// With share_peers=false nothing is offered, but the results the
	// devices kept are still fetched over the data plane.
	seeder, err := agent.Seed(ctx, s.c, j, agent.SeedConfig{UploadBytesPerSecond: st.ShareUploadBytesPerSecond(), Logger: log,
		OnStop: func() { _ = lock.Release() }, NoOffer: st.NoSharePeers})
	if err != nil || seeder == nil {
		_ = lock.Release()
		if err != nil {
			log.Warn("Cannot offer the job's files to the pool's devices; they fetch them from the coordinator", "err", err)
		}
		return nil
	}
	return seeder
}

// followJob merges job j's verified results as they arrive (the device
// must be the job's merger), showing progress like `run`, and prints the
// result like `run` does. seeder offers the job's files meanwhile (nil:
// none, see seedJob); followJob stops it. It holds the job's merge lock
// (lockMerge) meanwhile, recording command as its holder.
func followJob(ctx context.Context, g *globals, command string, s *session, j *job.Job, asJSON bool, seeder *agent.Seeder) error {
	m := j.Manifest
	lock, err := lockMerge(s, j, command)
	if err != nil {
		seeder.Stop()
		return err
	}
	defer lock.Release()
	prog := &progressPrinter{w: g.stderr, tty: isTerminal(g.stderr)}
	cfg := agent.FollowConfig{
		Dir:      mergeDir(s, j),
		Progress: prog.update,
		Activity: prog.activity,
		Notice: func(msg string) {
			prog.clear()
			fmt.Fprintln(g.stderr, msg)
		},
		Logger: g.logger(),
	}
	if seeder != nil {
		cfg.FetchResult = func(ctx context.Context, v pool.Verified) ([]byte, error) { return seeder.FetchResult(ctx, s.c, v) }
	}
	if !asJSON && (m.Split.Rule == "grid" || m.Split.Rule == "kfold") {
		cfg.Result = func(t job.Task, result []byte) {
			prog.clear()
			fmt.Fprintf(g.stdout, "task %-4d %s -> %s\n", t.Index, formatParams(m.Split, t.Params), bytes.TrimSpace(result))
		}
	}
	out, err := agent.Follow(ctx, s.c, j, cfg)
	prog.finish()
	seeder.Stop()
	if err != nil && !errors.Is(err, pool.ErrAllFailed) {
		hint := fmt.Sprintf("idlepool result %s --pool %s continues", j.ID, s.c.URL())
		switch {
		case ctx.Err() != nil:
			return &userError{Msg: "interrupted; the results merged so far are saved", Hint: hint, Cause: err}
		case errors.Is(err, agent.ErrForbidden):
			return &userError{Msg: err.Error(), Hint: "only the device that submitted a job merges it: use the same --home", Cause: err}
		case errors.Is(err, agent.ErrJobCancelled):
			return &userError{Msg: err.Error(), Hint: "the results merged so far are saved under " + cfg.Dir + "; a cancelled job is not queued again (a changed manifest is a new job)", Cause: err}
		case errors.Is(err, agent.ErrMergeLost):
			return &userError{Msg: err.Error(), Hint: "the merge journal under " + cfg.Dir + " was removed; the pool no longer holds those results", Cause: err}
		}
		return poolError(err, s.c.URL(), s.dirs)
	}
	if perr := printOutcome(g, m, out, asJSON); perr != nil {
		return perr
	}
	if out.Resumed > 0 {
		fmt.Fprintf(g.stderr, "(%d of %d results were taken from the journal of an earlier follow)\n", out.Resumed, out.Total)
	}
	// How the devices got the job's files, as they reported it.
	if st, serr := s.c.Status(ctx, j.ID); serr == nil && st.Transfer != nil {
		fmt.Fprintf(g.stderr, "data: %s\n", agent.TransferWords(*st.Transfer))
	}
	if n, b := seeder.Fetched(); n > 0 { // results the devices kept, fetched from them
		if merged := int64(out.Total - out.Resumed); n < merged {
			fmt.Fprintf(g.stderr, "results: %d of %d fetched from the devices that computed them (%s), the others from the coordinator\n", n, merged, agent.ByteSize(b))
		} else {
			fmt.Fprintf(g.stderr, "results: all %d fetched from the devices that computed them (%s)\n", n, agent.ByteSize(b))
		}
	}
	return outcomeError(err, out, "submit", asJSON)
}

// shellWord quotes s for a POSIX shell where it holds anything but
// letters, digits and -_./:=@%+,, so that a command shown to be copied
// runs as shown.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=@%+,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
