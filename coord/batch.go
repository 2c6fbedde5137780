package coord

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"time"

	"idlepool/castore"
	"idlepool/coord/api"
	"idlepool/pool"
)

// batchedLedgerAPI is the API version from which clients read ledger
// entries signed per batch.
const batchedLedgerAPI = 7

// maxWorkBody bounds a POST /v1/work body: MaxWorkResultBytes in base64
// plus the JSON of MaxWorkResults submissions (digest, lease, a reason of
// up to MaxReasonBytes each). The CBOR form of the same request is
// smaller (its results are bytes, not base64).
const maxWorkBody = MaxWorkResultBytes*4/3 + MaxWorkResults*(MaxReasonBytes+256) + 4096

// decodeWork decodes and checks a WorkRequest, in its CBOR form when
// inCBOR is set (api.UnmarshalCBOR) and else in JSON (decodeStrict): each
// result as decodeSubmission checks it, lease IDs of 32 lowercase hex
// digits, no lease twice, and the limits.
func decodeWork(data []byte, inCBOR bool) (WorkRequest, []pool.Submission, error) {
	var r WorkRequest
	if inCBOR {
		if len(data) == 0 {
			return r, nil, errors.New("empty body: want a CBOR map")
		}
		if data[0]>>5 != 5 { // major type 5: a map
			return r, nil, errors.New("the body is not a CBOR map")
		}
		if err := api.UnmarshalCBOR(data, &r); err != nil {
			return r, nil, err
		}
	} else {
		var w workJSON // its lists are read, and counted, element by element
		if err := decodeObject(data, &w); err != nil {
			return r, nil, err
		}
		r.Lease = w.Lease
		var err error
		if r.Results, err = decodeJSONList[WorkResult](w.Results, "results", "results", MaxWorkResults, maxWorkItemElements); err != nil {
			return r, nil, err
		}
		if r.Transfers, err = decodeJSONList[TransferReport](w.Transfers, "transfers", "reports", MaxWorkTransfers, maxWorkItemElements); err != nil {
			return r, nil, err
		}
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

// workJSON is a WorkRequest as decodeWork reads it from JSON: its lists
// raw, so that each is decoded element by element and refused at its
// limit. Decoded whole, a body of 6 MiB of empty objects was 2 million
// results and 1.3 GB of memory before its count was checked.
type workJSON struct {
	Results   json.RawMessage `json:"results,omitempty"`
	Lease     int             `json:"lease,omitempty"`
	Transfers json.RawMessage `json:"transfers,omitempty"`
}

// maxWorkItemElements bounds the elements of the arrays within one
// element of a JSON POST /v1/work's lists (a result's reference holds
// at most MaxResultBytes/castore.ChunkSize chunks): twice the most a
// valid one has.
const maxWorkItemElements = 2 * MaxResultBytes / castore.ChunkSize

// decodeJSONList decodes raw, the JSON array (or null) of field, element
// by element, strictly (no unknown field), and refuses it once it holds
// more than limit elements (nouns, in the error), before decoding the
// rest, and an element whose own arrays hold more than elements
// elements in all (checkJSONElements), before decoding it. Errors name
// the field, and the element by its index.
func decodeJSONList[T any](raw json.RawMessage, field, nouns string, limit, elements int) ([]T, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return nil, fmt.Errorf("field %q: want an array", field)
	}
	var out []T
	for dec.More() {
		if len(out) == limit {
			return nil, fmt.Errorf("field %q: %d %s or more, the limit is %d per request", field, limit+1, nouns, limit)
		}
		var elem json.RawMessage // checked, then decoded
		if err := dec.Decode(&elem); err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", field, len(out), jsonProblem(err))
		}
		if err := checkJSONElements(elem, elements, "its"); err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", field, len(out), err)
		}
		var v T
		d := json.NewDecoder(bytes.NewReader(elem))
		d.DisallowUnknownFields()
		if err := d.Decode(&v); err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", field, len(out), jsonProblem(err))
		}
		out = append(out, v)
	}
	if _, err := dec.Token(); err != nil { // the closing ]
		return nil, fmt.Errorf("field %q: %w", field, jsonProblem(err))
	}
	return out, nil
}

// validLeaseID reports whether id is 32 lowercase hex digits.
func validLeaseID(id string) bool {
	ok := len(id) == 32
	for i := 0; ok && i < len(id); i++ {
		ok = id[i] >= '0' && id[i] <= '9' || id[i] >= 'a' && id[i] <= 'f'
	}
	return ok
}

// work is POST /v1/work: the results are submitted one after another
// without waiting (pool.Scheduler.SubmitQueued), then the leases are
// asked for, so that they share a group commit; the answer waits for
// every result's commit. The request is read in CBOR when its
// Content-Type says application/cbor (API version 8), and answered in
// CBOR when its Accept prefers it (acceptsCBOR); errors that refuse the
// whole request are JSON, as every error answer is.
func (s *Server) work(w http.ResponseWriter, r *http.Request, c call) error {
	s.noteQueued(w)
	req, subs, err := decodeWork(c.body, isCBOR(r))
	if err != nil {
		s.metrics.submissions.WithLabelValues("refused").Add(float64(max(len(req.Results), 1)))
		return badRequest("%v", err)
	}
	s.transfers.add(c.peer.ID, req.Transfers)
	out := WorkResponse{Results: make([]WorkAnswer, len(subs)), Leases: []LeaseGrant{}}
	commits := make([]pool.Committed, len(subs))
	refused := func(i int, err error) {
		lease := req.Results[i].Lease
		s.metrics.submissions.WithLabelValues("refused").Inc()
		out.Results[i] = s.workAnswer(lease, s.leaseErr("submit for", lease, err))
	}
	for i, sub := range subs {
		commits[i], err = s.sched.SubmitQueued(r.Context(), c.peer.ID, req.Results[i].Lease, sub)
		if err != nil {
			refused(i, err)
		}
	}
	if req.Lease > 0 {
		if _, ok := s.offers.get(c.peer.ID, s.cfg.Now()); !ok {
			a := s.workAnswer("", noOffer(c.peer.ID))
			out.LeaseError = &a
		} else if leases, err := s.sched.Lease(r.Context(), c.peer.ID, req.Lease); err != nil {
			a := s.workAnswer("", fmt.Errorf("lease for peer %s: %w", c.peer.ID, err))
			out.LeaseError = &a
		} else {
			for _, l := range leases {
				out.Leases = append(out.Leases, LeaseGrant{Lease: l.ID, Job: HexDigest(l.Job), Task: l.Task, Deadline: l.Deadline})
			}
			s.metrics.leases.Add(float64(len(leases)))
		}
	}
	for i, sub := range subs {
		if out.Results[i].Status != 0 {
			continue // refused above
		}
		if err := commits[i].Wait(r.Context()); err != nil {
			refused(i, err)
			continue
		}
		s.metrics.took(sub)
		out.Results[i] = WorkAnswer{Lease: req.Results[i].Lease, Status: http.StatusOK}
	}
	w.Header().Set("Vary", "Accept")
	s.noteQueued(w)
	if acceptsCBOR(r) {
		writeWorkCBOR(w, &out)
		return nil
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// isCBOR reports whether r's body is in CBOR: its Content-Type is
// api.CBORContentType (parameters aside). Any other body is read as JSON.
func isCBOR(r *http.Request) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && mt == api.CBORContentType
}

// writeWorkCBOR writes a 200 answer of out in its CBOR form
// (api.AppendWorkResponseCBOR), with Content-Type application/cbor, into
// a buffer sized for it up front.
func writeWorkCBOR(w http.ResponseWriter, out *WorkResponse) {
	n := 32 + 64*len(out.Results) + 160*len(out.Leases)
	if out.LeaseError != nil {
		n += 64 + len(out.LeaseError.Error)
	}
	for _, a := range out.Results {
		n += len(a.Code) + len(a.Error)
	}
	writeBody(w, http.StatusOK, api.CBORContentType, api.AppendWorkResponseCBOR(make([]byte, 0, n), out))
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
