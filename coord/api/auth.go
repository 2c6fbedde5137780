package api

import (
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"idlepool/identity"
)

// Request signing (docs/api.md, "Authentication"). A request carries
//
//	Authorization: Idlepool peer=<peer ID>, ts=<unix milliseconds>, sig=<base64 signature>
//
// where sig is the device key's Ed25519 signature over RequestMessage,
// or, to a coordinator of MACAPIVersion or later,
//
//	Authorization: Idlepool peer=<peer ID>, ts=<unix milliseconds>, mac=<base64 HMAC-SHA256>
//
// where mac is the HMAC-SHA256 of RequestMessage under the device's
// RequestKey with the pool: checking it costs the coordinator some 2 µs
// where a signature costs some 40 (coord's BenchmarkRequestAuth).

const (
	// AuthScheme is the scheme of the Authorization header.
	AuthScheme = "Idlepool"
	// requestDomain separates request signatures from every other message
	// an idlepool key signs (endorsements, receipts).
	requestDomain = "idlepool/request/v1"
	// requestKeyInfo is the HKDF info of RequestKey, before the two
	// public keys.
	requestKeyInfo = "idlepool/request-mac/v1"
)

// MACAPIVersion is the first API version whose coordinators take a
// request authenticated by mac= (MACRequestDigest) instead of sig=.
const MACAPIVersion = 9

// RequestKey derives the 32-byte key a device and its pool authenticate
// the device's requests with (MACRequestDigest): HKDF-SHA256 (RFC 5869,
// no salt) of their X25519 agreement, shared (identity.Key.Agree: the
// device's key with the pool's public key, or the pool's with the
// device's), with info "idlepool/request-mac/v1" followed by the
// device's and the pool's 32-byte public keys. Only the device and the
// holders of the pool's key (every node of a cluster) can compute it,
// so a MAC under it says the device sent the request as well as its
// signature does to the pool, though not to anyone else: requests are
// checked by the pool alone, never kept as evidence.
func RequestKey(shared [32]byte, device, pool ed25519.PublicKey) [32]byte {
	info := make([]byte, 0, len(requestKeyInfo)+len(device)+len(pool))
	info = append(append(append(info, requestKeyInfo...), device...), pool...)
	b, err := hkdf.Key(sha256.New, shared[:], nil, string(info), 32)
	if err != nil {
		panic("api: hkdf: " + err.Error()) // only for a length past 255 hashes
	}
	return [32]byte(b)
}

// RequestMAC returns the 32-byte HMAC-SHA256 (RFC 2104) of msg (a
// RequestMessage) under key (RequestKey).
func RequestMAC(key *[32]byte, msg []byte) []byte {
	m := hmac.New(sha256.New, key[:])
	m.Write(msg)
	return m.Sum(nil)
}

// MACRequestDigest is SignRequestDigest with a MAC under key (the
// device's RequestKey with the pool) instead of a signature: it sets
// req's Authorization header to "Idlepool peer=<peer>, ts=…, mac=…",
// peer the device key's ID. Only a coordinator of MACAPIVersion or later
// takes it; an older one answers 401.
func MACRequestDigest(req *http.Request, bodySHA256 [32]byte, peer string, key *[32]byte, now time.Time) {
	ts := now.UnixMilli()
	mac := RequestMAC(key, RequestMessage(req.Method, req.URL.RequestURI(), ts, bodySHA256))
	req.Header.Set("Authorization", fmt.Sprintf("%s peer=%s, ts=%d, mac=%s",
		AuthScheme, peer, ts, base64.StdEncoding.EncodeToString(mac)))
}

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
	sig := key.Sign(RequestMessage(req.Method, req.URL.RequestURI(), ts, bodySHA256))
	req.Header.Set("Authorization", fmt.Sprintf("%s peer=%s, ts=%d, sig=%s",
		AuthScheme, key.ID(), ts, base64.StdEncoding.EncodeToString(sig)))
}

// RequestMessage is the byte string a request signature covers:
// "idlepool/request/v1" 0 METHOD 0 TARGET 0 TS 0 hex(sha256(body)), TS
// in unix milliseconds. The coordinator checks a signature against it.
func RequestMessage(method, target string, ts int64, bodySHA256 [32]byte) []byte {
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
