package coord

import (
	"crypto/sha256"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"idlepool/identity"
)

func TestSignAndVerify(t *testing.T) {
	key, err := identity.FromSeed(make([]byte, 32))
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
	if err := a.verify(key.Public(), "POST", "/v1/leases?x=1", sha256.Sum256(body)); err != nil {
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
		if err := a.verify(key.Public(), tc.method, tc.target, sha256.Sum256([]byte(tc.body))); !errors.Is(err, errAuth) {
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
	cases := []struct {
		name, h string
		ok      bool
	}{
		{"good", "Idlepool peer=" + id + ", ts=1, sig=" + sig, true},
		{"scheme case", "idlepool peer=" + id + ",ts=1,sig=" + sig, true},
		{"reordered", "Idlepool sig=" + sig + ", ts=1, peer=" + id, true},
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
