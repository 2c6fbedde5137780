package agent

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"math/rand/v2"
	"mime"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"idlepool/coord/api"
	"idlepool/identity"
	"idlepool/job"
	"idlepool/pool"
	"idlepool/version"
)

// maxAnswer bounds the JSON answers the client reads (results may carry
// result bytes of up to 64 MiB each; a page of them is bounded by max).
const maxAnswer = 256 << 20

// Client speaks the coordinator's HTTP API (docs/api.md) for one device:
// every request that needs it is signed with the device key. A Client is
// safe for concurrent use.
//
// Every answer's Date header gives the coordinator's clock: the client
// measures this device's offset from it and signs with the pool's time
// (its own clock corrected by the offset), so that a device whose clock is
// off by more than the coordinator allows (5 minutes) keeps working, and
// converts the lease deadlines it reads to its own clock.
//
// A clustered pool has several nodes, any of which answers any request
// (docs/operator.md, "A pool on several machines"): the client is given
// all of their URLs and fails over by itself. A request that cannot reach a node,
// or that a node answers 503 with code "no_leader" (an election under way,
// or a node cut off from the majority), is signed again and sent to the
// next node; the node that answered last is tried first next time (the
// first time, a node picked at random), unless its answer named the node
// in charge (api.InChargeHeader), one the client was given or has been
// answered by, and could reach in the last minute: that node is tried
// first then, as it answers without forwarding. A client given some of a cluster's nodes
// learns the others from GET /v1/pool (Pool).
type Client struct {
	name  string                     // URL(): CanonicalPoolURL of the nodes given
	nodes atomic.Pointer[[]*url.URL] // the pool's nodes (given, then learnt); a single coordinator is one
	cur   atomic.Int32               // index in nodes of the node that answered last
	key   *identity.Key
	http  *http.Client

	mu          sync.Mutex
	now         func() time.Time // this device's clock
	offset      time.Duration    // the pool's clock minus now, as last measured
	measured    bool             // offset was measured
	skewRefused bool             // the last signed request was refused for its timestamp
	failedSince time.Time        // first of the failures since the last answer; zero after one
	profile     profileSource    // the owner's profile Register sends (profile.go)

	// onReach is called, outside mu, when failedSince becomes set or
	// zero again (watchReach); nil: not at all.
	onReach func(reachable bool, since time.Time)

	work workQueue // calls waiting for the next POST /v1/work (work.go)
	// transfers are the fetch counts not yet reported (work.go).
	transfers transferQueue

	chunkBytes atomic.Int64 // chunk bytes fetched from the coordinator (Chunk)
	// fetchesKept says that this device fetches the results other devices
	// keep, for the jobs it merges (SetFetchesKept).
	fetchesKept atomic.Bool
	// registration is the body of the last registration the pool took
	// (Register), sent again once when a signed request is refused 401
	// (answer): the pool does not know this device there.
	registration atomic.Pointer[[]byte]
	// takeOver is WaitOutTakeOvers' setting (nil: none).
	takeOver atomic.Pointer[takeOverWait]
	// reqKey is this device's request key with the pool
	// (api.RequestKey), set once the pool said it takes requests with a
	// MAC (apiVersion); nil until then, or when its key is unusable.
	reqKey atomic.Pointer[[32]byte]
	// macRefused has requests signed whatever reqKey says, for a while
	// after one with a MAC was refused (answer).
	macRefused refusedFor

	// inCharge caches which known node the last InChargeHeader named
	// (preferInCharge); given is how many of the nodes NewClient was
	// given (the first ones); reached holds the URLs of the nodes that
	// answered this client (true), and unreachable, per node URL, when a
	// request to it last failed to reach it (time.Time).
	inCharge    atomic.Pointer[inChargeCache]
	given       int
	reached     sync.Map
	unreachable sync.Map
}

// inChargeCache is the node an InChargeHeader value names: at, its index
// in the client's nodes when they were n (-1: none of them). Nodes are
// only ever appended, so an index stays valid.
type inChargeCache struct {
	header string
	n, at  int
}

// unreachableFor is how long a node that could not be reached is not
// preferred for being in charge: a node's public URL may not be
// reachable from every device (preferInCharge).
const unreachableFor = time.Minute

// NewClient returns a client of the pool at poolURL (scheme and host, e.g.
// "http://127.0.0.1:7420"; for a clustered pool, its nodes' URLs separated
// by commas, e.g. "http://a:7420,http://b:7420,http://c:7420") that signs
// with the device key. hc nil means a client with a 60 s timeout per
// request. A URL that is not http or https with a host, or a list that
// names one node twice, is ErrBadRequest.
func NewClient(poolURL string, key *identity.Key, hc *http.Client) (*Client, error) {
	bases, err := ParsePoolURL(poolURL)
	if err != nil {
		return nil, err
	}
	if hc == nil {
		hc = &http.Client{Timeout: 60 * time.Second}
	}
	c := &Client{name: canonical(bases), key: key, http: hc, now: time.Now, given: len(bases)}
	c.nodes.Store(&bases)
	// Each client starts at a node of its own, and goes to the node in
	// charge once an answer names it (preferInCharge).
	c.cur.Store(int32(rand.IntN(len(bases))))
	return c, nil
}

// learnNodes adds the node URLs a clustered pool announced (PoolInfo.Nodes)
// that the client does not know yet; malformed ones are ignored. Nodes are
// never forgotten: one that is down is passed over.
func (c *Client) learnNodes(announced []string) {
	for {
		old := c.nodes.Load()
		known := map[string]bool{}
		for _, u := range *old {
			known[u.String()] = true
		}
		next := slices.Clone(*old)
		for _, a := range announced {
			us, err := ParsePoolURL(a)
			if err != nil || len(us) != 1 || known[us[0].String()] {
				continue
			}
			known[us[0].String()] = true
			next = append(next, us[0])
		}
		if len(next) == len(*old) || c.nodes.CompareAndSwap(old, &next) {
			return
		}
	}
}

// Nodes returns the base URLs of the pool's nodes the client knows: those
// given to NewClient, then those the pool announced.
func (c *Client) Nodes() []string {
	ns := *c.nodes.Load()
	out := make([]string, len(ns))
	for i, u := range ns {
		out[i] = u.String()
	}
	return out
}

// CanonicalPoolURL returns poolURL as it names the pool in a device's
// local state (Client.URL): ParsePoolURL's nodes, sorted and separated by
// commas, so that one pool written two ways ("http://a/", or a cluster's
// nodes in another order) is one pool. Its error is ParsePoolURL's.
func CanonicalPoolURL(poolURL string) (string, error) {
	bases, err := ParsePoolURL(poolURL)
	if err != nil {
		return "", err
	}
	return canonical(bases), nil
}

func canonical(bases []*url.URL) string {
	names := make([]string, len(bases))
	for i, u := range bases {
		names[i] = u.String()
	}
	slices.Sort(names)
	return strings.Join(names, ",")
}

// ParsePoolURL parses a pool URL: one coordinator's base URL, or the
// comma-separated base URLs of a clustered pool's nodes, each http or
// https with a host (a trailing slash is dropped). It returns them in the
// order given; ErrBadRequest names the first that is malformed, one given
// twice, or the address of the pool's page for browsers (a path ending
// in /join or /web), with the pool's own address to give instead.
func ParsePoolURL(poolURL string) ([]*url.URL, error) {
	var out []*url.URL
	seen := map[string]bool{}
	for part := range strings.SplitSeq(poolURL, ",") {
		part = strings.TrimSpace(part)
		u, err := url.Parse(strings.TrimRight(part, "/"))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.RawQuery != "" || u.Fragment != "" {
			if part != poolURL {
				return nil, fmt.Errorf("%w: pool URL %q: node %q: want http://HOST:PORT or https://HOST, several separated by commas", ErrBadRequest, poolURL, part)
			}
			return nil, fmt.Errorf("%w: pool URL %q: want http://HOST:PORT or https://HOST", ErrBadRequest, poolURL)
		}
		if page := path.Base(u.Path); page == "join" || page == "web" {
			// The address of a pool's page for browsers (GET /join) or
			// of its page's files, copied from the browser's address bar.
			base := *u
			base.Path = path.Dir(u.Path)
			return nil, fmt.Errorf("%w: pool URL %q is the pool's page for web browsers: give the pool's own address, %s", ErrBadRequest, poolURL, strings.TrimRight(base.String(), "/"))
		}
		if seen[u.String()] {
			return nil, fmt.Errorf("%w: pool URL %q: node %s is named twice", ErrBadRequest, poolURL, u)
		}
		seen[u.String()] = true
		out = append(out, u)
	}
	return out, nil
}

// SetClock replaces the device's clock the client reads (time.Now); for
// tests of a device whose clock is off.
func (c *Client) SetClock(now func() time.Time) {
	c.mu.Lock()
	c.now = now
	c.mu.Unlock()
}

// clock returns the device's clock.
func (c *Client) clock() time.Time {
	c.mu.Lock()
	now := c.now
	c.mu.Unlock()
	return now()
}

// ClockOffset returns the pool's clock minus this device's, as measured
// from the coordinator's last answer, and whether it was measured.
func (c *Client) ClockOffset() (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.offset, c.measured
}

// PoolNow returns the pool's time now: the device's clock corrected by
// the measured offset.
func (c *Client) PoolNow() time.Time {
	c.mu.Lock()
	now, off := c.now, c.offset
	c.mu.Unlock()
	return now().Add(off)
}

// localTime converts a time of the pool's clock to this device's.
func (c *Client) localTime(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	off, _ := c.ClockOffset()
	return t.Add(-off)
}

// ClockRefused reports whether the coordinator refused the last signed
// request for its timestamp (ErrClockSkew) although the client signed it
// with the pool's time as measured.
func (c *Client) ClockRefused() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.skewRefused
}

// UnreachableSince returns when the coordinator stopped answering (the
// first failure to reach it since its last answer, by the device's
// clock); zero while it answers.
func (c *Client) UnreachableSince() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failedSince
}

// noteAnswer records an answer that arrived: the coordinator is
// reachable, and its Date header (resolution one second, so taken as the
// middle of its second) against the middle of the request's round trip
// gives the offset.
func (c *Client) noteAnswer(date string, sent, received time.Time) {
	c.mu.Lock()
	since, hook := c.failedSince, c.onReach
	c.failedSince = time.Time{}
	if t, err := http.ParseTime(date); err == nil {
		mid := sent.Add(received.Sub(sent) / 2)
		c.offset = t.Add(500 * time.Millisecond).Sub(mid).Round(time.Millisecond)
		c.measured = true
	}
	c.mu.Unlock()
	if !since.IsZero() && hook != nil {
		hook(true, since)
	}
}

// noteFailure records a failure to reach the coordinator at t.
func (c *Client) noteFailure(t time.Time) {
	c.mu.Lock()
	first, hook := c.failedSince.IsZero(), c.onReach
	if first {
		c.failedSince = t
	}
	c.mu.Unlock()
	if first && hook != nil {
		hook(false, t)
	}
}

// watchReach makes the client call f, outside its lock, when the
// coordinator stops answering (reachable false, since the failure's time)
// and when it answers again (reachable true, since when it did not).
func (c *Client) watchReach(f func(reachable bool, since time.Time)) {
	c.mu.Lock()
	c.onReach = f
	c.mu.Unlock()
}

// URL returns the pool's URL as given to NewClient, normalised by
// CanonicalPoolURL: one base URL, or a clustered pool's node URLs sorted
// and separated by commas. It
// names the pool in this device's local state (pending receipts, ledger
// cursors), so it does not change when the client fails over or learns
// more nodes, nor with the order the nodes were given in.
func (c *Client) URL() string { return c.name }

// Node returns the base URL of the node the next request goes to first:
// the one that answered last.
func (c *Client) Node() string {
	ns := *c.nodes.Load()
	return ns[int(c.cur.Load())%len(ns)].String()
}

// PeerID returns the ID of the device key the client signs with.
func (c *Client) PeerID() string { return c.key.ID() }

// do sends one request and decodes a JSON answer into out (nil: discard).
// A status >= 300 is an *APIError; a transport failure wraps
// ErrUnavailable, unless ctx ended.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, body []byte, sign bool, out any) (int, error) {
	var b payload
	if body != nil {
		b = payload{r: bytes.NewReader(body), n: int64(len(body)), sum: sha256.Sum256(body), ctype: "application/json"}
	}
	resp, err := c.send(ctx, method, path, query, b, sign)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if err := readJSON(ctx, resp, method, path, out); err != nil {
		return 0, err
	}
	return resp.StatusCode, nil
}

// readJSON decodes resp's JSON body into out (the body is discarded when
// out is nil); it does not close it. An HTML page is notAPI's error, an
// unreadable body one wrapping ErrUnavailable.
func readJSON(ctx context.Context, resp *http.Response, method, path string, out any) error {
	var err error
	if out == nil {
		_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswer))
	} else {
		body := bufio.NewReader(io.LimitReader(resp.Body, maxAnswer))
		if head, _ := body.Peek(512); isHTML(resp.Header.Get("Content-Type"), head) {
			page, _ := io.ReadAll(io.LimitReader(body, maxPage))
			return notAPI(resp, page)
		}
		err = json.NewDecoder(body).Decode(out)
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: %s %s: read answer: %w", ErrUnavailable, method, path, err)
	}
	return nil
}

// payload is a request body: its bytes, length, SHA-256 (what the
// signature covers) and content type; and accept, the request's Accept
// header ("": none). The zero value is no body.
type payload struct {
	r      io.Reader
	n      int64
	sum    [32]byte
	ctype  string
	accept string
}

// send sends a request and returns a response with a 2xx status, or an
// error: *APIError for other statuses (the body is read and closed).
// A request refused for its timestamp (ErrClockSkew) is signed again and
// sent once more when the answer changed the measured clock offset.
func (c *Client) send(ctx context.Context, method, path string, query url.Values, body payload, sign bool) (*http.Response, error) {
	resp, err := c.sendTry(ctx, method, path, query, body, sign, false)
	w := c.takeOver.Load()
	if w == nil || !InTakeOver(err) {
		return resp, err
	}
	deadline := time.Now().Add(w.max)
	for InTakeOver(err) && time.Until(deadline) > 0 && rewind(body.r) {
		if w.note != nil {
			w.note(err)
		}
		if serr := sleep(ctx, min(TakeOverPoll, time.Until(deadline))); serr != nil {
			return nil, serr
		}
		resp, err = c.sendTry(ctx, method, path, query, body, sign, false)
	}
	return resp, err
}

// takeOverWait is how long a request waits out a take-over, and whom it
// tells (WaitOutTakeOvers).
type takeOverWait struct {
	max  time.Duration
	note func(error)
}

// WaitOutTakeOvers makes a request that a clustered pool answers 503
// no_leader (InTakeOver: no node is in charge of what it asks about, as
// for the seconds a take-over lasts) be sent again every TakeOverPoll,
// for up to max in all, rather than fail at once; note, when not nil, is
// told of each such answer before the wait. A command line's requests
// wait so; an agent's own loops retry by themselves. max <= 0 turns it
// off (the default).
func (c *Client) WaitOutTakeOvers(max time.Duration, note func(err error)) {
	if max <= 0 {
		c.takeOver.Store(nil)
		return
	}
	c.takeOver.Store(&takeOverWait{max: max, note: note})
}

// sendTry is send; retried is set on the second try.
//
// It tries the pool's nodes in turn, starting with the one that answered
// last: a node that cannot be reached, or that answers 503 "no_leader",
// passes the request to the next one (signed again; a body that cannot be
// rewound goes to one node only). When no node does better, a
// "no_leader" answer is the answer, else the last transport failure.
func (c *Client) sendTry(ctx context.Context, method, path string, query url.Values, body payload, sign, retried bool) (*http.Response, error) {
	if body.r == nil {
		body.sum = sha256.Sum256(nil)
	}
	nodes := *c.nodes.Load()
	n := len(nodes)
	start := int(c.cur.Load()) % n
	sent := c.clock()
	var (
		lastErr  error
		noLeader *http.Response // a node's 503 "no_leader", the answer if no node does better
		noUsed   time.Duration
		noMAC    bool
	)
	for i := range n {
		if i > 0 && !rewind(body.r) {
			break
		}
		at := (start + i) % n
		resp, used, mac, err := c.sendTo(ctx, nodes[at], n > 1, method, path, query, body, sign)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			lastErr = err
			if n > 1 {
				c.unreachable.Store(nodes[at].String(), c.clock())
			}
			continue
		}
		if n > 1 && isNoLeader(resp) {
			noLeader, noUsed, noMAC = resp, used, mac
			continue
		}
		c.cur.Store(int32(at))
		if n > 1 {
			if _, ok := c.reached.Load(nodes[at].String()); !ok {
				c.reached.Store(nodes[at].String(), true)
			}
			c.preferInCharge(nodes, resp.Header.Get(api.InChargeHeader))
		}
		return c.answer(ctx, resp, used, mac, method, path, query, body, sign, retried)
	}
	if noLeader != nil {
		// Some node answers, but none is in charge: that is the answer.
		return c.answer(ctx, noLeader, noUsed, noMAC, method, path, query, body, sign, retried)
	}
	c.noteFailure(sent)
	return nil, lastErr
}

// preferInCharge makes the node that header (an answer's
// InChargeHeader) names the first one tried next: it answers requests
// itself, where any other node forwards them to it. Only a node this
// client was given, or one that has answered it, is preferred so (a
// node's URL that a pool announced may not be reachable from this
// device, and trying it could wait out a dial's timeout), and not while
// it could not be reached in the last unreachableFor. A header that
// names none of nodes, or none, changes nothing.
func (c *Client) preferInCharge(nodes []*url.URL, header string) {
	if header == "" {
		return
	}
	k := c.inCharge.Load()
	if k == nil || k.header != header || k.n != len(nodes) {
		k = &inChargeCache{header: header, n: len(nodes), at: -1}
		if us, err := ParsePoolURL(header); err == nil && len(us) == 1 {
			k.at = slices.IndexFunc(nodes, func(u *url.URL) bool { return u.String() == us[0].String() })
		}
		c.inCharge.Store(k)
	}
	if k.at < 0 {
		return
	}
	if _, ok := c.reached.Load(nodes[k.at].String()); k.at >= c.given && !ok {
		return
	}
	if t, ok := c.unreachable.Load(nodes[k.at].String()); ok && c.clock().Sub(t.(time.Time)) < unreachableFor {
		return
	}
	c.cur.Store(int32(k.at))
}

// isNoLeader reports whether resp is a cluster node's 503 "no_leader"
// answer. It reads a 503's body into memory (closing the connection's),
// so that the answer can still be read.
func isNoLeader(resp *http.Response) bool {
	if resp.StatusCode != http.StatusServiceUnavailable {
		return false
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(b))
	var eb struct {
		Code string `json:"code"`
	}
	return json.Unmarshal(b, &eb) == nil && eb.Code == api.CodeNoLeader
}

// sendTo sends one request to the node at base and returns its response,
// the clock offset its signature used and whether a MAC stood for the
// signature (macKey), or a transport failure wrapping ErrUnavailable
// (naming the node when the pool has several).
func (c *Client) sendTo(ctx context.Context, base *url.URL, several bool, method, path string, query url.Values, body payload, sign bool) (*http.Response, time.Duration, bool, error) {
	u := *base
	u.Path = base.Path + path
	u.RawQuery = query.Encode()
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body.r)
	if err != nil {
		return nil, 0, false, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if body.r != nil {
		req.ContentLength = body.n
		req.Header.Set("Content-Type", body.ctype)
	}
	if body.accept != "" {
		req.Header.Set("Accept", body.accept)
	}
	// What this client is, for a pool that accepts only newer ones
	// (coord.Config.MinAgentVersion).
	req.Header.Set(api.VersionHeader, version.Version)
	req.Header.Set(api.APIHeader, strconv.Itoa(api.APIVersion))
	used, _ := c.ClockOffset()
	var mac bool
	if sign {
		if k := c.macKey(path); k != nil {
			api.MACRequestDigest(req, body.sum, c.key.ID(), k, c.PoolNow())
			mac = true
		} else {
			api.SignRequestDigest(req, body.sum, c.key, c.PoolNow())
		}
	}
	sent := c.clock()
	resp, err := c.http.Do(req)
	if err != nil {
		if several {
			return nil, 0, mac, fmt.Errorf("%w: %s %s (node %s): %w", ErrUnavailable, method, path, base, err)
		}
		return nil, 0, mac, fmt.Errorf("%w: %s %s: %w", ErrUnavailable, method, path, err)
	}
	c.noteAnswer(resp.Header.Get("Date"), sent, c.clock())
	return resp, used, mac, nil
}

// macRefusedFor is how long the client signs its requests after one
// with a MAC was refused: the pool may have gone to a coordinator older
// than api.MACAPIVersion (a node of an older version taking charge of a
// cluster being upgraded, or a coordinator rolled back).
const macRefusedFor = 10 * time.Minute

// macKey returns the request key to authenticate a request for path
// with instead of a signature, or nil to sign it: before the pool said
// it takes MACs, for macRefusedFor after it refused one, and for a
// registration, which the pool checks with the key it carries.
func (c *Client) macKey(path string) *[32]byte {
	k := c.reqKey.Load()
	if k == nil || path == registerPath || c.macRefused.active(c.clock()) {
		return nil
	}
	return k
}

// learnRequestKey derives this device's request key with the pool whose
// GET /v1/pool answered info, when that pool takes requests with a MAC
// (api.MACAPIVersion or later); a key it cannot agree with leaves the
// requests signed.
func (c *Client) learnRequestKey(info api.PoolInfo) {
	if info.Version < api.MACAPIVersion || c.reqKey.Load() != nil {
		return
	}
	shared, err := c.key.Agree(info.Key)
	if err != nil {
		return
	}
	k := api.RequestKey(shared, c.key.Public(), info.Key)
	c.reqKey.Store(&k)
}

// answer turns a node's response into send's result: resp itself for a
// 2xx status, else an *APIError (the body read and closed). A request
// refused for its timestamp is signed again and sent once more when the
// answer changed the measured clock offset from used, the one it was
// signed with.
func (c *Client) answer(ctx context.Context, resp *http.Response, used time.Duration, mac bool, method, path string, query url.Values, body payload, sign, retried bool) (*http.Response, error) {
	if sign {
		c.mu.Lock()
		c.skewRefused = false
		c.mu.Unlock()
	}
	if resp.StatusCode < 300 {
		return resp, nil
	}
	defer resp.Body.Close()
	ae := &APIError{Method: method, Path: path, Status: resp.StatusCode}
	var eb struct {
		Error   string   `json:"error"`
		Code    string   `json:"code"`
		Missing []string `json:"missing"`
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if isHTML(resp.Header.Get("Content-Type"), b) {
		return nil, notAPI(resp, b)
	}
	if json.Unmarshal(b, &eb) == nil {
		ae.Message, ae.Code, ae.Missing = eb.Error, eb.Code, eb.Missing
	} else {
		ae.Message = strings.TrimSpace(string(b))
	}
	if sign && ae.Status == http.StatusUnauthorized && ae.Code != codeClockSkew && !retried && path != registerPath && rewind(body.r) {
		// The pool does not know this device here: a divided pool's
		// shard that no node was in charge of when the device
		// registered (the others took the registration), or a pool
		// begun again. Register again, as before, and ask once more.
		if reg := c.registration.Load(); reg != nil {
			if _, err := c.do(ctx, http.MethodPost, registerPath, nil, *reg, true, nil); err == nil {
				return c.sendTry(ctx, method, path, query, body, sign, true)
			}
		}
	}
	if mac && ae.Status == http.StatusUnauthorized && ae.Code != codeClockSkew && rewind(body.r) {
		// Refused with a MAC, after registering again where that was
		// the answer: the node is older than api.MACAPIVersion, or does
		// not agree on the key (a pool begun again). Sign, for a while,
		// and ask once more; the pool's version and key are asked
		// again when next needed.
		c.macRefused.refuse(c.clock(), macRefusedFor)
		c.reqKey.Store(nil)
		c.work.mu.Lock()
		c.work.version = 0
		c.work.mu.Unlock()
		return c.sendTry(ctx, method, path, query, body, sign, true)
	}
	if sign && ae.Code == codeClockSkew {
		off, _ := c.ClockOffset()
		ae.Offset = off
		if d := off - used; (d > time.Second || d < -time.Second) && !retried && rewind(body.r) {
			// Signed before the offset was known (or with an older
			// one): sign again with the pool's time as just measured.
			return c.sendTry(ctx, method, path, query, body, sign, true)
		}
		c.mu.Lock()
		c.skewRefused = true
		c.mu.Unlock()
	}
	return nil, ae
}

// maxPage bounds how much of an HTML page is read to find its title.
const maxPage = 64 << 10

// isHTML reports whether an answer with Content-Type ctype, starting with
// head, is an HTML page, which no coordinator's JSON API serves.
func isHTML(ctype string, head []byte) bool {
	if mt, _, err := mime.ParseMediaType(ctype); err == nil && (mt == "text/html" || mt == "application/xhtml+xml") {
		return true
	}
	head = bytes.TrimLeft(bytes.TrimPrefix(head, []byte("\xef\xbb\xbf")), " \t\r\n")
	head = bytes.ToLower(head[:min(len(head), 16)])
	return bytes.HasPrefix(head, []byte("<!doctype html")) || bytes.HasPrefix(head, []byte("<html"))
}

var titleRE = regexp.MustCompile(`(?is)<title[^>]*>(.*?)</title>`)

// notAPI is the *NotAPIError for resp, an HTML page starting with page.
func notAPI(resp *http.Response, page []byte) error {
	e := &NotAPIError{Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type")}
	if r := resp.Request; r != nil {
		u := *r.URL
		u.RawQuery, u.User = "", nil
		e.Method, e.URL = r.Method, u.String()
	}
	if m := titleRE.FindSubmatch(page); m != nil {
		t := strings.Join(strings.Fields(html.UnescapeString(string(m[1]))), " ")
		if r := []rune(t); len(r) > 100 {
			t = string(r[:100]) + "…"
		}
		e.Title = t
	}
	return e
}

// rewind moves a request body back to its start for sending it again,
// reporting whether it could (no body, or one that can seek).
func rewind(r io.Reader) bool {
	if r == nil {
		return true
	}
	s, ok := r.(io.Seeker)
	if !ok {
		return false
	}
	_, err := s.Seek(0, io.SeekStart)
	return err == nil
}

func (c *Client) postJSON(ctx context.Context, path string, in, out any) (int, error) {
	body, err := json.Marshal(in)
	if err != nil {
		return 0, fmt.Errorf("encode %s: %w", path, err)
	}
	return c.do(ctx, http.MethodPost, path, nil, body, true, out)
}

// cborWorkAPIVersion is the coordinator API version from which POST
// /v1/work takes its body in CBOR (api.CBORContentType): an older
// coordinator reads every body as JSON and would refuse it.
const cborWorkAPIVersion = 8

// cborAccept is the Accept header of a request whose answer the client
// reads in CBOR or JSON, by its Content-Type: CBOR preferred.
const cborAccept = api.CBORContentType + ", application/json;q=0.5"

// postCBOR sends in, in its CBOR form (api.MarshalCBOR), as a signed POST
// to path, and decodes the answer into out: in CBOR when it comes so
// (api.UnmarshalCBORAnswer), in JSON otherwise (a coordinator may answer
// either; errors always come in JSON, as *APIError). A CBOR answer that
// does not decode is an error wrapping ErrUnavailable.
func (c *Client) postCBOR(ctx context.Context, path string, in, out any) error {
	body, err := api.MarshalCBOR(in)
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	p := payload{r: bytes.NewReader(body), n: int64(len(body)), sum: sha256.Sum256(body), ctype: api.CBORContentType, accept: cborAccept}
	resp, err := c.send(ctx, http.MethodPost, path, nil, p, true)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != api.CBORContentType {
		return readJSON(ctx, resp, http.MethodPost, path, out)
	}
	b, err := readAnswer(ctx, resp, http.MethodPost, path)
	if err != nil {
		return err
	}
	if err := api.UnmarshalCBORAnswer(b, out); err != nil {
		return fmt.Errorf("%w: POST %s: read answer: %w: %w", ErrUnavailable, path, errCBORAnswer, err)
	}
	return nil
}

// readAnswer reads resp's body whole, at most maxAnswer bytes, into a
// buffer of its Content-Length when it has one (not grown step by step);
// it does not close it. A body it cannot read, or a longer one, is an
// error wrapping ErrUnavailable (the context's error once it is done).
func readAnswer(ctx context.Context, resp *http.Response, method, path string) ([]byte, error) {
	var buf bytes.Buffer
	if n := resp.ContentLength; n > 0 && n <= maxAnswer {
		buf.Grow(int(n) + bytes.MinRead)
	}
	_, err := buf.ReadFrom(io.LimitReader(resp.Body, maxAnswer+1))
	if err == nil && buf.Len() > maxAnswer {
		err = fmt.Errorf("answer over %d bytes", maxAnswer)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: %s %s: read answer: %w", ErrUnavailable, method, path, err)
	}
	return buf.Bytes(), nil
}

// errCBORAnswer marks an answer in CBOR that this client could not
// decode (postCBOR).
var errCBORAnswer = errors.New("the CBOR answer does not decode")

// Pool fetches the pool's name and the coordinator's public key. Of a
// clustered pool, the answer lists its nodes, which the client adds to
// those it fails over to.
func (c *Client) Pool(ctx context.Context) (api.PoolInfo, error) {
	var info api.PoolInfo
	_, err := c.do(ctx, http.MethodGet, "/v1/pool", nil, nil, false, &info)
	if err == nil && len(info.Key) != ed25519.PublicKeySize {
		err = fmt.Errorf("%w: GET /v1/pool: no valid coordinator key", ErrUnavailable)
	}
	if err == nil {
		c.learnNodes(info.Nodes)
	}
	return info, err
}

// Register registers the client's device with the pool, endorsed by
// owner; invite is the pool's invite token or "". Registering again is
// harmless. A pool that does not admit the device answers ErrForbidden.
// After UseOwnerProfile it sends the owner's signed profile too. Once
// the pool took a registration, a signed request it later refuses 401
// (it does not know the device there) is answered by sending the same
// registration again and the request once more.
func (c *Client) Register(ctx context.Context, owner *identity.Key, name, invite string) (api.Registered, error) {
	in := api.Registration{
		Key:         c.key.Public(),
		OwnerKey:    owner.Public(),
		Endorsement: owner.Sign(pool.EndorsementMessage(c.key.Public())),
		Name:        name,
		Invite:      invite,
		Profile:     c.ownerProfile(owner),
	}
	var reg api.Registered
	body, err := c.register(ctx, in, &reg)
	if in.Profile != nil && profileUnknown(err) {
		// A coordinator from before owner profiles refuses the field:
		// register without it rather than not at all.
		in.Profile = nil
		body, err = c.register(ctx, in, &reg)
	}
	if err == nil {
		c.sentProfile(in.Profile)
		c.registration.Store(&body)
	}
	return reg, err
}

// registerPath is where a device registers (POST).
const registerPath = "/v1/peers"

// register posts in to registerPath and returns the body it sent.
func (c *Client) register(ctx context.Context, in api.Registration, out *api.Registered) ([]byte, error) {
	body, err := json.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", registerPath, err)
	}
	_, err = c.do(ctx, http.MethodPost, registerPath, nil, body, true, out)
	return body, err
}

// PutBlob uploads the file at path by its digest d, streaming it from
// disk; a file the pool already has is not stored twice. created reports
// whether it was new. A file that no longer matches d is refused by the
// coordinator (ErrBadRequest).
func (c *Client) PutBlob(ctx context.Context, d job.Digest, path string) (created bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return false, fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return false, fmt.Errorf("read %s: %w", path, err)
	}
	body := payload{r: f, n: st.Size(), sum: d, ctype: "application/octet-stream"}
	resp, err := c.send(ctx, http.MethodPut, "/v1/blobs/"+d.String(), nil, body, true)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode == http.StatusCreated, nil
}

// FetchBlob downloads the file with digest d into path (atomically, mode
// 0400), checking the digest; ErrBadBlob if it does not match.
func (c *Client) FetchBlob(ctx context.Context, d job.Digest, path string) error {
	resp, err := c.send(ctx, http.MethodGet, "/v1/blobs/"+d.String(), nil, payload{}, false)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	tmp, err := os.CreateTemp(filepath.Dir(path), ".blob-*")
	if err != nil {
		return fmt.Errorf("cache blob: %w", err)
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(tmp, h), resp.Body)
	if err = errors.Join(err, tmp.Sync(), tmp.Close()); err != nil {
		os.Remove(tmp.Name())
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: download blob %s: %w", ErrUnavailable, d, err)
	}
	var got job.Digest
	h.Sum(got[:0])
	if got != d {
		os.Remove(tmp.Name())
		return fmt.Errorf("%w: blob %s arrived as %s", ErrBadBlob, d, got)
	}
	if err := os.Chmod(tmp.Name(), 0o400); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("cache blob: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("cache blob: %w", err)
	}
	return nil
}

// RegisterJob registers a job by its canonical encoding. When the pool
// lacks files the job names, it answers an *APIError with status 409
// (ErrConflict) whose Missing lists their digests.
func (c *Client) RegisterJob(ctx context.Context, canonical []byte) (created bool, err error) {
	return c.registerJob(ctx, api.JobRequest{Canonical: canonical})
}

func (c *Client) registerJob(ctx context.Context, req api.JobRequest) (created bool, err error) {
	status, err := c.postJSON(ctx, "/v1/jobs", req, nil)
	return status == http.StatusCreated, err
}

// submitTries is how many times Submit registers a job whose files the
// pool says it lacks, uploading them between tries; from the second
// upload on it first waits submitLag more each time (0.25, 0.5, ... s:
// 2.5 s in all).
const (
	submitTries = 6
	submitLag   = 250 * time.Millisecond
)

// Submit makes the pool know job j: it registers the job, uploads the
// files the pool reports missing (program and inputs, by digest; nothing
// already there is sent again) and registers it again, with its known
// answers when it has some ([verify] known_answers: uploaded like a file,
// kept by the pool and never served). The submitting device becomes the
// job's merger. Submitting a known job is harmless. A pool that still
// says the files are missing once they were uploaded (a divided pool's
// shard that changed hands a moment ago) is asked again a few times, a
// moment apart (submitTries).
func (c *Client) Submit(ctx context.Context, j *job.Job) error {
	req := api.JobRequest{Canonical: j.Canonical, FetchesKept: c.refs(ctx)}
	if j.HasKnownAnswers() {
		d := api.HexDigest(j.KnownAnswers.SHA256)
		req.KnownAnswers = &d // beside the job, not in it: peers never see it
	}
	for try := 0; ; try++ {
		_, err := c.registerJob(ctx, req)
		var ae *APIError
		if !errors.As(err, &ae) || ae.Status != http.StatusConflict || len(ae.Missing) == 0 || try == submitTries-1 {
			return err
		}
		if try > 0 {
			// Its files were uploaded already: the node of a divided
			// pool's shard that changed hands a moment ago may not see
			// the pool's copy of them yet. Asked again after a moment
			// (and the files sent again: stored once).
			if err := sleep(ctx, time.Duration(try)*submitLag); err != nil {
				return err
			}
		}
		files := map[job.Digest]string{j.Program.SHA256: j.Program.Path}
		for _, ref := range j.Inputs {
			files[ref.SHA256] = ref.Path
		}
		if j.KnownAnswers.Path != "" {
			files[j.KnownAnswers.SHA256] = j.KnownAnswers.Path // the pool keeps it from peers
		}
		for _, m := range ae.Missing {
			d, err := job.ParseDigest(m)
			if err != nil {
				return fmt.Errorf("register job: the pool asks for %q: %w", m, err)
			}
			path, ok := files[d]
			if !ok {
				return fmt.Errorf("register job: the pool asks for file %s, which the job does not name", d)
			}
			if _, err := c.PutBlob(ctx, d, path); err != nil {
				return fmt.Errorf("upload %s: %w", path, err)
			}
		}
	}
}

func jobStatus(in api.JobInfo) pool.JobStatus {
	return pool.JobStatus{Job: job.ID(in.Job), Name: in.Name, Owner: in.Owner, Merger: in.Merger, Tasks: in.Tasks,
		Waiting: in.Waiting, Cancelled: in.Cancelled,
		Accepted: in.Accepted, Failed: in.Failed, Leased: in.Leased, Acked: in.Acked, Complete: in.Complete,
		Quorum: in.Quorum, Redundancy: in.Redundancy, Retrying: in.Retrying, Trouble: in.Trouble, Transfer: in.Transfer,
		Recomputing: in.Recomputing, TimingOut: in.TimingOut, TimeoutDevices: in.TimeoutDevices, Timeouts: in.Timeouts}
}

// Status fetches a job's progress; ErrNotFound for a job the pool does
// not know.
func (c *Client) Status(ctx context.Context, id job.ID) (pool.JobStatus, error) {
	var st api.JobInfo
	_, err := c.do(ctx, http.MethodGet, "/v1/jobs/"+id.String(), nil, nil, true, &st)
	return jobStatus(st), err
}

// Jobs lists the pool's jobs.
func (c *Client) Jobs(ctx context.Context) ([]pool.JobStatus, error) {
	var in []api.JobInfo
	_, err := c.do(ctx, http.MethodGet, "/v1/jobs", nil, nil, true, &in)
	out := make([]pool.JobStatus, len(in))
	for i, s := range in {
		out[i] = jobStatus(s)
	}
	return out, err
}

// Canonical fetches a job's canonical encoding and checks that it hashes
// to id (else ErrBadBlob).
func (c *Client) Canonical(ctx context.Context, id job.ID) ([]byte, error) {
	resp, err := c.send(ctx, http.MethodGet, "/v1/jobs/"+id.String()+"/canonical", nil, payload{}, true)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: fetch job %s: %w", ErrUnavailable, id, err)
	}
	if sha256.Sum256(b) != id {
		return nil, fmt.Errorf("%w: the encoding of job %s does not hash to its ID", ErrBadBlob, id)
	}
	return b, nil
}

// Lease asks for up to max leases; none (an empty slice) means no work
// right now. Their deadlines are by this device's clock. Calls made while
// another is in flight travel together (work.go).
func (c *Client) Lease(ctx context.Context, max int) ([]pool.Lease, error) {
	if c.batched(ctx) {
		return c.leaseWork(ctx, max)
	}
	var out api.LeaseResponse
	_, err := c.postJSON(ctx, "/v1/leases", api.LeaseRequest{Max: max}, &out)
	leases := make([]pool.Lease, len(out.Leases))
	for i, g := range out.Leases {
		leases[i] = pool.Lease{ID: g.Lease, Job: job.ID(g.Job), Task: g.Task, Peer: c.key.ID(), Deadline: c.localTime(g.Deadline)}
	}
	return leases, err
}

// Heartbeat extends a lease and returns its new deadline (by this
// device's clock); ErrLeaseExpired when the lease is gone.
func (c *Client) Heartbeat(ctx context.Context, lease string) (time.Time, error) {
	var out api.Deadline
	_, err := c.do(ctx, http.MethodPost, "/v1/leases/"+url.PathEscape(lease)+"/heartbeat", nil, []byte("{}"), true, &out)
	return c.localTime(out.Deadline), err
}

// SendResult returns the submission of a lease. Sending the same
// submission again is harmless. Results sent while another call is in
// flight travel together (work.go). A task decided before the submission
// arrived answers ErrConflict; a lease that expired, ErrLeaseExpired.
func (c *Client) SendResult(ctx context.Context, lease string, s pool.Submission) error {
	if len(s.Result) <= maxWorkResultBytes && c.batched(ctx) {
		_, err := c.resultWork(ctx, lease, s, 0)
		return err
	}
	_, err := c.postJSON(ctx, "/v1/leases/"+url.PathEscape(lease)+"/result", c.wireSubmission(ctx, s), nil)
	return err
}

// workAPIVersion is the coordinator API version from which submissions
// carry the work their task took; older coordinators refuse the field.
const workAPIVersion = 6

// wireSubmission is s as the coordinator takes it: without its work for a
// coordinator older than workAPIVersion (whose receipts credit the
// declared cost).
func (c *Client) wireSubmission(ctx context.Context, s pool.Submission) api.ResultSubmission {
	in := api.ResultSubmission{Digest: api.HexDigest(s.Digest), Result: s.Result, Failed: s.Failed, Reason: s.Reason, Machine: s.Machine, Ref: s.Ref}
	if c.apiVersion(ctx) >= workAPIVersion {
		in.Work = s.Work
	}
	return in
}

// SendResultAndLease is SendResult with a request for up to want new
// leases in the same request (POST /v1/work), so that a task loop that
// has finished a task asks for its next one without a request of its
// own. It returns the leases granted, with deadlines by this device's
// clock, even when err (the result's error, as SendResult's) is not nil:
// the caller computes them or releases them. None are asked for, and nil
// is returned, where they cannot travel with the result (a coordinator of
// API version 1, a result larger than a batch carries) or the lease part
// was refused; the caller then asks with Lease.
func (c *Client) SendResultAndLease(ctx context.Context, lease string, s pool.Submission, want int) ([]pool.Lease, error) {
	if want <= 0 || len(s.Result) > maxWorkResultBytes || !c.batched(ctx) {
		return nil, c.SendResult(ctx, lease, s)
	}
	return c.resultWork(ctx, lease, s, want)
}

// Release hands a lease back so that the task is leased again at once.
func (c *Client) Release(ctx context.Context, lease string) error {
	_, err := c.do(ctx, http.MethodPost, "/v1/leases/"+url.PathEscape(lease)+"/release", nil, []byte("{}"), true, nil)
	return err
}

// Results fetches up to max verified outcomes of a job with Seq > after,
// in acceptance order. Only the job's merger may (else ErrForbidden).
func (c *Client) Results(ctx context.Context, id job.ID, after int64, max int) ([]pool.Verified, error) {
	var out struct {
		Results []pool.Verified `json:"results"`
	}
	q := url.Values{"after": {strconv.FormatInt(after, 10)}, "max": {strconv.Itoa(max)}}
	if c.refs(ctx) {
		q.Set("refs", "1") // this merger fetches results kept by devices
	}
	_, err := c.do(ctx, http.MethodGet, "/v1/jobs/"+id.String()+"/results", q, nil, true, &out)
	return out.Results, err
}

// Ack tells the coordinator that the merger holds the outcomes up to seq
// upto, durably; the coordinator may then delete their bytes.
func (c *Client) Ack(ctx context.Context, id job.ID, upto int64) error {
	_, err := c.postJSON(ctx, "/v1/jobs/"+id.String()+"/ack", map[string]int64{"upto": upto}, nil)
	return err
}

// Cancel withdraws job id from the pool (POST /v1/jobs/{id}/cancel): it
// leases nothing more and its live leases end. Only a device of the job's
// owner may (else ErrForbidden, code "not_owner"); cancelling again is
// nil. It returns the job's status after the cancel.
func (c *Client) Cancel(ctx context.Context, id job.ID) (pool.JobStatus, error) {
	var st api.JobInfo
	_, err := c.postJSON(ctx, "/v1/jobs/"+id.String()+"/cancel", struct{}{}, &st)
	return jobStatus(st), err
}

// receiptsAccept is the Accept header of a receipts request: the
// compact form first, JSON too.
const receiptsAccept = pool.EntriesContentType + ", application/json;q=0.5"

// Receipts fetches up to max ledger entries naming this device with
// sequence numbers above after. It asks for them in the compact CBOR
// form (pool.AppendEntriesCBOR: each batch's signature once, cheaper to
// read than JSON) and reads the answer by its Content-Type, so a
// coordinator that answers JSON (one older than the compact form, which
// ignores Accept) is read as before. The entries are not verified here
// (pool.EntryVerifier). A malformed compact answer is an error wrapping
// pool.ErrEntriesCBOR that names what is wrong, with no entries.
func (c *Client) Receipts(ctx context.Context, after uint64, max int) ([]pool.Entry, error) {
	return c.ReceiptsOf(ctx, -1, after, max)
}

// ReceiptsOf is Receipts of shard's ledger in a pool divided into shards
// (GET /v1/receipts?shard=S, 0 to api.PoolInfo.Shards-1, each shard's
// entries numbered from 1); a negative shard names none, as Receipts.
func (c *Client) ReceiptsOf(ctx context.Context, shard int, after uint64, max int) ([]pool.Entry, error) {
	const path = "/v1/receipts"
	q := url.Values{"after": {strconv.FormatUint(after, 10)}, "max": {strconv.Itoa(max)}}
	if shard >= 0 {
		q.Set("shard", strconv.Itoa(shard))
	}
	resp, err := c.send(ctx, http.MethodGet, path, q, payload{accept: receiptsAccept}, true)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != pool.EntriesContentType {
		var out struct {
			Entries []pool.Entry `json:"entries"`
		}
		err := readJSON(ctx, resp, http.MethodGet, path, &out)
		return out.Entries, err
	}
	b, err := readAnswer(ctx, resp, http.MethodGet, path)
	if err != nil {
		return nil, err
	}
	es, err := pool.DecodeEntriesCBOR(b)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	return es, nil
}

// Ledger fetches up to max entries of the pool's ledger with sequence
// numbers above after (max 0: the coordinator's default page). In a
// pool divided into shards (api.PoolInfo.Shards) it is shard 0's
// ledger; LedgerOf reads another's.
func (c *Client) Ledger(ctx context.Context, after uint64, max int) ([]pool.Entry, error) {
	return c.LedgerOf(ctx, -1, after, max)
}

// LedgerOf is Ledger of shard's ledger in a pool divided into shards
// (GET /v1/ledger?shard=S, 0 to api.PoolInfo.Shards-1); a negative shard
// asks without naming one, as Ledger does.
func (c *Client) LedgerOf(ctx context.Context, shard int, after uint64, max int) ([]pool.Entry, error) {
	q := url.Values{"after": {strconv.FormatUint(after, 10)}}
	if max > 0 {
		q.Set("max", strconv.Itoa(max))
	}
	if shard >= 0 {
		q.Set("shard", strconv.Itoa(shard))
	}
	resp, err := c.send(ctx, http.MethodGet, "/v1/ledger", q, payload{}, false)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	entries, err := ReadLedger(resp.Body)
	if err != nil && ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return entries, err
}

// ReadLedger decodes a ledger in JSON Lines, one entry per line; blank
// lines are skipped.
func ReadLedger(r io.Reader) ([]pool.Entry, error) {
	var entries []pool.Entry
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for line := 1; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var e pool.Entry
		if err := json.Unmarshal(b, &e); err != nil {
			return entries, fmt.Errorf("ledger line %d: %w", line, err)
		}
		entries = append(entries, e)
	}
	if err := sc.Err(); err != nil {
		return entries, fmt.Errorf("read ledger: %w", err)
	}
	return entries, nil
}

// SetFetchesKept says whether this device fetches, for the jobs it
// merges, the results the devices that computed them keep (it runs a
// data plane: Seed sets it, Seeder.Stop clears it). While it does, Submit
// and the requests for results tell the pool so, and the pool's devices
// keep results over pool.InlineResultBytes instead of sending them;
// while it does not, the results come inline.
func (c *Client) SetFetchesKept(on bool) { c.fetchesKept.Store(on) }

// refs reports whether to tell the coordinator that this device fetches
// kept results: it does, and the coordinator takes references (API
// version 4).
func (c *Client) refs(ctx context.Context) bool {
	return c.fetchesKept.Load() && c.apiVersion(ctx) >= refsAPIVersion
}
