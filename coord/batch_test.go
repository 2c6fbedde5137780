package coord

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/coord/api"
	"idlepool/job"
	"idlepool/pool"
)

// TestWork runs a job of three tasks through POST /v1/work: each peer
// leases and returns its tasks in one signed request each, a bad part of
// a request is answered on its own without refusing the rest, and the
// merger's long poll returns as soon as the outcomes are committed. It
// runs with every request in JSON, in CBOR answered in CBOR, and in CBOR
// answered in JSON (no Accept).
func TestWork(t *testing.T) {
	for _, form := range []string{"json", "cbor", "cbor request"} {
		t.Run(form, func(t *testing.T) { testWork(t, form) })
	}
}

func testWork(t *testing.T, form string) {
	ts := startServer(t, nil)
	alice, bob, carol := newPeer(t, nil), newPeer(t, nil), newPeer(t, nil)
	for _, p := range []*testPeer{alice, bob, carol} {
		ts.register(t, p, "", http.StatusCreated)
	}
	j := testJob(t, "work", 3)
	id := j.ID.String()
	if a := ts.upload(t, alice, programBytes(t, j)); a.status != http.StatusCreated {
		t.Fatalf("upload: %d %s", a.status, a.body)
	}
	if a := ts.do(t, alice, "POST", "/v1/jobs", JobRequest{Canonical: j.Canonical}); a.status != http.StatusCreated {
		t.Fatalf("submit job: %d %s", a.status, a.body)
	}
	work := func(p *testPeer, req WorkRequest) WorkResponse {
		t.Helper()
		var a answer
		switch form {
		case "json":
			a = ts.do(t, p, "POST", "/v1/work", req)
		case "cbor":
			a = ts.doCBOR(t, p, "POST", "/v1/work", req, "application/json;q=0.5, application/cbor")
		default:
			a = ts.doCBOR(t, p, "POST", "/v1/work", req, "")
		}
		if a.status != http.StatusOK {
			t.Fatalf("work: %d %s", a.status, a.body)
		}
		if v := a.header.Get("Vary"); v != "Accept" {
			t.Errorf("Vary: %q, want Accept", v)
		}
		if cl := a.header.Get("Content-Length"); cl != strconv.Itoa(len(a.body)) {
			t.Errorf("Content-Length %q, want %d", cl, len(a.body))
		}
		var out WorkResponse
		if ct := a.header.Get("Content-Type"); form == "cbor" {
			if ct != api.CBORContentType {
				t.Fatalf("Content-Type %q, want %s", ct, api.CBORContentType)
			}
			if err := api.UnmarshalCBORAnswer(a.body, &out); err != nil {
				t.Fatalf("CBOR answer: %v", err)
			}
		} else {
			if ct != "application/json" {
				t.Fatalf("Content-Type %q, want application/json", ct)
			}
			a.decode(t, &out)
		}
		return out
	}

	// Without an offer: the lease part says why, as POST /v1/leases would.
	out := work(bob, WorkRequest{Lease: 4})
	if out.LeaseError == nil || out.LeaseError.Status != http.StatusConflict || out.LeaseError.Code != "no_offer" || len(out.Leases) != 0 {
		t.Fatalf("work before the offer: %+v, want lease_error 409 no_offer", out)
	}
	ts.offer(t, bob)
	ts.offer(t, carol)
	bobs, carols := work(bob, WorkRequest{Lease: 4}).Leases, work(carol, WorkRequest{Lease: 4}).Leases
	if len(bobs) != 3 || len(carols) != 3 {
		t.Fatalf("leases: bob %d, carol %d, want 3 each", len(bobs), len(carols))
	}

	// The merger waits for outcomes while the peers return them.
	type page struct {
		res Results
		a   answer
	}
	polled := make(chan page, 1)
	go func() {
		// Each request waits up to 5 s for an outcome; on a slow machine
		// the peers may take longer, so ask again until one comes, for
		// as long as the test binary's patience lasts.
		for end := time.Now().Add(patience(t)); ; {
			a := ts.do(t, alice, "GET", "/v1/jobs/"+id+"/results?after=0&max=10&wait=5000", nil)
			var res Results
			if a.status == http.StatusOK {
				a.decode(t, &res)
			}
			if a.status != http.StatusOK || len(res.Results) > 0 || time.Now().After(end) {
				polled <- page{res, a}
				return
			}
		}
	}()

	result := func(task int64) []byte { return fmt.Appendf(nil, `{"x":%d}`, task+1) }
	results := func(ls []LeaseGrant) []WorkResult {
		var out []WorkResult
		for _, l := range ls {
			r := result(l.Task)
			out = append(out, WorkResult{Lease: l.Lease, ResultSubmission: ResultSubmission{Digest: HexDigest(pool.ReplicaDigest(r, false, "")), Result: r}})
		}
		return out
	}
	// Bob returns his three results and, in the same request, one of
	// carol's leases and a lease nobody granted: those two are refused
	// on their own.
	unknown := strings.Repeat("0", 32)
	req := WorkRequest{Results: append(results(bobs), results(carols[:1])[0])}
	req.Results = append(req.Results, WorkResult{Lease: unknown, ResultSubmission: req.Results[0].ResultSubmission})
	out = work(bob, req)
	var got []string
	for _, a := range out.Results {
		got = append(got, fmt.Sprintf("%s %d %s", a.Lease[:4], a.Status, a.Code))
	}
	want := []string{
		bobs[0].Lease[:4] + " 200 ", bobs[1].Lease[:4] + " 200 ", bobs[2].Lease[:4] + " 200 ",
		carols[0].Lease[:4] + " 403 not_your_lease", "0000 404 unknown_lease",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("answers to bob's results (-want +got):\n%s", diff)
	}
	// An answer over net/http's 4 KiB buffer still says its length (the
	// work helper checks Content-Length): 100 leases nobody granted.
	many := WorkRequest{}
	for i := range 100 {
		many.Results = append(many.Results, WorkResult{Lease: fmt.Sprintf("%032x", i+1), ResultSubmission: req.Results[0].ResultSubmission})
	}
	for i, a := range work(bob, many).Results {
		if a.Status != http.StatusNotFound || a.Code != "unknown_lease" {
			t.Fatalf("answer %d to a lease nobody granted: %+v", i, a)
		}
	}
	// Sending them again is idempotent, as with the version 1 endpoint.
	for i, a := range work(bob, WorkRequest{Results: results(bobs)}).Results {
		if a.Status != http.StatusOK {
			t.Errorf("bob's result %d again: %+v", i, a)
		}
	}
	out = work(carol, WorkRequest{Results: results(carols), Lease: 4})
	for i, a := range out.Results {
		if a.Status != http.StatusOK {
			t.Errorf("carol's result %d: %+v", i, a)
		}
	}
	if len(out.Leases) != 0 || out.LeaseError != nil {
		t.Errorf("carol leased %+v (%+v) of a finished job", out.Leases, out.LeaseError)
	}

	var p page
	select {
	case p = <-polled:
	case <-time.After(patience(t)):
		t.Fatal("the merger's long poll never returned")
	}
	if p.a.status != http.StatusOK || len(p.res.Results) == 0 {
		t.Fatalf("long poll: %d %s", p.a.status, p.a.body)
	}
	if v := p.res.Results[0]; v.Seq != 1 || v.Status != pool.OutcomeOK {
		t.Errorf("first outcome %+v", v)
	}
	if err := pool.VerifyLedger(ts.downloadLedger(t, ""), ts.PublicKey()); err != nil {
		t.Errorf("ledger: %v", err)
	}
}

// TestWorkRefused checks that a malformed POST /v1/work is refused whole,
// with a message naming the problem, and changes nothing.
func TestWorkRefused(t *testing.T) {
	ts := startServer(t, nil)
	bob := newPeer(t, nil)
	ts.register(t, bob, "", http.StatusCreated)
	lease := strings.Repeat("a", 32)
	sub := ResultSubmission{Digest: HexDigest(pool.ReplicaDigest([]byte("1"), false, "")), Result: []byte("1")}
	for _, tc := range []struct {
		name string
		req  any
		want string
		cbor bool // send req in CBOR (api.MarshalCBOR, or the bytes given)
	}{
		{name: "CBOR, too many leases", req: WorkRequest{Lease: MaxLeases + 1}, want: `field "lease"`, cbor: true},
		{name: "CBOR, lease twice", req: WorkRequest{Results: []WorkResult{{Lease: lease, ResultSubmission: sub}, {Lease: lease, ResultSubmission: sub}}}, want: "appears twice", cbor: true},
		{name: "CBOR, wrong digest", req: WorkRequest{Results: []WorkResult{{Lease: lease, ResultSubmission: ResultSubmission{Digest: sub.Digest, Result: []byte("2")}}}}, want: "does not match", cbor: true},
		{name: "CBOR, unknown key", req: map[string]any{"leases": 1}, want: "unknown key", cbor: true},
		{name: "CBOR, a key twice", req: []byte("\xa2\x65lease\x01\x65lease\x02"), want: "appears twice", cbor: true},
		{name: "CBOR, trailing bytes", req: []byte("\xa1\x65lease\x01\xa0"), want: "trailing data", cbor: true},
		{name: "CBOR, truncated", req: []byte("\xa1\x65lease\x19\x01"), want: "CBOR", cbor: true},
		{name: "CBOR, not a map", req: []byte("\x81\x01"), want: "not a CBOR map", cbor: true},
		{name: "CBOR, empty", req: []byte{}, want: "empty body", cbor: true},
		{name: "CBOR, JSON body", req: []byte(`{"lease":1}`), want: "not a CBOR map", cbor: true},
		{name: "JSON, a CBOR body", req: []byte("\xa1\x65lease\x01"), want: "it looks like a CBOR map"},
		{"too many leases", WorkRequest{Lease: MaxLeases + 1}, `field "lease"`, false},
		{"negative leases", WorkRequest{Lease: -1}, `field "lease"`, false},
		{"bad lease ID", WorkRequest{Results: []WorkResult{{Lease: "x", ResultSubmission: sub}}}, "not 32 lowercase hex digits", false},
		{"lease twice", WorkRequest{Results: []WorkResult{{Lease: lease, ResultSubmission: sub}, {Lease: lease, ResultSubmission: sub}}}, "appears twice", false},
		{"wrong digest", WorkRequest{Results: []WorkResult{{Lease: lease, ResultSubmission: ResultSubmission{Digest: sub.Digest, Result: []byte("2")}}}}, "does not match", false},
		{"unknown field", map[string]any{"leases": 1}, "unknown field", false},
		{"transfer without a job", WorkRequest{Transfers: []TransferReport{{Transfer: pool.Transfer{Direct: 1}}}}, `field "job" is missing`, false},
		{"transfer twice", WorkRequest{Transfers: []TransferReport{{Job: HexDigest{1}}, {Job: HexDigest{1}}}}, "appears twice", false},
		{"negative transfer", WorkRequest{Transfers: []TransferReport{{Job: HexDigest{1}, Transfer: pool.Transfer{Relayed: -1}}}}, `field "relayed": -1 bytes is out of range`, false},
		{"implausible transfer", WorkRequest{Transfers: []TransferReport{{Job: HexDigest{1}, Transfer: pool.Transfer{Coordinator: 1 << 51}}}}, `field "coordinator"`, false},
		{"too many transfers", WorkRequest{Transfers: make([]TransferReport, MaxWorkTransfers+1)}, `field "transfers": 65 reports`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := ts.state(t)
			var a answer
			if tc.cbor {
				a = ts.doCBOR(t, bob, "POST", "/v1/work", tc.req, "application/cbor")
			} else {
				a = ts.do(t, bob, "POST", "/v1/work", tc.req)
			}
			if a.status != http.StatusBadRequest || !strings.Contains(a.errorBody(t).Error, tc.want) {
				t.Errorf("%d %s, want 400 naming %q", a.status, a.body, tc.want)
			}
			if diff := cmp.Diff(before, ts.state(t)); diff != "" {
				t.Errorf("refused request changed the state (-before +after):\n%s", diff)
			}
		})
	}
}

// TestWorkTransfers: the transfer reports devices send with POST /v1/work
// add up per job and device in GET /v1/jobs/{id} and in /metrics; a
// report for a job the pool does not know counts nowhere.
func TestWorkTransfers(t *testing.T) {
	ts := startServer(t, nil)
	alice, bob, carol := newPeer(t, nil), newPeer(t, nil), newPeer(t, nil)
	for _, p := range []*testPeer{alice, bob, carol} {
		ts.register(t, p, "", http.StatusCreated)
	}
	j := testJob(t, "transfers", 2)
	if a := ts.upload(t, alice, programBytes(t, j)); a.status != http.StatusCreated {
		t.Fatalf("upload: %d %s", a.status, a.body)
	}
	if a := ts.do(t, alice, "POST", "/v1/jobs", JobRequest{Canonical: j.Canonical}); a.status != http.StatusCreated {
		t.Fatalf("submit job: %d %s", a.status, a.body)
	}
	status := func() JobInfo {
		t.Helper()
		a := ts.do(t, alice, "GET", "/v1/jobs/"+j.ID.String(), nil)
		if a.status != http.StatusOK {
			t.Fatalf("status: %d %s", a.status, a.body)
		}
		var ji JobInfo
		a.decode(t, &ji)
		return ji
	}
	if ji := status(); ji.Transfer != nil {
		t.Fatalf("before any report: transfer %+v, want none", *ji.Transfer)
	}
	report := func(p *testPeer, ts2 ...TransferReport) {
		t.Helper()
		if a := ts.do(t, p, "POST", "/v1/work", WorkRequest{Transfers: ts2}); a.status != http.StatusOK {
			t.Fatalf("work: %d %s", a.status, a.body)
		}
	}
	id := HexDigest(j.ID)
	report(bob, TransferReport{Job: id, Transfer: pool.Transfer{Coordinator: 1000}})
	report(carol, TransferReport{Job: id, Transfer: pool.Transfer{Direct: 900, Coordinator: 100}},
		TransferReport{Job: HexDigest{7}, Transfer: pool.Transfer{Relayed: 5}}) // a job nobody submitted
	report(carol, TransferReport{Job: id, Transfer: pool.Transfer{Direct: 100}})
	report(alice, TransferReport{Job: id, Transfer: pool.Transfer{Direct: 10, Relayed: 990}})
	report(alice, TransferReport{Job: id}) // nothing to count
	want := pool.JobTransfer{Devices: 3, Direct: 1, Relayed: 1, CoordinatorOnly: 1,
		Bytes: pool.Transfer{Direct: 1010, Relayed: 990, Coordinator: 1100}}
	if diff := cmp.Diff(&want, status().Transfer); diff != "" {
		t.Errorf("the job's transfer (-want +got):\n%s", diff)
	}
	m := ts.do(t, nil, "GET", "/metrics", nil)
	for _, line := range []string{
		`idlepool_transfer_bytes_total{path="direct"} 1010`,
		`idlepool_transfer_bytes_total{path="relayed"} 990`,
		`idlepool_transfer_bytes_total{path="coordinator"} 1100`,
	} {
		if !strings.Contains(string(m.body), line+"\n") {
			t.Errorf("/metrics lacks %q", line)
		}
	}
}

// TestTransferBookBounds: the book keeps at most maxTransferJobs jobs,
// forgetting complete and unknown ones first, then the oldest.
func TestTransferBookBounds(t *testing.T) {
	complete := map[job.ID]bool{}
	b := newTransferBook(func(id job.ID) (bool, bool) { return complete[id], true })
	idOf := func(i int) job.ID {
		var id job.ID
		id[0], id[1] = byte(i>>8), byte(i)
		id[31] = 1
		return id
	}
	for i := range maxTransferJobs {
		complete[idOf(i)] = i%2 == 1
		b.add("dev", []TransferReport{{Job: HexDigest(idOf(i)), Transfer: pool.Transfer{Direct: 1}}})
	}
	b.add("dev", []TransferReport{{Job: HexDigest(idOf(maxTransferJobs)), Transfer: pool.Transfer{Direct: 1}}})
	if b.summary(idOf(1)) != nil || b.summary(idOf(0)) == nil || b.summary(idOf(maxTransferJobs)) == nil {
		t.Errorf("after one job too many: a complete job kept, or a live one or the new one forgotten")
	}
	if n := len(b.jobs); n != maxTransferJobs/2+1 {
		t.Errorf("%d jobs kept, want the %d live ones and the new one", n, maxTransferJobs/2)
	}
	clear(complete)
	for i := maxTransferJobs + 1; len(b.jobs) < maxTransferJobs; i++ {
		b.add("dev", []TransferReport{{Job: HexDigest(idOf(i)), Transfer: pool.Transfer{Direct: 1}}})
	}
	b.add("dev", []TransferReport{{Job: HexDigest(idOf(3 * maxTransferJobs)), Transfer: pool.Transfer{Direct: 1}}})
	if len(b.jobs) != maxTransferJobs*3/4+1 || b.summary(idOf(0)) != nil || b.summary(idOf(3*maxTransferJobs)) == nil {
		t.Errorf("every job live: %d kept (want %d), the oldest (job 0) must go first", len(b.jobs), maxTransferJobs*3/4+1)
	}
	if b.entries != len(b.jobs) {
		t.Errorf("%d sums counted for %d jobs of one device each", b.entries, len(b.jobs))
	}

	// A device's sums stop at maxTransferBytes: no overflow.
	id := idOf(3 * maxTransferJobs)
	for range 10 {
		b.add("big", []TransferReport{{Job: HexDigest(id), Transfer: pool.Transfer{Direct: maxTransferBytes}}})
	}
	if s := b.summary(id); s.Bytes.Direct != maxTransferBytes+1 {
		t.Errorf("after ten reports of 1 PiB: %d direct bytes, want the cap %d plus the other device's 1", s.Bytes.Direct, int64(maxTransferBytes)+1)
	}
}

// TestDecodeWorkBounded: a POST /v1/work body within its size limit but
// with millions of list elements is refused at the list's limit, without
// decoding the rest: decoded whole, 6 MiB of empty results took 1.3 GB.
func TestDecodeWorkBounded(t *testing.T) {
	many := func(key string, n int) []byte {
		return []byte(`{"` + key + `":[` + strings.Repeat(`{},`, n-1) + `{}]}`)
	}
	for _, tc := range []struct {
		name string
		body []byte
		want string
	}{
		{"results", many("results", 2_000_000), `field "results": 257 results or more, the limit is 256`},
		{"transfers", many("transfers", 2_000_000), `field "transfers": 65 reports or more, the limit is 64`},
		{"a result of the wrong shape", []byte(`{"results":[{"lease":1}]}`), `results[0]: field "lease"`},
		{"results not a list", []byte(`{"results":{}}`), `field "results": want an array`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.body) > maxWorkBody {
				t.Fatalf("body of %d bytes, over the limit of %d", len(tc.body), maxWorkBody)
			}
			n, err := allocatedBy(func() error { _, _, err := decodeWork(tc.body, false); return err })
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("decodeWork: %v, want an error saying %q", err, tc.want)
			}
			if n > 200<<20 {
				t.Errorf("decoding it allocated %d MB", n>>20)
			}
		})
	}
}
