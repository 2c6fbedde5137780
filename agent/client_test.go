package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/agent"
	"idlepool/coord"
	"idlepool/identity"
)

func TestAPIErrors(t *testing.T) {
	tests := []struct {
		status    int
		body      string
		sentinel  error
		retryable bool
		code, msg string
	}{
		{400, `{"error":"bad json","code":"bad_request"}`, agent.ErrBadRequest, false, "bad_request", "bad json"},
		{401, `{"error":"bad signature","code":"unauthorized"}`, agent.ErrUnauthorized, false, "unauthorized", "bad signature"},
		{403, `{"error":"not invited","code":"forbidden"}`, agent.ErrForbidden, false, "forbidden", "not invited"},
		{404, `{"error":"unknown job","code":"not_found"}`, agent.ErrNotFound, false, "not_found", "unknown job"},
		{409, `{"error":"task decided","code":"conflict"}`, agent.ErrConflict, false, "conflict", "task decided"},
		{410, `{"error":"lease expired","code":"lease_expired"}`, agent.ErrLeaseExpired, false, "lease_expired", "lease expired"},
		{413, `{"error":"too large","code":"too_large"}`, agent.ErrTooLarge, false, "too_large", "too large"},
		{429, `slow down`, nil, true, "", "slow down"},
		{500, `{"error":"disk full","code":"internal"}`, agent.ErrUnavailable, true, "internal", "disk full"},
		{503, `not json`, agent.ErrUnavailable, true, "", "not json"},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tc.status)
				fmt.Fprint(w, tc.body)
			}))
			defer srv.Close()
			c, err := agent.NewClient(srv.URL, mustKey(t), srv.Client())
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Lease(context.Background(), 1)
			var ae *agent.APIError
			if !errors.As(err, &ae) {
				t.Fatalf("error %v is not an *APIError", err)
			}
			if diff := cmp.Diff([]any{tc.status, tc.code, tc.msg}, []any{ae.Status, ae.Code, ae.Message}); diff != "" {
				t.Errorf("APIError (-want +got):\n%s", diff)
			}
			if tc.sentinel != nil && !errors.Is(err, tc.sentinel) {
				t.Errorf("errors.Is(%v, %v) = false", err, tc.sentinel)
			}
			if got := agent.Retryable(err); got != tc.retryable {
				t.Errorf("Retryable = %v, want %v", got, tc.retryable)
			}
		})
	}
}

func TestUnreachableIsRetryable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	c, err := agent.NewClient(url, mustKey(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Lease(context.Background(), 1)
	if !errors.Is(err, agent.ErrUnavailable) || !agent.Retryable(err) {
		t.Fatalf("error %v: want ErrUnavailable, retryable", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err = c.Lease(ctx, 1); !errors.Is(err, context.Canceled) || agent.Retryable(err) {
		t.Fatalf("with a cancelled context: %v, want context.Canceled, not retryable", err)
	}
}

func TestNewClientRefusesBadURLs(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:7420", "ftp://host", "http://"} {
		if _, err := agent.NewClient(u, mustKey(t), nil); err == nil {
			t.Errorf("NewClient(%q) accepted it", u)
		}
	}
}

func TestPoolKeyIsPinned(t *testing.T) {
	key := mustKey(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/pool" {
			http.NotFound(w, r)
			return
		}
		json.NewEncoder(w).Encode(coord.PoolInfo{Pool: "lab", Key: key.Public(), Version: 1})
	}))
	defer srv.Close()
	c, err := agent.NewClient(srv.URL, mustKey(t), srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	cfg := t.TempDir()
	ctx := context.Background()
	for range 2 { // first use pins, second use checks
		info, err := agent.PoolKey(ctx, c, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if info.Pool != "lab" || identity.IDOf(info.Key) != key.ID() {
			t.Fatalf("pool info %+v", info)
		}
	}
	st, err := os.Stat(agent.PinFile(cfg, srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		t.Errorf("pin file mode %v, want private", st.Mode().Perm())
	}
	key = mustKey(t) // the pool answers with another key now
	_, err = agent.PoolKey(ctx, c, cfg)
	if !errors.Is(err, agent.ErrPoolKeyChanged) || !strings.Contains(err.Error(), "lab") {
		t.Fatalf("after the key changed: %v, want ErrPoolKeyChanged", err)
	}
}

func TestReadLedgerRefusesDamage(t *testing.T) {
	tests := []struct{ name, text string }{
		{"not json", "{\n"},
		{"unknown key", `{"seq":1,"prev":"` + strings.Repeat("0", 64) + `","bogus":1}` + "\n"},
		{"bad digest", `{"seq":1,"prev":"xyz","kind":"receipt","job":"","digest":"","sig":""}` + "\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := agent.ReadLedger(strings.NewReader(tc.text)); err == nil {
				t.Fatal("accepted")
			}
		})
	}
	if e, err := agent.ReadLedger(strings.NewReader("\n\n")); err != nil || len(e) != 0 {
		t.Fatalf("blank lines: %v, %v", e, err)
	}
}

// FuzzReadLedger feeds ReadLedger arbitrary downloads: it must never
// panic, and what it accepts must encode back to entries that decode the
// same.
func FuzzReadLedger(f *testing.F) {
	zero := strings.Repeat("0", 64)
	f.Add([]byte(`{"seq":1,"prev":"` + zero + `","kind":"receipt","pool":"p","job":"` + zero + `","task":0,"peer":"x","owner":"y","lease":"l","digest":"` + zero + `","cost":1,"time":0,"sig":""}` + "\n"))
	f.Add([]byte("\n\n{}\n"))
	f.Add([]byte(`{"seq":-1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		entries, err := agent.ReadLedger(strings.NewReader(string(b)))
		if err != nil {
			return
		}
		for _, e := range entries {
			enc, err := json.Marshal(e)
			if err != nil {
				t.Fatalf("accepted entry does not encode: %v", err)
			}
			back, err := agent.ReadLedger(strings.NewReader(string(enc)))
			if err != nil || len(back) != 1 {
				t.Fatalf("re-decoding %s: %v", enc, err)
			}
			if diff := cmp.Diff(e, back[0]); diff != "" {
				t.Fatalf("round trip changed the entry:\n%s", diff)
			}
		}
	})
}

// A clustered pool's client fails over: a node that cannot be reached
// and a node answering 503 "no_leader" pass the request on to the next
// node, with its body and a signature; the node that answered is asked
// first next time; when no node answers, the error is ErrUnavailable and
// the pool counts as unreachable.
func TestClientFailsOver(t *testing.T) {
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close() // connection refused from now on
	var noLeaderHits, okHits int
	noLeader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		noLeaderHits++
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, `{"error":"no node in charge","code":%q}`, coord.CodeNoLeader)
	}))
	defer noLeader.Close()
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		okHits++
		b := make([]byte, 16)
		n, _ := r.Body.Read(b)
		if string(b[:n]) != "{}" || !strings.HasPrefix(r.Header.Get("Authorization"), "Idlepool ") {
			t.Errorf("request reached the third node with body %q and Authorization %q", b[:n], r.Header.Get("Authorization"))
		}
		fmt.Fprint(w, `{"deadline":"2026-01-02T03:04:05Z"}`)
	}))
	defer ok.Close()

	list := strings.Join([]string{down.URL, noLeader.URL, ok.URL + "/"}, ", ")
	c, err := agent.NewClient(list, mustKey(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	sorted := []string{down.URL, noLeader.URL, ok.URL}
	slices.Sort(sorted)
	if want := strings.Join(sorted, ","); c.URL() != want {
		t.Errorf("URL() = %q, want %q", c.URL(), want)
	}
	for range 2 {
		if _, err := c.Heartbeat(context.Background(), "l1"); err != nil {
			t.Fatalf("heartbeat through the cluster: %v", err)
		}
	}
	// The first request starts at a node picked at random and ends at
	// the node in charge; the second goes there first.
	if noLeaderHits > 1 || okHits != 2 {
		t.Errorf("hits on the no-leader node and the node in charge: %d and %d, want at most 1 and 2", noLeaderHits, okHits)
	}
	if c.Node() != ok.URL {
		t.Errorf("Node() = %q, want the node that answered, %q", c.Node(), ok.URL)
	}
	if !c.UnreachableSince().IsZero() {
		t.Error("the pool counts as unreachable although a node answered")
	}

	// No node in charge anywhere: the last node's answer is the error.
	c2, err := agent.NewClient(down.URL+","+noLeader.URL, mustKey(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c2.Heartbeat(context.Background(), "l1")
	var ae *agent.APIError
	if !errors.As(err, &ae) || ae.Code != coord.CodeNoLeader || !errors.Is(err, agent.ErrUnavailable) {
		t.Errorf("heartbeat with no node in charge: %v, want a 503 no_leader APIError", err)
	}

	// Every node down.
	c3, err := agent.NewClient(down.URL+","+strings.Replace(down.URL, "127.0.0.1", "127.0.0.2", 1), mustKey(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c3.Heartbeat(context.Background(), "l1"); !errors.Is(err, agent.ErrUnavailable) {
		t.Errorf("heartbeat with every node down: %v, want ErrUnavailable", err)
	}
	if c3.UnreachableSince().IsZero() {
		t.Error("the pool does not count as unreachable with every node down")
	}
}

// A clustered pool's client goes to the node in charge once an answer
// names it (api.InChargeHeader): the node it reached first forwards, the
// node in charge answers itself. A header naming a node the client does
// not know, or one it could not reach in the last minute, changes
// nothing: a node's own URL may not be reachable from every device.
func TestClientGoesToTheNodeInCharge(t *testing.T) {
	var mu sync.Mutex
	hits := map[string]int{}
	var inCharge string // what every node names as in charge
	node := func(name string) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			hits[name]++
			w.Header().Set(coord.InChargeHeader, inCharge)
			mu.Unlock()
			fmt.Fprint(w, `{"deadline":"2026-01-02T03:04:05Z"}`)
		}))
	}
	a, b := node("a"), node("b")
	defer a.Close()
	defer b.Close()
	beat := func(c *agent.Client, n int) {
		t.Helper()
		for range n {
			if _, err := c.Heartbeat(context.Background(), "l1"); err != nil {
				t.Fatal(err)
			}
		}
	}
	count := func() (int, int) {
		mu.Lock()
		defer mu.Unlock()
		ha, hb := hits["a"], hits["b"]
		clear(hits)
		return ha, hb
	}

	// b is in charge, and its URL is written as a node's config gives it
	// (a trailing slash).
	inCharge = b.URL + "/"
	c, err := agent.NewClient(a.URL+","+b.URL, mustKey(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	beat(c, 5)
	if ha, hb := count(); ha > 1 || hb < 4 || c.Node() != b.URL {
		t.Errorf("hits on a and on b, in charge: %d and %d, then Node() = %q; want at most 1 on a, the rest on b, %s", ha, hb, c.Node(), b.URL)
	}

	// a node the client does not know: it stays where it is.
	mu.Lock()
	inCharge = "http://127.0.0.1:1"
	mu.Unlock()
	beat(c, 3)
	if ha, hb := count(); ha != 0 || hb != 3 {
		t.Errorf("a node in charge the client does not know: hits on a and b %d and %d, want 0 and 3", ha, hb)
	}

	// The node in charge cannot be reached from this device (it takes
	// each connection and closes it at once): a answers, and the client
	// does not go back to the node in charge on a's word for a minute.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var tries atomic.Int32
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			tries.Add(1)
			conn.Close()
		}
	}()
	downURL := "http://" + ln.Addr().String()
	mu.Lock()
	inCharge = downURL
	mu.Unlock()
	c2, err := agent.NewClient(downURL+","+a.URL, mustKey(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	beat(c2, 4)
	if ha, _ := count(); ha != 4 || c2.Node() != a.URL {
		t.Errorf("the node in charge unreachable: %d of 4 answered by a, Node() = %q; want 4, %s", ha, c2.Node(), a.URL)
	}
	// One try at the unreachable node (the first request's, or the
	// second's on a's word), then none.
	if n := tries.Load(); n > 1 {
		t.Errorf("the unreachable node in charge was tried %d times in 4 requests, want at most 1", n)
	}

	// A node the client learnt from the pool (GET /v1/pool), not given
	// and never answered by, is not gone to on another node's word: its
	// URL may not be reachable from this device at all.
	key := mustKey(t)
	var first *httptest.Server
	first = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(coord.InChargeHeader, downURL)
		if r.URL.Path == "/v1/pool" {
			json.NewEncoder(w).Encode(coord.PoolInfo{Pool: "lab", Key: key.Public(), Version: coord.APIVersion, Nodes: []string{first.URL, downURL}})
			return
		}
		fmt.Fprint(w, `{"deadline":"2026-01-02T03:04:05Z"}`)
	}))
	defer first.Close()
	c3, err := agent.NewClient(first.URL, mustKey(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c3.Pool(context.Background()); err != nil || len(c3.Nodes()) != 2 {
		t.Fatalf("learning the nodes: %v, %q", err, c3.Nodes())
	}
	before := tries.Load()
	beat(c3, 3)
	if n := tries.Load() - before; n != 0 || c3.Node() != first.URL {
		t.Errorf("a learnt node never reached, named in charge: tried %d times, Node() = %q; want 0, %s", n, c3.Node(), first.URL)
	}
}

func TestParsePoolURL(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		errPart string
	}{
		{"http://127.0.0.1:7420", []string{"http://127.0.0.1:7420"}, ""},
		{"https://pool.example/", []string{"https://pool.example"}, ""},
		{"http://a:1,http://b:2, http://c:3/", []string{"http://a:1", "http://b:2", "http://c:3"}, ""},
		{"127.0.0.1:7420", nil, `pool URL "127.0.0.1:7420": want http://HOST:PORT`},
		{"http://a:1,b:2", nil, `node "b:2"`},
		{"http://a:1,", nil, `node ""`},
		{"http://a:1,http://a:1/", nil, "named twice"},
		{"http://a:1?x=1", nil, "want http://HOST:PORT"},
		{"http://127.0.0.1:7420/join", nil, "the pool's page for web browsers: give the pool's own address, http://127.0.0.1:7420"},
		{"https://pool.example/lab/join/", nil, "give the pool's own address, https://pool.example/lab"},
		{"https://pool.example/lab", []string{"https://pool.example/lab"}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			us, err := agent.ParsePoolURL(tc.in)
			if tc.errPart != "" {
				if !errors.Is(err, agent.ErrBadRequest) || !strings.Contains(err.Error(), tc.errPart) {
					t.Fatalf("ParsePoolURL(%q) = %v, want ErrBadRequest naming %q", tc.in, err, tc.errPart)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, u := range us {
				got = append(got, u.String())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// A client given one node of a cluster learns the others from GET
// /v1/pool and fails over to them once that node is gone; its URL, which
// names the pool in local state, stays the one given.
func TestClientLearnsNodes(t *testing.T) {
	second := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"deadline":"2026-01-02T03:04:05Z"}`)
	}))
	defer second.Close()
	key := mustKey(t)
	var first *httptest.Server
	first = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(coord.PoolInfo{Pool: "lab", Key: key.Public(), Version: coord.APIVersion,
			Nodes: []string{first.URL, "not a URL", second.URL + "/"}})
	}))
	c, err := agent.NewClient(first.URL, mustKey(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Pool(context.Background()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{first.URL, second.URL}, c.Nodes()); diff != "" {
		t.Errorf("nodes after GET /v1/pool (-want +got):\n%s", diff)
	}
	first.Close()
	if _, err := c.Heartbeat(context.Background(), "l1"); err != nil {
		t.Fatalf("heartbeat with the first node gone: %v", err)
	}
	if c.URL() != first.URL || c.Node() != second.URL {
		t.Errorf("URL() = %q, Node() = %q; want %q and %q", c.URL(), c.Node(), first.URL, second.URL)
	}
}

// TestHTMLAnswerIsNoCoordinator: a URL where another web server answers
// with an HTML page (its 404, a proxy's 502, a portal's 200) is said to
// be no coordinator, with what it served, and never read as one of the
// coordinator's answers (a 404 page is no unknown job).
func TestHTMLAnswerIsNoCoordinator(t *testing.T) {
	const page404 = "<!DOCTYPE html>\n<html><head><title>404 &ndash;\n  Not Found</title></head><body><h1>Not Found</h1></body></html>\n"
	tests := []struct {
		name      string
		status    int
		ctype     string // "": none set (Go's server sniffs the body)
		body      string
		wantMsg   string
		retryable bool
	}{
		{"another server's 404", 404, "text/html; charset=utf-8", page404,
			`GET %s/v1/pool served 404 Not Found, an HTML page titled "404 – Not Found" (text/html; charset=utf-8), where an idlepool coordinator's JSON API was expected`, false},
		{"a page served as OK", 200, "", "<html><body>Welcome to nginx!</body></html>",
			`GET %s/v1/pool served 200 OK, an HTML page (text/html; charset=utf-8), where an idlepool coordinator's JSON API was expected`, false},
		{"a proxy's bad gateway", 502, "text/html", "<html><head><title>502 Bad Gateway</title></head></html>",
			`GET %s/v1/pool served 502 Bad Gateway, an HTML page titled "502 Bad Gateway" (text/html), where an idlepool coordinator's JSON API was expected`, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.ctype != "" {
					w.Header().Set("Content-Type", tc.ctype)
				}
				w.WriteHeader(tc.status)
				fmt.Fprint(w, tc.body)
			}))
			defer srv.Close()
			c, err := agent.NewClient(srv.URL, mustKey(t), srv.Client())
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Pool(t.Context())
			if want := fmt.Sprintf(tc.wantMsg, srv.URL); err == nil || err.Error() != want {
				t.Fatalf("Pool: error\n%v\nwant\n%s", err, want)
			}
			if !errors.Is(err, agent.ErrNotCoordinator) {
				t.Error("errors.Is(err, ErrNotCoordinator) = false")
			}
			if errors.Is(err, agent.ErrNotFound) {
				t.Error("errors.Is(err, ErrNotFound) = true for another server's page")
			}
			if got := agent.Retryable(err); got != tc.retryable {
				t.Errorf("Retryable = %v, want %v", got, tc.retryable)
			}
			if strings.Contains(err.Error(), "<h1>") || strings.Contains(err.Error(), "<body>") {
				t.Errorf("error dumps the page: %v", err)
			}
		})
	}

	// A coordinator's own plain-text answer (its mux's 404) is still an
	// answer of the API.
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	c, err := agent.NewClient(srv.URL, mustKey(t), srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Pool(t.Context())
	if !errors.Is(err, agent.ErrNotFound) || errors.Is(err, agent.ErrNotCoordinator) {
		t.Errorf("plain-text 404: error %v, want ErrNotFound and not ErrNotCoordinator", err)
	}
}

// refuseNoLeader answers as a divided pool's node does while no node is
// in charge of shard: 503, code "no_leader".
func refuseNoLeader(w http.ResponseWriter, shard int) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusServiceUnavailable)
	fmt.Fprintf(w, `{"error":"no coordinator is in charge of shard %d right now","code":%q}`, shard, coord.CodeNoLeader)
}

// A client told to wait out take-overs sends a request again while the
// pool answers 503 no_leader, body and signature included, and returns
// the answer that follows; told nothing, or past its wait, it returns
// the no_leader answer.
func TestClientWaitsOutTakeOvers(t *testing.T) {
	t.Parallel()
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	pass := co.proxy(t)
	var refuse atomic.Int64 // how many requests the "take-over" refuses yet
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if refuse.Add(-1) >= 0 {
			refuseNoLeader(w, 1)
			return
		}
		pass.ServeHTTP(w, r)
	}))
	defer front.Close()
	ctx := context.Background()
	dev := newDevice(t, nil)
	c, err := agent.NewClient(front.URL, dev.key, nil)
	if err != nil {
		t.Fatal(err)
	}
	var notes atomic.Int64
	c.WaitOutTakeOvers(time.Hour, func(err error) {
		if !agent.InTakeOver(err) {
			t.Errorf("told of %v, not of a take-over", err)
		}
		notes.Add(1)
	})
	refuse.Store(2)
	if _, err := c.Register(ctx, dev.owner, "cli", ""); err != nil {
		t.Fatalf("register through a take-over: %v", err)
	}
	refuse.Store(3)
	if _, err := c.Jobs(ctx); err != nil {
		t.Fatalf("list jobs through a take-over: %v", err)
	}
	if n := notes.Load(); n != 5 {
		t.Errorf("told of %d take-over answers, want 5", n)
	}

	// Not told to wait, or past the wait: the no_leader answer.
	c.WaitOutTakeOvers(0, nil)
	refuse.Store(1)
	if _, err := c.Jobs(ctx); !agent.InTakeOver(err) {
		t.Errorf("list jobs with no wait: %v, want the no_leader answer", err)
	}
	c.WaitOutTakeOvers(time.Millisecond, nil)
	refuse.Store(1 << 30)
	if _, err := c.Jobs(ctx); !agent.InTakeOver(err) {
		t.Errorf("list jobs past the wait: %v, want the no_leader answer", err)
	}
}

// A pool that still says a job's files are missing after they were
// uploaded (a divided pool's shard that changed hands a moment ago does
// not see the pool's copy of them yet) is asked again a moment later,
// and the job is submitted once it sees them.
func TestSubmitWaitsForUploadedFiles(t *testing.T) {
	t.Parallel()
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	pass := co.proxy(t)
	j := planJob(t, "lagging-files", 3, "")
	var refused atomic.Int64
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/jobs" && refused.Add(1) <= 4 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusConflict)
			fmt.Fprintf(w, `{"error":"the job names 1 file(s) the pool does not have","code":"missing_files","missing":[%q]}`, j.Program.SHA256.String())
			return
		}
		pass.ServeHTTP(w, r)
	}))
	defer front.Close()
	sub := newSubmitter(t, front.URL, nil)
	ctx := context.Background()
	if err := sub.c.Submit(ctx, j); err != nil {
		t.Fatalf("submit while the pool's node does not see the uploaded files yet: %v", err)
	}
	if n := refused.Load(); n != 5 {
		t.Errorf("%d registrations, want 5 (4 refused)", n)
	}
	if st, err := sub.c.Status(ctx, j.ID); err != nil || st.Tasks != 3 {
		t.Fatalf("the job's status: %+v, %v", st, err)
	}
}
