package api_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"idlepool/coord/api"
	"idlepool/identity"
	"idlepool/job"
)

// TestSignRequest: the Authorization header SignRequest sets names the
// key's peer ID and the timestamp, and its signature verifies over
// RequestMessage of the method, the request target with its query, the
// timestamp and the body's SHA-256, as the coordinator checks it; over
// another body it does not.
func TestSignRequest(t *testing.T) {
	key, err := identity.Generate()
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"max":2}`)
	req, err := http.NewRequest("POST", "http://127.0.0.1:7420/v1/leases?x=1", nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.UnixMilli(1_767_000_000_123)
	api.SignRequest(req, body, key, now)

	h := req.Header.Get("Authorization")
	want := fmt.Sprintf("%s peer=%s, ts=%d, sig=", api.AuthScheme, key.ID(), now.UnixMilli())
	rest, ok := strings.CutPrefix(h, want)
	if !ok {
		t.Fatalf("Authorization = %q, want it to start with %q", h, want)
	}
	sig, err := base64.StdEncoding.DecodeString(rest)
	if err != nil {
		t.Fatalf("signature %q: %v", rest, err)
	}
	msg := api.RequestMessage("POST", "/v1/leases?x=1", now.UnixMilli(), sha256.Sum256(body))
	if err := identity.Verify(key.Public(), msg, sig); err != nil {
		t.Errorf("signature does not verify over RequestMessage: %v", err)
	}
	other := api.RequestMessage("POST", "/v1/leases?x=1", now.UnixMilli(), sha256.Sum256([]byte(`{"max":3}`)))
	if err := identity.Verify(key.Public(), other, sig); err == nil {
		t.Error("signature verifies over another body")
	}
}

// TestHexDigestJSON: a HexDigest encodes as 64 lowercase hex digits and
// decodes only from such; anything else is an error wrapping
// job.ErrBadDigest.
func TestHexDigestJSON(t *testing.T) {
	d := api.HexDigest(sha256.Sum256([]byte("x")))
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if want := `"` + d.String() + `"`; string(b) != want || len(b) != 66 || strings.ToLower(string(b)) != string(b) {
		t.Fatalf("Marshal = %s, want %s", b, want)
	}
	var back api.HexDigest
	if err := json.Unmarshal(b, &back); err != nil || back != d {
		t.Fatalf("Unmarshal(%s) = %v, %v; want %v", b, back, err, d)
	}
	for _, in := range []string{`""`, `"abc"`, `"` + strings.Repeat("g", 64) + `"`, `"` + d.String() + `0"`} {
		var got api.HexDigest
		if err := json.Unmarshal([]byte(in), &got); !errors.Is(err, job.ErrBadDigest) {
			t.Errorf("Unmarshal(%s) = %v, want an error wrapping job.ErrBadDigest", in, err)
		}
	}
}
