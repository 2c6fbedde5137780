package coord

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"idlepool/castore"
	"idlepool/coord/api"
	"idlepool/identity"
	"idlepool/job"
	"idlepool/pool"
)

// The wire format of the API (docs/api.md) is package api's
// (idlepool/coord/api), which clients import without linking the server.
// The names below are its names, so that the server's code and its
// callers that link the server anyway (the idlepool command) say them
// unqualified; a client that is not the server imports api.

// The request and answer bodies, as package api defines them.
type (
	Ack                 = api.Ack
	ChunkAnnounce       = api.ChunkAnnounce
	ChunkAnnounced      = api.ChunkAnnounced
	ChunkHolders        = api.ChunkHolders
	ChunkHoldersRequest = api.ChunkHoldersRequest
	Deadline            = api.Deadline
	ErrorBody           = api.ErrorBody
	HeldResults         = api.HeldResults
	HexDigest           = api.HexDigest
	ICEAnswer           = api.ICEAnswer
	JobCreated          = api.JobCreated
	JobInfo             = api.JobInfo
	JobRequest          = api.JobRequest
	KeepResults         = api.KeepResults
	LeaseGrant          = api.LeaseGrant
	LeaseRequest        = api.LeaseRequest
	LeaseResponse       = api.LeaseResponse
	PoolInfo            = api.PoolInfo
	Receipts            = api.Receipts
	Registered          = api.Registered
	Registration        = api.Registration
	ResultSubmission    = api.ResultSubmission
	Results             = api.Results
	SignalsAnswer       = api.SignalsAnswer
	TransferReport      = api.TransferReport
	WorkAnswer          = api.WorkAnswer
	WorkRequest         = api.WorkRequest
	WorkResponse        = api.WorkResponse
	WorkResult          = api.WorkResult
)

// The API's version, headers, error codes and limits, as package api
// defines them.
const (
	APIVersion          = api.APIVersion
	APIHeader           = api.APIHeader
	VersionHeader       = api.VersionHeader
	InChargeHeader      = api.InChargeHeader
	CodeAgentTooOld     = api.CodeAgentTooOld
	CodeNoLeader        = api.CodeNoLeader
	DefaultSignalWait   = api.DefaultSignalWait
	MaxLeases           = api.MaxLeases
	MaxResultBytes      = api.MaxResultBytes
	MaxReasonBytes      = api.MaxReasonBytes
	MaxWorkResults      = api.MaxWorkResults
	MaxWorkResultBytes  = api.MaxWorkResultBytes
	MaxWorkTransfers    = api.MaxWorkTransfers
	MaxChunksPerRequest = api.MaxChunksPerRequest
	MaxChunksPerPeer    = api.MaxChunksPerPeer
	MaxHoldersPerChunk  = api.MaxHoldersPerChunk
	TrackerTTL          = api.TrackerTTL
)

// SignRequest is api.SignRequest: it signs req for a coordinator.
func SignRequest(req *http.Request, body []byte, key *identity.Key, now time.Time) {
	api.SignRequest(req, body, key, now)
}

// SignRequestDigest is api.SignRequestDigest: SignRequest for a body
// known by its SHA-256.
func SignRequestDigest(req *http.Request, bodySHA256 [32]byte, key *identity.Key, now time.Time) {
	api.SignRequestDigest(req, bodySHA256, key, now)
}

// jobInfo is s as the API reports it.
func jobInfo(s pool.JobStatus) JobInfo {
	return JobInfo{Job: HexDigest(s.Job), Name: s.Name, Owner: s.Owner, Merger: s.Merger, Tasks: s.Tasks,
		Accepted: s.Accepted, Failed: s.Failed, Leased: s.Leased, Waiting: s.Waiting, Acked: s.Acked, Complete: s.Complete,
		Cancelled: s.Cancelled, Quorum: s.Quorum, Redundancy: s.Redundancy, Retrying: s.Retrying, Trouble: s.Trouble,
		Recomputing: s.Recomputing, TimingOut: s.TimingOut, TimeoutDevices: s.TimeoutDevices, Timeouts: s.Timeouts}
}

// maxJSONElements bounds the elements of all the arrays of one JSON
// request body together (checkJSONElements): twice the longest list a
// request decoded whole may carry (a chunk announcement's
// MaxChunksPerRequest), so no request within its limits meets it. The
// bodies whose arrays may hold more are read element by element
// (decodeJSONList): POST /v1/work's, and POST /v1/results/held's, whose
// results carry their job and digest as arrays of 32 numbers (65
// elements a result).
const maxJSONElements = 2 * MaxChunksPerRequest

// maxJSONDepth is encoding/json's limit of nested containers: a deeper
// text is refused by the decoder, so checkJSONElements stops counting
// there rather than keep a stack of it.
const maxJSONDepth = 10_000

// decodeStrict decodes data, a JSON object, into v: unknown fields,
// anything but exactly one object, trailing data, and arrays of more
// than maxJSONElements elements in all are errors that name the
// problem. v must point to a struct.
func decodeStrict(data []byte, v any) error {
	// What is not an object is refused by decodeObject, in its words.
	if trimmed := bytes.TrimLeft(data, " \t\r\n"); len(trimmed) > 0 && trimmed[0] == '{' {
		if err := checkJSONElements(trimmed, maxJSONElements, "the body's"); err != nil {
			return fmt.Errorf("%w: send fewer in each request", err)
		}
	}
	return decodeObject(data, v)
}

// checkJSONElements refuses data, a JSON text, whose arrays hold more
// than limit elements in all ("<whose> arrays hold more than …"),
// before anything is decoded: the decoder
// would allocate every element before a handler could count them, and a
// body of empty objects ("{},", 3 bytes each) becomes a slice of
// structs some thirty times its size (80 bytes for a HeldResult: 1 MiB
// of them allocated 134 MB while it was decoded). It
// reads each byte once (strings by bytes.IndexByte) and allocates only
// for more than 32 nested containers, and stops at maxJSONDepth of
// them; what is not JSON is left to the decoder to name.
func checkJSONElements(data []byte, limit int, whose string) error {
	var stack [32]bool
	open := stack[:0] // per open container, innermost last: true for an array
	first := false    // just after '[': the next value is its first element
	n := 0
	for i := 0; i < len(data); i++ {
		c := data[i]
		if c == ' ' || c == '\t' || c == '\r' || c == '\n' {
			continue
		}
		if first {
			first = false
			if c != ']' {
				n++
			}
		}
		switch c {
		case '"':
			for { // to the closing quote: one not escaped by an odd run of backslashes
				k := bytes.IndexByte(data[i+1:], '"')
				if k < 0 {
					return nil // unterminated: the decoder says so
				}
				i += 1 + k
				escapes := 0
				for j := i - 1; data[j] == '\\'; j-- {
					escapes++
				}
				if escapes%2 == 0 {
					break
				}
			}
		case '[', '{':
			if len(open) == maxJSONDepth {
				return nil // too deep for the decoder, which says so
			}
			open = append(open, c == '[')
			first = c == '['
		case ']', '}':
			if len(open) > 0 {
				open = open[:len(open)-1]
			}
		case ',':
			if len(open) > 0 && open[len(open)-1] {
				n++
			}
		}
		if n > limit {
			return fmt.Errorf("%s arrays hold more than %d elements in all", whose, limit)
		}
	}
	return nil
}

// decodeObject is decodeStrict without the bound on arrays, for a body
// whose lists are json.RawMessage read element by element
// (decodeJSONList).
func decodeObject(data []byte, v any) error {
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if len(trimmed) == 0 {
		return errors.New("empty body: want a JSON object")
	}
	if trimmed[0] != '{' {
		if c := trimmed[0]; c >= 0xa0 && c <= 0xbb { // the head of a CBOR map
			return errors.New("the body is not a JSON object (it looks like a CBOR map: only POST /v1/work takes CBOR, with Content-Type: " + api.CBORContentType + ")")
		}
		return errors.New("the body is not a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonProblem(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

// jsonProblem rewords a decoding error for people.
func jsonProblem(err error) error {
	var typ *json.UnmarshalTypeError
	var syn *json.SyntaxError
	switch {
	case errors.As(err, &typ) && typ.Field != "":
		return fmt.Errorf("field %q: want %s, not a JSON %s", typ.Field, typ.Type, typ.Value)
	case errors.As(err, &syn):
		return fmt.Errorf("malformed JSON at byte %d: %s", syn.Offset, strings.TrimPrefix(syn.Error(), "json: "))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("malformed JSON: the body ends in the middle of a value")
	}
	return errors.New(strings.TrimPrefix(err.Error(), "json: "))
}

// decodeLeaseRequest decodes and checks a LeaseRequest.
func decodeLeaseRequest(data []byte) (LeaseRequest, error) {
	var r LeaseRequest
	if err := decodeStrict(data, &r); err != nil {
		return r, err
	}
	if r.Max == 0 {
		r.Max = 1
	}
	if r.Max < 1 || r.Max > MaxLeases {
		return r, fmt.Errorf("field \"max\": %d is out of range: ask for 1 to %d leases", r.Max, MaxLeases)
	}
	return r, nil
}

// decodeSubmission decodes a ResultSubmission and checks that it is one
// of the two forms, within limits, with the digest it must carry.
func decodeSubmission(data []byte) (pool.Submission, error) {
	var r ResultSubmission
	if err := decodeStrict(data, &r); err != nil {
		return pool.Submission{}, err
	}
	return checkSubmission(r)
}

// checkSubmission checks that r is one of the two forms, within limits,
// with the digest it must carry.
func checkSubmission(r ResultSubmission) (pool.Submission, error) {
	if r.Digest == (HexDigest{}) {
		return pool.Submission{}, errors.New("field \"digest\" is missing")
	}
	if r.Failed && len(r.Result) > 0 {
		return pool.Submission{}, errors.New("a failed task has no result: send \"failed\" and \"reason\", or \"result\"")
	}
	if !r.Failed && r.Reason != "" {
		return pool.Submission{}, errors.New("field \"reason\" is only for a failed task")
	}
	if r.Machine && !r.Failed {
		return pool.Submission{}, errors.New("field \"machine\" is only for a failed task: send \"failed\" and \"reason\" with it")
	}
	if w := r.Work; w != nil {
		switch {
		case r.Machine:
			return pool.Submission{}, errors.New("field \"work\" is not for a machine-dependent failure: what it counted says nothing about the task")
		case w.Rule < 1:
			return pool.Submission{}, fmt.Errorf("field \"work\": rule %d: want the metering rule's version, from 1", w.Rule)
		case w.Count > pool.MaxWorkCount:
			return pool.Submission{}, fmt.Errorf("field \"work\": count %d is larger than %d", w.Count, uint64(pool.MaxWorkCount))
		}
	}
	if len(r.Result) > MaxResultBytes {
		return pool.Submission{}, fmt.Errorf("result of %d bytes is larger than the limit of %d", len(r.Result), MaxResultBytes)
	}
	if len(r.Reason) > MaxReasonBytes {
		return pool.Submission{}, fmt.Errorf("reason of %d bytes is larger than the limit of %d", len(r.Reason), MaxReasonBytes)
	}
	if r.Ref != nil {
		if err := checkRef(r); err != nil {
			return pool.Submission{}, fmt.Errorf("field \"ref\": %w", err)
		}
	} else if want := pool.ReplicaDigest(r.Result, r.Failed, r.Reason); job.Digest(r.Digest) != want {
		return pool.Submission{}, fmt.Errorf("digest %s does not match the submission (want %s)", r.Digest, want)
	}
	return pool.Submission{Digest: job.Digest(r.Digest), Result: r.Result, Failed: r.Failed, Reason: r.Reason, Machine: r.Machine, Ref: r.Ref, Work: r.Work}, nil
}

// checkRef checks a submission by reference: alone (no bytes, no
// failure), over the inline size and within the result limit, in chunks
// of castore.ChunkSize, describing the digest submitted.
func checkRef(r ResultSubmission) error {
	m := r.Ref
	switch {
	case r.Failed || len(r.Result) > 0:
		return errors.New("a result kept by the device is sent alone: no \"result\" and no \"failed\" with it")
	case m.SHA256 != castore.Digest(r.Digest):
		return fmt.Errorf("describes a file of SHA-256 %x, not the digest %s", m.SHA256, r.Digest)
	case m.Size <= pool.InlineResultBytes:
		return fmt.Errorf("a result of %d bytes is sent inline (\"result\"): references are for results over %d bytes", m.Size, pool.InlineResultBytes)
	case m.Size > MaxResultBytes:
		return fmt.Errorf("a result of %d bytes is larger than the limit of %d", m.Size, MaxResultBytes)
	case m.ChunkSize != castore.ChunkSize:
		return fmt.Errorf("chunk size %d: results are cut in chunks of %d bytes", m.ChunkSize, castore.ChunkSize)
	}
	return m.Validate()
}

// decodeRegistration decodes and checks the shape of a Registration (not
// its signatures).
func decodeRegistration(data []byte) (Registration, error) {
	var r Registration
	if err := decodeStrict(data, &r); err != nil {
		return r, err
	}
	if len(r.Key) != 32 {
		return r, fmt.Errorf("field \"key\": want a base64 Ed25519 public key of 32 bytes, got %d bytes", len(r.Key))
	}
	if len(r.OwnerKey) != 32 {
		return r, fmt.Errorf("field \"owner_key\": want a base64 Ed25519 public key of 32 bytes, got %d bytes", len(r.OwnerKey))
	}
	if len(r.Endorsement) != 64 {
		return r, fmt.Errorf("field \"endorsement\": want a base64 Ed25519 signature of 64 bytes, got %d bytes", len(r.Endorsement))
	}
	if len(r.Name) > 64 || strings.ContainsFunc(r.Name, func(c rune) bool { return c < ' ' || c == 0x7f }) {
		return r, errors.New("field \"name\": want at most 64 printable bytes")
	}
	if len(r.Invite) > 256 {
		return r, errors.New("field \"invite\" is too long")
	}
	return r, nil
}

// decodeJobRequest decodes a JobRequest.
func decodeJobRequest(data []byte) (JobRequest, error) {
	var r JobRequest
	if err := decodeStrict(data, &r); err != nil {
		return r, err
	}
	if len(r.Canonical) == 0 {
		return r, errors.New("field \"canonical\" is missing: send the job's canonical encoding in base64")
	}
	return r, nil
}

// decodeAck decodes an Ack.
func decodeAck(data []byte) (Ack, error) {
	var r Ack
	if err := decodeStrict(data, &r); err != nil {
		return r, err
	}
	if r.Upto < 0 {
		return r, fmt.Errorf("field \"upto\": %d is negative", r.Upto)
	}
	return r, nil
}

// decodeEmpty accepts an empty body or an empty JSON object, the bodies of
// heartbeat and release.
func decodeEmpty(data []byte) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	return decodeStrict(data, &struct{}{})
}
