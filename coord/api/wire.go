package api

import (
	"encoding/hex"
	"fmt"
	"time"

	"idlepool/castore"
	"idlepool/identity"
	"idlepool/job"
	"idlepool/pool"
)

// HexDigest is a SHA-256 digest (a file digest or a job ID) that encodes
// in JSON as 64 lowercase hex digits.
type HexDigest job.Digest

// String returns the 64 hex digits.
func (d HexDigest) String() string { return job.Digest(d).String() }

// MarshalText encodes d as 64 lowercase hex digits.
func (d HexDigest) MarshalText() ([]byte, error) { return hex.AppendEncode(nil, d[:]), nil }

// UnmarshalText parses 64 hex digits; anything else is an error wrapping
// job.ErrBadDigest.
func (d *HexDigest) UnmarshalText(b []byte) error {
	v, err := job.ParseDigest(string(b))
	if err != nil {
		return err
	}
	*d = HexDigest(v)
	return nil
}

// MarshalCBOR encodes d as a CBOR text string of its 64 hex digits, as in
// JSON (the CBOR form of a body: CBORContentType).
func (d HexDigest) MarshalCBOR() ([]byte, error) {
	b := make([]byte, 2, 2+2*len(d))
	b[0], b[1] = 0x78, byte(2*len(d)) // a text string of 64 bytes
	return hex.AppendEncode(b, d[:]), nil
}

// UnmarshalCBOR reads what MarshalCBOR writes: a text string of 64 hex
// digits (its length in any definite head). Anything else (a byte
// string, another length) is an error wrapping job.ErrBadDigest.
func (d *HexDigest) UnmarshalCBOR(b []byte) error {
	if len(b) == 0 || b[0]>>5 != 3 { // major type 3: text
		return errDigestCBOR
	}
	var n uint64 // the length
	head := 0    // the bytes of the length after the first: 0, 1, 2, 4 or 8
	switch ai := b[0] & 0x1f; {
	case ai < 24:
		n = uint64(ai)
	case ai > 27:
		return errDigestCBOR
	default:
		if head = 1 << (ai - 24); len(b) < 1+head {
			return errDigestCBOR
		}
		for _, c := range b[1 : 1+head] {
			n = n<<8 | uint64(c)
		}
	}
	if n != uint64(2*len(d)) || len(b) != 1+head+2*len(d) {
		return errDigestCBOR
	}
	return d.UnmarshalText(b[1+head:])
}

// errDigestCBOR is the error of HexDigest.UnmarshalCBOR for what is not
// a text string of 64 bytes.
var errDigestCBOR = fmt.Errorf("%w: a digest is a CBOR text string of 64 hex digits", job.ErrBadDigest)

// PoolInfo is the answer to GET /v1/pool.
type PoolInfo struct {
	Pool       string `json:"pool"`        // the pool's name
	Key        []byte `json:"key"`         // the coordinator's Ed25519 public key, which signs receipts
	InviteOnly bool   `json:"invite_only"` // registering needs an invite token or an allowed owner
	Version    int    `json:"version"`     // API version: APIVersion
	// MinAgent is the oldest idlepool version ("X.Y.Z") whose devices the
	// pool accepts, MinAPI the oldest API version, LatestAgent the newest
	// release its operator knows of; empty or 0 when the pool sets none
	// (coord.Config.MinAgentVersion and the others).
	MinAgent    string `json:"min_agent,omitempty"`
	MinAPI      int    `json:"min_api,omitempty"`
	LatestAgent string `json:"latest_agent,omitempty"`
	// Nodes are the HTTP URLs of every node of a clustered pool
	// ("http://HOST:PORT", this one included), so a client given one
	// node learns the others and fails over to them; empty for a pool
	// of one node (idlepool serve without --cluster).
	Nodes []string `json:"nodes,omitempty"`
	// Shards is K in a pool whose work is divided into K > 1 shards
	// (a cluster's `shards`), each with a ledger of its own: GET
	// /v1/ledger?shard=S reads shard S's (0 to K-1), and a verifier
	// checks all K. Absent (0) in a pool of one shard: one ledger.
	Shards int `json:"shards,omitempty"`
}

// CodeNoLeader is the error code of a 503 answer from a node of a
// clustered pool that cannot reach the node in charge of scheduling (none
// elected yet, or this node is cut off from the majority). A client tries
// another node.
const CodeNoLeader = "no_leader"

// Registration is the body of POST /v1/peers. Key is the device's Ed25519
// public key (32 bytes), OwnerKey its owner's, and Endorsement the owner
// key's signature over pool.EndorsementMessage(Key). Invite is the pool's
// invite token, needed by invite-only pools unless the owner is allowed.
// Profile, when set, is the owner's signed display name and link; it must
// verify and be OwnerKey's, or the registration is refused (400
// "bad_profile"); the pool shows the latest one beside the owner's ID.
type Registration struct {
	Key         []byte `json:"key"`
	OwnerKey    []byte `json:"owner_key"`
	Endorsement []byte `json:"endorsement"`
	Name        string `json:"name,omitempty"` // a label for people, at most 64 bytes
	Invite      string `json:"invite,omitempty"`

	Profile *identity.Profile `json:"profile,omitempty"`
}

// Registered is the answer to POST /v1/peers: the device's peer ID and its
// owner ID (identity.IDOf of the two keys).
type Registered struct {
	Peer  string `json:"peer"`
	Owner string `json:"owner"`
}

// JobRequest is the body of POST /v1/jobs: a job's canonical encoding
// (job.Job.Canonical).
type JobRequest struct {
	Canonical []byte `json:"canonical"`
	// KnownAnswers, when set, is the digest of a known-answers file
	// (job.Verify.KnownAnswers) uploaded like the job's files: the pool
	// keeps it with the job, checks replicas against it and never serves
	// it. It is not part of the job: a job already in the pool keeps the
	// answers it came with.
	KnownAnswers *HexDigest `json:"known_answers,omitempty"`
	// FetchesKept (version 4) says that the submitter, the job's merger,
	// fetches the results the devices keep (it runs a data plane while it
	// follows the job): the job takes results by reference for
	// pool.KeptWindow, and every request for its results with refs=1
	// extends that (pool.Scheduler.MergerFetchesKept).
	FetchesKept bool `json:"fetches_kept,omitempty"`
}

// JobCreated is the answer to POST /v1/jobs.
type JobCreated struct {
	Job   HexDigest `json:"job"`
	Tasks int64     `json:"tasks"`
}

// JobInfo is a job's progress (pool.JobStatus with a hex job ID), the
// answer to GET /v1/jobs/{id} and an element of GET /v1/jobs.
type JobInfo struct {
	Job        HexDigest `json:"job"`
	Name       string    `json:"name"`
	Owner      string    `json:"owner"`
	Merger     string    `json:"merger"`
	Tasks      int64     `json:"tasks"`
	Accepted   int64     `json:"accepted"`
	Failed     int64     `json:"failed"`
	Leased     int64     `json:"leased"`
	Waiting    int64     `json:"waiting"` // tasks whose returned results wait for a quorum
	Acked      int64     `json:"acked"`
	Complete   bool      `json:"complete"`
	Cancelled  bool      `json:"cancelled,omitempty"` // its owner cancelled it (POST /v1/jobs/{id}/cancel)
	Quorum     int       `json:"quorum"`
	Redundancy int       `json:"redundancy"`
	Retrying   int64     `json:"retrying,omitempty"` // pool.JobStatus.Retrying
	Trouble    string    `json:"trouble,omitempty"`  // pool.JobStatus.Trouble
	// TimingOut, TimeoutDevices and Timeouts are pool.JobStatus's: the
	// undecided tasks that ran past their time limit on some device.
	TimingOut      int64  `json:"timingOut,omitempty"`
	TimeoutDevices int    `json:"timeoutDevices,omitempty"`
	Timeouts       string `json:"timeouts,omitempty"`
	// Recomputing is pool.JobStatus.Recomputing: accepted results whose
	// holders were all gone, computed again.
	Recomputing int64 `json:"recomputing,omitempty"`
	// Transfer sums how the job's devices said they fetched its files
	// (TransferReport); absent when none reported.
	Transfer *pool.JobTransfer `json:"transfer,omitempty"`
	// OwnerProfile is the owner's signed display name and link, when the
	// owner gave one (check it with identity.Profile.Verify).
	OwnerProfile *identity.Profile `json:"owner_profile,omitempty"`
}

// LeaseRequest is the body of POST /v1/leases: how many tasks the peer
// wants at most, 1 to MaxLeases (0 or absent means 1).
type LeaseRequest struct {
	Max int `json:"max"`
}

// MaxLeases is the most leases one POST /v1/leases grants.
const MaxLeases = 64

// LeaseGrant is one lease in LeaseResponse.
type LeaseGrant struct {
	Lease    string    `json:"lease"` // 32 lowercase hex digits
	Job      HexDigest `json:"job"`
	Task     int64     `json:"task"`
	Deadline time.Time `json:"deadline"` // heartbeat before this, or the task is leased again
}

// LeaseResponse is the answer to POST /v1/leases; Leases is empty (never
// null) when there is no work: ask again later.
type LeaseResponse struct {
	Leases []LeaseGrant `json:"leases"`
}

// Deadline is the answer to POST /v1/leases/{lease}/heartbeat.
type Deadline struct {
	Deadline time.Time `json:"deadline"`
}

// ResultSubmission is the body of POST /v1/leases/{lease}/result: either
// Result (at most MaxResultBytes) or Failed with Reason, and Digest as
// pool.ReplicaDigest computes it. Machine, with Failed, marks a failure
// that depends on the device (pool.Submission.Machine: a timeout, a dead
// worker): it earns nothing and the task is leased again.
//
// Ref, in place of Result, is the chunk manifest of a result the device
// keeps and serves to the job's merger (pool.Submission.Ref): over
// pool.InlineResultBytes, cut in chunks of castore.ChunkSize, its SHA256
// equal to Digest.
//
// Work (API version 6) is what the device counted of the work the task
// took, {"rule", "count"} (pool.Work): with every outcome but a
// machine-dependent failure.
type ResultSubmission struct {
	Digest  HexDigest         `json:"digest"`
	Result  []byte            `json:"result,omitempty"`
	Failed  bool              `json:"failed,omitempty"`
	Reason  string            `json:"reason,omitempty"`
	Machine bool              `json:"machine,omitempty"`
	Ref     *castore.Manifest `json:"ref,omitempty"`
	Work    *pool.Work        `json:"work,omitempty"`
}

// HeldResults is the body of POST /v1/results/held: results the calling
// device keeps for mergers (at most pool.MaxHeldQuery). The answer,
// KeepResults, says for each, in order, whether to keep it (true) or
// delete it (pool.Scheduler.KeepResults).
type HeldResults struct {
	Results []pool.HeldResult `json:"results"`
}

// KeepResults is the answer to POST /v1/results/held.
type KeepResults struct {
	Keep []bool `json:"keep"`
}

// Limits of a result submission.
const (
	MaxResultBytes = 64 << 20 // a task's result
	MaxReasonBytes = 4 << 10  // a failure reason
)

// Results is the answer to GET /v1/jobs/{id}/results: verified outcomes in
// acceptance order (empty, never null, when none is new).
type Results struct {
	Results []pool.Verified `json:"results"`
}

// Ack is the body of POST /v1/jobs/{id}/ack: the merger has folded every
// outcome with Seq <= Upto.
type Ack struct {
	Upto int64 `json:"upto"`
}

// Receipts is the answer to GET /v1/receipts: ledger entries naming the
// calling peer, in ledger order.
type Receipts struct {
	Entries []pool.Entry `json:"entries"`
}

// ErrorBody is the body of every error answer. Code is a stable,
// machine-readable word (see docs/api.md); Error is for people. Missing
// lists the files a job names that the pool lacks (code "missing_files").
type ErrorBody struct {
	Error   string      `json:"error"`
	Code    string      `json:"code"`
	Missing []HexDigest `json:"missing,omitempty"`
}

// Headers with which a client says what it is: VersionHeader its idlepool
// version ("1.4.0", "dev" for a build not given one), APIHeader the API
// version it speaks (APIVersion of its build). Clients older than these
// headers send neither.
const (
	VersionHeader = "Idlepool-Version"
	APIHeader     = "Idlepool-Api"
)

// InChargeHeader is the header in which a clustered pool's node names
// the public base URL of the node in charge of the pool
// ("http://192.0.2.11:8080", its cluster.toml url) on every answer to
// the pool's API while it knows one. A client given several of the
// pool's nodes sends its next requests to that node when it is one of
// them: it answers them itself, without forwarding them to another.
const InChargeHeader = "Idlepool-In-Charge"

// CodeAgentTooOld is the code of a 426 answer to a device older than the
// pool accepts (coord.Config.MinAgentVersion, MinAPIVersion); its
// message says so in words ("this pool needs idlepool 1.4 or newer").
const CodeAgentTooOld = "agent_too_old"
