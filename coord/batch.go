package coord

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"idlepool/pool"
)

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
// (legacyEntries); a signed request without the header (an agent from
// before it) too.
const APIVersion = 7

// batchedLedgerAPI is the API version from which clients read ledger
// entries signed per batch.
const batchedLedgerAPI = 7

// MaxWorkResults is the most results one POST /v1/work carries, and
// MaxWorkResultBytes the most result bytes (all results together); a
// larger result goes alone, to POST /v1/leases/{lease}/result.
const (
	MaxWorkResults     = 256
	MaxWorkResultBytes = 4 << 20
)

// maxWorkBody bounds a POST /v1/work body: MaxWorkResultBytes in base64
// plus the JSON of MaxWorkResults submissions (digest, lease, a reason of
// up to MaxReasonBytes each).
const maxWorkBody = MaxWorkResultBytes*4/3 + MaxWorkResults*(MaxReasonBytes+256) + 4096

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

// decodeWork decodes and checks a WorkRequest: each result as
// decodeSubmission checks it, lease IDs of 32 lowercase hex digits, no
// lease twice, and the limits.
func decodeWork(data []byte) (WorkRequest, []pool.Submission, error) {
	var r WorkRequest
	if err := decodeStrict(data, &r); err != nil {
		return r, nil, err
	}
	if r.Lease < 0 || r.Lease > MaxLeases {
		return r, nil, fmt.Errorf("field \"lease\": %d is out of range: ask for 0 to %d leases", r.Lease, MaxLeases)
	}
	if err := checkTransfers(r.Transfers); err != nil {
		return r, nil, err
	}
	if len(r.Results) > MaxWorkResults {
		return r, nil, fmt.Errorf("field \"results\": %d results, the limit is %d per request", len(r.Results), MaxWorkResults)
	}
	subs := make([]pool.Submission, len(r.Results))
	seen := make(map[string]bool, len(r.Results))
	size := 0
	for i, res := range r.Results {
		if !validLeaseID(res.Lease) {
			return r, nil, fmt.Errorf("results[%d]: lease %q is not 32 lowercase hex digits", i, res.Lease)
		}
		if seen[res.Lease] {
			return r, nil, fmt.Errorf("results[%d]: lease %s appears twice", i, res.Lease)
		}
		seen[res.Lease] = true
		if size += len(res.Result); size > MaxWorkResultBytes {
			return r, nil, fmt.Errorf("results: more than %d result bytes in one request: send a large result alone (POST /v1/leases/{lease}/result)", MaxWorkResultBytes)
		}
		sub, err := checkSubmission(res.ResultSubmission)
		if err != nil {
			return r, nil, fmt.Errorf("results[%d] (lease %s): %w", i, res.Lease, err)
		}
		subs[i] = sub
	}
	return r, subs, nil
}

// validLeaseID reports whether id is 32 lowercase hex digits.
func validLeaseID(id string) bool {
	ok := len(id) == 32
	for i := 0; ok && i < len(id); i++ {
		ok = id[i] >= '0' && id[i] <= '9' || id[i] >= 'a' && id[i] <= 'f'
	}
	return ok
}

// work is POST /v1/work: the results are submitted concurrently, so that
// they and the leases share one group commit, and the answer waits for
// all of them.
func (s *Server) work(w http.ResponseWriter, r *http.Request, c call) error {
	req, subs, err := decodeWork(c.body)
	if err != nil {
		s.metrics.submissions.WithLabelValues("refused").Add(float64(max(len(req.Results), 1)))
		return badRequest("%v", err)
	}
	s.transfers.add(c.peer.ID, req.Transfers)
	out := WorkResponse{Results: make([]WorkAnswer, len(subs)), Leases: []LeaseGrant{}}
	var wg sync.WaitGroup
	for i, sub := range subs {
		lease := req.Results[i].Lease
		wg.Go(func() {
			err := s.sched.Submit(r.Context(), c.peer.ID, lease, sub)
			if err != nil {
				s.metrics.submissions.WithLabelValues("refused").Inc()
				out.Results[i] = s.workAnswer(lease, s.leaseErr("submit for", lease, err))
				return
			}
			s.metrics.took(sub)
			out.Results[i] = WorkAnswer{Lease: lease, Status: http.StatusOK}
		})
	}
	if req.Lease > 0 {
		wg.Go(func() {
			if _, ok := s.offers.get(c.peer.ID, s.cfg.Now()); !ok {
				a := s.workAnswer("", noOffer(c.peer.ID))
				out.LeaseError = &a
				return
			}
			leases, err := s.sched.Lease(r.Context(), c.peer.ID, req.Lease)
			if err != nil {
				a := s.workAnswer("", fmt.Errorf("lease for peer %s: %w", c.peer.ID, err))
				out.LeaseError = &a
				return
			}
			for _, l := range leases {
				out.Leases = append(out.Leases, LeaseGrant{Lease: l.ID, Job: HexDigest(l.Job), Task: l.Task, Deadline: l.Deadline})
			}
			s.metrics.leases.Add(float64(len(leases)))
		})
	}
	wg.Wait()
	writeJSON(w, http.StatusOK, out)
	return nil
}

// workAnswer is the answer to one part of a POST /v1/work that failed:
// the status and code the version 1 endpoint would answer, and its
// message (a generic one for a coordinator fault, whose cause is logged).
func (s *Server) workAnswer(lease string, err error) WorkAnswer {
	status, code := errorStatus(err)
	a := WorkAnswer{Lease: lease, Status: status, Code: code, Error: err.Error()}
	var ae *apiError
	if errors.As(err, &ae) {
		a.Error = ae.msg
	}
	switch {
	case code == "store_unavailable":
		a.Error = "the coordinator cannot store anything now (" + s.storeWords(err) + "): retry later"
	case status == http.StatusServiceUnavailable:
		a.Error = "the coordinator is shutting down or restarting: retry later"
	case status >= 500:
		s.log.Error("Work request part failed", "lease", lease, "err", err)
		a.Error = "internal coordinator error (see the coordinator's log)"
	}
	return a
}

// resultsQuery reads the query of GET /v1/jobs/{id}/results: after, max
// (as pageQuery) and wait, the milliseconds to wait for a new outcome
// when none is there yet (0 to pool.MaxResultsWait; API version 2).
func resultsQuery(r *http.Request) (after, max int64, wait time.Duration, refs bool, err error) {
	q, err := parseQuery(r, "after", "max", "wait", "refs")
	if err != nil {
		return 0, 0, 0, false, err
	}
	if after, err = q.int("after", 0, 0, 1<<62); err != nil {
		return 0, 0, 0, false, err
	}
	if max, err = q.int("max", defaultResults, 1, maxResults); err != nil {
		return 0, 0, 0, false, err
	}
	ms, err := q.int("wait", 0, 0, pool.MaxResultsWait.Milliseconds())
	if err != nil {
		return 0, 0, 0, false, err
	}
	r1, err := q.int("refs", 0, 0, 1)
	return after, max, time.Duration(ms) * time.Millisecond, r1 == 1, err
}
