package coord

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"idlepool/identity"
)

// Request signing (docs/api.md, "Authentication"). A request carries
//
//	Authorization: Idlepool peer=<peer ID>, ts=<unix milliseconds>, sig=<base64 signature>
//
// where sig is the device key's Ed25519 signature over requestMessage.

const (
	authScheme = "Idlepool"
	// requestDomain separates request signatures from every other message
	// an idlepool key signs (endorsements, receipts).
	requestDomain = "idlepool/request/v1"
	// clockSkew is how far a request's timestamp may be from the
	// coordinator's clock, either way.
	clockSkew = 5 * time.Minute
	// maxAuthHeader bounds the Authorization header we parse; a valid one
	// is about 150 bytes.
	maxAuthHeader = 512
)

// SignRequest signs req for a coordinator: it sets req's Authorization
// header to the signature by key over req's method, request target
// (req.URL.RequestURI(): path, then '?' and the query if any), the
// timestamp now (unix milliseconds) and the SHA-256 of body, which must be
// exactly the bytes req will send (nil for none). Sign right before
// sending: the coordinator refuses a timestamp more than 5 minutes from
// its clock. SignRequest only sets a header; it is safe for concurrent use
// on distinct requests.
func SignRequest(req *http.Request, body []byte, key *identity.Key, now time.Time) {
	SignRequestDigest(req, sha256.Sum256(body), key, now)
}

// SignRequestDigest is SignRequest for a body known by its SHA-256, such as
// a large file streamed from disk: bodySHA256 must be the SHA-256 of the
// bytes req will send. For PUT /v1/blobs/{digest} it is the blob's digest.
func SignRequestDigest(req *http.Request, bodySHA256 [32]byte, key *identity.Key, now time.Time) {
	ts := now.UnixMilli()
	sig := key.Sign(requestMessage(req.Method, req.URL.RequestURI(), ts, bodySHA256))
	req.Header.Set("Authorization", fmt.Sprintf("%s peer=%s, ts=%d, sig=%s",
		authScheme, key.ID(), ts, base64.StdEncoding.EncodeToString(sig)))
}

// requestMessage is the byte string a request signature covers:
// "idlepool/request/v1" 0 METHOD 0 TARGET 0 TS 0 hex(sha256(body)).
func requestMessage(method, target string, ts int64, bodySHA256 [32]byte) []byte {
	b := make([]byte, 0, len(requestDomain)+len(method)+len(target)+20+64+4)
	b = append(b, requestDomain...)
	b = append(b, 0)
	b = append(b, method...)
	b = append(b, 0)
	b = append(b, target...)
	b = append(b, 0)
	b = strconv.AppendInt(b, ts, 10)
	b = append(b, 0)
	return hex.AppendEncode(b, bodySHA256[:])
}

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
	if !ok || !strings.EqualFold(scheme, authScheme) {
		return a, fmt.Errorf("%w: Authorization scheme must be %q", errAuth, authScheme)
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
	if err := identity.Verify(key, requestMessage(method, target, a.TS, bodySHA256), a.Sig); err != nil {
		return fmt.Errorf("%w: the signature does not verify with the key of peer %s", errAuth, a.Peer)
	}
	return nil
}
