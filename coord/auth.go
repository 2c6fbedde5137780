package coord

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"sync"
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
	Sig  []byte // 64-byte Ed25519 signature, or nil when MAC is set
	MAC  []byte // 32-byte HMAC-SHA256 under the device's api.RequestKey, or nil
}

// parseAuthorization parses an "Idlepool peer=…, ts=…, sig=…" header
// value, or one with mac=… (api.MACRequestDigest) instead of sig=….
// Each parameter must appear exactly once, and sig or mac, not both;
// the scheme is matched case-insensitively (RFC 9110, section 11.1).
// Errors wrap errAuth and say what is wrong.
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
	var seen [4]bool // peer, ts, sig, mac
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
		case "mac":
			i = 3
			mac, err := base64.StdEncoding.Strict().DecodeString(v)
			if err != nil || len(mac) != sha256.Size {
				return a, fmt.Errorf("%w: mac is not a base64 HMAC-SHA256 of 32 bytes", errAuth)
			}
			a.MAC = mac
		default:
			return a, fmt.Errorf("%w: unknown Authorization parameter %q", errAuth, k)
		}
		if seen[i] {
			return a, fmt.Errorf("%w: Authorization parameter %q given twice", errAuth, k)
		}
		seen[i] = true
	}
	for i, name := range []string{"peer", "ts"} {
		if !seen[i] {
			return a, fmt.Errorf("%w: Authorization header has no %s", errAuth, name)
		}
	}
	switch {
	case !seen[2] && !seen[3]:
		return a, fmt.Errorf("%w: Authorization header has no sig (or mac)", errAuth)
	case seen[2] && seen[3]:
		return a, fmt.Errorf("%w: Authorization header has both sig and mac: give one", errAuth)
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

// verify checks the signature over the request with the peer's key, or
// its MAC under the key keys derives for it.
func (a authorization) verify(keys *requestKeys, key []byte, method, target string, bodySHA256 [32]byte) error {
	msg := api.RequestMessage(method, target, a.TS, bodySHA256)
	if a.MAC != nil {
		k, err := keys.of(key)
		if err != nil {
			return fmt.Errorf("%w: no request key with peer %s: %w", errAuth, a.Peer, err)
		}
		if !hmac.Equal(a.MAC, api.RequestMAC(&k, msg)) {
			return fmt.Errorf("%w: the mac does not verify with the request key of peer %s and this pool (sign the request instead if the device took the pool's key from elsewhere)", errAuth, a.Peer)
		}
		return nil
	}
	if err := identity.Verify(key, msg, a.Sig); err != nil {
		return fmt.Errorf("%w: the signature does not verify with the key of peer %s", errAuth, a.Peer)
	}
	return nil
}

// maxRequestKeys bounds how many devices' request keys a requestKeys
// keeps; past it, it forgets them all and derives them again as asked
// (about 0.1 ms each).
const maxRequestKeys = 1 << 16

// requestKeys derives each device's api.RequestKey with the pool, from
// the pool's key, and keeps it: the agreement costs some 80 µs once per
// device, where a signature check costs some 40 per request.
// It is safe for concurrent use.
type requestKeys struct {
	pool *identity.Key
	mu   sync.Mutex
	keys map[[ed25519.PublicKeySize]byte][32]byte // by the device's public key
}

func newRequestKeys(pool *identity.Key) *requestKeys {
	return &requestKeys{pool: pool, keys: map[[ed25519.PublicKeySize]byte][32]byte{}}
}

// of returns the request key of the device whose public key is device.
// Errors wrap identity.ErrBadKey: device is not a usable key.
func (r *requestKeys) of(device []byte) ([32]byte, error) {
	if len(device) != ed25519.PublicKeySize {
		return [32]byte{}, fmt.Errorf("%w: public key of %d bytes", identity.ErrBadKey, len(device))
	}
	id := [ed25519.PublicKeySize]byte(device)
	r.mu.Lock()
	k, ok := r.keys[id]
	r.mu.Unlock()
	if ok {
		return k, nil
	}
	shared, err := r.pool.Agree(device)
	if err != nil {
		return k, err
	}
	k = api.RequestKey(shared, device, r.pool.Public())
	r.mu.Lock()
	if len(r.keys) >= maxRequestKeys {
		clear(r.keys)
	}
	r.keys[id] = k
	r.mu.Unlock()
	return k, nil
}
