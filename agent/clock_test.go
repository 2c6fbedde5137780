package agent_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"idlepool/agent"
	"idlepool/pool"
	"idlepool/store"
)

// startAgentWith starts an agent of dev in the pool at url with its
// configuration changed by adjust.
func startAgentWith(t *testing.T, url string, dev *device, exec pool.Executor, adjust func(*agent.Config)) *runningAgent {
	t.Helper()
	cfg := agent.Config{
		PoolURL: url, Home: dev.dirs, DeviceKey: dev.key, OwnerKey: dev.owner, Slots: 1,
		Executor: exec, Store: dev.local, HTTP: httpClient(t),
		MaxBackoff: 200 * time.Millisecond, IdlePoll: 50 * time.Millisecond, ReceiptPoll: 50 * time.Millisecond,
		Logger: quietLogger(t).With("side", "agent"),
	}
	adjust(&cfg)
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ra := &runningAgent{Agent: a, dev: dev, stop: cancel, done: make(chan error, 1)}
	go func() { ra.done <- a.Serve(ctx) }()
	t.Cleanup(func() { ra.Stop(t) })
	return ra
}

// skewed is a device clock off the real one by off.
func skewed(off time.Duration) func() time.Time {
	return func() time.Time { return time.Now().Add(off) }
}

// hasNotice reports whether one of the status's notices contains want.
func hasNotice(st agent.AgentStatus, want string) bool {
	for _, n := range st.Notices(time.Local, time.Now()) {
		if strings.Contains(n, want) {
			return true
		}
	}
	return false
}

func TestAgentWorksWithSkewedClock(t *testing.T) {
	// A device whose clock is 7 minutes behind the pool's used to be
	// refused (401) and `join` exited. It measures the offset from the
	// coordinator's answers, signs with the pool's time, computes, and
	// says how far off its clock is.
	for _, off := range []time.Duration{-7 * time.Minute, 26 * time.Hour} {
		t.Run(off.String(), func(t *testing.T) {
			co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
			dev := newDevice(t, nil)
			ra := startAgentWith(t, co.url, dev, &fakeExec{}, func(c *agent.Config) { c.Now = skewed(off) })
			j := planJob(t, "squares-skew", 6, "redundancy = 1\nquorum = 1")
			sub := newSubmitter(t, co.url, nil)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			out, err := sub.run(t, ctx, j)
			if err != nil {
				t.Fatalf("job with a device %v off: %v", off, err)
			}
			same(t, out, solo(t, j, &fakeExec{}))
			st := ra.Status()
			if got := time.Duration(st.ClockOffsetMS) * time.Millisecond; (got + off).Abs() > 5*time.Second {
				t.Errorf("measured offset %v, want about %v", got, -off)
			}
			want := agent.ClockWords(-off)
			if !hasNotice(st, want) || st.ClockRefused {
				t.Errorf("notices %q (refused %t), want one with %q", st.Notices(time.Local, time.Now()), st.ClockRefused, want)
			}
		})
	}
}

func TestAgentWaitsOutARefusedClock(t *testing.T) {
	// When the pool refuses the device's clock although it signs with the
	// time it measured (here a proxy rewrites the Date header, so that
	// the offset cannot be measured), the agent stays up, says so, and
	// retries; once the pool accepts it again it computes.
	const off = -7 * time.Minute
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	var lying atomic.Bool
	lying.Store(true)
	proxy := co.proxy(t)
	proxy.ModifyResponse = func(r *http.Response) error {
		if lying.Load() {
			r.Header.Set("Date", time.Now().Add(off).UTC().Format(http.TimeFormat))
		}
		return nil
	}
	front := httptest.NewServer(proxy)
	t.Cleanup(front.Close)
	dev := newDevice(t, nil)
	ra := startAgentWith(t, front.URL, dev, &fakeExec{}, func(c *agent.Config) { c.Now = skewed(off) })
	waitFor(t, "the status says the pool refuses the clock", func() bool {
		st := ra.Status()
		return st.ClockRefused && hasNotice(st, "refuses this device's clock")
	})
	select {
	case err := <-ra.done:
		t.Fatalf("the agent stopped: %v", err)
	default:
	}
	lying.Store(false)
	j := planJob(t, "squares-refused-clock", 4, "redundancy = 1\nquorum = 1")
	sub := newSubmitter(t, co.url, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := sub.run(t, ctx, j)
	if err != nil {
		t.Fatalf("job after the clock was accepted: %v", err)
	}
	same(t, out, solo(t, j, &fakeExec{}))
	if st := ra.Status(); st.ClockRefused {
		t.Errorf("still refused after the pool accepted the device: %+v", st)
	}
}

func TestAgentAbandonsTaskWhenPoolIsGone(t *testing.T) {
	// The pool goes away for good while a task runs: once its lease has
	// run out and a grace period passed, the agent stops the task,
	// records it as abandoned (no result, no receipt expected), says so,
	// and stays up.
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	dev := newDevice(t, nil)
	exec := &fakeExec{Block: make(chan struct{})}
	defer close(exec.Block)
	ra := startAgentWith(t, co.url, dev, exec, func(c *agent.Config) { c.AbandonAfter = 200 * time.Millisecond })
	j := planJob(t, "pi", 1, "redundancy = 1\nquorum = 1")
	sub := newSubmitter(t, co.url, nil)
	if err := sub.c.Submit(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the task runs", func() bool { return len(ra.Running()) == 1 })
	co.Stop()
	waitFor(t, "the task is abandoned", func() bool { return len(ra.Status().Abandoned) == 1 })
	st := ra.Status()
	if len(st.Running) != 0 {
		t.Errorf("still running after it was abandoned: %+v", st.Running)
	}
	if st.UnreachableSince.IsZero() {
		t.Errorf("the status does not say since when the pool is unreachable: %+v", st)
	}
	// The words with fixed times are checked in cmd/idlepool's
	// TestPrintAgent; here, that the notice is there.
	if want := "task 0 of job pi abandoned: pool unreachable since "; !hasNotice(st, want) {
		t.Errorf("notices %q, want one starting %q", st.Notices(time.Local, time.Now()), want)
	}
	all, err := dev.local.Contributions(context.Background(), store.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 || all[0].State != store.StateRejected || !all[0].Acknowledged ||
		!strings.Contains(all[0].Reason, "abandoned: pool unreachable since") || all[0].Result != nil {
		t.Fatalf("local record %+v, want one rejected, acknowledged contribution without a result saying it was abandoned", all)
	}
	select {
	case err := <-ra.done:
		t.Fatalf("the agent stopped: %v", err)
	default:
	}
}

// A device whose job's files are refused for a moment (the pool answers
// 503 "no_leader" while the node that serves every shard's files changes
// hands) tries the job again within the lease and computes it, instead
// of handing the task back at once: the hand-back is refused by the same
// take-over, and the task then waits out its lease (minutes: a person
// trying a divided pool saw a job take 347 s instead of seconds).
func TestAgentWaitsOutATakeOverOfItsJobsFiles(t *testing.T) {
	t.Parallel()
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	pass := co.proxy(t)
	var refuse, releases atomic.Int64 // file requests the "take-over" refuses yet; hand-backs seen
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/release") {
			releases.Add(1)
		}
		if r.Method == http.MethodGet && (strings.HasPrefix(r.URL.Path, "/v1/chunks/") || strings.HasPrefix(r.URL.Path, "/v1/blobs/")) && refuse.Add(-1) >= 0 {
			refuseNoLeader(w, 0)
			return
		}
		pass.ServeHTTP(w, r)
	}))
	defer front.Close()
	refuse.Store(2)
	dev := newDevice(t, nil)
	startAgentWith(t, front.URL, dev, &fakeExec{}, func(c *agent.Config) {})
	// A lease of minutes, as a pool's (the harness's default is 2 s):
	// the device's retries are bounded by the lease, not by how fast a
	// busy machine heartbeats.
	j := planJob(t, "squares-take-over", 3, "lease_timeout = \"5m\"\nredundancy = 1\nquorum = 1")
	sub := newSubmitter(t, co.url, nil)
	ctx, cancel := context.WithTimeout(context.Background(), patience(t))
	defer cancel()
	out, err := sub.run(t, ctx, j)
	if err != nil {
		t.Fatalf("a job whose files were refused for a moment: %v", err)
	}
	same(t, out, solo(t, j, &fakeExec{}))
	if n := refuse.Load(); n >= 0 {
		t.Fatalf("the front refused %d file requests fewer than it was set to: the job's files were not fetched through it", n+1)
	}
	if n := releases.Load(); n != 0 {
		t.Errorf("the device handed %d tasks back; want none: the job's files were to be fetched again", n)
	}
}
