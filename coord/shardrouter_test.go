package coord

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/cluster"
	"idlepool/coord/api"
	"idlepool/identity"
	"idlepool/job"
	"idlepool/offers"
	"idlepool/pool"
)

// dirMirror is a BlobMirror in a directory: what a cluster's object
// store is to its nodes, for shard coordinators on one machine.
type dirMirror struct{ dir string }

func (m dirMirror) Put(_ context.Context, d job.Digest, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(m.dir, ".put-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(m.dir, d.String()))
}

func (m dirMirror) List(context.Context) ([]job.Digest, error) {
	es, err := os.ReadDir(m.dir)
	if err != nil {
		return nil, err
	}
	var out []job.Digest
	for _, e := range es {
		if d, err := job.ParseDigest(e.Name()); err == nil {
			out = append(out, d)
		}
	}
	return out, nil
}

func (m dirMirror) Open(_ context.Context, d job.Digest) (io.ReadCloser, error) {
	return os.Open(filepath.Join(m.dir, d.String()))
}

// startShards starts k coordinators, shard 0 to k-1 of one pool: each
// with its own DataDir and SQLite store, all holding the same pool key
// and sharing one mirror of files.
func startShards(t *testing.T, k int) []*testServer {
	t.Helper()
	return startShardsWith(t, k, nil)
}

// startShardsWith is startShards with edit, if not nil, adjusting shard
// s's Config before it starts.
func startShardsWith(t *testing.T, k int, edit func(s int, c *Config)) []*testServer {
	t.Helper()
	poolKey := filepath.Join(t.TempDir(), "pool.key")
	if _, err := identity.LoadOrCreate(poolKey); err != nil {
		t.Fatal(err)
	}
	key, err := os.ReadFile(poolKey)
	if err != nil {
		t.Fatal(err)
	}
	mirror := dirMirror{t.TempDir()}
	var out []*testServer
	for s := range k {
		out = append(out, startServer(t, func(c *Config) {
			if err := os.WriteFile(filepath.Join(c.DataDir, keyFile), key, 0o600); err != nil {
				t.Fatal(err)
			}
			c.Shard, c.Shards = s, k
			c.Cluster = &ClusterHooks{Blobs: mirror}
			if edit != nil {
				edit(s, c)
			}
		}))
	}
	return out
}

// poolKeyOf loads the pool's key, which every one of shards holds
// (startShards copies shard 0's).
func poolKeyOf(t *testing.T, shards []*testServer) *identity.Key {
	t.Helper()
	key, err := identity.Load(filepath.Join(shards[0].cfg.DataDir, keyFile))
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// routerFor serves a ShardRouter over shards on 127.0.0.1 and returns a
// testServer-like handle on it: do, register and upload go through the
// router.
func routerFor(t *testing.T, shards []*testServer) (*routerClient, *ShardRouter) {
	t.Helper()
	return routerAt(t, shards, nil)
}

// routerAt is routerFor with the router's clock now (nil: time.Now).
func routerAt(t *testing.T, shards []*testServer, now func() time.Time) (*routerClient, *ShardRouter) {
	t.Helper()
	key := poolKeyOf(t, shards)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	rt, err := NewShardRouter(ShardRouterConfig{Shards: len(shards), Key: key, Transport: tr, Now: now,
		Target: func(s int) (string, bool) { return shards[s].URL(), true }})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(rt)
	t.Cleanup(hs.Close)
	return &routerClient{url: hs.URL, client: hs.Client()}, rt
}

// routerClient sends signed requests to a router.
type routerClient struct {
	url    string
	client *http.Client
}

func (rc *routerClient) do(t *testing.T, p *testPeer, method, path string, v any, form string) answer {
	t.Helper()
	var body []byte
	switch b := v.(type) {
	case nil:
	case []byte:
		body = b
	default:
		var err error
		if form == "cbor" {
			body, err = api.MarshalCBOR(v)
		} else {
			body, err = json.Marshal(v)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	req, err := http.NewRequest(method, rc.url+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if form == "cbor" {
		req.Header.Set("Content-Type", api.CBORContentType)
		req.Header.Set("Accept", api.CBORContentType)
	} else if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if p != nil {
		p.authenticate(t, req, body)
	}
	resp, err := rc.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{status: resp.StatusCode, body: b, header: resp.Header}
}

// register registers peers through the router, each new to the pool.
func (rc *routerClient) register(t *testing.T, peers ...*testPeer) {
	t.Helper()
	for _, p := range peers {
		if a := rc.do(t, p, "POST", "/v1/peers", p.registration(""), ""); a.status != http.StatusCreated {
			t.Fatalf("register %s: %d %s", p.ID(), a.status, a.body)
		}
	}
}

// submit uploads j's program and submits j through the router, as owner.
func (rc *routerClient) submit(t *testing.T, owner *testPeer, j *job.Job) {
	t.Helper()
	d := job.Digest(sha256.Sum256(programBytes(t, j)))
	if a := rc.do(t, owner, "PUT", "/v1/blobs/"+d.String(), programBytes(t, j), ""); a.status != http.StatusCreated {
		t.Fatalf("upload: %d %s", a.status, a.body)
	}
	if a := rc.do(t, owner, "POST", "/v1/jobs", JobRequest{Canonical: j.Canonical}, ""); a.status != http.StatusCreated {
		t.Fatalf("submit %s: %d %s", j.Manifest.Name, a.status, a.body)
	}
}

func (rc *routerClient) work(t *testing.T, p *testPeer, req WorkRequest, form string) WorkResponse {
	t.Helper()
	a := rc.do(t, p, "POST", "/v1/work", req, form)
	if a.status != http.StatusOK {
		t.Fatalf("work: %d %s", a.status, a.body)
	}
	var out WorkResponse
	if form == "cbor" {
		if err := api.UnmarshalCBORAnswer(a.body, &out); err != nil {
			t.Fatalf("CBOR answer %q: %v", a.header.Get("Content-Type"), err)
		}
	} else {
		a.decode(t, &out)
	}
	if a.header.Get(QueuedHeader) != "" {
		t.Errorf("the router passed on %s", QueuedHeader)
	}
	return out
}

// shardedJobs plans jobs until they fall on at least two shards of k,
// and at least n of them.
func shardedJobs(t *testing.T, k, n int) []*job.Job {
	t.Helper()
	var out []*job.Job
	shards := map[int]bool{}
	for i := 0; len(out) < n || len(shards) < 2; i++ {
		j := testJob(t, fmt.Sprintf("sharded-%d", i), 3)
		shards[cluster.ShardOf(j.ID, k)] = true
		out = append(out, j)
	}
	return out
}

// Three shard coordinators behind a router take jobs on their shards;
// a device's work requests are split by shard and answered in order, in
// JSON and in CBOR; two devices' results decide every task.
func TestShardRouterSplitsWork(t *testing.T) {
	const k = 3
	shards := startShards(t, k)
	rc, _ := routerFor(t, shards)
	alice, bob, carol := newPeer(t, nil), newPeer(t, nil), newPeer(t, nil)
	// Carol authenticates with MACs: the router checks those of the
	// requests it splits, and each shard those it is passed.
	carol.macFor = poolKeyOf(t, shards).Public()
	rc.register(t, alice, bob, carol)
	jobs := shardedJobs(t, k, 3)
	onShard := map[int]int{}
	for _, j := range jobs {
		rc.submit(t, alice, j)
		s := cluster.ShardOf(j.ID, k)
		onShard[s]++
		for i, sh := range shards {
			_, err := sh.sched.Status(j.ID)
			if (err == nil) != (i == s) {
				t.Errorf("job %s of shard %d: on shard %d: %v", j.Manifest.Name, s, i, err)
			}
		}
		if a := rc.do(t, alice, "GET", "/v1/jobs/"+j.ID.String(), nil, ""); a.status != http.StatusOK {
			t.Errorf("status of %s through the router: %d %s", j.Manifest.Name, a.status, a.body)
		}
	}
	// The lists of jobs and of listings hold every shard's.
	for _, path := range []string{"/v1/jobs", "/v1/listings"} {
		a := rc.do(t, bob, "GET", path, nil, "")
		var list []json.RawMessage
		a.decode(t, &list)
		if a.status != http.StatusOK || len(list) != len(jobs) {
			t.Errorf("GET %s through the router: %d, %d entries, want %d", path, a.status, len(list), len(jobs))
		}
	}
	for _, p := range []*testPeer{bob, carol} {
		body, _ := json.Marshal(testOffer(p, time.Now(), 10*time.Minute))
		if a := rc.do(t, p, "POST", "/v1/offers", body, ""); a.status != http.StatusOK {
			t.Fatalf("offer of %s: %d %s", p.ID(), a.status, a.body)
		}
	}

	result := func(task int64) []byte { return fmt.Appendf(nil, `{"x":%d}`, task+1) }
	results := func(ls []LeaseGrant) []WorkResult {
		var out []WorkResult
		for _, l := range ls {
			r := result(l.Task)
			out = append(out, WorkResult{Lease: l.Lease, ResultSubmission: ResultSubmission{Digest: HexDigest(pool.ReplicaDigest(r, false, "")), Result: r}})
		}
		return out
	}
	total := 0
	for _, n := range onShard {
		total += 3 * n
	}
	for i, p := range []*testPeer{bob, carol} {
		form := []string{"json", "cbor"}[i]
		// Asked for work, the router finds it on every shard in turn.
		var leases []LeaseGrant
		for try := 0; len(leases) < total && try < 4*k; try++ {
			leases = append(leases, rc.work(t, p, WorkRequest{Lease: 2}, form).Leases...)
		}
		if len(leases) != total {
			t.Fatalf("%s leased %d tasks, want all %d", p.ID(), len(leases), total)
		}
		leased := map[int]bool{}
		for _, l := range leases {
			s, err := pool.LeaseShard(l.Lease, k)
			if err != nil || s != cluster.ShardOf(job.ID(l.Job), k) {
				t.Fatalf("lease %s of job %s: shard %d, %v; want the job's shard", l.Lease, l.Job, s, err)
			}
			leased[s] = true
		}
		if len(leased) < 2 {
			t.Fatalf("leases on %d shards, want at least 2", len(leased))
		}
		// One request returns them all, with a lease no shard minted in
		// the middle and a transfer report: split, answered in order.
		slices.Reverse(leases)
		req := WorkRequest{Results: results(leases), Transfers: []TransferReport{{Job: HexDigest(jobs[0].ID)}}}
		nobody := strings.Repeat("0", 16) + "07" + strings.Repeat("0", 14)
		req.Results = slices.Insert(req.Results, 1, WorkResult{Lease: nobody, ResultSubmission: req.Results[0].ResultSubmission})
		out := rc.work(t, p, req, form)
		var got, want []string
		for i, a := range out.Results {
			got = append(got, fmt.Sprintf("%s %d %s", a.Lease, a.Status, a.Code))
			w := fmt.Sprintf("%s 200 ", req.Results[i].Lease)
			if i == 1 {
				w = nobody + " 404 unknown_lease"
			}
			want = append(want, w)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("answers to %s's results (-want +got):\n%s", p.ID(), diff)
		}
	}
	for _, j := range jobs {
		st, err := shards[cluster.ShardOf(j.ID, k)].sched.Status(j.ID)
		if err != nil || !st.Complete || st.Accepted != 3 {
			t.Errorf("job %s: %+v, %v; want its 3 tasks accepted", j.Manifest.Name, st, err)
		}
		a := rc.do(t, alice, "GET", "/v1/jobs/"+j.ID.String()+"/results?after=0&max=10", nil, "")
		var res Results
		a.decode(t, &res)
		if a.status != http.StatusOK || len(res.Results) != 3 {
			t.Errorf("results of %s through the router: %d %s", j.Manifest.Name, a.status, a.body)
		}
	}
}

// A shard's coordinator takes a forwarded request only with the MAC of
// the pool's key, over the very request, for itself, and fresh; a
// coordinator of an undivided pool takes none.
func TestShardForwardedRequests(t *testing.T) {
	shards := startShards(t, 2)
	solo := startServer(t, nil)
	p := newPeer(t, nil)
	for _, ts := range []*testServer{shards[0], shards[1], solo} {
		ts.register(t, p, "", http.StatusCreated)
		ts.offer(t, p)
	}
	poolKey, err := identity.Load(filepath.Join(shards[0].cfg.DataDir, keyFile))
	if err != nil {
		t.Fatal(err)
	}
	other, _ := identity.Generate()
	good, wrong := newForwardKey(poolKey), newForwardKey(other)
	body := []byte(`{"lease":1}`)
	tests := []struct {
		name   string
		to     *testServer
		key    *forwardKey
		shard  int
		at     time.Time
		alter  func(*http.Request)
		status int
		says   string
	}{
		{"good", shards[1], &good, 1, time.Now(), nil, http.StatusOK, ""},
		{"forged", shards[1], &wrong, 1, time.Now(), nil, http.StatusUnauthorized, "does not verify"},
		{"for another shard", shards[1], &good, 0, time.Now(), nil, http.StatusUnauthorized, "forwarded to shard 0"},
		{"replayed late", shards[1], &good, 1, time.Now().Add(-2 * clockSkew), nil, http.StatusUnauthorized, "from the coordinator's clock"},
		{"body altered", shards[1], &good, 1, time.Now(), func(r *http.Request) {
			r.Body = io.NopCloser(strings.NewReader(`{"lease":9}`))
			r.ContentLength = 11
		}, http.StatusUnauthorized, "does not verify"},
		{"path altered", shards[1], &good, 1, time.Now(), func(r *http.Request) { r.URL.RawQuery = "x=1" }, http.StatusUnauthorized, "does not verify"},
		{"not a shard", solo, &good, 0, time.Now(), nil, http.StatusUnauthorized, "not a shard"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.to.request(t, "POST", "/v1/work", body)
			tc.key.sign(req, tc.shard, p.ID(), tc.at, body)
			if tc.alter != nil {
				tc.alter(req)
			}
			a := tc.to.send(t, req)
			if a.status != tc.status || !strings.Contains(string(a.body), tc.says) {
				t.Fatalf("%d %s, want %d saying %q", a.status, a.body, tc.status, tc.says)
			}
			if tc.status == http.StatusOK && a.header.Get(QueuedHeader) == "" {
				t.Errorf("a shard's answer to work has no %s", QueuedHeader)
			}
		})
	}
}

func TestForwardMAC(t *testing.T) {
	k1, _ := identity.Generate()
	k2, _ := identity.Generate()
	a, b, c := newForwardKey(k1), newForwardKey(k1), newForwardKey(k2)
	if a != b || a == c {
		t.Fatal("the forwarding key is not a function of the pool key alone")
	}
	sum := sha256.Sum256([]byte("body"))
	m := a.mac(1, "POST", "/v1/work", "idpeer", 42, sum)
	for name, other := range map[string][]byte{
		"shard":  a.mac(2, "POST", "/v1/work", "idpeer", 42, sum),
		"method": a.mac(1, "PUT", "/v1/work", "idpeer", 42, sum),
		"target": a.mac(1, "POST", "/v1/work?", "idpeer", 42, sum),
		"peer":   a.mac(1, "POST", "/v1/work", "idpeeR", 42, sum),
		"time":   a.mac(1, "POST", "/v1/work", "idpeer", 43, sum),
		"body":   a.mac(1, "POST", "/v1/work", "idpeer", 42, sha256.Sum256([]byte("Body"))),
		"key":    c.mac(1, "POST", "/v1/work", "idpeer", 42, sum),
	} {
		if bytes.Equal(m, other) {
			t.Errorf("the MAC does not cover the %s", name)
		}
	}
	for _, h := range []string{"", "peer=x", "peer=idaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa, shard=1, ts=1, mac=AAAA",
		"peer=idaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa, shard=-1, ts=1, mac=" + strings.Repeat("A", 43) + "=", "x=1"} {
		if _, err := parseForwarded(h); !errors.Is(err, errAuth) {
			t.Errorf("parseForwarded(%q): %v, want errAuth", h, err)
		}
	}
}

// With one shard the router passes every request to it unchanged: the
// same method, path, body and headers the device sent.
func TestShardRouterOneShard(t *testing.T) {
	ts := startServer(t, nil)
	key, err := identity.Load(filepath.Join(ts.cfg.DataDir, keyFile))
	if err != nil {
		t.Fatal(err)
	}
	rec := &recordingTransport{next: &http.Transport{}}
	t.Cleanup(rec.next.CloseIdleConnections)
	rt, err := NewShardRouter(ShardRouterConfig{Shards: 1, Key: key, Transport: rec, Target: func(int) (string, bool) { return ts.URL(), true }})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(rt)
	t.Cleanup(hs.Close)
	rc := &routerClient{url: hs.URL, client: hs.Client()}
	p := newPeer(t, nil)
	sent := []string{}
	note := func(method, path string, body []byte) {
		sent = append(sent, fmt.Sprintf("%s %s %x", method, path, sha256.Sum256(body)))
	}
	reg, _ := json.Marshal(p.registration(""))
	if a := rc.do(t, p, "POST", "/v1/peers", reg, ""); a.status != http.StatusCreated {
		t.Fatalf("register: %d %s", a.status, a.body)
	}
	note("POST", "/v1/peers", reg)
	lease := []byte(`{"max":1}`)
	if a := rc.do(t, p, "POST", "/v1/leases", lease, ""); a.status != http.StatusConflict {
		t.Fatalf("lease without an offer: %d %s", a.status, a.body)
	}
	note("POST", "/v1/leases", lease)
	work := []byte(`{"lease":1}`)
	if a := rc.do(t, p, "POST", "/v1/work", work, ""); a.status != http.StatusOK {
		t.Fatalf("work: %d %s", a.status, a.body)
	}
	note("POST", "/v1/work", work)
	if a := rc.do(t, p, "GET", "/v1/jobs/"+strings.Repeat("ab", 32), nil, ""); a.status != http.StatusNotFound {
		t.Fatalf("unknown job: %d %s", a.status, a.body)
	}
	note("GET", "/v1/jobs/"+strings.Repeat("ab", 32), nil)
	if diff := cmp.Diff(sent, rec.seen()); diff != "" {
		t.Errorf("requests passed on (-sent +passed):\n%s", diff)
	}
	for _, h := range rec.headers() {
		if h.Get("Authorization") == "" || h.Get(ForwardedHeader) != "" {
			t.Errorf("a request passed on with Authorization %q and %s %q", h.Get("Authorization"), ForwardedHeader, h.Get(ForwardedHeader))
		}
	}
}

// recordingTransport records the requests it carries.
type recordingTransport struct {
	next *http.Transport
	mu   sync.Mutex
	reqs []string
	hdrs []http.Header
}

func (rt *recordingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil {
		body, _ = io.ReadAll(r.Body)
		r.Body.Close()
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	rt.mu.Lock()
	rt.reqs = append(rt.reqs, fmt.Sprintf("%s %s %x", r.Method, r.URL.RequestURI(), sha256.Sum256(body)))
	rt.hdrs = append(rt.hdrs, r.Header.Clone())
	rt.mu.Unlock()
	return rt.next.RoundTrip(r)
}

func (rt *recordingTransport) seen() []string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return slices.Clone(rt.reqs)
}

func (rt *recordingTransport) headers() []http.Header {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return slices.Clone(rt.hdrs)
}

var _ BlobMirror = dirMirror{}

// A shard without a coordinator for the moment (its node gone, another
// not yet in charge) holds the others up in nothing: a registration and
// an offer that every other shard took are taken, and a job of another
// shard is answered; a request for the shard itself is answered 503
// no_leader. A refusal by a shard that answers is still the answer.
func TestShardRouterShardDown(t *testing.T) {
	const k = 3
	shards := startShards(t, k)
	key := poolKeyOf(t, shards)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	var down atomic.Int32
	down.Store(2)
	rt, err := NewShardRouter(ShardRouterConfig{Shards: k, Key: key, Transport: tr,
		Target: func(s int) (string, bool) { return shards[s].URL(), s != int(down.Load()) }})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(rt)
	t.Cleanup(hs.Close)
	rc := &routerClient{url: hs.URL, client: hs.Client()}
	alice := newPeer(t, nil)
	if a := rc.do(t, alice, "POST", "/v1/peers", alice.registration(""), ""); a.status != http.StatusCreated {
		t.Fatalf("register with shard 2 down: %d %s", a.status, a.body)
	}
	for s, sh := range shards {
		if _, ok := sh.sched.Peer(alice.ID()); ok != (s != 2) {
			t.Errorf("shard %d knows alice: %v", s, ok)
		}
	}
	jobs := shardedJobs(t, k, 3)
	for _, j := range jobs {
		s := cluster.ShardOf(j.ID, k)
		d := job.Digest(sha256.Sum256(programBytes(t, j)))
		if a := rc.do(t, alice, "PUT", "/v1/blobs/"+d.String(), programBytes(t, j), ""); a.status != http.StatusCreated {
			t.Fatalf("upload: %d %s", a.status, a.body)
		}
		a := rc.do(t, alice, "POST", "/v1/jobs", JobRequest{Canonical: j.Canonical}, "")
		if s == 2 {
			if !a.noLeader() {
				t.Errorf("submit to the shard that is down: %d %s, want 503 no_leader", a.status, a.body)
			}
			continue
		}
		if a.status != http.StatusCreated {
			t.Errorf("submit %s to shard %d, shard 2 down: %d %s", j.Manifest.Name, s, a.status, a.body)
		}
	}
	// Shard 2 back: it does not know alice, and says so to her request
	// for leases whatever the others answer (they have no offer of
	// hers); her agent registers again on that 401, and shard 2 then
	// knows her.
	down.Store(-1)
	if a := rc.do(t, alice, "POST", "/v1/leases", map[string]int{"max": 1}, ""); a.status != http.StatusUnauthorized {
		t.Errorf("leases for a device shard 2 never registered: %d %s, want 401", a.status, a.body)
	}
	if a := rc.do(t, alice, "POST", "/v1/peers", alice.registration(""), ""); a.status != http.StatusOK && a.status != http.StatusCreated {
		t.Fatalf("register again: %d %s", a.status, a.body)
	}
	if _, ok := shards[2].sched.Peer(alice.ID()); !ok {
		t.Error("shard 2 does not know alice after she registered again")
	}
	// A registration it refuses (signed by another key than it
	// registers) is refused through the router, whatever the others
	// answered.
	bob := newPeer(t, nil)
	reg := bob.registration("")
	reg.Key = alice.key.Public()
	if a := rc.do(t, bob, "POST", "/v1/peers", reg, ""); a.status != http.StatusUnauthorized {
		t.Errorf("a registration every shard refuses: %d %s, want 401", a.status, a.body)
	}
}

// Each job a divided pool takes is logged "Job added" once, by the
// coordinator of its shard (its Scheduler, which names the job's owner
// and merger), and by no other shard; the same job submitted again is
// not logged again. The coordinator's handler once logged it as well,
// so that every job was "added" twice on its shard.
func TestShardedJobAddedLoggedOnce(t *testing.T) {
	const k = 3
	logs := make([]*logLines, k)
	for s := range logs {
		logs[s] = &logLines{}
	}
	shards := startShardsWith(t, k, func(s int, c *Config) {
		c.Logger = slog.New(slog.NewJSONHandler(logs[s], nil)).With("shard", s)
	})
	rc, _ := routerFor(t, shards)
	alice := newPeer(t, nil)
	if a := rc.do(t, alice, "POST", "/v1/peers", alice.registration(""), ""); a.status != http.StatusCreated {
		t.Fatalf("register: %d %s", a.status, a.body)
	}
	jobs := shardedJobs(t, k, 3)
	want := make([][]string, k)
	for _, j := range jobs {
		d := job.Digest(sha256.Sum256(programBytes(t, j)))
		if a := rc.do(t, alice, "PUT", "/v1/blobs/"+d.String(), programBytes(t, j), ""); a.status != http.StatusCreated {
			t.Fatalf("upload: %d %s", a.status, a.body)
		}
		for _, status := range []int{http.StatusCreated, http.StatusOK} {
			if a := rc.do(t, alice, "POST", "/v1/jobs", JobRequest{Canonical: j.Canonical}, ""); a.status != status {
				t.Fatalf("submit %s: %d %s, want %d", j.Manifest.Name, a.status, a.body, status)
			}
		}
		s := cluster.ShardOf(j.ID, k)
		want[s] = append(want[s], j.ID.String())
	}
	for s, l := range logs {
		var got []string
		for _, r := range l.find("Job added") {
			id, _ := r["job"].(string)
			got = append(got, id)
		}
		if diff := cmp.Diff(want[s], got); diff != "" {
			t.Errorf("jobs logged \"Job added\" by shard %d (-want +got):\n%s", s, diff)
		}
	}
}

// A divided pool lists its jobs in the order one coordinator of the
// whole pool lists them, not shard by shard: GET /v1/jobs and GET
// /v1/listings oldest first, and GET /v1/dashboard newest first, the
// newest 50 only, so that the finished jobs the pool's page shows (the
// newest three; the older fold away) are the pool's newest. The jobs go
// to three shards and to an undivided pool alike, one at a time, dealt
// from the highest shard down; every coordinator reads one clock, which
// moves a millisecond before each job. The shards' AddedHeader never
// reaches the device.
func TestShardRouterOrdersJobsOverThePool(t *testing.T) {
	const k = 3
	start := time.Now()
	var ms atomic.Int64
	clock := func() time.Time { return start.Add(time.Duration(ms.Load()) * time.Millisecond) }
	shards := startShardsWith(t, k, func(_ int, c *Config) { c.Now = clock })
	solo := startServer(t, func(c *Config) { c.Now = clock })
	rc, _ := routerFor(t, shards)
	alice := newPeer(t, nil)
	type target struct {
		name string
		do   func(method, path string, v any) answer
	}
	divided := target{"divided", func(method, path string, v any) answer { return rc.do(t, alice, method, path, v, "") }}
	undivided := target{"undivided", func(method, path string, v any) answer { return solo.do(t, alice, method, path, v) }}
	pools := []target{divided, undivided}
	for _, p := range pools {
		if a := p.do("POST", "/v1/peers", alice.registration("")); a.status != http.StatusCreated {
			t.Fatalf("register with the %s pool: %d %s", p.name, a.status, a.body)
		}
	}

	// Dealt from the highest shard down: joined shard by shard, the
	// lists would start with shard 0's jobs, which came after others.
	byShard := make([][]*job.Job, k)
	for _, j := range shardedJobs(t, k, dashboardMaxJobs+4) {
		s := cluster.ShardOf(j.ID, k)
		byShard[s] = append(byShard[s], j)
	}
	var jobs []*job.Job
	for round := 0; ; round++ {
		dealt := false
		for s := k - 1; s >= 0; s-- {
			if round < len(byShard[s]) {
				jobs, dealt = append(jobs, byShard[s][round]), true
			}
		}
		if !dealt {
			break
		}
	}
	var oldest []string
	for _, j := range jobs {
		ms.Add(1)
		prog := programBytes(t, j)
		d := job.Digest(sha256.Sum256(prog))
		for _, p := range pools {
			if a := p.do("PUT", "/v1/blobs/"+d.String(), prog); a.status != http.StatusCreated {
				t.Fatalf("upload to the %s pool: %d %s", p.name, a.status, a.body)
			}
			if a := p.do("POST", "/v1/jobs", JobRequest{Canonical: j.Canonical}); a.status != http.StatusCreated {
				t.Fatalf("submit %s to the %s pool: %d %s", j.Manifest.Name, p.name, a.status, a.body)
			}
		}
		oldest = append(oldest, j.ID.String())
	}
	newest := slices.Clone(oldest)
	slices.Reverse(newest)

	// get reads a list of p's jobs, by ID.
	get := func(p target, path string) []string {
		t.Helper()
		a := p.do("GET", path, nil)
		if a.status != http.StatusOK {
			t.Fatalf("GET %s of the %s pool: %d %s", path, p.name, a.status, a.body)
		}
		if h := a.header.Get(AddedHeader); h != "" {
			t.Errorf("GET %s of the %s pool: the answer has %s %.40q...", path, p.name, AddedHeader, h)
		}
		var ids []string
		switch path {
		case "/v1/jobs":
			var list []JobInfo
			a.decode(t, &list)
			for _, j := range list {
				ids = append(ids, j.Job.String())
			}
		case "/v1/listings":
			var list []offers.Listing
			a.decode(t, &list)
			for _, l := range list {
				ids = append(ids, l.Job.String())
			}
		case "/v1/dashboard":
			var d Dashboard
			a.decode(t, &d)
			for _, j := range d.Jobs {
				ids = append(ids, j.Job)
			}
		}
		return ids
	}
	for _, tc := range []struct {
		path string
		want []string
	}{
		{"/v1/jobs", oldest},
		{"/v1/listings", oldest},
		{"/v1/dashboard", newest[:dashboardMaxJobs]},
	} {
		for _, p := range pools {
			if diff := cmp.Diff(tc.want, get(p, tc.path)); diff != "" {
				t.Errorf("GET %s of the %s pool, by job (-want +got):\n%s", tc.path, p.name, diff)
			}
		}
	}

	// Every job cancelled, the page shows the newest three of the pool.
	for _, j := range jobs {
		if a := divided.do("POST", "/v1/jobs/"+j.ID.String()+"/cancel", nil); a.status != http.StatusOK {
			t.Fatalf("cancel %s: %d %s", j.Manifest.Name, a.status, a.body)
		}
	}
	var d Dashboard
	divided.do("GET", "/v1/dashboard", nil).decode(t, &d)
	var shown []string
	for _, j := range d.Jobs {
		if j.Cancelled && len(shown) < 3 {
			shown = append(shown, j.Job)
		}
	}
	if diff := cmp.Diff(newest[:3], shown); diff != "" {
		t.Errorf("the finished jobs the page shows (-want +got):\n%s", diff)
	}
}

// mergeAdded keeps each shard's own order whatever its times say, takes
// the earliest (the latest, newest first) of the shards' next jobs,
// breaks a tie of one millisecond by shard so that the two orders are
// each other reversed, and joins the lists in shard order when a shard
// said no times.
func TestMergeAdded(t *testing.T) {
	tests := []struct {
		name   string
		lists  [][]string
		added  [][]int64
		newest bool
		want   []string
		merged bool
	}{
		{"oldest first", [][]string{{"a1", "a4"}, {"b2", "b3"}, {"c0"}}, [][]int64{{1, 4}, {2, 3}, {0}}, false,
			[]string{"c0", "a1", "b2", "b3", "a4"}, true},
		{"newest first", [][]string{{"a4", "a1"}, {"b3", "b2"}, {"c0"}}, [][]int64{{4, 1}, {3, 2}, {0}}, true,
			[]string{"a4", "b3", "b2", "a1", "c0"}, true},
		{"a tie, oldest first", [][]string{{"a"}, {"b"}, {"c"}}, [][]int64{{5}, {5}, {5}}, false,
			[]string{"a", "b", "c"}, true},
		{"a tie, newest first", [][]string{{"a"}, {"b"}, {"c"}}, [][]int64{{5}, {5}, {5}}, true,
			[]string{"c", "b", "a"}, true},
		{"a shard's clock stepped back", [][]string{{"a1", "a2"}, {"b"}}, [][]int64{{9, 3}, {5}}, false,
			[]string{"b", "a1", "a2"}, true},
		{"empty shards", [][]string{nil, {"b"}, nil}, [][]int64{nil, {1}, nil}, false,
			[]string{"b"}, true},
		{"nothing", [][]string{nil, nil}, [][]int64{nil, nil}, true, []string{}, true},
		{"a shard without times", [][]string{{"a9"}, {"b1"}}, [][]int64{{9}, nil}, false,
			[]string{"a9", "b1"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, merged := mergeAdded(tc.lists, tc.added, tc.newest)
			if diff := cmp.Diff(tc.want, got); diff != "" || merged != tc.merged {
				t.Errorf("merged %v, want %v; list (-want +got):\n%s", merged, tc.merged, diff)
			}
		})
	}
}

// The router tells Missed of each request it could not pass to a shard's
// coordinator, streamed (a shard's ledger) or split (a registration):
// Target named one that did not answer (moved by a hand-over), or none;
// a node then reads the leases again at once. Requests that reached
// their shard tell it nothing.
func TestShardRouterToldOfMisses(t *testing.T) {
	const k = 3
	shards := startShards(t, k)
	key := poolKeyOf(t, shards)
	gone := httptest.NewServer(http.NotFoundHandler())
	goneURL := gone.URL
	gone.Close() // shard 1's coordinator as a stale read names it
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	var mu sync.Mutex
	missed := map[int]int{}
	rt, err := NewShardRouter(ShardRouterConfig{Shards: k, Key: key, Transport: tr,
		Target: func(s int) (string, bool) {
			switch s {
			case 1:
				return goneURL, true
			case 2:
				return "", false
			}
			return shards[s].URL(), true
		},
		Missed: func(s int) {
			mu.Lock()
			defer mu.Unlock()
			missed[s]++
		}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(rt)
	t.Cleanup(hs.Close)
	rc := &routerClient{url: hs.URL, client: hs.Client()}
	for s := range k {
		a := rc.do(t, nil, "GET", fmt.Sprintf("/v1/ledger?shard=%d&max=1", s), nil, "")
		if s == 0 && a.status != http.StatusOK {
			t.Errorf("shard 0's ledger: %d %s", a.status, a.body)
		}
		if s > 0 && !a.noLeader() {
			t.Errorf("shard %d's ledger: %d %s, want 503 no_leader", s, a.status, a.body)
		}
	}
	mu.Lock()
	if diff := cmp.Diff(map[int]int{1: 1, 2: 1}, missed); diff != "" {
		t.Errorf("misses after one ledger read per shard (-want +got):\n%s", diff)
	}
	clear(missed)
	mu.Unlock()
	alice := newPeer(t, nil)
	rc.do(t, alice, "POST", "/v1/peers", alice.registration(""), "")
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff(map[int]int{1: 1, 2: 1}, missed); diff != "" {
		t.Errorf("misses after a registration, split over the shards (-want +got):\n%s", diff)
	}
}

// routerWithAShardDown starts k shard coordinators behind a router whose
// Target names none for the shard down says: -1 (its first value) for
// none, k for every shard.
func routerWithAShardDown(t *testing.T, k int) ([]*testServer, *routerClient, *atomic.Int32) {
	t.Helper()
	shards := startShards(t, k)
	key := poolKeyOf(t, shards)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	down := new(atomic.Int32)
	down.Store(-1)
	rt, err := NewShardRouter(ShardRouterConfig{Shards: k, Key: key, Transport: tr,
		Target: func(s int) (string, bool) {
			d := int(down.Load())
			return shards[s].URL(), d != s && d != k
		}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(rt)
	t.Cleanup(hs.Close)
	return shards, &routerClient{url: hs.URL, client: hs.Client()}, down
}

// Found by killing a divided pool's node: while one shard had no node in
// charge, the pool's page said "Cannot reach the coordinator" and showed
// nothing, the healthy shards' jobs included. The merged dashboard now
// leaves that shard out and names it; with no shard answering it is the
// first shard's answer, as before.
func TestShardRouterDashboardWithAShardDown(t *testing.T) {
	const k = 3
	_, rc, down := routerWithAShardDown(t, k)
	alice := newPeer(t, nil)
	rc.register(t, alice)
	jobs := shardedJobs(t, k, 3)
	for _, j := range jobs {
		rc.submit(t, alice, j)
	}
	dashboard := func() (Dashboard, answer) {
		a := rc.do(t, nil, "GET", "/v1/dashboard", nil, "")
		var d Dashboard
		if a.status == http.StatusOK {
			if err := json.Unmarshal(a.body, &d); err != nil {
				t.Fatal(err)
			}
		}
		return d, a
	}
	all, a := dashboard()
	if a.status != http.StatusOK || len(all.Jobs) != len(jobs) || all.Unanswered != nil {
		t.Fatalf("every shard up: %d, %d jobs, unanswered %v", a.status, len(all.Jobs), all.Unanswered)
	}
	on := map[int]int{} // jobs by shard
	for _, j := range jobs {
		on[cluster.ShardOf(j.ID, k)]++
	}
	for _, s := range []int{0, 2} {
		down.Store(int32(s))
		d, a := dashboard()
		if a.status != http.StatusOK {
			t.Fatalf("shard %d down: %d %s, want the others' dashboard", s, a.status, a.body)
		}
		want := []DashboardShard{{Shard: s, Reason: "no coordinator is in charge of it right now"}}
		if diff := cmp.Diff(want, d.Unanswered); diff != "" {
			t.Errorf("shard %d down: unanswered (-want +got):\n%s", s, diff)
		}
		if len(d.Jobs) != len(jobs)-on[s] || d.Pool != all.Pool || d.Key != all.Key {
			t.Errorf("shard %d down: %d jobs, pool %q key %q; want %d and %q %q", s, len(d.Jobs), d.Pool, d.Key, len(jobs)-on[s], all.Pool, all.Key)
		}
		for _, j := range d.Jobs {
			if j.Shard == nil || *j.Shard == s {
				t.Errorf("shard %d down: job %s of shard %v listed", s, j.Name, j.Shard)
			}
		}
		if h := fmt.Sprintf("shard %d: (did not answer)", s); !strings.Contains(d.Ledger.Head, h) || !strings.HasPrefix(d.Ledger.Head, "shard 0: ") {
			t.Errorf("shard %d down: ledger head %q, want it to start with shard 0 and say %q", s, d.Ledger.Head, h)
		}
	}
	down.Store(k) // none answers
	if _, a := dashboard(); !a.noLeader() {
		t.Errorf("no shard up: %d %s, want 503 no_leader", a.status, a.body)
	}
	// The page and its files come from the router itself, whatever the
	// shards; another path still goes to shard 0.
	for _, path := range []string{"/", "/web/pool.js", "/web/pool.css", "/web/icon.png"} {
		if a := rc.do(t, nil, "GET", path, nil, ""); a.status != http.StatusOK || a.header.Get("Content-Security-Policy") != pageCSP {
			t.Errorf("GET %s with no shard up: %d, CSP %q", path, a.status, a.header.Get("Content-Security-Policy"))
		}
	}
	if a := rc.do(t, nil, "GET", "/web/nothing.js", nil, ""); !a.noLeader() {
		t.Errorf("GET /web/nothing.js with no shard up: %d %s, want shard 0's 503", a.status, a.body)
	}
	down.Store(-1)
	if a := rc.do(t, nil, "GET", "/web/nothing.js", nil, ""); a.status != http.StatusNotFound {
		t.Errorf("GET /web/nothing.js: %d %s, want shard 0's 404", a.status, a.body)
	}
}

// GET /v1/offers lists every shard's live offers, one per device: a
// shard whose node in charge changed knows none until each device posts
// again, and shard 0's list alone made a follow say "no donor offers
// compute" while donors computed. A shard that does not answer is left
// out.
func TestShardRouterMergesOffers(t *testing.T) {
	const k = 3
	shards, rc, down := routerWithAShardDown(t, k)
	alice, bob, carol := newPeer(t, nil), newPeer(t, nil), newPeer(t, nil)
	rc.register(t, alice, bob, carol)
	now := time.Now().UTC().Truncate(time.Millisecond)
	if a := rc.do(t, alice, "POST", "/v1/offers", testOffer(alice, now, 5*time.Minute), ""); a.status != http.StatusOK {
		t.Fatalf("alice's offer: %d %s", a.status, a.body)
	}
	// Bob's offer reaches shard 2 alone, as after a take-over of shards 0
	// and 1; alice's newer one too.
	direct := &routerClient{url: shards[2].URL(), client: rc.client}
	if a := direct.do(t, bob, "POST", "/v1/offers", testOffer(bob, now, 5*time.Minute), ""); a.status != http.StatusOK {
		t.Fatalf("bob's offer to shard 2: %d %s", a.status, a.body)
	}
	newer := testOffer(alice, now.Add(time.Second), 5*time.Minute)
	if a := direct.do(t, alice, "POST", "/v1/offers", newer, ""); a.status != http.StatusOK {
		t.Fatalf("alice's newer offer to shard 2: %d %s", a.status, a.body)
	}
	list := func() []offers.Offer {
		t.Helper()
		a := rc.do(t, carol, "GET", "/v1/offers", nil, "")
		var out []offers.Offer
		if a.status != http.StatusOK || json.Unmarshal(a.body, &out) != nil {
			t.Fatalf("GET /v1/offers: %d %s", a.status, a.body)
		}
		return out
	}
	peers := func(l []offers.Offer) []string {
		var out []string
		for _, o := range l {
			out = append(out, o.Peer)
		}
		return out
	}
	want := []string{alice.ID(), bob.ID()}
	slices.Sort(want)
	got := list()
	if diff := cmp.Diff(want, peers(got)); diff != "" {
		t.Fatalf("offers listed (-want +got):\n%s", diff)
	}
	for _, o := range got {
		if o.Peer == alice.ID() && !o.Issued.Equal(newer.Issued) {
			t.Errorf("alice's offer issued %v, want her newest, %v", o.Issued, newer.Issued)
		}
	}
	down.Store(0)
	if diff := cmp.Diff(want, peers(list())); diff != "" {
		t.Errorf("offers listed with shard 0 down (-want +got):\n%s", diff)
	}
}

// A shard that said it has nothing waiting is not asked again for
// leases within queuedStale (the router's clock): an idle pool's
// requests for work are not each forwarded to every shard. Past it,
// every shard is asked again, and a job submitted meanwhile is found.
func TestShardRouterAsksForLeasesWhereTasksWait(t *testing.T) {
	const k = 3
	shards := startShards(t, k)
	// The router's clock stands still between the two requests whose
	// gap must stay under queuedStale, whatever the machine's load, and
	// is set to the real time before each step (the shards check the
	// time of what it forwards against theirs).
	var clock atomic.Int64
	catchUp := func(by time.Duration) { clock.Store(max(time.Now().UnixNano(), clock.Load()+int64(by))) }
	catchUp(0)
	rc, rt := routerAt(t, shards, func() time.Time { return time.Unix(0, clock.Load()) })
	alice, bob := newPeer(t, nil), newPeer(t, nil)
	rc.register(t, alice, bob)
	body, _ := json.Marshal(testOffer(bob, time.Now(), 10*time.Minute))
	if a := rc.do(t, bob, "POST", "/v1/offers", body, ""); a.status != http.StatusOK {
		t.Fatalf("offer: %d %s", a.status, a.body)
	}
	ask := func(what string, wantAsked int) []LeaseGrant {
		t.Helper()
		before := rt.Counts().There
		ls := rc.work(t, bob, WorkRequest{Lease: 2}, "json").Leases
		if asked := rt.Counts().There - before; wantAsked > 0 && asked != int64(wantAsked) {
			t.Errorf("%s: the request for leases went to %d shards, want %d", what, asked, wantAsked)
		}
		return ls
	}
	catchUp(0)
	if ls := ask("nothing heard yet", k); len(ls) != 0 {
		t.Fatalf("leases of a pool without jobs: %+v", ls)
	}
	ask("every shard said it has nothing waiting", 1)
	j := shardedJobs(t, k, 1)[0]
	rc.submit(t, alice, j)
	catchUp(queuedStale)
	if ls := ask("past queuedStale", 0); len(ls) == 0 {
		t.Fatalf("no leases of job %s past %s", j.Manifest.Name, queuedStale)
	}
}
