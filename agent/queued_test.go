package agent_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"idlepool/agent"
	"idlepool/coord"
	"idlepool/worker"
)

// grantWatcher is an http.RoundTripper that notes the leases of the
// first grant an agent receives (POST /v1/work answered with leases)
// and closes queuedBeat once a heartbeat of that grant's second lease
// has been answered.
type grantWatcher struct {
	next http.RoundTripper
	t    *testing.T

	mu         sync.Mutex
	grant      []string // the first grant's lease IDs, in order
	queuedBeat chan struct{}
	beaten     bool
}

func (g *grantWatcher) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := g.next.RoundTrip(r)
	if err != nil || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/work":
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		resp.Body = io.NopCloser(bytes.NewReader(b))
		var wr coord.WorkResponse
		if err := decodeWorkBody(resp.Header.Get("Content-Type"), b, &wr); err != nil {
			g.t.Errorf("POST /v1/work answer: %v", err)
		}
		g.mu.Lock()
		if g.grant == nil && len(wr.Leases) > 0 {
			for _, l := range wr.Leases {
				g.grant = append(g.grant, l.Lease)
			}
		}
		g.mu.Unlock()
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/heartbeat"):
		g.mu.Lock()
		if len(g.grant) > 1 && r.URL.Path == "/v1/leases/"+g.grant[1]+"/heartbeat" && !g.beaten {
			g.beaten = true
			close(g.queuedBeat)
		}
		g.mu.Unlock()
	}
	return resp, nil
}

// blockFirstExec is fakeExec whose first task does not end until
// release is closed (or patience runs out: then timedOut is set).
type blockFirstExec struct {
	fakeExec
	release  <-chan struct{}
	n        atomic.Int64
	timedOut atomic.Bool
}

func (e *blockFirstExec) Run(ctx context.Context, req worker.Request) (worker.Result, error) {
	if e.n.Add(1) == 1 {
		select {
		case <-e.release:
		case <-time.After(2 * time.Minute): // patience: the waiting lease was never extended
			e.timedOut.Store(true)
		case <-ctx.Done():
		}
	}
	return e.fakeExec.Run(ctx, req)
}

// A lease that waits behind the one its slot computes (LeaseAhead) is
// extended while it waits: the first task does not end until the pool
// has answered a heartbeat of the second lease of the same grant, which
// an agent that extends only running tasks' leases never sends. That
// lease's task is then computed, not dropped.
func TestQueuedLeaseExtended(t *testing.T) {
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	dev := newDevice(t, nil)
	watch := &grantWatcher{next: http.DefaultTransport.(*http.Transport).Clone(), t: t, queuedBeat: make(chan struct{})}
	exec := &blockFirstExec{release: watch.queuedBeat}
	startAgentWith(t, co.url, dev, exec, func(c *agent.Config) {
		c.LeaseAhead = 2
		c.HTTP = &http.Client{Transport: watch, Timeout: 5 * time.Minute}
	})
	sub := newSubmitter(t, co.url, nil)
	// A heartbeat comes at a third of the lease's time: about a second.
	j := planJob(t, "queued", 2, `lease_timeout = "3s"`)
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer scancel()
	if err := sub.c.Submit(sctx, j); err != nil {
		t.Fatal(err)
	}
	for exec.n.Load() < 2 && !exec.timedOut.Load() && sctx.Err() == nil { // patience
		time.Sleep(10 * time.Millisecond)
	}
	if exec.timedOut.Load() {
		t.Fatal("the lease waiting behind the running one was not extended while it waited")
	}
	if n := exec.n.Load(); n < 2 {
		t.Fatalf("%d tasks computed, want the waiting lease's too", n)
	}
}
