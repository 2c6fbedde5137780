package coord

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"idlepool/identity"
	"idlepool/job"
	"idlepool/pool"
)

// state is what a refused request must leave unchanged.
type state struct {
	Jobs   []pool.JobStatus
	Ledger []pool.Entry
	Blobs  []string
}

func (ts *testServer) state(t *testing.T) state {
	t.Helper()
	entries, err := ts.sched.Ledger(0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var blobs []string
	err = filepath.WalkDir(ts.blobs.dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			blobs = append(blobs, d.Name())
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return state{Jobs: ts.sched.Jobs(), Ledger: entries, Blobs: blobs}
}

// downloadLedger reads GET /v1/ledger as JSON Lines.
func (ts *testServer) downloadLedger(t *testing.T, query string) []pool.Entry {
	t.Helper()
	a := ts.do(t, nil, "GET", "/v1/ledger"+query, nil)
	if a.status != http.StatusOK {
		t.Fatalf("ledger: %d %s", a.status, a.body)
	}
	if ct := a.header.Get("Content-Type"); ct != "application/jsonl" {
		t.Errorf("ledger Content-Type %q", ct)
	}
	var out []pool.Entry
	sc := bufio.NewScanner(bytes.NewReader(a.body))
	for sc.Scan() {
		var e pool.Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("ledger line %q: %v", sc.Text(), err)
		}
		out = append(out, e)
	}
	return out
}

func TestPoolInfoHealthz(t *testing.T) {
	ts := startServer(t, nil)
	a := ts.do(t, nil, "GET", "/healthz", nil)
	if a.status != 200 || string(a.body) != "ok\n" {
		t.Errorf("healthz: %d %q", a.status, a.body)
	}
	var info PoolInfo
	a = ts.do(t, nil, "GET", "/v1/pool", nil)
	a.decode(t, &info)
	want := PoolInfo{Pool: "test", Key: ts.PublicKey(), InviteOnly: false, Version: APIVersion}
	if diff := cmp.Diff(want, info); diff != "" {
		t.Errorf("pool info (-want +got):\n%s", diff)
	}
}

// TestPoolFlow runs a job of two tasks at quorum 2 through the API: two
// peers of different owners compute it, the submitter merges it, and the
// ledger verifies.
func TestPoolFlow(t *testing.T) {
	ts := startServer(t, nil)
	alice, bob, carol := newPeer(t, nil), newPeer(t, nil), newPeer(t, nil)
	for _, p := range []*testPeer{alice, bob, carol} {
		var r Registered
		ts.register(t, p, "", http.StatusCreated).decode(t, &r)
		if want := (Registered{Peer: p.ID(), Owner: p.owner.ID()}); r != want {
			t.Errorf("registered %+v, want %+v", r, want)
		}
	}
	ts.register(t, bob, "", http.StatusOK) // again: idempotent

	j := testJob(t, "flow", 2)
	id := j.ID.String()
	prog := programBytes(t, j)

	// The job names a file the pool lacks: 409 with its digest.
	a := ts.do(t, alice, "POST", "/v1/jobs", JobRequest{Canonical: j.Canonical})
	if a.status != http.StatusConflict {
		t.Fatalf("job before its program: %d %s", a.status, a.body)
	}
	if e := a.errorBody(t); e.Code != "missing_files" || len(e.Missing) != 1 || job.Digest(e.Missing[0]) != j.Program.SHA256 {
		t.Errorf("missing files answer %+v, want the program %s", e, j.Program.SHA256)
	}

	if a := ts.upload(t, alice, prog); a.status != http.StatusCreated {
		t.Fatalf("upload: %d %s", a.status, a.body)
	}
	// Uploading it again costs nothing: the answer comes before the body
	// is sent ("Expect: 100-continue").
	body := &countingReader{r: bytes.NewReader(prog)}
	req := ts.request(t, "PUT", "/v1/blobs/"+j.Program.SHA256.String(), nil)
	req.Body, req.ContentLength = readCloser{body}, int64(len(prog))
	req.Header.Set("Expect", "100-continue")
	SignRequestDigest(req, j.Program.SHA256, alice.key, time.Now())
	if a := ts.send(t, req); a.status != http.StatusOK {
		t.Fatalf("second upload: %d %s", a.status, a.body)
	}
	if body.n != 0 {
		t.Errorf("second upload sent %d body bytes, want 0", body.n)
	}
	a = ts.do(t, nil, "GET", "/v1/blobs/"+j.Program.SHA256.String(), nil)
	if a.status != 200 || !bytes.Equal(a.body, prog) {
		t.Errorf("blob download: %d, %d bytes", a.status, len(a.body))
	}

	var created JobCreated
	a = ts.do(t, alice, "POST", "/v1/jobs", JobRequest{Canonical: j.Canonical})
	if a.status != http.StatusCreated {
		t.Fatalf("submit job: %d %s", a.status, a.body)
	}
	a.decode(t, &created)
	if want := (JobCreated{Job: HexDigest(j.ID), Tasks: 2}); created != want {
		t.Errorf("job created %+v, want %+v", created, want)
	}
	if a := ts.do(t, alice, "POST", "/v1/jobs", JobRequest{Canonical: j.Canonical}); a.status != http.StatusOK {
		t.Errorf("submit job again: %d %s", a.status, a.body)
	}
	var info JobInfo
	ts.do(t, bob, "GET", "/v1/jobs/"+id, nil).decode(t, &info)
	if info.Job != HexDigest(j.ID) || info.Tasks != 2 || info.Merger != alice.ID() || info.Owner != alice.owner.ID() || info.Quorum != 2 {
		t.Errorf("job info %+v", info)
	}
	var list []JobInfo
	ts.do(t, bob, "GET", "/v1/jobs", nil).decode(t, &list)
	if len(list) != 1 || list[0].Job != HexDigest(j.ID) {
		t.Errorf("job list %+v", list)
	}
	if a := ts.do(t, carol, "GET", "/v1/jobs/"+id+"/canonical", nil); a.status != 200 || !bytes.Equal(a.body, j.Canonical) {
		t.Errorf("canonical: %d %q", a.status, a.body)
	}

	// Bob and carol lease every task once each, once the pool holds their
	// offers.
	for _, p := range []*testPeer{bob, carol} {
		if a := ts.do(t, p, "POST", "/v1/leases", LeaseRequest{Max: 4}); a.status != http.StatusConflict || a.errorBody(t).Code != "no_offer" {
			t.Fatalf("lease before the offer: %d %s, want 409 no_offer", a.status, a.body)
		}
		ts.offer(t, p)
	}
	lease := func(p *testPeer) []LeaseGrant {
		t.Helper()
		var lr LeaseResponse
		a := ts.do(t, p, "POST", "/v1/leases", LeaseRequest{Max: 4})
		if a.status != 200 {
			t.Fatalf("lease: %d %s", a.status, a.body)
		}
		a.decode(t, &lr)
		return lr.Leases
	}
	bobs, carols := lease(bob), lease(carol)
	if len(bobs) != 2 || len(carols) != 2 {
		t.Fatalf("leases: bob %d, carol %d, want 2 each", len(bobs), len(carols))
	}
	for _, l := range append(bobs, carols...) {
		if l.Job != HexDigest(j.ID) || !l.Deadline.After(time.Now()) {
			t.Errorf("lease %+v", l)
		}
	}

	var dl Deadline
	a = ts.do(t, bob, "POST", "/v1/leases/"+bobs[0].Lease+"/heartbeat", nil)
	if a.status != 200 {
		t.Fatalf("heartbeat: %d %s", a.status, a.body)
	}
	a.decode(t, &dl)
	if dl.Deadline.IsZero() {
		t.Errorf("heartbeat deadline is zero")
	}

	result := func(task int64) []byte { return fmt.Appendf(nil, `{"x":%d}`, task+1) }
	submission := func(task int64) ResultSubmission {
		r := result(task)
		return ResultSubmission{Digest: HexDigest(pool.ReplicaDigest(r, false, "")), Result: r}
	}
	// Carol may not act on bob's lease.
	before := ts.state(t)
	for _, op := range []string{"heartbeat", "result", "release"} {
		var body any
		if op == "result" {
			body = submission(bobs[0].Task)
		}
		a := ts.do(t, carol, "POST", "/v1/leases/"+bobs[0].Lease+"/"+op, body)
		if a.status != http.StatusForbidden || a.errorBody(t).Code != "not_your_lease" {
			t.Errorf("carol %s on bob's lease: %d %s", op, a.status, a.body)
		}
	}
	if diff := cmp.Diff(before, ts.state(t)); diff != "" {
		t.Errorf("refused requests changed the state (-before +after):\n%s", diff)
	}

	for _, l := range append(bobs, carols...) {
		p := bob
		if strings.Contains(fmt.Sprint(carols), l.Lease) {
			p = carol
		}
		for range 2 { // a resent submission is idempotent
			if a := ts.do(t, p, "POST", "/v1/leases/"+l.Lease+"/result", submission(l.Task)); a.status != 200 {
				t.Fatalf("submit task %d: %d %s", l.Task, a.status, a.body)
			}
		}
	}

	// Only the merger reads results.
	if a := ts.do(t, bob, "GET", "/v1/jobs/"+id+"/results", nil); a.status != http.StatusForbidden || a.errorBody(t).Code != "not_merger" {
		t.Errorf("results for bob: %d %s", a.status, a.body)
	}
	var res Results
	waitUntil(t, patience(t), "both results", func() bool {
		ts.do(t, alice, "GET", "/v1/jobs/"+id+"/results?after=0&max=10", nil).decode(t, &res)
		return len(res.Results) >= 2
	})
	got := map[int64]string{}
	for _, v := range res.Results {
		if v.Status != pool.OutcomeOK {
			t.Errorf("outcome %+v", v)
		}
		got[v.Task] = string(v.Result)
	}
	if want := map[int64]string{0: string(result(0)), 1: string(result(1))}; !cmp.Equal(want, got) {
		t.Errorf("results %v, want %v", got, want)
	}
	if a := ts.do(t, alice, "POST", "/v1/jobs/"+id+"/ack", Ack{Upto: 2}); a.status != 200 {
		t.Errorf("ack: %d %s", a.status, a.body)
	}
	ts.do(t, alice, "GET", "/v1/jobs/"+id, nil).decode(t, &info)
	if !info.Complete || info.Accepted != 2 || info.Acked != 2 {
		t.Errorf("job after ack %+v", info)
	}

	// The ledger: one receipt per agreeing replica, verifying end to end.
	entries := ts.downloadLedger(t, "")
	if err := pool.VerifyLedger(entries, ts.PublicKey()); err != nil {
		t.Errorf("ledger: %v", err)
	}
	receipts := map[string]int{}
	for _, e := range entries {
		if e.Kind == pool.KindReceipt {
			receipts[e.Peer]++
		}
	}
	if want := map[string]int{bob.ID(): 2, carol.ID(): 2}; !cmp.Equal(want, receipts) {
		t.Errorf("receipts per peer %v, want %v", receipts, want)
	}
	if tail := ts.downloadLedger(t, "?after=1&max=2"); len(tail) != 2 || tail[0].Seq != 2 {
		t.Errorf("ledger page after=1 max=2: %d entries", len(tail))
	}
	var rc Receipts
	ts.do(t, bob, "GET", "/v1/receipts", nil).decode(t, &rc)
	if len(rc.Entries) != 2 {
		t.Errorf("bob's receipts: %d entries", len(rc.Entries))
	}
	checkLedgerForClients(t, ts, bob)
	for _, e := range rc.Entries {
		if e.Peer != bob.ID() {
			t.Errorf("bob's receipts hold %+v", e)
		}
	}

	a = ts.do(t, nil, "GET", "/metrics", nil)
	for _, want := range []string{
		"idlepool_coord_leases_granted_total 4",
		`idlepool_coord_submissions_total{result="taken"} 8`,
		`idlepool_coord_tasks{outcome="ok"} 2`,
		`idlepool_coord_ledger_entries_total{kind="receipt"} 4`,
		`idlepool_coord_ledger_entries_total{kind="deviation"} 0`,
		`idlepool_coord_http_requests_total{code="403",route="POST /v1/leases/{lease}/heartbeat"} 1`,
		"idlepool_coord_http_request_duration_seconds_bucket",
		"process_cpu_seconds_total",
	} {
		if !strings.Contains(string(a.body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

type readCloser struct{ *countingReader }

func (readCloser) Close() error { return nil }

// TestHostileRequests sends malformed and hostile requests: each gets its
// 4xx and a message, and none changes the pool's state.
func TestHostileRequests(t *testing.T) {
	ts := startServer(t, nil)
	peer, stranger := newPeer(t, nil), newPeer(t, nil)
	ts.register(t, peer, "", http.StatusCreated)
	j := testJob(t, "hostile", 1)
	ts.upload(t, peer, programBytes(t, j))
	if a := ts.do(t, peer, "POST", "/v1/jobs", JobRequest{Canonical: j.Canonical}); a.status != http.StatusCreated {
		t.Fatalf("submit: %d %s", a.status, a.body)
	}
	unknown := job.Digest(sha256.Sum256([]byte("nothing"))).String()
	id := j.ID.String()
	other, _ := identity.Generate()

	signedAs := func(p *testPeer, method, path string, body []byte, edit func(*http.Request)) func() answer {
		return func() answer {
			req := ts.request(t, method, path, body)
			if p != nil {
				SignRequest(req, body, p.key, time.Now())
			}
			if edit != nil {
				edit(req)
			}
			return ts.send(t, req)
		}
	}
	send := func(p *testPeer, method, path string, body []byte) func() answer {
		return signedAs(p, method, path, body, nil)
	}
	huge := bytes.Repeat([]byte(" "), 2<<20)
	cases := []struct {
		name   string
		do     func() answer
		status int
		code   string
		msg    string // a part of the message
	}{
		{"bad JSON", send(peer, "POST", "/v1/leases", []byte(`{"max":`)), 400, "bad_request", "malformed JSON"},
		{"not an object", send(peer, "POST", "/v1/leases", []byte(`[1]`)), 400, "bad_request", "not a JSON object"},
		{"unknown field", send(peer, "POST", "/v1/leases", []byte(`{"max":1,"min":2}`)), 400, "bad_request", `unknown field "min"`},
		{"trailing data", send(peer, "POST", "/v1/leases", []byte(`{"max":1} {}`)), 400, "bad_request", "trailing data"},
		{"wrong type", send(peer, "POST", "/v1/leases", []byte(`{"max":"1"}`)), 400, "bad_request", `field "max"`},
		{"out of range", send(peer, "POST", "/v1/leases", []byte(`{"max":100000}`)), 400, "bad_request", "out of range"},
		{"empty job", send(peer, "POST", "/v1/jobs", []byte(`{}`)), 400, "bad_request", "canonical"},
		{"garbage job", send(peer, "POST", "/v1/jobs", []byte(`{"canonical":"AAEC"}`)), 400, "bad_job", "canonical"},
		{"huge body", send(peer, "POST", "/v1/jobs", huge), 413, "too_large", "limit"},
		{"huge chunked body", signedAs(peer, "POST", "/v1/jobs", huge, func(r *http.Request) {
			r.ContentLength = -1 // sent chunked: the limit applies while reading
		}), 413, "too_large", "limit"},
		{"unknown job", send(peer, "GET", "/v1/jobs/"+unknown, nil), 404, "unknown_job", unknown},
		{"unknown job results", send(peer, "GET", "/v1/jobs/"+unknown+"/results", nil), 404, "unknown_job", unknown},
		{"unknown job ack", send(peer, "POST", "/v1/jobs/"+unknown+"/ack", []byte(`{"upto":1}`)), 404, "unknown_job", unknown},
		{"malformed job ID", send(peer, "GET", "/v1/jobs/xyz", nil), 400, "bad_request", "64 hex digits"},
		{"unknown lease", send(peer, "POST", "/v1/leases/0123456789abcdef0123456789abcdef/heartbeat", nil), 404, "unknown_lease", ""},
		{"malformed lease", send(peer, "POST", "/v1/leases/nope/heartbeat", nil), 400, "bad_request", "32 lowercase hex"},
		{"unknown query", send(peer, "GET", "/v1/jobs/"+id+"/results?after=0&limit=3", nil), 400, "bad_request", `"limit"`},
		{"bad query number", send(peer, "GET", "/v1/jobs/"+id+"/results?after=-1", nil), 400, "bad_request", "after"},
		{"negative ack", send(peer, "POST", "/v1/jobs/"+id+"/ack", []byte(`{"upto":-1}`)), 400, "bad_request", "negative"},
		{"no signature", send(nil, "POST", "/v1/leases", []byte(`{"max":1}`)), 401, "unauthorized", "no Authorization"},
		{"unknown peer", send(stranger, "POST", "/v1/leases", []byte(`{"max":1}`)), 401, "unauthorized", "register first"},
		{"wrong key", signedAs(peer, "POST", "/v1/leases", []byte(`{"max":1}`), func(r *http.Request) {
			body := []byte(`{"max":1}`)
			SignRequest(r, body, other, time.Now())
			r.Header.Set("Authorization", strings.Replace(r.Header.Get("Authorization"), other.ID(), peer.ID(), 1))
		}), 401, "unauthorized", "does not verify"},
		{"tampered body", signedAs(peer, "POST", "/v1/leases", []byte(`{"max":2}`), func(r *http.Request) {
			SignRequest(r, []byte(`{"max":1}`), peer.key, time.Now())
		}), 401, "unauthorized", "does not verify"},
		{"other path", signedAs(peer, "GET", "/v1/jobs/"+id, nil, func(r *http.Request) {
			r2 := ts.request(t, "GET", "/v1/jobs", nil)
			SignRequest(r2, nil, peer.key, time.Now())
			r.Header = r2.Header
		}), 401, "unauthorized", "does not verify"},
		{"stale timestamp", signedAs(peer, "POST", "/v1/leases", []byte(`{"max":1}`), func(r *http.Request) {
			SignRequest(r, []byte(`{"max":1}`), peer.key, time.Now().Add(-10*time.Minute))
		}), 401, "clock_skew", "clock"},
		{"future timestamp", signedAs(peer, "POST", "/v1/leases", []byte(`{"max":1}`), func(r *http.Request) {
			SignRequest(r, []byte(`{"max":1}`), peer.key, time.Now().Add(10*time.Minute))
		}), 401, "clock_skew", "clock"},
		{"garbled header", signedAs(peer, "POST", "/v1/leases", []byte(`{"max":1}`), func(r *http.Request) {
			r.Header.Set("Authorization", "Bearer abc")
		}), 401, "unauthorized", "scheme"},
		{"blob digest mismatch", send(peer, "PUT", "/v1/blobs/"+unknown, []byte("other bytes")), 401, "unauthorized", "digest in the path"},
		{"blob body mismatch", signedAs(peer, "PUT", "/v1/blobs/"+unknown, []byte("other bytes"), func(r *http.Request) {
			SignRequestDigest(r, sha256.Sum256([]byte("nothing")), peer.key, time.Now())
		}), 400, "digest_mismatch", "SHA-256"},
		{"blob unknown", send(nil, "GET", "/v1/blobs/"+unknown, nil), 404, "unknown_blob", unknown},
		{"no route", send(nil, "GET", "/v2/everything", nil), 404, "not_found", "/v2/everything"},
		{"register bad endorsement", func() answer {
			reg := peer.registration("")
			reg.Key = stranger.key.Public() // endorsement is over peer's key
			body, _ := json.Marshal(reg)
			return signedAs(stranger, "POST", "/v1/peers", body, nil)()
		}, 401, "bad_endorsement", "endorsement"},
		{"register someone else's key", func() answer {
			body, _ := json.Marshal(stranger.registration(""))
			return signedAs(peer, "POST", "/v1/peers", body, nil)()
		}, 401, "unauthorized", "registers the key"},
		{"register short key", send(stranger, "POST", "/v1/peers", []byte(`{"key":"AAAA","owner_key":"AAAA","endorsement":"AAAA"}`)), 400, "bad_request", "32 bytes"},
	}
	before := ts.state(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := tc.do()
			e := a.errorBody(t)
			if a.status != tc.status || e.Code != tc.code || !strings.Contains(e.Error, tc.msg) {
				t.Errorf("got %d %q %q, want %d %q containing %q", a.status, e.Code, e.Error, tc.status, tc.code, tc.msg)
			}
		})
	}
	if diff := cmp.Diff(before, ts.state(t)); diff != "" {
		t.Errorf("refused requests changed the state (-before +after):\n%s", diff)
	}
	if _, ok := ts.sched.Peer(stranger.ID()); ok {
		t.Errorf("a refused registration registered %s", stranger.ID())
	}
}

func TestInviteOnly(t *testing.T) {
	allowed := newPeer(t, nil)
	const token = "0123456789abcdef-invite"
	ts := startServer(t, func(c *Config) {
		c.InviteToken = token
		c.AllowOwners = []string{allowed.owner.ID()}
	})
	var info PoolInfo
	ts.do(t, nil, "GET", "/v1/pool", nil).decode(t, &info)
	if !info.InviteOnly {
		t.Errorf("pool info says open")
	}
	stranger := newPeer(t, nil)
	for _, invite := range []string{"", "wrong-token-of-some-length"} {
		a := ts.register(t, stranger, invite, http.StatusForbidden)
		if e := a.errorBody(t); e.Code != "not_invited" || e.Error != notInvited {
			t.Errorf("stranger with invite %q: %+v", invite, e)
		}
	}
	if _, ok := ts.sched.Peer(stranger.ID()); ok {
		t.Errorf("a stranger was registered")
	}
	ts.register(t, stranger, token, http.StatusCreated)
	ts.register(t, allowed, "", http.StatusCreated)
	sibling := newPeer(t, allowed.owner) // another device of the allowed owner
	ts.register(t, sibling, "", http.StatusCreated)
}

// TestRestart stops a coordinator and starts another on its data
// directory: same key, same peers, same jobs.
func TestRestart(t *testing.T) {
	dir := t.TempDir()
	useDir := func(c *Config) { c.DataDir = dir }
	ts, stop := runServer(t, useDir)
	p := newPeer(t, nil)
	ts.register(t, p, "", http.StatusCreated)
	j := testJob(t, "restart", 3)
	ts.upload(t, p, programBytes(t, j))
	if a := ts.do(t, p, "POST", "/v1/jobs", JobRequest{Canonical: j.Canonical}); a.status != http.StatusCreated {
		t.Fatalf("submit: %d %s", a.status, a.body)
	}
	key := ts.PublicKey()
	stop()
	if a, err := http.Get(ts.URL() + "/healthz"); err == nil {
		a.Body.Close()
		t.Errorf("the stopped coordinator still answers")
	}

	ts = startServer(t, useDir)
	if !bytes.Equal(key, ts.PublicKey()) {
		t.Errorf("the coordinator key changed across a restart")
	}
	ts.register(t, p, "", http.StatusOK)
	var info JobInfo
	ts.do(t, p, "GET", "/v1/jobs/"+j.ID.String(), nil).decode(t, &info)
	if info.Tasks != 3 {
		t.Errorf("job after restart %+v", info)
	}
	if a := ts.upload(t, p, programBytes(t, j)); a.status != http.StatusOK {
		t.Errorf("blob after restart: %d", a.status)
	}
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"defaults", Config{DataDir: "d"}, true},
		{"no data dir", Config{}, false},
		{"bad listen", Config{DataDir: "d", Listen: "localhost"}, false},
		{"short token", Config{DataDir: "d", InviteToken: "abc"}, false},
		{"bad owner", Config{DataDir: "d", AllowOwners: []string{"alice"}}, false},
		{"good owner", Config{DataDir: "d", AllowOwners: []string{"id" + strings.Repeat("a", 32)}}, true},
		{"control in pool name", Config{DataDir: "d", Pool: "a\nb"}, false},
		{"long token", Config{DataDir: "d", InviteToken: strings.Repeat("t", 1025)}, false},
		{"negative body timeout", Config{DataDir: "d", BodyTimeout: -time.Second}, false},
		{"negative max conns", Config{DataDir: "d", MaxConns: -1}, false},
		{"more conns than files", Config{DataDir: "d", MaxConns: 1 << 30}, false},
		{"small body memory", Config{DataDir: "d", MaxBodyMemory: 1 << 10}, false},
		{"body in memory over body memory", Config{DataDir: "d", MaxBodyMemory: 1 << 20, BodyInMemory: 2 << 20}, false},
		{"limits", Config{DataDir: "d", MaxConns: 8, BodyTimeout: time.Second, MinBodyRate: 1, MaxBodyMemory: 1 << 20, BodyInMemory: 1}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if (err == nil) != tc.ok {
				t.Fatalf("Validate: %v, want ok=%v", err, tc.ok)
			}
			if tc.ok && (tc.cfg.Listen != DefaultListen || tc.cfg.Pool != "default" || tc.cfg.Logger == nil) {
				t.Errorf("defaults not filled in: %+v", tc.cfg)
			}
			if tc.ok && (tc.cfg.MaxConns < 1 || tc.cfg.ReadHeaderTimeout <= 0 || tc.cfg.BodyTimeout <= 0 || tc.cfg.IdleTimeout <= 0 ||
				tc.cfg.MinBodyRate < 1 || tc.cfg.MaxBodyMemory < maxJSONBody || tc.cfg.BodyInMemory < 1 || tc.cfg.MaxSpoolBytes < 1) {
				t.Errorf("limits not filled in: %+v", tc.cfg)
			}
		})
	}
}

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestLeaseExpiry lets a lease pass its deadline on an injected clock:
// its holder gets 410 and the task is leased again to another peer.
func TestLeaseExpiry(t *testing.T) {
	clock := &fakeClock{now: time.Now()}
	ts := startServer(t, func(c *Config) { c.Now = clock.Now })
	owner, slow, fast, third := newPeer(t, nil), newPeer(t, nil), newPeer(t, nil), newPeer(t, nil)
	do := func(p *testPeer, method, path string, v any) answer {
		t.Helper()
		body, raw := v.([]byte)
		if !raw && v != nil {
			body, _ = json.Marshal(v)
		}
		req := ts.request(t, method, path, body)
		SignRequest(req, body, p.key, clock.Now()) // on the coordinator's clock
		return ts.send(t, req)
	}
	leases := func(p *testPeer) []LeaseGrant {
		t.Helper()
		var lr LeaseResponse
		do(p, "POST", "/v1/leases", LeaseRequest{Max: 4}).decode(t, &lr)
		return lr.Leases
	}
	for _, p := range []*testPeer{owner, slow, fast, third} {
		if a := do(p, "POST", "/v1/peers", p.registration("")); a.status != http.StatusCreated {
			t.Fatalf("register: %d %s", a.status, a.body)
		}
	}
	for _, p := range []*testPeer{slow, fast, third} {
		ts.offer(t, p)
	}
	j := testJob(t, "expiry", 1)
	do(owner, "PUT", "/v1/blobs/"+j.Program.SHA256.String(), programBytes(t, j))
	if a := do(owner, "POST", "/v1/jobs", JobRequest{Canonical: j.Canonical}); a.status != http.StatusCreated {
		t.Fatalf("submit: %d %s", a.status, a.body)
	}
	slows, fasts := leases(slow), leases(fast)
	if len(slows) != 1 || len(fasts) != 1 {
		t.Fatalf("leases: slow %d, fast %d, want 1 each", len(slows), len(fasts))
	}
	clock.Advance(job.DefaultLeaseTimeout / 2)
	if a := do(fast, "POST", "/v1/leases/"+fasts[0].Lease+"/heartbeat", nil); a.status != http.StatusOK {
		t.Fatalf("fast heartbeat: %d %s", a.status, a.body)
	}
	if got := leases(third); len(got) != 0 {
		t.Fatalf("both replicas are leased, yet a third peer got %+v", got)
	}
	clock.Advance(job.DefaultLeaseTimeout/2 + time.Second) // past slow's deadline only

	l := slows[0]
	a := do(slow, "POST", "/v1/leases/"+l.Lease+"/heartbeat", nil)
	if a.status != http.StatusGone || a.errorBody(t).Code != "lease_expired" {
		t.Errorf("heartbeat after the deadline: %d %s", a.status, a.body)
	}
	r := []byte(`{"x":1}`)
	a = do(slow, "POST", "/v1/leases/"+l.Lease+"/result", ResultSubmission{Digest: HexDigest(pool.ReplicaDigest(r, false, "")), Result: r})
	if a.status != http.StatusGone {
		t.Errorf("result after the deadline: %d %s", a.status, a.body)
	}
	// The task is not abandoned: it is leased again.
	if got := leases(third); len(got) != 1 || got[0].Task != l.Task || got[0].Lease == l.Lease {
		t.Errorf("after expiry the third peer got %+v, want a new lease of task %d", got, l.Task)
	}
	a = ts.do(t, nil, "GET", "/metrics", nil)
	if !strings.Contains(string(a.body), "idlepool_coord_leases_expired_total 2") {
		t.Errorf("metrics do not count 2 expired leases")
	}
}

// TestLyingPeer has one peer return wrong bytes: the task is leased again
// until a majority of owners, one more than the quorum after the split,
// agrees, the liar earns a deviation and no
// receipt, and the merger sees only the agreed result.
func TestLyingPeer(t *testing.T) {
	ts := startServer(t, nil)
	owner, honest1, liar, honest2 := newPeer(t, nil), newPeer(t, nil), newPeer(t, nil), newPeer(t, nil)
	honest3 := newPeer(t, nil)
	for _, p := range []*testPeer{owner, honest1, liar, honest2, honest3} {
		ts.register(t, p, "", http.StatusCreated)
		ts.offer(t, p)
	}
	j := testJob(t, "liar", 1)
	ts.upload(t, owner, programBytes(t, j))
	if a := ts.do(t, owner, "POST", "/v1/jobs", JobRequest{Canonical: j.Canonical}); a.status != http.StatusCreated {
		t.Fatalf("submit: %d %s", a.status, a.body)
	}
	compute := func(p *testPeer, result string) {
		t.Helper()
		var lr LeaseResponse
		ts.do(t, p, "POST", "/v1/leases", LeaseRequest{Max: 1}).decode(t, &lr)
		if len(lr.Leases) != 1 {
			t.Fatalf("peer got %d leases, want 1", len(lr.Leases))
		}
		r := []byte(result)
		sub := ResultSubmission{Digest: HexDigest(pool.ReplicaDigest(r, false, "")), Result: r}
		if a := ts.do(t, p, "POST", "/v1/leases/"+lr.Leases[0].Lease+"/result", sub); a.status != 200 {
			t.Fatalf("result: %d %s", a.status, a.body)
		}
	}
	compute(honest1, `{"x":1}`)
	compute(liar, `{"x":666}`)
	compute(honest2, `{"x":1}`) // 2-1 after a split is a bare majority: one more
	compute(honest3, `{"x":1}`) // three owners agree against one

	var res Results
	waitUntil(t, patience(t), "the agreed result", func() bool {
		ts.do(t, owner, "GET", "/v1/jobs/"+j.ID.String()+"/results", nil).decode(t, &res)
		return len(res.Results) > 0
	})
	if len(res.Results) != 1 || res.Results[0].Status != pool.OutcomeOK || string(res.Results[0].Result) != `{"x":1}` {
		t.Fatalf("results %+v, want the agreed {\"x\":1}", res.Results)
	}
	kinds := map[string]string{}
	for _, e := range ts.downloadLedger(t, "") {
		kinds[e.Peer] = e.Kind
	}
	want := map[string]string{honest1.ID(): pool.KindReceipt, honest2.ID(): pool.KindReceipt, honest3.ID(): pool.KindReceipt, liar.ID(): pool.KindDeviation}
	if diff := cmp.Diff(want, kinds); diff != "" {
		t.Errorf("ledger kinds per peer (-want +got):\n%s", diff)
	}
	var rc Receipts
	ts.do(t, liar, "GET", "/v1/receipts", nil).decode(t, &rc)
	if len(rc.Entries) != 1 || rc.Entries[0].Kind != pool.KindDeviation || rc.Entries[0].Cost != 0 {
		t.Errorf("the liar's ledger entries %+v, want one deviation of cost 0", rc.Entries)
	}
}

// TestCancelJob: only a device of the job's owner cancels it (403
// not_owner otherwise, 200 again); its live lease answers 410
// job_cancelled at the next heartbeat and submission, nothing more is
// leased, and submitting the job again is 410.
func TestCancelJob(t *testing.T) {
	ts := startServer(t, nil)
	owner, donor := newPeer(t, nil), newPeer(t, nil)
	ownerLaptop := newPeer(t, owner.owner)
	for _, p := range []*testPeer{owner, ownerLaptop, donor} {
		ts.register(t, p, "", http.StatusCreated)
	}
	ts.offer(t, donor)
	j := testJob(t, "cancel", 2)
	ts.upload(t, owner, programBytes(t, j))
	if a := ts.do(t, owner, "POST", "/v1/jobs", JobRequest{Canonical: j.Canonical}); a.status != http.StatusCreated {
		t.Fatalf("submit: %d %s", a.status, a.body)
	}
	var lr LeaseResponse
	ts.do(t, donor, "POST", "/v1/leases", LeaseRequest{Max: 1}).decode(t, &lr)
	if len(lr.Leases) != 1 {
		t.Fatalf("leases %+v, want 1", lr.Leases)
	}
	path := "/v1/jobs/" + j.ID.String() + "/cancel"
	if a := ts.do(t, donor, "POST", path, nil); a.status != http.StatusForbidden || a.errorBody(t).Code != "not_owner" {
		t.Errorf("cancel by another owner: %d %s, want 403 not_owner", a.status, a.body)
	}
	for _, p := range []*testPeer{ownerLaptop, owner} {
		var info JobInfo
		a := ts.do(t, p, "POST", path, nil)
		if a.status != http.StatusOK {
			t.Fatalf("cancel: %d %s", a.status, a.body)
		}
		a.decode(t, &info)
		if !info.Cancelled || info.Leased != 0 || info.Complete {
			t.Errorf("status after cancel: %+v", info)
		}
	}
	l := lr.Leases[0].Lease
	if a := ts.do(t, donor, "POST", "/v1/leases/"+l+"/heartbeat", nil); a.status != http.StatusGone || a.errorBody(t).Code != "job_cancelled" {
		t.Errorf("heartbeat of a withdrawn lease: %d %s, want 410 job_cancelled", a.status, a.body)
	}
	r := []byte(`{"x":1}`)
	sub := ResultSubmission{Digest: HexDigest(pool.ReplicaDigest(r, false, "")), Result: r}
	if a := ts.do(t, donor, "POST", "/v1/leases/"+l+"/result", sub); a.status != http.StatusGone || a.errorBody(t).Code != "job_cancelled" {
		t.Errorf("result for a withdrawn lease: %d %s, want 410 job_cancelled", a.status, a.body)
	}
	ts.do(t, donor, "POST", "/v1/leases", LeaseRequest{Max: 4}).decode(t, &lr)
	if len(lr.Leases) != 0 {
		t.Errorf("leases after cancel: %+v", lr.Leases)
	}
	if a := ts.do(t, owner, "POST", "/v1/jobs", JobRequest{Canonical: j.Canonical}); a.status != http.StatusGone || a.errorBody(t).Code != "job_cancelled" {
		t.Errorf("submitting a cancelled job again: %d %s, want 410 job_cancelled", a.status, a.body)
	}
}

// checkLedgerForClients checks that a client of API version 6, which
// knows no "tree", reads the ledger and p's receipts signed one by one,
// each verifying on its own, as does an agent that says no version; one
// of this version, or a download without the header, reads the entries
// as stored, signed per batch, and the whole ledger verifies. Receipts
// asked for with Accept: application/cbor come in the compact form
// (pool.AppendEntriesCBOR), the same entries as in JSON; any other
// Accept gets the JSON answer, the bytes encoding/json writes.
func checkLedgerForClients(t *testing.T, ts *testServer, p *testPeer) {
	t.Helper()
	tests := []struct {
		name   string
		api    string // "": no header
		peer   *testPeer
		legacy bool
		accept string // "": no header
		cbor   bool   // the answer is in CBOR
	}{
		{name: "ledger, API 6", api: "6", legacy: true},
		{name: "ledger, this API", api: strconv.Itoa(APIVersion)},
		{name: "ledger, no header"},
		{name: "ledger, this API, CBOR accepted", api: strconv.Itoa(APIVersion), accept: "application/cbor"},
		{name: "receipts, API 6", api: "6", peer: p, legacy: true},
		{name: "receipts, no header", peer: p, legacy: true},
		{name: "receipts, this API", api: strconv.Itoa(APIVersion), peer: p},
		{name: "receipts, this API, JSON accepted", api: strconv.Itoa(APIVersion), peer: p, accept: "application/json"},
		{name: "receipts, this API, CBOR", api: strconv.Itoa(APIVersion), peer: p, accept: "application/cbor, application/json;q=0.5", cbor: true},
		{name: "receipts, this API, CBOR second", api: strconv.Itoa(APIVersion), peer: p, accept: "text/plain, Application/CBOR", cbor: true},
		{name: "receipts, this API, CBOR refused", api: strconv.Itoa(APIVersion), peer: p, accept: "application/cbor;q=0, application/json"},
		{name: "receipts, API 6, CBOR", api: "6", peer: p, legacy: true, accept: "application/cbor", cbor: true},
	}
	jsonEntries := map[bool][]pool.Entry{} // by legacy
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := "/v1/ledger"
			if tc.peer != nil {
				path = "/v1/receipts"
			}
			req := ts.request(t, "GET", path, nil)
			if tc.api != "" {
				req.Header.Set(APIHeader, tc.api)
			}
			if tc.accept != "" {
				req.Header.Set("Accept", tc.accept)
			}
			if tc.peer != nil {
				SignRequest(req, nil, tc.peer.key, time.Now())
			}
			a := ts.send(t, req)
			if a.status != http.StatusOK {
				t.Fatalf("%d %s", a.status, a.body)
			}
			// The answer depends on these request headers: a cache must
			// key on them (RFC 9110, section 12.5.5).
			wantVary := APIHeader
			if tc.peer != nil {
				wantVary = "Accept, " + APIHeader
			}
			if v := a.header.Get("Vary"); v != wantVary {
				t.Errorf("Vary %q, want %q", v, wantVary)
			}
			// A receipts answer says its length, so that a device reads
			// it into a buffer of that size (writeBody).
			if cl := a.header.Get("Content-Length"); tc.peer != nil && cl != strconv.Itoa(len(a.body)) {
				t.Errorf("Content-Length %q, want %d", cl, len(a.body))
			}
			var entries []pool.Entry
			switch {
			case tc.cbor:
				if ct := a.header.Get("Content-Type"); ct != "application/cbor" {
					t.Fatalf("Content-Type %q, want application/cbor", ct)
				}
				var err error
				if entries, err = pool.DecodeEntriesCBOR(a.body); err != nil {
					t.Fatal(err)
				}
				for _, e := range entries {
					if (e.Tree == nil) != tc.legacy {
						t.Errorf("entry %d: with a tree proof: %v, want %v", e.Seq, e.Tree != nil, !tc.legacy)
					}
				}
				if diff := cmp.Diff(jsonEntries[tc.legacy], entries, cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("entries in CBOR and in JSON differ (-json +cbor):\n%s", diff)
				}
			case tc.peer != nil:
				if ct := a.header.Get("Content-Type"); ct != "application/json" {
					t.Fatalf("Content-Type %q, want application/json", ct)
				}
				var rc Receipts
				a.decode(t, &rc)
				entries = rc.Entries
				jsonEntries[tc.legacy] = entries
				// The bytes are those encoding/json writes (writeJSON).
				var want bytes.Buffer
				enc := json.NewEncoder(&want)
				if err := enc.Encode(Receipts{Entries: entries}); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(want.Bytes(), a.body) {
					t.Errorf("JSON answer differs from encoding/json's:\n%s\nwant\n%s", a.body, want.Bytes())
				}
			default:
				for line := range bytes.Lines(a.body) {
					var e pool.Entry
					if err := json.Unmarshal(line, &e); err != nil {
						t.Fatal(err)
					}
					entries = append(entries, e)
				}
			}
			if len(entries) == 0 {
				t.Fatal("no entries")
			}
			if got := bytes.Contains(a.body, []byte(`"tree"`)); !tc.cbor && got == tc.legacy {
				t.Errorf("entries with a tree proof: %v, want %v", got, !tc.legacy)
			}
			for _, e := range entries {
				if err := pool.VerifyEntry(e, ts.PublicKey()); err != nil {
					t.Errorf("VerifyEntry %d: %v", e.Seq, err)
				}
			}
			if tc.peer == nil && !tc.legacy {
				if err := pool.VerifyLedger(entries, ts.PublicKey()); err != nil {
					t.Errorf("VerifyLedger: %v", err)
				}
			}
		})
	}
}
