package api

import "idlepool/pool"

// APIVersion is the version GET /v1/pool reports. Version 2 is version 1
// plus POST /v1/work (results and a lease request in one signed request)
// and the "wait" parameter of GET /v1/jobs/{id}/results (a long poll).
// Version 3 is version 2 plus the "transfers" of POST /v1/work
// (TransferReport), which a coordinator of version 2 refuses as an
// unknown field. Every older endpoint and body is still served
// unchanged, so an older agent keeps working; a newer agent reads the
// version first and speaks the coordinator's.
//
// Version 4 is version 3 plus results kept by the devices: the "ref" of a
// result submission (ResultSubmission.Ref), POST /v1/results/held, POST
// /v1/jobs/{id}/results/{seq}/lost, and the "refs=1" of GET
// /v1/jobs/{id}/results, with which a merger says it fetches such
// results; without it, an outcome whose result the devices kept is
// answered 409 "result_kept", never as an empty result.
//
// Version 5 is version 4 plus the "cpu_time_share" of an offer's
// capacity (how hard the donor lets the machine work), which a
// coordinator of version 4 refuses as an unknown field: an agent sends it
// only to a coordinator of version 5 or later.
//
// Version 6 is version 5 plus metering: the "work" of a result
// submission (ResultSubmission.Work), what the device counted of the work
// the task took, which replicas agree on and receipts credit; and the
// "work" of outcomes and ledger entries. A submission without it (an
// older agent) is taken, agrees only with its like, and earns no cost.
//
// Version 7 is version 6 plus ledger entries signed per batch: the
// "tree" of an entry (pool.Entry.Tree), its inclusion proof in the Merkle
// tree of the entries committed with it, whose head "sig" signs. A client
// that says it speaks an older version (APIHeader) reads such entries of
// GET /v1/receipts and GET /v1/ledger signed one by one, as before
// (the coordinator converts them); a signed request without the header
// (an agent from before it) too.
//
// Version 8 is version 7 plus a POST /v1/work body in CBOR
// (CBORContentType): the same WorkRequest, its JSON converted item for
// item, results as byte strings. A coordinator of version 7 would read
// it as JSON and refuse it, so an agent sends it only to version 8 or
// later. Its answer comes in CBOR when the request's Accept prefers it
// (content negotiation, as GET /v1/receipts's), whatever the body's form.
//
// Version 9 is version 8 plus requests authenticated by a MAC under a
// key the device and the pool agree on (MACRequestDigest, RequestKey)
// instead of a signature. A coordinator of version 8 refuses such a
// request (401), so an agent sends them only to version 9 or later, and
// signs its requests again for a while when one is refused.
const APIVersion = 9

// MaxWorkResults is the most results one POST /v1/work carries, and
// MaxWorkResultBytes the most result bytes (all results together); a
// larger result goes alone, to POST /v1/leases/{lease}/result.
const (
	MaxWorkResults     = 256
	MaxWorkResultBytes = 4 << 20
)

// WorkResult is one result in a WorkRequest: the lease it answers and its
// submission, exactly as POST /v1/leases/{lease}/result takes it.
type WorkResult struct {
	Lease string `json:"lease"`
	ResultSubmission
}

// WorkRequest is the body of POST /v1/work (API version 2): up to
// MaxWorkResults results of the calling peer's leases, and how many new
// leases it wants (0 to MaxLeases; 0 asks for none). One signature covers
// all of it. The results and the lease request are handled concurrently,
// so that they share one group commit: a lease may be granted before a
// result of the same request is taken.
//
// Transfers, if any, report the bytes of jobs' files the device fetched
// since its last report (TransferReport); they travel on whatever request
// goes next, so reporting costs no request of its own.
type WorkRequest struct {
	Results   []WorkResult     `json:"results,omitempty"`
	Lease     int              `json:"lease,omitempty"`
	Transfers []TransferReport `json:"transfers,omitempty"`
}

// WorkAnswer is the coordinator's answer to one WorkResult: Status 200
// when the result was taken (or had been, idempotently), otherwise the
// status, code and message POST /v1/leases/{lease}/result would have
// answered (409 "task_decided", 410 "lease_expired", ...).
type WorkAnswer struct {
	Lease  string `json:"lease"`
	Status int    `json:"status"`
	Code   string `json:"code,omitempty"`
	Error  string `json:"error,omitempty"`
}

// WorkResponse is the answer to POST /v1/work: one WorkAnswer per result,
// in the request's order, the leases granted (empty, never null, when
// none), and, when leases were asked for and none could be granted for a
// reason other than "no work now", LeaseError with what POST /v1/leases
// would have answered (e.g. 409 "no_offer").
type WorkResponse struct {
	Results    []WorkAnswer `json:"results"`
	Leases     []LeaseGrant `json:"leases"`
	LeaseError *WorkAnswer  `json:"lease_error,omitempty"`
}

// TransferReport is one element of WorkRequest.Transfers: the bytes of
// job Job's files the calling device fetched since its last report, by
// path (pool.Transfer). The coordinator adds them up per job and device
// for the job's status (JobInfo.Transfer) and /metrics. They are the
// device's word, not measured by the coordinator: they describe, they
// decide nothing. Any registered device may report on any job the pool
// knows, and a request whose answer was lost is sent again with its
// reports, which then count twice.
type TransferReport struct {
	Job HexDigest `json:"job"`
	pool.Transfer
}

// MaxWorkTransfers is the most transfer reports one POST /v1/work carries.
const MaxWorkTransfers = 64
