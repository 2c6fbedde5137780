package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"idlepool/agent"
	"idlepool/coord"
	"idlepool/home"
	"idlepool/identity"
	"idlepool/idle"
	"idlepool/job"
	"idlepool/offers"
	"idlepool/pool"
	"idlepool/store"
	"idlepool/worker"
)

// The tests run a real coordinator (coord.Server) on 127.0.0.1 and real
// agents over HTTP; only the sandbox is replaced by fakeExec, a
// hand-written executor that computes a small, deterministic result from
// the task's JSON like a job program would.

// fakeExec is a pool.Executor that runs no program: task i's result is
// {"index": i, "square": i*i}; tasks whose index is in fail fail with a
// trap, and those in TimeOut run past their time limit, as on a machine
// starved of CPU. Delay makes every task take that long (cancelled with
// ctx); Block, if set, makes each task wait until it receives from Block:
// a value sent (one task each) or its closing (all of them). Every task
// counts Work instructions, or fakeWork when Work is 0.
type fakeExec struct {
	Work    uint64
	Delay   time.Duration
	Fail    map[int64]bool
	TimeOut map[int64]bool
	Block   chan struct{}
	Pad     int // bytes of padding in each result ("pad"), to make it large
	runs    atomic.Int64
}

// fakeWork is what a task of fakeExec counts by default: 10,000 cost
// units' worth, more than the tests' jobs declare, so that receipts
// credit the declared cost.
const fakeWork = 1e12

// Runs is how many tasks the executor was asked to run.
func (f *fakeExec) Runs() int64 { return f.runs.Load() }

func (f *fakeExec) Run(ctx context.Context, req worker.Request) (worker.Result, error) {
	var t struct {
		Index int64 `json:"index"`
	}
	if err := json.Unmarshal(req.Stdin, &t); err != nil {
		return worker.Result{}, fmt.Errorf("%w: stdin: %v", worker.ErrInvalidRequest, err)
	}
	f.runs.Add(1)
	if f.Block != nil {
		select {
		case <-f.Block:
		case <-ctx.Done():
			return worker.Result{}, ctx.Err()
		}
	}
	if f.Delay > 0 {
		select {
		case <-time.After(f.Delay):
		case <-ctx.Done():
			return worker.Result{}, ctx.Err()
		}
	}
	work := f.Work
	if work == 0 {
		work = fakeWork
	}
	if f.TimeOut[t.Index] {
		return worker.Result{PID: 1, Failure: &worker.Failure{Kind: worker.FailureTimeout, Message: "task ran longer than its limit of 10m0s"}}, nil
	}
	if f.Fail[t.Index] {
		return worker.Result{PID: 1, Stderr: []byte("panic: boom\n"), Failure: &worker.Failure{Kind: worker.FailureTrap, Message: "exit status 2"}, Work: work}, nil
	}
	if f.Pad > 0 {
		return worker.Result{PID: 1, Stdout: fmt.Appendf(nil, `{"index":%d,"square":%d,"pad":%q}`, t.Index, t.Index*t.Index, strings.Repeat("p", f.Pad)), Work: work}, nil
	}
	return worker.Result{PID: 1, Stdout: fmt.Appendf(nil, `{"index":%d,"square":%d}`, t.Index, t.Index*t.Index), Work: work}, nil
}

// planJob writes a manifest of a squares job with the given extra policy
// lines and a stand-in program (an empty WebAssembly module), and plans it.
func planJob(t testing.TB, name string, tasks int, policy string) *job.Job {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "prog.wasm"), []byte("\x00asm\x01\x00\x00\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	leaseTimeout := "lease_timeout = \"2s\"\n" // policy may give its own, first
	if strings.HasPrefix(policy, "lease_timeout") {
		leaseTimeout = ""
	}
	text := fmt.Sprintf(`name = %q
program = "prog.wasm"
[split]
rule = "range"
tasks = %d
[[merge]]
field = "square"
rule = "sum"
[[merge]]
field = "index"
rule = "stats"
[derive]
mean = "index.mean"
[policy]
%s%s
`, name, tasks, leaseTimeout, policy)
	m, err := job.ParseManifest("job.toml", dir, []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	j, err := job.Plan(m)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// solo computes j alone, the reference every pooled result must match.
func solo(t testing.TB, j *job.Job, exec pool.Executor) *pool.Outcome {
	t.Helper()
	out, err := pool.RunSolo(context.Background(), j, exec, pool.SoloConfig{Slots: 2, RunDir: t.TempDir()})
	if err != nil && !errors.Is(err, pool.ErrAllFailed) {
		t.Fatal(err)
	}
	return out
}

// patience is how long a test waits for what it expects before it
// says it never came: what is left of the test binary's -timeout, less
// a minute to report it, so that a busy machine never decides a
// verdict; ten minutes without a timeout.
func patience(t testing.TB) time.Duration {
	if dt, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if d, ok := dt.Deadline(); ok {
			return max(time.Until(d)-time.Minute, time.Minute)
		}
	}
	return 10 * time.Minute
}

func quietLogger(t testing.TB) *slog.Logger {
	if os.Getenv("IDLEPOOL_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// coordinator is a coord.Server serving in the background.
type coordinator struct {
	t       testing.TB
	dataDir string
	listen  string
	url     string
	key     []byte
	stop    context.CancelFunc
	done    chan error
}

// proxy returns a reverse proxy to co, for a test that stands between
// the devices and the pool.
func (co *coordinator) proxy(t testing.TB) *httputil.ReverseProxy {
	t.Helper()
	target, err := url.Parse(co.url)
	if err != nil {
		t.Fatal(err)
	}
	return httputil.NewSingleHostReverseProxy(target)
}

// startCoordinator starts a coordinator with its state in dataDir,
// listening on listen ("127.0.0.1:0" for any free port).
func startCoordinator(t testing.TB, dataDir, listen string) *coordinator {
	t.Helper()
	return startCoordinatorWith(t, dataDir, listen, coord.RelayConfig{})
}

// startCoordinatorWith is startCoordinator with a TURN relay (none when
// relay.Listen is "").
func startCoordinatorWith(t testing.TB, dataDir, listen string, relay coord.RelayConfig) *coordinator {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var srv *coord.Server
	var err error
	for try := 0; ; try++ { // a port just closed may take a moment to be free again
		srv, err = coord.New(ctx, coord.Config{Listen: listen, DataDir: dataDir, Pool: "test", Relay: relay,
			Logger: quietLogger(t).With("side", "coordinator")})
		if err == nil || try == 50 || !strings.Contains(err.Error(), "address already in use") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		cancel()
		t.Fatalf("start coordinator: %v", err)
	}
	c := &coordinator{t: t, dataDir: dataDir, url: srv.URL(), listen: strings.TrimPrefix(srv.URL(), "http://"), key: srv.PublicKey(), stop: cancel, done: make(chan error, 1)}
	go func() { c.done <- srv.Serve(ctx) }()
	t.Cleanup(c.Stop)
	return c
}

// Stop stops the coordinator and waits until it has.
func (c *coordinator) Stop() {
	if c.stop == nil {
		return
	}
	c.stop()
	c.stop = nil
	// As an agent's Stop: a busy machine must not decide the verdict.
	select {
	case err := <-c.done:
		if err != nil {
			c.t.Errorf("coordinator: %v", err)
		}
	case <-time.After(patience(c.t)):
		c.t.Errorf("coordinator did not stop")
	}
}

// device is one agent's identity and state.
type device struct {
	dirs  home.Dirs
	key   *identity.Key
	owner *identity.Key
	local *store.Local
}

func newDevice(t testing.TB, owner *identity.Key) *device {
	t.Helper()
	dirs, err := home.Resolve(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := dirs.Create(); err != nil {
		t.Fatal(err)
	}
	key := mustKey(t)
	if owner == nil {
		owner = mustKey(t)
	}
	local, err := store.OpenLocal(filepath.Join(dirs.Data, "local.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { local.Close() })
	return &device{dirs: dirs, key: key, owner: owner, local: local}
}

func mustKey(t testing.TB) *identity.Key {
	t.Helper()
	k, err := identity.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// httpClient returns a client whose idle connections are closed when the
// test ends, so that no goroutine outlives it.
func httpClient(t testing.TB) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// runningAgent is an agent serving in the background.
type runningAgent struct {
	*agent.Agent
	dev  *device
	stop context.CancelFunc
	done chan error
}

// startAgent starts an agent of dev in the pool at url.
func startAgent(t testing.TB, url string, dev *device, exec pool.Executor, slots int, tamper func(pool.Lease, pool.TaskOutcome) pool.TaskOutcome) *runningAgent {
	t.Helper()
	a, err := agent.New(agent.Config{
		PoolURL: url, Home: dev.dirs, DeviceKey: dev.key, OwnerKey: dev.owner, Slots: slots,
		Executor: exec, Store: dev.local, HTTP: httpClient(t), Tamper: tamper,
		MaxBackoff: 200 * time.Millisecond, IdlePoll: 50 * time.Millisecond, ReceiptPoll: 50 * time.Millisecond,
		Logger: quietLogger(t).With("side", "agent", "peer", dev.key.ID()),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ra := &runningAgent{Agent: a, dev: dev, stop: cancel, done: make(chan error, 1)}
	go func() { ra.done <- a.Serve(ctx) }()
	t.Cleanup(func() { ra.Stop(t) })
	return ra
}

// Stop stops the agent and waits for Serve to return.
func (ra *runningAgent) Stop(t testing.TB) {
	if ra.stop == nil {
		return
	}
	ra.stop()
	ra.stop = nil
	start := time.Now()
	select {
	case err := <-ra.done:
		if err != nil {
			t.Errorf("agent Serve: %v", err)
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Logf("the agent took %v to stop", took.Round(time.Millisecond)) // a busy machine, or a request it waited for
		}
	case <-time.After(patience(t)):
		t.Errorf("agent did not stop")
	}
}

// submitter is the device that submits jobs and merges them.
type submitter struct {
	c   *agent.Client
	dev *device
}

func newSubmitter(t testing.TB, url string, owner *identity.Key) *submitter {
	t.Helper()
	dev := newDevice(t, owner)
	c, err := agent.NewClient(url, dev.key, httpClient(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := agent.PoolKey(ctx, c, dev.dirs.Config); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Register(ctx, dev.owner, "submitter", ""); err != nil {
		t.Fatal(err)
	}
	return &submitter{c: c, dev: dev}
}

// run submits j and follows it to the end.
func (s *submitter) run(t testing.TB, ctx context.Context, j *job.Job) (*pool.Outcome, error) {
	t.Helper()
	if err := s.c.Submit(ctx, j); err != nil {
		t.Fatalf("submit: %v", err)
	}
	return agent.Follow(ctx, s.c, j, agent.FollowConfig{
		Dir: filepath.Join(s.dev.dirs.Data, "merges", j.ID.String()), Poll: 20 * time.Millisecond,
		MaxBackoff: 200 * time.Millisecond, Logger: quietLogger(t).With("side", "merger"),
	})
}

// ledger downloads the pool's whole ledger.
func ledger(t testing.TB, c *agent.Client) []pool.Entry {
	t.Helper()
	var all []pool.Entry
	for {
		page, err := c.Ledger(context.Background(), uint64(len(all)), 0)
		if err != nil {
			t.Fatalf("ledger: %v", err)
		}
		if len(page) == 0 {
			return all
		}
		all = append(all, page...)
	}
}

// settle waits until no contribution of the devices is pending any more
// (their agents have read their receipts), or fails at patience(t): a
// fixed 20 s let a busy machine decide the verdict.
func settle(t testing.TB, devs ...*device) {
	t.Helper()
	deadline := time.Now().Add(patience(t))
	for _, d := range devs {
		for {
			pending, err := d.local.Contributions(context.Background(), store.Filter{State: store.StatePending})
			if err != nil {
				t.Fatal(err)
			}
			if len(pending) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("device %s still has %d pending contributions, e.g. %+v", d.key.ID(), len(pending), pending[0])
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// checkHistory checks that dev's local history agrees with the ledger:
// its confirmed contributions are exactly its receipts, and every
// deviation or unverified entry naming it is a rejected contribution.
func checkHistory(t testing.TB, dev *device, entries []pool.Entry) {
	t.Helper()
	all, err := dev.local.Contributions(context.Background(), store.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	byLease := map[string]store.Contribution{}
	var confirmed int
	for _, c := range all {
		if _, dup := byLease[c.Lease]; dup {
			t.Errorf("lease %s recorded twice", c.Lease)
		}
		byLease[c.Lease] = c
		if c.State == store.StateConfirmed {
			confirmed++
		}
	}
	var receipts int
	for _, e := range entries {
		if e.Peer != dev.key.ID() {
			continue
		}
		c, ok := byLease[e.Lease]
		if !ok {
			t.Errorf("ledger entry %d (%s, task %d) names a lease this device has no record of", e.Seq, e.Kind, e.Task)
			continue
		}
		want := store.StateRejected
		if e.Kind == pool.KindReceipt {
			want = store.StateConfirmed
			receipts++
			if c.Cost != e.Cost {
				t.Errorf("lease %s: cost %v, receipt says %v", e.Lease, c.Cost, e.Cost)
			}
		}
		if c.State != want {
			t.Errorf("lease %s: %s in the ledger, %s in the history (%s)", e.Lease, e.Kind, c.State, c.Reason)
		}
	}
	if confirmed != receipts {
		t.Errorf("device %s: %d confirmed contributions, %d receipts in the ledger", dev.key.ID(), confirmed, receipts)
	}
}

// perReplica counts ledger entries per (job, task, peer): each must be 1.
func checkNoDuplicates(t testing.TB, entries []pool.Entry) {
	t.Helper()
	type key struct {
		job  job.ID
		task int64
		peer string
	}
	seen := map[key]uint64{}
	for _, e := range entries {
		k := key{e.Job, e.Task, e.Peer}
		if s, ok := seen[k]; ok {
			t.Errorf("entries %d and %d both name task %d of peer %s", s, e.Seq, e.Task, e.Peer)
		}
		seen[k] = e.Seq
	}
}

// agentClient returns a client of the pool signing as dev, registered.
func agentClient(t testing.TB, url string, dev *device) *agent.Client {
	t.Helper()
	c, err := agent.NewClient(url, dev.key, httpClient(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Register(context.Background(), dev.owner, "", ""); err != nil {
		t.Fatal(err)
	}
	return c
}

// publishOffer publishes dev's capacity offer (testOffers with the
// default settings) through c, as an agent does before it leases: the
// pool leases nothing to a device without one.
func publishOffer(t testing.TB, c *agent.Client, dev *device) {
	t.Helper()
	publishOfferState(t, c, dev, idle.StateComputing, "")
}

// publishOfferState is publishOffer with the policy's state and hold (or,
// for an agent before holds, its reason in words).
func publishOfferState(t testing.TB, c *agent.Client, dev *device, state idle.State, hold idle.Hold) {
	t.Helper()
	ctx := context.Background()
	info, err := agent.PoolKey(ctx, c, dev.dirs.Config)
	if err != nil {
		t.Fatal(err)
	}
	o := offers.Build(offers.Spec{Pool: info.Pool, PoolURL: c.URL(), Peer: dev.key.ID(), Owner: dev.owner.ID(),
		Capacity:    testOffers{settings: idle.Defaults()}.Capacity(ctx, idle.Signals{}),
		Preferences: offers.Preferences{Global: offers.PoolPreferences{Weight: 1}}, Issued: time.Now(),
		State: state, Hold: hold})
	o.Sign(dev.key)
	if err := c.PutOffer(ctx, o); err != nil {
		t.Fatal(err)
	}
}

func itoa(i int64) string { return strconv.FormatInt(i, 10) }

// testOffers is an agent.OfferSource: a small machine with the settings
// given, the GPUs of the signals, and the donor's preferences.
type testOffers struct {
	settings idle.Settings
	prefs    offers.Preferences
}

func (o testOffers) Capacity(_ context.Context, sig idle.Signals) idle.Capacity {
	m := idle.Machine{OS: runtime.GOOS, Arch: runtime.GOARCH, CPUModel: "test CPU", LogicalCPUs: 4, MemoryTotalMiB: 8192, TimeZone: "UTC"}
	return idle.NewCapacity(m, o.settings, sig.GPUs)
}

func (o testOffers) Preferences(context.Context) offers.Preferences { return o.prefs }
