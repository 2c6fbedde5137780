package api

import (
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
// where sig is the device key's Ed25519 signature over RequestMessage.

const (
	// AuthScheme is the scheme of the Authorization header.
	AuthScheme = "Idlepool"
	// requestDomain separates request signatures from every other message
	// an idlepool key signs (endorsements, receipts).
	requestDomain = "idlepool/request/v1"
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
