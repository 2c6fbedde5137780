package coord

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/p2p"
)

// signal makes a candidate signal from p to to, signed, with sequence seq.
func signal(p *testPeer, to string, seq uint64, sent time.Time) p2p.Signal {
	s := p2p.Signal{To: to, Session: strings.Repeat("ab", 16), Seq: seq, SentMS: sent.UnixMilli(),
		Kind: p2p.KindCandidate, Candidate: fmt.Sprintf(`{"candidate":"candidate:%d 1 udp 1 127.0.0.1 %d typ host"}`, seq, 1000+seq)}
	s.Sign(p.key)
	return s
}

func (ts *testServer) receive(t *testing.T, p *testPeer, waitMs int) []p2p.Signal {
	t.Helper()
	a := ts.do(t, p, "GET", "/v1/signals?waitMs="+strconv.Itoa(waitMs), nil)
	if a.status != http.StatusOK {
		t.Fatalf("GET /v1/signals: %d %s", a.status, a.body)
	}
	var ans SignalsAnswer
	a.decode(t, &ans)
	return ans.Signals
}

func TestSignalRelay(t *testing.T) {
	clock := &fakeClock{now: time.Now()}
	ts := startServer(t, func(c *Config) { c.Now = clock.Now })
	a, b, mallory := newPeer(t, nil), newPeer(t, nil), newPeer(t, nil)
	for _, p := range []*testPeer{a, b, mallory} {
		ts.register(t, p, "", http.StatusCreated)
	}
	now := clock.Now()
	first := signal(a, b.ID(), 10, now)
	if got := ts.do(t, a, "POST", "/v1/signals", first); got.status != http.StatusAccepted {
		t.Fatalf("post: %d %s", got.status, got.body)
	}
	if m := ts.do(t, nil, "GET", "/metrics", nil); !strings.Contains(string(m.body), "idlepool_coord_signals_waiting 1\n") {
		t.Errorf("/metrics does not count 1 signal waiting:\n%s", m.body)
	}
	got := ts.receive(t, b, 0)
	want := first
	want.FromKey = a.key.Public()
	if diff := cmp.Diff([]p2p.Signal{want}, got); diff != "" {
		t.Fatalf("delivered signals (-want +got):\n%s", diff)
	}
	if err := got[0].Verify(got[0].FromKey); err != nil {
		t.Errorf("delivered signal does not verify with the key the coordinator gives: %v", err)
	}
	if again := ts.receive(t, b, 0); len(again) != 0 {
		t.Errorf("a delivered signal was delivered again: %+v", again)
	}

	tampered := signal(a, b.ID(), 11, now)
	tampered.Candidate = strings.Replace(tampered.Candidate, "127.0.0.1", "10.9.9.9", 1)
	wrongSender := signal(mallory, b.ID(), 12, now)
	wrongSender.From = a.ID() // claims a, signed by mallory
	noSig := signal(a, b.ID(), 13, now)
	noSig.Sig = nil
	badFP := p2p.Signal{To: b.ID(), Session: strings.Repeat("cd", 16), Seq: 14, SentMS: now.UnixMilli(), Kind: p2p.KindOffer,
		SDP: "v=0\r\na=fingerprint:sha-256 AA:BB\r\n", Fingerprint: "sha-256 CC:DD"}
	badFP.Sign(a.key)
	for _, tc := range []struct {
		name   string
		poster *testPeer
		s      p2p.Signal
		status int
		code   string
	}{
		{"replayed", a, first, http.StatusConflict, "replay"},
		{"older sequence", a, signal(a, b.ID(), 9, now), http.StatusConflict, "replay"},
		{"tampered after signing", a, tampered, http.StatusUnauthorized, "unauthorized"},
		{"posted for another device", mallory, signal(a, b.ID(), 20, now), http.StatusBadRequest, "bad_request"},
		{"signed by another key", mallory, wrongSender, http.StatusBadRequest, "bad_request"},
		{"unsigned", a, noSig, http.StatusBadRequest, "bad_request"},
		{"fingerprint not the SDP's", a, badFP, http.StatusBadRequest, "bad_request"},
		{"stale", a, signal(a, b.ID(), 21, now.Add(-6*time.Minute)), http.StatusUnauthorized, "clock_skew"},
		{"to an unknown device", a, signal(a, newPeer(t, nil).ID(), 22, now), http.StatusNotFound, "unknown_peer"},
		{"to itself", a, signal(a, a.ID(), 23, now), http.StatusBadRequest, "bad_request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ts.do(t, tc.poster, "POST", "/v1/signals", tc.s)
			if got.status != tc.status || got.errorBody(t).Code != tc.code {
				t.Errorf("status %d %s, want %d %s", got.status, got.body, tc.status, tc.code)
			}
		})
	}
	if got := ts.receive(t, b, 0); len(got) != 0 {
		t.Errorf("refused signals were delivered: %+v", got)
	}

	// Bounded: 64 waiting signals from one sender, then 429.
	seq := uint64(100)
	for i := range mailboxPerSender + 1 {
		seq++
		got := ts.do(t, a, "POST", "/v1/signals", signal(a, b.ID(), seq, now))
		if i < mailboxPerSender && got.status != http.StatusAccepted {
			t.Fatalf("signal %d: %d %s", i, got.status, got.body)
		}
		if i == mailboxPerSender && (got.status != http.StatusTooManyRequests || got.errorBody(t).Code != "mailbox_full") {
			t.Fatalf("signal over the mailbox bound: %d %s, want 429 mailbox_full", got.status, got.body)
		}
	}
	// ...and kept at most a minute.
	clock.Advance(maxSignalAge + time.Second)
	if got := ts.receive(t, b, 0); len(got) != 0 {
		t.Errorf("%d signals older than %v were delivered", len(got), maxSignalAge)
	}
	if n := ts.signals.pending(); n != 0 {
		t.Errorf("%d signals kept", n)
	}

	// A long poll answers as soon as a signal arrives.
	done := make(chan []p2p.Signal, 1)
	go func() { done <- ts.receive(t, b, 120_000) }()
	for ts.signals.waiters() == 0 {
		time.Sleep(time.Millisecond) // polling a condition
	}
	late := signal(a, b.ID(), seq+1, clock.Now())
	if got := ts.do(t, a, "POST", "/v1/signals", late); got.status != http.StatusAccepted {
		t.Fatalf("post: %d %s", got.status, got.body)
	}
	select {
	case got := <-done:
		if len(got) != 1 || got[0].Seq != late.Seq {
			t.Errorf("long poll got %+v, want the signal of sequence %d", got, late.Seq)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the long poll did not answer within 2 minutes of a signal")
	}
}

// TestSignalToOfflineDevice: a device that listened for signals and has
// had no long poll open for offlineAfter is offline: a signal to it is
// refused with 410 at once, so that the sender's connection fails now
// rather than after its timeout. A device never seen listening, or one
// listening now however long ago it started, is not judged.
func TestSignalToOfflineDevice(t *testing.T) {
	clock := &fakeClock{now: time.Now()}
	ts := startServer(t, func(c *Config) { c.Now = clock.Now })
	a, b, c := newPeer(t, nil), newPeer(t, nil), newPeer(t, nil)
	for _, p := range []*testPeer{a, b, c} {
		ts.register(t, p, "", http.StatusCreated)
	}
	seq := uint64(0)
	post := func(to *testPeer) answer {
		t.Helper()
		seq++
		return ts.do(t, a, "POST", "/v1/signals", signal(a, to.ID(), seq, clock.Now()))
	}
	if got := post(b); got.status != http.StatusAccepted {
		t.Fatalf("signal to a device never seen listening: %d %s, want 202", got.status, got.body)
	}
	ts.receive(t, b, 0)
	clock.Advance(offlineAfter / 2)
	if got := post(b); got.status != http.StatusAccepted {
		t.Fatalf("signal to a device that listened %v ago: %d %s, want 202", offlineAfter/2, got.status, got.body)
	}
	clock.Advance(offlineAfter/2 + time.Second)
	got := post(b)
	if got.status != http.StatusGone || got.errorBody(t).Code != "peer_offline" || !strings.Contains(got.errorBody(t).Error, b.ID()) {
		t.Fatalf("signal to a device that stopped listening %v ago: %d %s, want 410 peer_offline naming it", offlineAfter+time.Second, got.status, got.body)
	}
	if n := len(ts.receive(t, b, 0)); n != 1 {
		t.Errorf("b got %d signals, want the one sent while it listened (the refused one is not kept)", n)
	}
	if got := post(b); got.status != http.StatusAccepted {
		t.Fatalf("signal to a device that listens again: %d %s, want 202", got.status, got.body)
	}

	// A long poll open for longer than offlineAfter still listens.
	done := make(chan []p2p.Signal, 1)
	go func() { done <- ts.receive(t, c, 120_000) }()
	for ts.signals.waiters() == 0 {
		time.Sleep(time.Millisecond) // polling a condition
	}
	clock.Advance(3 * offlineAfter)
	if got := post(c); got.status != http.StatusAccepted {
		t.Fatalf("signal to a device with a long poll open: %d %s, want 202", got.status, got.body)
	}
	select {
	case got := <-done:
		if len(got) != 1 {
			t.Errorf("long poll got %+v, want one signal", got)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the long poll did not answer within 2 minutes of a signal")
	}
}

func TestICEServers(t *testing.T) {
	clock := &fakeClock{now: time.Now()}
	secret := []byte("a secret of 20 bytes")
	ts := startServer(t, func(c *Config) {
		c.Now = clock.Now
		c.Relay = RelayConfig{Listen: "127.0.0.1:0", Secret: secret}
	})
	p := newPeer(t, nil)
	ts.register(t, p, "", http.StatusCreated)
	a := ts.do(t, p, "GET", "/v1/ice", nil)
	var ans ICEAnswer
	a.decode(t, &ans)
	if len(ans.ICEServers) != 2 {
		t.Fatalf("ICE servers %+v, want STUN and TURN", ans.ICEServers)
	}
	turn := ans.ICEServers[1]
	addr := ts.RelayAddr().String()
	if diff := cmp.Diff([]string{"turn:" + addr + "?transport=udp"}, turn.URLs); diff != "" {
		t.Errorf("TURN URLs (-want +got):\n%s", diff)
	}
	expiry := clock.Now().Add(time.Hour).Unix()
	if want := fmt.Sprintf("%d:%s", expiry, p.ID()); turn.Username != want {
		t.Errorf("username %q, want %q", turn.Username, want)
	}
	m := hmac.New(sha1.New, secret)
	m.Write([]byte(turn.Username))
	if want := base64.StdEncoding.EncodeToString(m.Sum(nil)); turn.Credential != want {
		t.Errorf("credential %q, want base64(HMAC-SHA1(secret, username)) %q", turn.Credential, want)
	}
	if !ans.Expires.Equal(time.Unix(expiry, 0)) && ans.Expires.Unix() != expiry {
		t.Errorf("expires %v, want %v", ans.Expires, time.Unix(expiry, 0))
	}

	// Without a relay: no servers, and no error.
	plain := startServer(t, nil)
	q := newPeer(t, nil)
	plain.register(t, q, "", http.StatusCreated)
	var none ICEAnswer
	plain.do(t, q, "GET", "/v1/ice", nil).decode(t, &none)
	if len(none.ICEServers) != 0 {
		t.Errorf("a coordinator without a relay gave %+v", none.ICEServers)
	}
	b, _ := json.Marshal(none)
	if !strings.Contains(string(b), `"iceServers":[]`) {
		t.Errorf("answer %s, want an empty list", b)
	}
}

// TestLongPollGivenUp: a client that stops waiting for its long poll
// (GET /v1/signals) is no fault of the coordinator's: it is logged at
// debug level, never warned about as a refused request.
func TestLongPollGivenUp(t *testing.T) {
	var log logLines
	ts := startServer(t, func(c *Config) {
		c.Logger = slog.New(slog.NewJSONHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	p := newPeer(t, nil)
	ts.register(t, p, "", http.StatusCreated)
	// Cancel each poll a little later than the last until the
	// coordinator has logged one given up, in either way.
	wait := 50 * time.Millisecond
	waitUntil(t, patience(t), "a long poll given up by its client", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		wait = min(2*wait, 5*time.Second) // the poll itself waits 60 s
		req := ts.request(t, "GET", "/v1/signals?waitMs=60000", nil).WithContext(ctx)
		SignRequest(req, nil, p.key, time.Now())
		if resp, err := ts.client.Do(req); err == nil {
			resp.Body.Close()
		}
		return len(log.find("Request given up by its client"))+len(log.find("Request refused")) > 0
	})
	for _, r := range log.find("Request refused") {
		t.Errorf("logged at %v: %v", r["level"], r)
	}
	if r := log.find("Request given up by its client"); len(r) == 0 || r[0]["level"] != "DEBUG" {
		t.Errorf("given up: %v, want a record at DEBUG", r)
	}
}
