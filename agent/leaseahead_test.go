package agent_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"idlepool/agent"
	"idlepool/coord"
	"idlepool/pool"
	"idlepool/worker"
)

// countingExec is fakeExec that closes ran once it has been asked to run
// a second task.
type countingExec struct {
	fakeExec
	n    atomic.Int64
	once sync.Once
	ran  chan struct{}
}

func (e *countingExec) Run(ctx context.Context, req worker.Request) (worker.Result, error) {
	if e.n.Add(1) == 2 {
		e.once.Do(func() { close(e.ran) })
	}
	return e.fakeExec.Run(ctx, req)
}

// workRecorder is an http.RoundTripper that records the POST /v1/work
// bodies an agent sends, and holds the first one that carries a result
// until hold is closed (or patience runs out: then the test fails).
type workRecorder struct {
	next http.RoundTripper
	hold <-chan struct{}
	t    *testing.T

	mu       sync.Mutex
	bodies   []coord.WorkRequest
	held     bool
	timedOut bool
}

func (w *workRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost && r.URL.Path == "/v1/work" && r.Body != nil {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		var wr coord.WorkRequest
		if err := decodeWorkBody(r.Header.Get("Content-Type"), b, &wr); err != nil {
			w.t.Errorf("POST /v1/work body: %v", err)
		}
		w.mu.Lock()
		w.bodies = append(w.bodies, wr)
		first := len(wr.Results) > 0 && !w.held
		w.held = w.held || first
		w.mu.Unlock()
		if first {
			select {
			case <-w.hold:
			case <-time.After(2 * time.Minute): // patience: the next task never started
				w.mu.Lock()
				w.timedOut = true
				w.mu.Unlock()
			}
		}
	}
	return w.next.RoundTrip(r)
}

// leaseAheadAgents starts n agents with one slot each and lease-ahead
// ahead, each running tasks with the executor mk gives it and sending
// its HTTP through a workRecorder that holds results until the channel
// mk gives with it is closed; they stop with the test.
func leaseAheadAgents(t *testing.T, url string, n, ahead int, mk func() (pool.Executor, chan struct{})) []*workRecorder {
	t.Helper()
	var recs []*workRecorder
	for i := range n {
		dev := newDevice(t, nil)
		exec, hold := mk()
		rec := &workRecorder{next: http.DefaultTransport.(*http.Transport).Clone(), hold: hold, t: t}
		recs = append(recs, rec)
		startAgentWith(t, url, dev, exec, func(c *agent.Config) {
			c.LeaseAhead = ahead
			c.HTTP = &http.Client{Transport: rec, Timeout: 5 * time.Minute}
			c.Logger = c.Logger.With("n", i)
		})
	}
	return recs
}

// runAllOK submits a job of tasks empty tasks named name and fails the
// test unless every task is accepted.
func runAllOK(t *testing.T, url, name string, tasks int64) {
	t.Helper()
	sub := newSubmitter(t, url, nil)
	j := planJob(t, name, int(tasks), `lease_timeout = "10m"`)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := sub.run(t, ctx, j)
	if err != nil {
		t.Fatal(err)
	}
	if out.OK != tasks {
		t.Fatalf("%d of %d tasks ok", out.OK, tasks)
	}
}

// An agent that leases ahead asks for that many tasks at once and
// computes the next while the result of the one before is on its way:
// its first result's request is held until the next task has started,
// which an agent that waits for each answer never does. The job still
// ends with every task accepted, by two agents with one slot each.
func TestLeaseAhead(t *testing.T) {
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	const ahead, tasks = 4, 8
	recs := leaseAheadAgents(t, co.url, 2, ahead, func() (pool.Executor, chan struct{}) {
		exec := &countingExec{ran: make(chan struct{})}
		return exec, exec.ran
	})
	runAllOK(t, co.url, "ahead", tasks)
	for i, rec := range recs {
		rec.mu.Lock()
		asked, results := 0, 0
		for _, b := range rec.bodies {
			asked = max(asked, b.Lease)
			results += len(b.Results)
		}
		if rec.timedOut {
			t.Errorf("agent %d waited for its first result's answer before computing its next lease", i)
		}
		if asked != ahead {
			t.Errorf("agent %d asked for at most %d leases at once, want %d", i, asked, ahead)
		}
		if results == 0 {
			t.Errorf("agent %d sent no result through POST /v1/work", i)
		}
		rec.mu.Unlock()
	}
}

var _ pool.Executor = (*countingExec)(nil)

// An agent left to choose (LeaseAhead 0) asks for one task at first and,
// once its slot's tasks turn out to take milliseconds, for
// MaxAutoLeaseAhead at once.
func TestLeaseAheadAuto(t *testing.T) {
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	const tasks = 12
	open := make(chan struct{})
	close(open)
	recs := leaseAheadAgents(t, co.url, 2, 0, func() (pool.Executor, chan struct{}) { return &fakeExec{}, open })
	runAllOK(t, co.url, "auto", tasks)
	for i, rec := range recs {
		rec.mu.Lock()
		var asked []int
		for _, b := range rec.bodies {
			if b.Lease > 0 {
				asked = append(asked, b.Lease)
			}
		}
		rec.mu.Unlock()
		if len(asked) == 0 || asked[0] != 1 || !slices.Contains(asked, agent.MaxAutoLeaseAhead) {
			t.Errorf("agent %d asked for %v leases at once, want 1 first, then %d", i, asked, agent.MaxAutoLeaseAhead)
		}
	}
}

// Left to choose, a slot leases one task at first and after a task of a
// second or more; after a shorter task, as many as fit into a second at
// that task's time, from AutoLeaseAhead to MaxAutoLeaseAhead. A
// configured LeaseAhead is kept whatever the task time.
func TestLeaseAheadByTaskTime(t *testing.T) {
	newAgent := func(ahead int) *agent.Agent {
		dev := newDevice(t, nil)
		a, err := agent.New(agent.Config{
			PoolURL: "http://127.0.0.1:1", Home: dev.dirs, DeviceKey: dev.key, OwnerKey: dev.owner, Slots: 1, LeaseAhead: ahead,
			Executor: &fakeExec{}, Store: newMemStore(), Logger: quietLogger(t),
		})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	auto, fixed := newAgent(0), newAgent(3)
	for _, tc := range []struct {
		took        time.Duration
		auto, fixed int
	}{
		{-1, 1, 3},
		{0, agent.MaxAutoLeaseAhead, 3},
		{2 * time.Millisecond, agent.MaxAutoLeaseAhead, 3},
		{62500 * time.Microsecond, agent.MaxAutoLeaseAhead, 3},
		{100 * time.Millisecond, 10, 3},
		{200 * time.Millisecond, 5, 3},
		{250 * time.Millisecond, agent.AutoLeaseAhead, 3},
		{999 * time.Millisecond, agent.AutoLeaseAhead, 3},
		{time.Second, 1, 3},
		{time.Minute, 1, 3},
	} {
		if got := agent.LeaseAhead(auto, tc.took); got != tc.auto {
			t.Errorf("LeaseAhead 0, a task of %v: %d leases at once, want %d", tc.took, got, tc.auto)
		}
		if got := agent.LeaseAhead(fixed, tc.took); got != tc.fixed {
			t.Errorf("LeaseAhead 3, a task of %v: %d leases at once, want %d", tc.took, got, tc.fixed)
		}
	}
}
