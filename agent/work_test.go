package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"idlepool/agent"
	"idlepool/coord"
	"idlepool/coord/api"
	"idlepool/job"
	"idlepool/pool"
)

// gate is an http.RoundTripper in front of a real coordinator: it counts
// requests by method and path, can hold the next POST /v1/work until
// released, and can make the coordinator look like one of API version 1
// (GET /v1/pool says 1, POST /v1/work is 404 as on such a coordinator).
//
// With version set (and old not), GET /v1/pool says that API version
// instead. POST /v1/work is counted by Content-Type and Accept in
// ctypes. With refuseCBOR set, a POST /v1/work in CBOR is answered as a
// coordinator of version 7 answers it (400: it reads the body as JSON);
// with garbleCBOR, a CBOR answer to one has its body replaced by bytes
// that do not decode.
type gate struct {
	next       http.RoundTripper
	old        bool
	version    int
	refuseCBOR bool
	garbleCBOR bool
	// refuseMAC answers a request with a MAC 401, as a coordinator
	// older than api.MACAPIVersion does.
	refuseMAC bool

	// auth counts requests by key and how they were authenticated
	// ("sig", "mac" or "none").
	auth map[string]int

	mu      sync.Mutex
	counts  map[string]int
	ctypes  map[string]int
	hold    chan struct{} // non-nil: the next POST /v1/work waits for it to close
	holding chan struct{} // closed when a request is held
}

func (g *gate) RoundTrip(req *http.Request) (*http.Response, error) {
	key := req.Method + " " + req.URL.Path
	if req.URL.Path != "/v1/pool" && req.URL.Path != "/v1/work" && req.URL.Path != "/v1/leases" && req.URL.Path != "/v1/offers" {
		key = req.Method + " other"
	}
	kind := "none"
	switch h := req.Header.Get("Authorization"); {
	case strings.Contains(h, "mac="):
		kind = "mac"
	case strings.Contains(h, "sig="):
		kind = "sig"
	}
	if key == "POST other" && req.URL.Path == "/v1/peers" {
		key = "POST /v1/peers"
	}
	g.mu.Lock()
	g.counts[key]++
	if g.auth == nil {
		g.auth = map[string]int{}
	}
	g.auth[key+" "+kind]++
	refuseMAC := g.refuseMAC && kind == "mac"
	hold, holding := g.hold, g.holding
	if key == "POST /v1/work" {
		g.hold = nil
		if g.ctypes == nil {
			g.ctypes = map[string]int{}
		}
		g.ctypes[req.Header.Get("Content-Type")+" accept "+req.Header.Get("Accept")]++
	}
	g.mu.Unlock()
	g.mu.Lock()
	refuse := g.refuseCBOR && key == "POST /v1/work" && req.Header.Get("Content-Type") == api.CBORContentType
	g.mu.Unlock()
	switch {
	case refuseMAC:
		return &http.Response{StatusCode: http.StatusUnauthorized, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(bytes.NewReader([]byte(`{"error":"unauthorized: unknown Authorization parameter \"mac\"","code":"unauthorized"}`)))}, nil
	case refuse:
		return &http.Response{StatusCode: http.StatusBadRequest, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(bytes.NewReader([]byte(`{"error":"the body is not a JSON object","code":"bad_request"}`)))}, nil
	case g.old && key == "POST /v1/work":
		return &http.Response{StatusCode: http.StatusNotFound, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(bytes.NewReader([]byte(`{"error":"no such endpoint: POST /v1/work (see docs/api.md)","code":"not_found"}`)))}, nil
	case key == "POST /v1/work" && hold != nil:
		close(holding)
		<-hold
	}
	resp, err := g.next.RoundTrip(req)
	g.mu.Lock()
	garble := g.garbleCBOR
	g.mu.Unlock()
	if err == nil && garble && key == "POST /v1/work" && resp.Header.Get("Content-Type") == api.CBORContentType {
		resp.Body.Close()
		resp.Body, resp.ContentLength = io.NopCloser(bytes.NewReader([]byte{0xff})), 1
		resp.Header.Set("Content-Length", "1")
		return resp, nil
	}
	if err != nil || !g.old && g.version == 0 || key != "GET /v1/pool" {
		return resp, err
	}
	var info coord.PoolInfo
	err = json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	info.Version = 1
	if !g.old {
		info.Version = g.version
	}
	b, _ := json.Marshal(info)
	resp.Body, resp.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
	resp.Header.Del("Content-Length")
	return resp, nil
}

// decodeWorkBody decodes b, a POST /v1/work body or answer, into v: in
// CBOR when ctype (its Content-Type) says so, else in JSON.
func decodeWorkBody(ctype string, b []byte, v any) error {
	if ctype == api.CBORContentType {
		return api.UnmarshalCBORAnswer(b, v)
	}
	return json.Unmarshal(b, v)
}

func (g *gate) count(key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.counts[key]
}

// workJob plans a job of n tasks at quorum 2 whose leases last long
// enough for a slow test machine.
func workJob(t *testing.T, n int) *job.Job {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "prog.wasm"), []byte("\x00asm\x01\x00\x00\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := job.ParseManifest("job.toml", dir, fmt.Appendf(nil, `name = "work"
program = "prog.wasm"
[split]
rule = "range"
tasks = %d
[[merge]]
field = "n"
rule = "sum"
[policy]
lease_timeout = "10m"
`, n))
	if err != nil {
		t.Fatal(err)
	}
	j, err := job.Plan(m)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// poolWithJob starts a real coordinator and submits a job of n tasks
// (workJob) to it with a submitter, which it returns.
func poolWithJob(t *testing.T, n int) (*coordinator, *submitter, *job.Job) {
	t.Helper()
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	sub := newSubmitter(t, co.url, nil)
	j := workJob(t, n)
	if err := sub.c.Submit(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	return co, sub, j
}

// gatedClient returns a registered client of dev whose requests pass g,
// with its offer published.
func gatedClient(t *testing.T, url string, dev *device, g *gate) *agent.Client {
	t.Helper()
	hc := httpClient(t)
	g.next, g.counts = hc.Transport, map[string]int{}
	hc.Transport = g
	c, err := agent.NewClient(url, dev.key, hc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Register(context.Background(), dev.owner, "", ""); err != nil {
		t.Fatal(err)
	}
	publishOffer(t, c, dev)
	return c
}

func submission(task int64) pool.Submission {
	r := fmt.Appendf(nil, `{"n":%d}`, task)
	return pool.Submission{Digest: pool.ReplicaDigest(r, false, ""), Result: r}
}

// TestClientBatchesWork checks that results sent while a request is in
// flight travel together in the next one: eight results in two requests,
// each taken by the coordinator. Eight is what a device without a record
// may hold of other owners' jobs (pool.DefaultMaxUnverified).
func TestClientBatchesWork(t *testing.T) {
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	sub := newSubmitter(t, co.url, nil)
	j := workJob(t, pool.DefaultMaxUnverified)
	ctx := context.Background()
	if err := sub.c.Submit(ctx, j); err != nil {
		t.Fatal(err)
	}
	g := &gate{}
	c := gatedClient(t, co.url, newDevice(t, nil), g)
	leases, err := c.Lease(ctx, 16)
	if err != nil {
		t.Fatal(err)
	}
	if len(leases) != pool.DefaultMaxUnverified || g.count("POST /v1/work") != 1 || g.count("POST /v1/leases") != 0 {
		t.Fatalf("%d leases in %d POST /v1/work and %d POST /v1/leases; want %d in one POST /v1/work",
			len(leases), g.count("POST /v1/work"), g.count("POST /v1/leases"), pool.DefaultMaxUnverified)
	}

	g.mu.Lock()
	g.hold, g.holding = make(chan struct{}), make(chan struct{})
	hold, holding := g.hold, g.holding
	g.mu.Unlock()
	errs := make(chan error, len(leases))
	send := func(l pool.Lease) { errs <- c.SendResult(ctx, l.ID, submission(l.Task)) }
	go send(leases[0])
	<-holding // the first result is in flight
	for _, l := range leases[1:] {
		go send(l)
	}
	for end := time.Now().Add(2 * time.Minute); agent.QueuedWork(c) < len(leases)-1; {
		if time.Now().After(end) {
			t.Fatalf("%d results queued, want %d", agent.QueuedWork(c), len(leases)-1)
		}
		time.Sleep(time.Millisecond)
	}
	close(hold)
	for range leases {
		if err := <-errs; err != nil {
			t.Errorf("send result: %v", err)
		}
	}
	if n := g.count("POST /v1/work"); n != 3 {
		t.Errorf("%d POST /v1/work in all, want 3 (the leases, the first result, the other seven)", n)
	}
	st, err := sub.c.Status(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st.Waiting != pool.DefaultMaxUnverified {
		t.Errorf("%d tasks hold a returned result, want %d", st.Waiting, pool.DefaultMaxUnverified)
	}
	// A result sent again, and a refused one, each get their answer.
	if err := c.SendResult(ctx, leases[0].ID, submission(leases[0].Task)); err != nil {
		t.Errorf("result sent again: %v", err)
	}
	if err := c.SendResult(ctx, leases[1].ID, submission(leases[1].Task+1)); !errors.Is(err, agent.ErrConflict) {
		t.Errorf("another result for a returned lease: %v, want ErrConflict", err)
	}
}

// TestClientWorkCBOR: the client sends POST /v1/work in CBOR, asking for
// a CBOR answer, to a coordinator of API version 8 or later, and in JSON
// to one of version 7, which would read a CBOR body as JSON and refuse
// it; it authenticates its requests with a MAC under its request key
// with the pool to one of api.MACAPIVersion or later (once it has asked
// the version), and signs them for older ones, and its registration
// always. Each coordinator takes the results and grants the leases.
func TestClientWorkCBOR(t *testing.T) {
	co, _, j := poolWithJob(t, 4)
	ctx := context.Background()
	const inCBOR = "application/cbor accept application/cbor, application/json;q=0.5"
	for _, tc := range []struct {
		version    int
		want, auth string
	}{
		{0, inCBOR, "mac"}, // the coordinator's own, api.APIVersion
		{api.MACAPIVersion - 1, inCBOR, "sig"},
		{7, "application/json accept ", "sig"},
	} {
		g := &gate{version: tc.version}
		c := gatedClient(t, co.url, newDevice(t, nil), g)
		first, err := c.Lease(ctx, 1)
		if err != nil || len(first) != 1 {
			t.Fatalf("version %d: Lease = %v, %v", tc.version, first, err)
		}
		next, err := c.SendResultAndLease(ctx, first[0].ID, submission(first[0].Task), 1)
		if err != nil || len(next) != 1 || next[0].Job != j.ID {
			t.Fatalf("version %d: SendResultAndLease = %+v, %v; want a lease of the job", tc.version, next, err)
		}
		// The result was taken: sending another for it is a conflict.
		if _, err := c.SendResultAndLease(ctx, first[0].ID, submission(first[0].Task+1), 0); !errors.Is(err, agent.ErrConflict) {
			t.Errorf("version %d: another result for a returned lease: %v, want ErrConflict", tc.version, err)
		}
		g.mu.Lock()
		if g.ctypes[tc.want] != g.counts["POST /v1/work"] || g.ctypes[tc.want] < 3 {
			t.Errorf("version %d: POST /v1/work by Content-Type and Accept %v, want all %q", tc.version, g.ctypes, tc.want)
		}
		if n := g.auth["POST /v1/work "+tc.auth]; n != g.counts["POST /v1/work"] {
			t.Errorf("version %d: requests by how they were authenticated %v, want every POST /v1/work by %s", tc.version, g.auth, tc.auth)
		}
		if g.auth["POST /v1/peers sig"] != 1 || g.auth["POST /v1/peers mac"] != 0 {
			t.Errorf("version %d: requests by how they were authenticated %v, want the registration signed", tc.version, g.auth)
		}
		g.mu.Unlock()
	}
}

// TestClientWorkCBORRefused: when a coordinator that says version 8
// refuses a CBOR request whole (the node in charge of a cluster being
// upgraded is older), the client sends it again at once in JSON, and
// keeps to JSON for a while, then tries CBOR again.
func TestClientWorkCBORRefused(t *testing.T) {
	co, _, _ := poolWithJob(t, 4)
	ctx := context.Background()
	g := &gate{refuseCBOR: true}
	c := gatedClient(t, co.url, newDevice(t, nil), g)
	now := setClockByHand(c)
	next := leaseAndReturn(t, ctx, c)
	const inCBOR = "application/cbor accept application/cbor, application/json;q=0.5"
	const inJSON = "application/json accept "
	g.mu.Lock()
	if g.ctypes[inCBOR] != 1 || g.ctypes[inJSON] != 2 {
		t.Errorf("POST /v1/work by Content-Type and Accept %v, want one in CBOR, then each in JSON", g.ctypes)
	}
	g.refuseCBOR = false // the upgrade is over
	g.mu.Unlock()
	now.Add(int64(11 * time.Minute))
	if err := c.SendResult(ctx, next.ID, submission(next.Task)); err != nil {
		t.Fatalf("SendResult: %v", err)
	}
	g.mu.Lock()
	if g.ctypes[inCBOR] < 2 {
		t.Errorf("POST /v1/work by Content-Type and Accept %v, want CBOR again after %v", g.ctypes, 11*time.Minute)
	}
	g.mu.Unlock()
}

// TestClientWorkCBORUnreadable: a CBOR answer the client cannot decode
// is an error that the task loop retries (ErrUnavailable), and the
// client turns to JSON, which it reads.
func TestClientWorkCBORUnreadable(t *testing.T) {
	co, _, _ := poolWithJob(t, 4)
	ctx := context.Background()
	g := &gate{garbleCBOR: true}
	c := gatedClient(t, co.url, newDevice(t, nil), g)
	if _, err := c.Lease(ctx, 1); !errors.Is(err, agent.ErrUnavailable) {
		t.Fatalf("Lease with an unreadable answer: %v, want ErrUnavailable", err)
	}
	if l, err := c.Lease(ctx, 1); err != nil || len(l) != 1 {
		t.Fatalf("Lease after it = %v, %v; want a lease, in JSON", l, err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ctypes["application/cbor accept application/cbor, application/json;q=0.5"] != 1 || g.ctypes["application/json accept "] != 1 {
		t.Errorf("POST /v1/work by Content-Type and Accept %v, want one in CBOR, then one in JSON", g.ctypes)
	}
}

// TestClientSpeaksVersion1 checks that a client in front of a coordinator
// of API version 1 leases and sends results with the version 1 endpoints.
func TestClientSpeaksVersion1(t *testing.T) {
	co, sub, j := poolWithJob(t, 2)
	ctx := context.Background()
	g := &gate{old: true}
	c := gatedClient(t, co.url, newDevice(t, nil), g)
	leases, err := c.Lease(ctx, 4)
	if err != nil || len(leases) != 2 {
		t.Fatalf("lease: %d leases, %v", len(leases), err)
	}
	looks := g.count("GET /v1/pool")
	for _, l := range leases {
		if err := c.SendResult(ctx, l.ID, submission(l.Task)); err != nil {
			t.Errorf("send result: %v", err)
		}
	}
	if g.count("POST /v1/work") != 0 || g.count("POST /v1/leases") != 1 || g.count("GET /v1/pool") != looks {
		t.Errorf("requests %v, want version 1 endpoints only and one look at the version", g.counts)
	}
	st, err := sub.c.Status(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st.Waiting != 2 {
		t.Errorf("%d tasks hold a returned result, want 2", st.Waiting)
	}
}

// TestClientResultAndNextLease checks that a result sent with
// SendResultAndLease brings the task loop's next lease in the same
// request, that a refused result still hands over the lease granted, and
// that a coordinator of API version 1 gets the result alone.
func TestClientResultAndNextLease(t *testing.T) {
	co, _, j := poolWithJob(t, 4)
	ctx := context.Background()
	g := &gate{}
	c := gatedClient(t, co.url, newDevice(t, nil), g)
	first, err := c.Lease(ctx, 1)
	if err != nil || len(first) != 1 {
		t.Fatalf("Lease = %v, %v", first, err)
	}
	before := g.count("POST /v1/work")
	next, err := c.SendResultAndLease(ctx, first[0].ID, submission(first[0].Task), 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(next) != 1 || next[0].Task == first[0].Task || next[0].Job != j.ID {
		t.Fatalf("leases with the result: %+v, want one of another task of the job", next)
	}
	if n := g.count("POST /v1/work") - before; n != 1 {
		t.Errorf("%d POST /v1/work for a result and the next lease, want 1", n)
	}
	// A result the coordinator refuses (another digest for a lease that
	// returned one) still hands over the lease granted beside it.
	again, err := c.SendResultAndLease(ctx, first[0].ID, submission(first[0].Task+1), 1)
	if !errors.Is(err, agent.ErrConflict) {
		t.Errorf("refused result: %v, want ErrConflict", err)
	}
	if len(again) != 1 {
		t.Errorf("%d leases beside a refused result, want 1", len(again))
	}

	// API version 1: the result alone, through its own endpoint.
	old := &gate{old: true}
	c1 := gatedClient(t, co.url, newDevice(t, nil), old)
	l1, err := c1.Lease(ctx, 1)
	if err != nil || len(l1) != 1 {
		t.Fatalf("version 1 Lease = %v, %v", l1, err)
	}
	got, err := c1.SendResultAndLease(ctx, l1[0].ID, submission(l1[0].Task), 1)
	if err != nil || got != nil {
		t.Errorf("version 1 SendResultAndLease = %v, %v; want no leases, no error", got, err)
	}
	if n := old.count("POST /v1/work"); n != 0 {
		t.Errorf("%d POST /v1/work to a version 1 coordinator", n)
	}
}

// TestClientRequestMACRefused: when a coordinator that says
// api.MACAPIVersion refuses a request with a MAC (401: a node of an
// older version in charge of a cluster being upgraded), the client
// registers again and asks once more, as for any 401, then signs the
// request, and signs every request for a while, then asks the pool's
// version and key again and goes back to MACs.
func TestClientRequestMACRefused(t *testing.T) {
	co, _, _ := poolWithJob(t, 4)
	ctx := context.Background()
	g := &gate{refuseMAC: true}
	c := gatedClient(t, co.url, newDevice(t, nil), g)
	g.mu.Lock()
	asked := g.counts["GET /v1/pool"] // by joining
	g.mu.Unlock()
	now := setClockByHand(c)
	next := leaseAndReturn(t, ctx, c)
	g.mu.Lock()
	if g.auth["POST /v1/work mac"] != 2 || g.auth["POST /v1/work sig"] != 2 || g.auth["POST /v1/peers sig"] != 2 {
		t.Errorf("requests by how they were authenticated %v, want two POST /v1/work with a MAC (refused, then again after registering again), then each signed", g.auth)
	}
	g.refuseMAC = false // the upgrade is over
	g.mu.Unlock()
	now.Add(int64(11 * time.Minute))
	if err := c.SendResult(ctx, next.ID, submission(next.Task)); err != nil {
		t.Fatalf("SendResult: %v", err)
	}
	g.mu.Lock()
	// The device's clock moved on, so the first try may be refused for
	// its time and sent again with the pool's.
	if g.auth["POST /v1/work mac"] < 3 || g.auth["POST /v1/work sig"] != 2 {
		t.Errorf("requests by how they were authenticated %v, want MACs again after %v", g.auth, 11*time.Minute)
	}
	// The refusal made it ask the pool's version and key again.
	if n := g.counts["GET /v1/pool"] - asked; n != 2 {
		t.Errorf("%d GET /v1/pool after joining, want 2 (for the first request, and after the refusal)", n)
	}
	g.mu.Unlock()
}

// setClockByHand gives c a clock that stands still at the time of the
// call until moved on through the returned nanoseconds.
func setClockByHand(c *agent.Client) *atomic.Int64 {
	now := new(atomic.Int64)
	now.Store(time.Now().UnixNano())
	c.SetClock(func() time.Time { return time.Unix(0, now.Load()) })
	return now
}

// leaseAndReturn leases one task through c, returns its result with a
// request for another, and returns that next lease.
func leaseAndReturn(t *testing.T, ctx context.Context, c *agent.Client) pool.Lease {
	t.Helper()
	first, err := c.Lease(ctx, 1)
	if err != nil || len(first) != 1 {
		t.Fatalf("Lease = %v, %v", first, err)
	}
	next, err := c.SendResultAndLease(ctx, first[0].ID, submission(first[0].Task), 1)
	if err != nil || len(next) != 1 {
		t.Fatalf("SendResultAndLease = %+v, %v; want a lease", next, err)
	}
	return next[0]
}
