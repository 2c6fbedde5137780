package coord

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"idlepool/coord/api"
	"idlepool/identity"
	"idlepool/job"
	"idlepool/pool"
)

// testServer runs a real coordinator on 127.0.0.1 with its state in a
// temporary directory, and stops it when the test ends.
type testServer struct {
	*Server
	client *http.Client
}

func startServer(t *testing.T, edit func(*Config)) *testServer {
	t.Helper()
	ts, stop := runServer(t, edit)
	t.Cleanup(stop)
	return ts
}

// runServer starts a coordinator and returns a function that stops it
// and waits for Serve to return.
func runServer(t *testing.T, edit func(*Config)) (*testServer, func()) {
	t.Helper()
	cfg := Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Pool: "test"}
	if edit != nil {
		edit(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s, err := New(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatalf("New: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	// A transport of its own: its idle connections close with the server,
	// and it waits for 100 Continue as long as a server may think.
	tr := &http.Transport{ExpectContinueTimeout: time.Minute}
	// A server that closes idle connections within moments (the slow
	// client tests) may close one just as the client sends a POST on
	// it, which the client does not send again ("server closed idle
	// connection"): each request gets a connection of its own there.
	tr.DisableKeepAlives = cfg.IdleTimeout > 0 && cfg.IdleTimeout < time.Second
	ts := &testServer{Server: s, client: &http.Client{Transport: tr, Timeout: time.Minute}}
	var once sync.Once
	return ts, func() {
		once.Do(func() {
			tr.CloseIdleConnections()
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Serve: %v", err)
			}
		})
	}
}

// testPeer is a device with its own key and an owner key. With macFor
// set (the pool's public key), it authenticates its requests with a MAC
// under its request key with that pool instead of signing them (but its
// registration).
type testPeer struct {
	key, owner *identity.Key
	macFor     ed25519.PublicKey
}

// authenticate signs req, whose body is body, or sets its MAC (macFor).
func (p *testPeer) authenticate(t *testing.T, req *http.Request, body []byte) {
	t.Helper()
	if p.macFor == nil || req.URL.Path == "/v1/peers" {
		SignRequest(req, body, p.key, time.Now())
		return
	}
	shared, err := p.key.Agree(p.macFor)
	if err != nil {
		t.Fatal(err)
	}
	k := api.RequestKey(shared, p.key.Public(), p.macFor)
	api.MACRequestDigest(req, sha256.Sum256(body), p.ID(), &k, time.Now())
}

func newPeer(t *testing.T, owner *identity.Key) *testPeer {
	t.Helper()
	k, err := identity.Generate()
	if err != nil {
		t.Fatal(err)
	}
	if owner == nil {
		if owner, err = identity.Generate(); err != nil {
			t.Fatal(err)
		}
	}
	return &testPeer{key: k, owner: owner}
}

func (p *testPeer) ID() string { return p.key.ID() }

// answer is a response read in full.
type answer struct {
	status int
	body   []byte
	header http.Header
}

// errorBody decodes the body as an ErrorBody.
func (a answer) errorBody(t *testing.T) ErrorBody {
	t.Helper()
	var e ErrorBody
	if err := json.Unmarshal(a.body, &e); err != nil {
		t.Fatalf("error answer %d is not JSON: %v: %q", a.status, err, a.body)
	}
	return e
}

// decode decodes the body into v.
func (a answer) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(a.body, v); err != nil {
		t.Fatalf("answer %d: %v: %q", a.status, err, a.body)
	}
}

// request builds a request to the server with body.
func (ts *testServer) request(t *testing.T, method, path string, body []byte) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, ts.URL()+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req
}

// send sends req and reads the answer.
func (ts *testServer) send(t *testing.T, req *http.Request) answer {
	t.Helper()
	resp, err := ts.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read answer: %v", req.Method, req.URL, err)
	}
	return answer{status: resp.StatusCode, body: b, header: resp.Header}
}

// doCBOR sends a request signed by p with body (v in its CBOR form,
// api.MarshalCBOR, or v itself when []byte) as application/cbor, and
// Accept as given ("" for none).
func (ts *testServer) doCBOR(t *testing.T, p *testPeer, method, path string, v any, accept string) answer {
	t.Helper()
	body, ok := v.([]byte)
	if !ok {
		var err error
		if body, err = api.MarshalCBOR(v); err != nil {
			t.Fatal(err)
		}
	}
	req := ts.request(t, method, path, body)
	req.Header.Set("Content-Type", api.CBORContentType)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	SignRequest(req, body, p.key, time.Now())
	return ts.send(t, req)
}

// do sends a request signed by p (unsigned when p is nil); v, when not
// nil and not []byte, is encoded as JSON.
// offer publishes p's offer (testOffer, 10 minutes from the server's
// clock): a peer is leased nothing without one.
func (ts *testServer) offer(t *testing.T, p *testPeer) {
	t.Helper()
	now := ts.cfg.Now()
	body, _ := json.Marshal(testOffer(p, now, 10*time.Minute))
	req := ts.request(t, "POST", "/v1/offers", body)
	SignRequest(req, body, p.key, now)
	if a := ts.send(t, req); a.status != http.StatusOK {
		t.Fatalf("offer of %s: %d %s", p.ID(), a.status, a.body)
	}
}

func (ts *testServer) do(t *testing.T, p *testPeer, method, path string, v any) answer {
	t.Helper()
	var body []byte
	switch b := v.(type) {
	case nil:
	case []byte:
		body = b
	default:
		var err error
		if body, err = json.Marshal(v); err != nil {
			t.Fatal(err)
		}
	}
	req := ts.request(t, method, path, body)
	if p != nil {
		SignRequest(req, body, p.key, time.Now())
	}
	return ts.send(t, req)
}

// registration is p's registration body with invite.
func (p *testPeer) registration(invite string) Registration {
	return Registration{Key: p.key.Public(), OwnerKey: p.owner.Public(),
		Endorsement: p.owner.Sign(pool.EndorsementMessage(p.key.Public())), Name: "test device", Invite: invite}
}

// register registers p and checks the answer's status.
func (ts *testServer) register(t *testing.T, p *testPeer, invite string, want int) answer {
	t.Helper()
	a := ts.do(t, p, "POST", "/v1/peers", p.registration(invite))
	if a.status != want {
		t.Fatalf("register %s: status %d, want %d: %s", p.ID(), a.status, want, a.body)
	}
	return a
}

// upload uploads data as a blob signed by p and returns the status.
func (ts *testServer) upload(t *testing.T, p *testPeer, data []byte) answer {
	t.Helper()
	d := job.Digest(sha256.Sum256(data))
	return ts.do(t, p, "PUT", "/v1/blobs/"+d.String(), data)
}

// testJob writes a tiny program and a manifest of tasks tasks at quorum 2
// into a temporary directory and plans it.
func testJob(t *testing.T, name string, tasks int) *job.Job {
	t.Helper()
	return testJobWith(t, name, tasks, "")
}

// programBytes returns the program file of j.
func programBytes(t *testing.T, j *job.Job) []byte {
	t.Helper()
	b, err := os.ReadFile(j.Program.Path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// countingReader counts the bytes read from it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}
