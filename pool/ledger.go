package pool

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"sync"

	"github.com/fxamacker/cbor/v2"

	"idlepool/job"
)

// Ledger entry kinds.
const (
	// KindReceipt: the peer computed an accepted task (an ok outcome or a
	// verified failure) and agreed with the majority; it earns Cost units
	// (0 for a verified failure). A KindRevocation entry may revoke it.
	KindReceipt = "receipt"
	// KindDeviation: the peer returned a digest other than the one a
	// majority of distinct owners agreed on; it earns nothing.
	KindDeviation = "deviation"
	// KindUnverified: the task ended without a majority within the replica
	// limit; the peer's replica earns nothing and nobody is blamed.
	KindUnverified = "unverified"
)

// ledgerDomain is written into every entry's canonical encoding so a
// signature over an entry can never be mistaken for one over anything else.
const ledgerDomain = "idlepool/ledger-entry/v1"

// Entry is one record of a pool's append-only, hash-chained ledger, signed
// by the coordinator. Entries are numbered from 1 with no gaps; Prev is the
// Hash of the entry before (zero for the first). Cost is the planner's cost
// of the task in cost units (job.Job.Cost), never anything the peer
// reported and never time; it is 0 for deviations and unverified
// replicas. Time is unix milliseconds, informational only. Lease names the
// replica's lease, so an agent matches an entry to its own work.
//
// JSON (one object per line in a download) writes digests as 64 lowercase
// hex digits and Sig as standard base64; see MarshalJSON.
type Entry struct {
	Seq    uint64
	Prev   job.Digest
	Kind   string
	Pool   string
	Job    job.ID
	Task   int64
	Peer   string
	Owner  string
	Lease  string
	Digest job.Digest
	Cost   float64
	// Work, on a receipt of a completed task, is the count of the work it
	// took that its replicas agreed on (Work.Count, by worker.MeterRule),
	// from which Cost was derived (job.Job.WorkCost); 0 elsewhere.
	Work   uint64
	Time   int64
	Reason string
	// Sig is the coordinator's signature: over the head of the Merkle
	// tree of the entry's batch when Tree is set (one signature for the
	// batch, see TreeProof), over Canonical(false) when Tree is nil (an
	// entry signed alone, as every entry was before batches were signed).
	Sig []byte
	// Tree proves the entry is a leaf of the tree whose head Sig signs;
	// nil on an entry signed alone.
	Tree *TreeProof
}

var ledgerEncMode = func() cbor.EncMode {
	em, err := cbor.CoreDetEncOptions().EncMode()
	if err != nil {
		panic(err)
	}
	return em
}()

// Canonical returns the bytes the coordinator signs: the deterministic
// CBOR encoding (RFC 8949 section 4.2.1, core deterministic: shortest
// forms, definite lengths, map keys sorted bytewise) of a map with the
// keys "type" ("idlepool/ledger-entry/v1"), "seq", "prev" (32-byte
// string), "kind", "pool", "job" (32 bytes), "task", "peer", "owner",
// "lease", "digest" (32 bytes), "cost" (float, shortest exact form),
// "time" and "reason", "work" only when not 0 (so that entries signed
// before it existed still verify), and, with withSig, "sig" (64 bytes).
func (e Entry) Canonical(withSig bool) []byte {
	return e.appendCanonical(nil, withSig)
}

// entryCBOR is the map Canonical encodes, as a struct: the encoder sorts
// its keys once per type (core deterministic order) instead of sorting a
// map's keys at every call, and the bytes are the same as those of the
// map with the same keys and values (TestCanonicalMatchesMap). Canonical
// writes the same bytes by hand (appendCanonical); the tests keep this
// form as the reference.
type entryCBOR struct {
	Type   string  `cbor:"type"`
	Seq    uint64  `cbor:"seq"`
	Prev   []byte  `cbor:"prev"`
	Kind   string  `cbor:"kind"`
	Pool   string  `cbor:"pool"`
	Job    []byte  `cbor:"job"`
	Task   int64   `cbor:"task"`
	Peer   string  `cbor:"peer"`
	Owner  string  `cbor:"owner"`
	Lease  string  `cbor:"lease"`
	Digest []byte  `cbor:"digest"`
	Cost   float64 `cbor:"cost"`
	Work   uint64  `cbor:"work,omitempty"`
	Time   int64   `cbor:"time"`
	Reason string  `cbor:"reason"`
}

// signedEntryCBOR is entryCBOR with "sig".
type signedEntryCBOR struct {
	entryCBOR
	Sig []byte `cbor:"sig"`
}

// Hash returns what the next entry's Prev must hold: of an entry signed
// with its batch (Tree set), its LeafHash, which its signature cannot
// enter since the signature covers the whole batch; of an entry signed
// alone, SHA-256 of its canonical encoding with Sig.
func (e Entry) Hash() job.Digest {
	if e.Tree != nil {
		return e.LeafHash()
	}
	var buf [512]byte
	return sha256.Sum256(e.appendCanonical(buf[:0], true))
}

// LedgerError says which entry of a ledger does not verify and why. It
// matches ErrLedger with errors.Is; use errors.As to read Seq.
type LedgerError struct {
	Seq     uint64 // the first bad entry's position (1-based), or its Seq for VerifyEntry
	Problem string
}

// Error says which entry is bad and why.
func (e *LedgerError) Error() string {
	return fmt.Sprintf("pool: ledger does not verify: entry %d: %s", e.Seq, e.Problem)
}

// Is makes a *LedgerError match ErrLedger.
func (e *LedgerError) Is(target error) bool { return target == ErrLedger }

func ledgerErr(seq uint64, format string, args ...any) error {
	return &LedgerError{Seq: seq, Problem: fmt.Sprintf(format, args...)}
}

// VerifyEntry checks one entry on its own: a known kind, a finite,
// non-negative cost, and the coordinator's signature: over the head of
// the batch's Merkle tree that e.Tree's inclusion proof leads to, or,
// for an entry signed alone (Tree nil), over Canonical(false). It does
// not check the chain (see VerifyLedger). Errors are *LedgerError.
func VerifyEntry(e Entry, coordinator ed25519.PublicKey) error {
	return verifyEntry(e, coordinator, nil)
}

// headCache remembers tree heads whose signature verified: the entries
// of one batch share their head and signature, so each is checked once.
type headCache interface {
	verified(h TreeHead, sig []byte) bool
	add(h TreeHead, sig []byte)
}

// verifiedHead is the tree head and signature verifyEntry checked last:
// VerifyLedger reads the entries in order, so a batch's come together.
type verifiedHead struct {
	head TreeHead
	sig  []byte
}

func (v *verifiedHead) verified(h TreeHead, sig []byte) bool {
	return v.head == h && bytes.Equal(v.sig, sig)
}

func (v *verifiedHead) add(h TreeHead, sig []byte) { *v = verifiedHead{head: h, sig: sig} }

// EntryVerifier checks ledger entries one at a time, as VerifyEntry
// does, and remembers the batch tree heads whose signature it checked
// (the newest verifierHeads of them). The entries of a batch share its
// head and signature (a Merkle tree signed once, RFC 9162 style:
// ledgertree.go), so every entry after the first of its batch costs its
// inclusion proof, a few SHA-256 hashes, instead of an Ed25519
// verification. A device checking its receipts as they come, a few per
// batch, does so. Make one with NewEntryVerifier; it is safe for
// concurrent use.
type EntryVerifier struct {
	key   ed25519.PublicKey
	mu    sync.Mutex
	heads map[headSig]struct{}
	ring  []headSig // the remembered heads, oldest at next once full
	next  int
}

// verifierHeads is how many verified tree heads an EntryVerifier keeps:
// a device's receipts of one poll come from a few batches at most.
const verifierHeads = 64

type headSig struct {
	head TreeHead
	sig  [ed25519.SignatureSize]byte
}

// NewEntryVerifier returns an EntryVerifier of entries signed with
// coordinator, the pool's public key.
func NewEntryVerifier(coordinator ed25519.PublicKey) *EntryVerifier {
	return &EntryVerifier{key: coordinator, heads: make(map[headSig]struct{}, verifierHeads)}
}

// Verify checks e as VerifyEntry does: the same checks and the same
// errors (*LedgerError), whether or not its batch's head was checked
// before.
func (v *EntryVerifier) Verify(e Entry) error {
	return verifyEntry(e, v.key, v)
}

func (v *EntryVerifier) verified(h TreeHead, sig []byte) bool {
	if len(sig) != ed25519.SignatureSize {
		return false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	_, ok := v.heads[headSig{h, [ed25519.SignatureSize]byte(sig)}]
	return ok
}

func (v *EntryVerifier) add(h TreeHead, sig []byte) {
	if len(sig) != ed25519.SignatureSize {
		return
	}
	k := headSig{h, [ed25519.SignatureSize]byte(sig)}
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.heads[k]; ok {
		return
	}
	if len(v.ring) < verifierHeads {
		v.ring = append(v.ring, k)
	} else {
		delete(v.heads, v.ring[v.next])
		v.ring[v.next] = k
		v.next = (v.next + 1) % verifierHeads
	}
	v.heads[k] = struct{}{}
}

func verifyEntry(e Entry, coordinator ed25519.PublicKey, seen headCache) error {
	switch e.Kind {
	case KindReceipt, KindDeviation, KindUnverified, KindRevocation, KindAnchor:
	default:
		return ledgerErr(e.Seq, "unknown kind %q", e.Kind)
	}
	if math.IsNaN(e.Cost) || math.IsInf(e.Cost, 0) || e.Cost < 0 {
		return ledgerErr(e.Seq, "cost %v is not a finite non-negative number", e.Cost)
	}
	if len(coordinator) != ed25519.PublicKeySize {
		return ledgerErr(e.Seq, "coordinator key of %d bytes, want %d", len(coordinator), ed25519.PublicKeySize)
	}
	if len(e.Sig) != ed25519.SignatureSize {
		return ledgerErr(e.Seq, "the coordinator's signature does not verify")
	}
	if e.Tree == nil {
		if !ed25519.Verify(coordinator, e.Canonical(false), e.Sig) {
			return ledgerErr(e.Seq, "the coordinator's signature does not verify")
		}
		return nil
	}
	head, err := e.treeHead()
	if err != nil {
		return ledgerErr(e.Seq, "%v", err)
	}
	if seen != nil && seen.verified(head, e.Sig) {
		return nil
	}
	if !ed25519.Verify(coordinator, head.Canonical(), e.Sig) {
		return ledgerErr(e.Seq, "the coordinator's signature of its batch's tree head does not verify")
	}
	if seen != nil {
		seen.add(head, e.Sig)
	}
	return nil
}

// VerifyLedger checks a whole ledger from its first entry: Seq runs 1, 2,
// ... with no gap, each entry's Prev is the Hash of the one before (zero
// for the first), and each entry passes VerifyEntry. The error wraps
// is a *LedgerError (matching ErrLedger) naming the first bad entry and
// what is wrong. An empty ledger verifies.
func VerifyLedger(entries []Entry, coordinator ed25519.PublicKey) error {
	var (
		prev job.Digest
		last verifiedHead
	)
	for i, e := range entries {
		want := uint64(i + 1)
		if e.Seq != want {
			return ledgerErr(want, "found Seq %d, want %d (an entry is missing, added or out of order)", e.Seq, want)
		}
		if e.Prev != prev {
			return ledgerErr(e.Seq, "Prev does not match the hash of entry %d (the chain is broken)", e.Seq-1)
		}
		if err := verifyEntry(e, coordinator, &last); err != nil {
			return err
		}
		prev = e.Hash()
	}
	return nil
}

// entryJSON is Entry's JSON form.
type entryJSON struct {
	Seq    uint64    `json:"seq"`
	Prev   string    `json:"prev"`
	Kind   string    `json:"kind"`
	Pool   string    `json:"pool"`
	Job    string    `json:"job"`
	Task   int64     `json:"task"`
	Peer   string    `json:"peer"`
	Owner  string    `json:"owner"`
	Lease  string    `json:"lease"`
	Digest string    `json:"digest"`
	Cost   float64   `json:"cost"`
	Work   uint64    `json:"work,omitempty"`
	Time   int64     `json:"time"`
	Reason string    `json:"reason,omitempty"`
	Sig    string    `json:"sig"`
	Tree   *treeJSON `json:"tree,omitempty"`
}

// treeJSON is TreeProof's JSON form.
type treeJSON struct {
	Size  uint64   `json:"size"`
	Index uint64   `json:"index"`
	Path  []string `json:"path"`
}

// MarshalJSON writes the entry as a JSON object with the keys seq, prev,
// kind, pool, job, task, peer, owner, lease, digest, cost, work (omitted
// when 0), time, reason (omitted when empty), sig and tree (omitted for
// an entry signed alone: an object with size, index and path, the list
// of the path's hashes); digests as 64 lowercase hex digits, sig as
// standard base64. It is AppendJSON to nil.
func (e Entry) MarshalJSON() ([]byte, error) {
	return e.AppendJSON(nil)
}

// AppendJSON appends the entry's JSON (MarshalJSON) to b: the same bytes
// encoding/json writes for entryJSON, strings escaped as it escapes them
// (HTML characters too), without its reflection and the re-scan of a
// Marshaler's output, which were most of the cost of answering a
// device's receipt poll (docs/benchmarks.md). The error is
// encoding/json's for a Cost that is NaN or infinite; b is then
// returned as it was.
func (e Entry) AppendJSON(b []byte) ([]byte, error) {
	in := len(b)
	b = append(b, `{"seq":`...)
	b = strconv.AppendUint(b, e.Seq, 10)
	b = append(b, `,"prev":`...)
	b = appendDigestJSON(b, e.Prev)
	b = append(b, `,"kind":`...)
	b = appendStringJSON(b, e.Kind)
	b = append(b, `,"pool":`...)
	b = appendStringJSON(b, e.Pool)
	b = append(b, `,"job":`...)
	b = appendDigestJSON(b, e.Job)
	b = append(b, `,"task":`...)
	b = strconv.AppendInt(b, e.Task, 10)
	b = append(b, `,"peer":`...)
	b = appendStringJSON(b, e.Peer)
	b = append(b, `,"owner":`...)
	b = appendStringJSON(b, e.Owner)
	b = append(b, `,"lease":`...)
	b = appendStringJSON(b, e.Lease)
	b = append(b, `,"digest":`...)
	b = appendDigestJSON(b, e.Digest)
	b = append(b, `,"cost":`...)
	b, err := appendFloatJSON(b, e.Cost)
	if err != nil {
		return b[:in], err
	}
	if e.Work != 0 {
		b = append(b, `,"work":`...)
		b = strconv.AppendUint(b, e.Work, 10)
	}
	b = append(b, `,"time":`...)
	b = strconv.AppendInt(b, e.Time, 10)
	if e.Reason != "" {
		b = append(b, `,"reason":`...)
		b = appendStringJSON(b, e.Reason)
	}
	b = append(b, `,"sig":"`...)
	b = base64.StdEncoding.AppendEncode(b, e.Sig)
	b = append(b, '"')
	if t := e.Tree; t != nil {
		b = append(b, `,"tree":{"size":`...)
		b = strconv.AppendUint(b, t.Size, 10)
		b = append(b, `,"index":`...)
		b = strconv.AppendUint(b, t.Index, 10)
		b = append(b, `,"path":[`...)
		for i, d := range t.Path {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendDigestJSON(b, d)
		}
		b = append(b, "]}"...)
	}
	return append(b, '}'), nil
}

// appendDigestJSON appends d as a JSON string of 64 lowercase hex digits.
func appendDigestJSON(b []byte, d job.Digest) []byte {
	b = append(b, '"')
	b = hex.AppendEncode(b, d[:])
	return append(b, '"')
}

// appendStringJSON appends s as encoding/json writes it: printable ASCII
// other than '"', '\\', '<', '>' and '&' as it is, anything else through
// encoding/json itself.
func appendStringJSON(b []byte, s string) []byte {
	for i := range len(s) {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string never fails
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendFloatJSON appends f as encoding/json writes a float64: the
// shortest decimal, in exponent form only below 1e-6 or from 1e21 on
// (there through encoding/json itself); NaN and infinities are its
// error.
func appendFloatJSON(b []byte, f float64) ([]byte, error) {
	if a := math.Abs(f); a != 0 && (a < 1e-6 || a >= 1e21) || math.IsNaN(f) {
		q, err := json.Marshal(f)
		if err != nil {
			return b, err
		}
		return append(b, q...), nil
	}
	return strconv.AppendFloat(b, f, 'f', -1, 64), nil
}

// UnmarshalJSON reads what MarshalJSON writes. Unknown keys are an error,
// so a download that was tampered with in shape is refused, not ignored.
func (e *Entry) UnmarshalJSON(b []byte) error {
	var v entryJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("ledger entry: %w", err)
	}
	out := Entry{Seq: v.Seq, Kind: v.Kind, Pool: v.Pool, Task: v.Task, Peer: v.Peer, Owner: v.Owner,
		Lease: v.Lease, Cost: v.Cost, Work: v.Work, Time: v.Time, Reason: v.Reason}
	var err error
	for _, f := range []struct {
		name string
		s    string
		d    *job.Digest
	}{{"prev", v.Prev, &out.Prev}, {"job", v.Job, &out.Job}, {"digest", v.Digest, &out.Digest}} {
		if *f.d, err = job.ParseDigest(f.s); err != nil {
			return fmt.Errorf("ledger entry %d: %s: %w", v.Seq, f.name, err)
		}
	}
	if out.Sig, err = base64.StdEncoding.DecodeString(v.Sig); err != nil {
		return fmt.Errorf("ledger entry %d: sig: %w", v.Seq, err)
	}
	if v.Tree != nil {
		if len(v.Tree.Path) > 64 {
			return fmt.Errorf("ledger entry %d: tree: path of %d hashes", v.Seq, len(v.Tree.Path))
		}
		out.Tree = &TreeProof{Size: v.Tree.Size, Index: v.Tree.Index, Path: make([]job.Digest, len(v.Tree.Path))}
		for i, s := range v.Tree.Path {
			if out.Tree.Path[i], err = job.ParseDigest(s); err != nil {
				return fmt.Errorf("ledger entry %d: tree path %d: %w", v.Seq, i, err)
			}
		}
	}
	*e = out
	return nil
}
