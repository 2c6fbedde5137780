package coord

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"idlepool/coord/api"
	"idlepool/identity"
)

func TestSignAndVerify(t *testing.T) {
	key, err := identity.FromSeed(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	pool, err := identity.Generate()
	if err != nil {
		t.Fatal(err)
	}
	now := time.UnixMilli(1_800_000_000_000)
	body := []byte(`{"max":1}`)
	req, _ := http.NewRequest("POST", "http://127.0.0.1:7420/v1/leases?x=1", nil)
	SignRequest(req, body, key, now)
	h := req.Header.Get("Authorization")
	if !strings.HasPrefix(h, "Idlepool peer="+key.ID()+", ts=1800000000000, sig=") {
		t.Fatalf("header %q", h)
	}
	a, err := parseAuthorization(h)
	if err != nil {
		t.Fatal(err)
	}
	if a.Peer != key.ID() || a.TS != now.UnixMilli() {
		t.Errorf("parsed %+v", a)
	}
	keys := newRequestKeys(pool)
	if err := a.verify(keys, key.Public(), "POST", "/v1/leases?x=1", sha256.Sum256(body)); err != nil {
		t.Errorf("verify: %v", err)
	}
	for _, tc := range []struct {
		name, method, target string
		body                 string
	}{
		{"method", "PUT", "/v1/leases?x=1", `{"max":1}`},
		{"path", "POST", "/v1/leases", `{"max":1}`},
		{"query", "POST", "/v1/leases?x=2", `{"max":1}`},
		{"body", "POST", "/v1/leases?x=1", `{"max":2}`},
	} {
		if err := a.verify(keys, key.Public(), tc.method, tc.target, sha256.Sum256([]byte(tc.body))); !errors.Is(err, errAuth) {
			t.Errorf("changed %s: %v, want errAuth", tc.name, err)
		}
	}
	for _, d := range []time.Duration{-5 * time.Minute, 0, 5 * time.Minute} {
		if err := a.checkTime(now.Add(d)); err != nil {
			t.Errorf("skew %v: %v", d, err)
		}
	}
	for _, d := range []time.Duration{-5*time.Minute - time.Millisecond, 5*time.Minute + time.Millisecond} {
		if err := a.checkTime(now.Add(d)); !errors.Is(err, errAuth) {
			t.Errorf("skew %v: %v, want errAuth", d, err)
		}
	}
}

func TestParseAuthorization(t *testing.T) {
	id := "id" + strings.Repeat("a", 32)
	sig := strings.Repeat("A", 86) + "=="
	mac := strings.Repeat("A", 43) + "="
	cases := []struct {
		name, h string
		ok      bool
	}{
		{"good", "Idlepool peer=" + id + ", ts=1, sig=" + sig, true},
		{"scheme case", "idlepool peer=" + id + ",ts=1,sig=" + sig, true},
		{"reordered", "Idlepool sig=" + sig + ", ts=1, peer=" + id, true},
		{"mac", "Idlepool peer=" + id + ", ts=1, mac=" + mac, true},
		{"mac first", "Idlepool mac=" + mac + ", ts=1, peer=" + id, true},
		{"sig and mac", "Idlepool peer=" + id + ", ts=1, sig=" + sig + ", mac=" + mac, false},
		{"mac and sig", "Idlepool peer=" + id + ", ts=1, mac=" + mac + ", sig=" + sig, false},
		{"mac twice", "Idlepool peer=" + id + ", ts=1, mac=" + mac + ", mac=" + mac, false},
		{"short mac", "Idlepool peer=" + id + ", ts=1, mac=" + strings.Repeat("A", 40) + "==", false},
		{"mac the size of a sig", "Idlepool peer=" + id + ", ts=1, mac=" + sig, false},
		{"empty", "", false},
		{"other scheme", "Bearer peer=" + id + ", ts=1, sig=" + sig, false},
		{"no params", "Idlepool", false},
		{"missing sig", "Idlepool peer=" + id + ", ts=1", false},
		{"twice", "Idlepool peer=" + id + ", peer=" + id + ", ts=1, sig=" + sig, false},
		{"unknown param", "Idlepool peer=" + id + ", ts=1, sig=" + sig + ", x=1", false},
		{"bad peer", "Idlepool peer=alice, ts=1, sig=" + sig, false},
		{"signed ts", "Idlepool peer=" + id + ", ts=+1, sig=" + sig, false},
		{"big ts", "Idlepool peer=" + id + ", ts=99999999999999999999, sig=" + sig, false},
		{"short sig", "Idlepool peer=" + id + ", ts=1, sig=AAAA", false},
		{"bad base64", "Idlepool peer=" + id + ", ts=1, sig=" + strings.Repeat("!", 88), false},
		{"empty value", "Idlepool peer=, ts=1, sig=" + sig, false},
		{"too long", "Idlepool peer=" + id + ", ts=1, sig=" + sig + strings.Repeat(" ", 600), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseAuthorization(tc.h)
			if (err == nil) != tc.ok {
				t.Errorf("parseAuthorization(%q) = %v, want ok=%v", tc.h, err, tc.ok)
			}
			if err != nil && !errors.Is(err, errAuth) {
				t.Errorf("error %v does not wrap errAuth", err)
			}
		})
	}
}

// A request with a MAC under the device's request key passes as a
// signed one does, and fails as it does when anything it covers
// changes, and with another device's or another pool's key.
func TestMACAndVerify(t *testing.T) {
	device, err := identity.Generate()
	if err != nil {
		t.Fatal(err)
	}
	pool, err := identity.Generate()
	if err != nil {
		t.Fatal(err)
	}
	shared, err := device.Agree(pool.Public())
	if err != nil {
		t.Fatal(err)
	}
	k := api.RequestKey(shared, device.Public(), pool.Public())
	now := time.UnixMilli(1_800_000_000_000)
	body := []byte(`{"max":1}`)
	req, _ := http.NewRequest("POST", "http://127.0.0.1:7420/v1/work?x=1", nil)
	api.MACRequestDigest(req, sha256.Sum256(body), device.ID(), &k, now)
	h := req.Header.Get("Authorization")
	if !strings.HasPrefix(h, "Idlepool peer="+device.ID()+", ts=1800000000000, mac=") {
		t.Fatalf("header %q", h)
	}
	a, err := parseAuthorization(h)
	if err != nil {
		t.Fatal(err)
	}
	if a.Sig != nil || len(a.MAC) != 32 {
		t.Fatalf("parsed %+v", a)
	}
	keys := newRequestKeys(pool)
	for range 2 { // derived, then kept
		if err := a.verify(keys, device.Public(), "POST", "/v1/work?x=1", sha256.Sum256(body)); err != nil {
			t.Fatalf("verify: %v", err)
		}
	}
	other, _ := identity.Generate()
	for _, tc := range []struct {
		name, method, target, body string
		keys                       *requestKeys
		device                     []byte
	}{
		{"method", "PUT", "/v1/work?x=1", `{"max":1}`, keys, device.Public()},
		{"path", "POST", "/v1/work", `{"max":1}`, keys, device.Public()},
		{"query", "POST", "/v1/work?x=2", `{"max":1}`, keys, device.Public()},
		{"body", "POST", "/v1/work?x=1", `{"max":2}`, keys, device.Public()},
		{"another device's key", "POST", "/v1/work?x=1", `{"max":1}`, keys, other.Public()},
		{"another pool", "POST", "/v1/work?x=1", `{"max":1}`, newRequestKeys(other), device.Public()},
		{"a key of 31 bytes", "POST", "/v1/work?x=1", `{"max":1}`, keys, device.Public()[:31]},
	} {
		if err := a.verify(tc.keys, tc.device, tc.method, tc.target, sha256.Sum256([]byte(tc.body))); !errors.Is(err, errAuth) {
			t.Errorf("changed %s: %v, want errAuth", tc.name, err)
		}
	}
	// The pool's side derives the device's key from the device's
	// public key: the same key.
	if got, err := keys.of(device.Public()); err != nil || got != k {
		t.Errorf("the pool's request key for the device = %x, %v; the device's %x", got, err, k)
	}
}

// requestKeys keeps at most maxRequestKeys keys, and gives the same key
// after it forgot them.
func TestRequestKeysBounded(t *testing.T) {
	pool, _ := identity.Generate()
	keys := newRequestKeys(pool)
	first, _ := identity.Generate()
	k1, err := keys.of(first.Public())
	if err != nil {
		t.Fatal(err)
	}
	for i := range maxRequestKeys {
		keys.keys[[32]byte{byte(i), byte(i >> 8), byte(i >> 16), 1}] = [32]byte{}
	}
	d, _ := identity.Generate()
	if _, err := keys.of(d.Public()); err != nil {
		t.Fatal(err)
	}
	if n := len(keys.keys); n != 1 {
		t.Fatalf("%d keys kept past the bound, want 1 (the newest)", n)
	}
	if k, err := keys.of(first.Public()); err != nil || k != k1 {
		t.Fatalf("derived again: %x, %v; want %x", k, err, k1)
	}
}

// A coordinator takes a request with a MAC under the device's request key
// with the pool as it takes a signed one, over HTTP, and refuses one under
// any other key, or for a device it does not know, with a 401 that says
// why.
func TestServerTakesRequestMAC(t *testing.T) {
	ts := startServer(t, nil)
	p := newPeer(t, nil)
	ts.register(t, p, "", http.StatusCreated)
	macReq := func(p *testPeer, poolKey ed25519.PublicKey, method, path string, body []byte) answer {
		t.Helper()
		shared, err := p.key.Agree(poolKey)
		if err != nil {
			t.Fatal(err)
		}
		k := api.RequestKey(shared, p.key.Public(), poolKey)
		req := ts.request(t, method, path, body)
		api.MACRequestDigest(req, sha256.Sum256(body), p.ID(), &k, time.Now())
		return ts.send(t, req)
	}
	body, _ := json.Marshal(testOffer(p, ts.cfg.Now(), 10*time.Minute))
	if a := macReq(p, ts.PublicKey(), "POST", "/v1/offers", body); a.status != http.StatusOK {
		t.Fatalf("an offer with a MAC: %d %s", a.status, a.body)
	}
	if a := macReq(p, ts.PublicKey(), "GET", "/v1/receipts", nil); a.status != http.StatusOK {
		t.Fatalf("receipts with a MAC: %d %s", a.status, a.body)
	}
	other, _ := identity.Generate()
	for _, tc := range []struct {
		name    string
		p       *testPeer
		poolKey ed25519.PublicKey
		want    string
	}{
		{"another pool's key", p, other.Public(), "the mac does not verify"},
		{"a device the pool does not know", newPeer(t, nil), ts.PublicKey(), "unknown peer"},
	} {
		a := macReq(tc.p, tc.poolKey, "GET", "/v1/receipts", nil)
		if a.status != http.StatusUnauthorized || !strings.Contains(a.errorBody(t).Error, tc.want) {
			t.Errorf("%s: %d %s, want 401 saying %q", tc.name, a.status, a.body, tc.want)
		}
	}
}

// BenchmarkRequestAuth checks one request's authentication as a
// coordinator does once it has the body's hash: its Ed25519 signature,
// or its MAC under the device's request key (kept after the first).
func BenchmarkRequestAuth(b *testing.B) {
	device, _ := identity.Generate()
	pool, _ := identity.Generate()
	keys := newRequestKeys(pool)
	sum := sha256.Sum256([]byte(`{"lease":1}`))
	now := time.Now()
	for _, kind := range []string{"sig", "mac"} {
		b.Run(kind, func(b *testing.B) {
			req, _ := http.NewRequest("POST", "http://127.0.0.1:7420/v1/work", nil)
			if kind == "sig" {
				SignRequestDigest(req, sum, device, now)
			} else {
				shared, _ := device.Agree(pool.Public())
				k := api.RequestKey(shared, device.Public(), pool.Public())
				api.MACRequestDigest(req, sum, device.ID(), &k, now)
			}
			for b.Loop() {
				a, err := parseAuthorization(req.Header.Get("Authorization"))
				if err != nil {
					b.Fatal(err)
				}
				if err := a.verify(keys, device.Public(), "POST", "/v1/work", sum); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("derive", func(b *testing.B) { // a device's first request with a MAC
		for b.Loop() {
			clear(keys.keys)
			if _, err := keys.of(device.Public()); err != nil {
				b.Fatal(err)
			}
		}
	})
}
