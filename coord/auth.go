package coord

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"

	"idlepool/coord/api"
	"idlepool/identity"
)

// Request signing (docs/api.md, "Authentication"): api.SignRequest is
// the client's side; this file checks the Authorization header it sets.

const (
	// clockSkew is how far a request's timestamp may be from the
	// coordinator's clock, either way.
	clockSkew = 5 * time.Minute
	// maxAuthHeader bounds the Authorization header we parse; a valid one
	// is about 150 bytes.
	maxAuthHeader = 512
)

// authorization is a parsed Authorization header.
type authorization struct {
	Peer string // the peer ID the request claims
	TS   int64  // unix milliseconds
	Sig  []byte // 64-byte Ed25519 signature
}

// parseAuthorization parses an "Idlepool peer=…, ts=…, sig=…" header
// value. Each parameter must appear exactly once; the scheme is matched
// case-insensitively (RFC 9110, section 11.1). Errors wrap errAuth and say
// what is wrong.
func parseAuthorization(h string) (authorization, error) {
	var a authorization
	if h == "" {
		return a, fmt.Errorf("%w: no Authorization header: sign the request with the device key", errAuth)
	}
	if len(h) > maxAuthHeader {
		return a, fmt.Errorf("%w: Authorization header of %d bytes is too long", errAuth, len(h))
	}
	scheme, params, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, api.AuthScheme) {
		return a, fmt.Errorf("%w: Authorization scheme must be %q", errAuth, api.AuthScheme)
	}
	var seen [3]bool
	for part := range strings.SplitSeq(params, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || v == "" {
			return a, fmt.Errorf("%w: Authorization parameter %q is not key=value", errAuth, part)
		}
		var i int
		switch k {
		case "peer":
			i = 0
			if !validID(v) {
				return a, fmt.Errorf("%w: peer %q is not a peer ID", errAuth, v)
			}
			a.Peer = v
		case "ts":
			i = 1
			if v[0] == '+' || v[0] == '-' {
				return a, fmt.Errorf("%w: ts %q is not unix milliseconds", errAuth, v)
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return a, fmt.Errorf("%w: ts %q is not unix milliseconds", errAuth, v)
			}
			a.TS = n
		case "sig":
			i = 2
			sig, err := base64.StdEncoding.Strict().DecodeString(v)
			if err != nil || len(sig) != 64 {
				return a, fmt.Errorf("%w: sig is not a base64 Ed25519 signature of 64 bytes", errAuth)
			}
			a.Sig = sig
		default:
			return a, fmt.Errorf("%w: unknown Authorization parameter %q", errAuth, k)
		}
		if seen[i] {
			return a, fmt.Errorf("%w: Authorization parameter %q given twice", errAuth, k)
		}
		seen[i] = true
	}
	for i, name := range []string{"peer", "ts", "sig"} {
		if !seen[i] {
			return a, fmt.Errorf("%w: Authorization header has no %s", errAuth, name)
		}
	}
	return a, nil
}

// checkTime refuses a timestamp more than clockSkew from now.
func (a authorization) checkTime(now time.Time) error {
	if a.TS < now.Add(-clockSkew).UnixMilli() || a.TS > now.Add(clockSkew).UnixMilli() {
		return fmt.Errorf("%w: request timestamp %d (unix ms) is more than %v from the coordinator's clock (%d): check the device's clock",
			errClockSkew, a.TS, clockSkew, now.UnixMilli())
	}
	return nil
}

// verify checks the signature over the request with the peer's key.
func (a authorization) verify(key []byte, method, target string, bodySHA256 [32]byte) error {
	if err := identity.Verify(key, api.RequestMessage(method, target, a.TS, bodySHA256), a.Sig); err != nil {
		return fmt.Errorf("%w: the signature does not verify with the key of peer %s", errAuth, a.Peer)
	}
	return nil
}
