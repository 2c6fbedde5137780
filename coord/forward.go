package coord

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"idlepool/identity"
	"idlepool/job"
)

// Requests forwarded between the shards of a divided pool (ShardRouter):
// a router that split a device's signed request into parts, one per
// shard, checked the device's signature itself, and hands each shard
// its part with a MAC in place of the signature (a shard cannot check
// a signature over a body it sees only a part of).

// ForwardedHeader carries a forwarded request's authentication, in
// place of Authorization: "peer=ID, shard=S, ts=MS, mac=BASE64". peer is
// the device the request acts for, shard the shard it is meant for, ts
// the time it was forwarded in unix milliseconds (within the clock skew
// a request signature is allowed), mac the HMAC-SHA256 of
// forwardMessage under the pool's forwarding key (forwardKey). A
// coordinator that is not a shard of a divided pool (Config.Shards of 1)
// refuses every request that has it, 401.
const ForwardedHeader = "Idlepool-Forwarded"

// QueuedHeader is the header in which a shard's coordinator (Config.Shards
// > 1) tells, on its answers to requests for work (POST /v1/leases, POST
// /v1/work) and to POST /v1/jobs, how many tasks it has waiting to be
// leased (pool.Scheduler.Queued), a decimal count. A ShardRouter reads
// it to choose where to ask for work and where to place a new job, and
// takes it off the answer it passes on.
const QueuedHeader = "Idlepool-Shard-Queued"

// AddedHeader is the header in which a shard's coordinator (Config.Shards
// > 1) tells, on its answers to GET /v1/jobs, GET /v1/listings and GET
// /v1/dashboard, when each job its answer lists was added to the pool
// (pool.Scheduler.Added), in the list's order: unix milliseconds in
// decimal, separated by commas. A ShardRouter merges the shards' lists by
// these times into the order one coordinator of the whole pool would
// give (mergeAdded), and takes the header off the answer it passes on.
const AddedHeader = "Idlepool-Shard-Added"

// forwardInfo is the HKDF info of the forwarding key: every shard
// coordinator of a pool holds the pool's key, and so derives the same
// forwarding key, which nobody without the pool's key can.
const forwardInfo = "idlepool shard forwarding v1"

// forwardDomain begins every forwardMessage, so that no other MAC under
// the same key can pass for one.
const forwardDomain = "idlepool/forwarded/v1"

// forwardKey is the key of the MACs of forwarded requests.
type forwardKey [32]byte

// newForwardKey derives the forwarding key of the pool whose key is k.
func newForwardKey(k *identity.Key) forwardKey { return forwardKey(k.Derive(forwardInfo)) }

// forwardMessage is what a forwarded request's MAC covers:
// forwardDomain 0 SHARD 0 METHOD 0 TARGET 0 PEER 0 TS 0 hex(sha256(body)).
func forwardMessage(shard int, method, target, peer string, ts int64, bodySHA256 [32]byte) []byte {
	b := make([]byte, 0, len(forwardDomain)+len(method)+len(target)+len(peer)+100)
	b = append(b, forwardDomain...)
	b = append(b, 0)
	b = strconv.AppendInt(b, int64(shard), 10)
	b = append(b, 0)
	b = append(b, method...)
	b = append(b, 0)
	b = append(b, target...)
	b = append(b, 0)
	b = append(b, peer...)
	b = append(b, 0)
	b = strconv.AppendInt(b, ts, 10)
	b = append(b, 0)
	return hex.AppendEncode(b, bodySHA256[:])
}

// mac is the MAC of a forwarded request.
func (k *forwardKey) mac(shard int, method, target, peer string, ts int64, bodySHA256 [32]byte) []byte {
	h := hmac.New(sha256.New, k[:])
	h.Write(forwardMessage(shard, method, target, peer, ts, bodySHA256))
	return h.Sum(nil)
}

// sign sets req's ForwardedHeader for shard, acting for peer at now, with
// body the bytes req will send; it removes any Authorization header.
func (k *forwardKey) sign(req *http.Request, shard int, peer string, now time.Time, body []byte) {
	ts := now.UnixMilli()
	m := k.mac(shard, req.Method, req.URL.RequestURI(), peer, ts, sha256.Sum256(body))
	req.Header.Del("Authorization")
	req.Header.Set(ForwardedHeader, fmt.Sprintf("peer=%s, shard=%d, ts=%d, mac=%s", peer, shard, ts, base64.StdEncoding.EncodeToString(m)))
}

// forwarded is a parsed ForwardedHeader.
type forwarded struct {
	Peer  string
	Shard int
	TS    int64 // unix milliseconds
	MAC   []byte
}

// parseForwarded parses a ForwardedHeader value: each parameter exactly
// once. Errors wrap errAuth and say what is wrong.
func parseForwarded(h string) (forwarded, error) {
	var f forwarded
	if len(h) > maxAuthHeader {
		return f, fmt.Errorf("%w: %s header of %d bytes is too long", errAuth, ForwardedHeader, len(h))
	}
	var seen [4]bool
	for part := range strings.SplitSeq(h, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || v == "" {
			return f, fmt.Errorf("%w: %s parameter %q is not key=value", errAuth, ForwardedHeader, part)
		}
		var i int
		switch k {
		case "peer":
			i = 0
			if !validID(v) {
				return f, fmt.Errorf("%w: forwarded for %q, which is not a peer ID", errAuth, v)
			}
			f.Peer = v
		case "shard", "ts":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || v[0] == '+' || v[0] == '-' {
				return f, fmt.Errorf("%w: %s %q of %s is not a decimal number", errAuth, k, v, ForwardedHeader)
			}
			if k == "shard" {
				i, f.Shard = 1, int(min(n, 1<<20))
			} else {
				i, f.TS = 2, n
			}
		case "mac":
			i = 3
			m, err := base64.StdEncoding.Strict().DecodeString(v)
			if err != nil || len(m) != sha256.Size {
				return f, fmt.Errorf("%w: the mac of %s is not a base64 HMAC-SHA256 of 32 bytes", errAuth, ForwardedHeader)
			}
			f.MAC = m
		default:
			return f, fmt.Errorf("%w: unknown %s parameter %q", errAuth, ForwardedHeader, k)
		}
		if seen[i] {
			return f, fmt.Errorf("%w: %s parameter %q given twice", errAuth, ForwardedHeader, k)
		}
		seen[i] = true
	}
	for i, name := range []string{"peer", "shard", "ts", "mac"} {
		if !seen[i] {
			return f, fmt.Errorf("%w: %s header has no %s", errAuth, ForwardedHeader, name)
		}
	}
	return f, nil
}

// checkTime refuses a forwarding time more than clockSkew from now, as
// authorization.checkTime refuses a request's: a forwarded request kept
// and sent again later is refused.
func (f forwarded) checkTime(now time.Time) error {
	return authorization{Peer: f.Peer, TS: f.TS}.checkTime(now)
}

// verify checks the MAC over the request, for shard (this coordinator's).
func (f forwarded) verify(k *forwardKey, shard int, method, target string, bodySHA256 [32]byte) error {
	if f.Shard != shard {
		return fmt.Errorf("%w: the request was forwarded to shard %d, and this coordinator is shard %d", errAuth, f.Shard, shard)
	}
	if !hmac.Equal(f.MAC, k.mac(shard, method, target, f.Peer, f.TS, bodySHA256)) {
		return fmt.Errorf("%w: the forwarded request's mac does not verify with the pool's forwarding key: it was altered, or forwarded by a node without the pool's key", errAuth)
	}
	return nil
}

// authenticateForwarded parses and checks the time of r's
// ForwardedHeader, refusing it (401) unless this coordinator is a
// shard of a divided pool.
func (s *Server) authenticateForwarded(r *http.Request) (forwarded, error) {
	if s.cfg.Shards <= 1 {
		return forwarded{}, fmt.Errorf("%w: this coordinator is not a shard of a divided pool and takes no forwarded requests (%s): sign the request with the device key", errAuth, ForwardedHeader)
	}
	if len(r.Header.Values(ForwardedHeader)) != 1 {
		return forwarded{}, fmt.Errorf("%w: %d %s headers, want one", errAuth, len(r.Header.Values(ForwardedHeader)), ForwardedHeader)
	}
	f, err := parseForwarded(r.Header.Get(ForwardedHeader))
	if err != nil {
		return f, err
	}
	return f, f.checkTime(s.cfg.Now())
}

// isForwarded reports whether r claims to be forwarded by a shard router.
func isForwarded(r *http.Request) bool { return len(r.Header.Values(ForwardedHeader)) > 0 }

// noteAdded tells, on the answer w of a shard's coordinator, when each of
// the n jobs it lists was added to the pool (AddedHeader); id(i) is the
// ID of the i-th. An undivided pool's coordinator adds nothing.
func (s *Server) noteAdded(w http.ResponseWriter, n int, id func(i int) job.ID) {
	if s.cfg.Shards <= 1 {
		return
	}
	b := make([]byte, 0, 14*n)
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		at, _ := s.sched.Added(id(i)) // a job listed stays in the pool
		b = strconv.AppendInt(b, at.UnixMilli(), 10)
	}
	w.Header().Set(AddedHeader, string(b))
}

// noteQueued tells, on the answer w of a shard's coordinator, how many
// tasks it has waiting (QueuedHeader). An undivided pool's coordinator
// adds nothing.
func (s *Server) noteQueued(w http.ResponseWriter) {
	if s.cfg.Shards > 1 {
		w.Header().Set(QueuedHeader, strconv.FormatInt(s.sched.Queued(), 10))
	}
}
