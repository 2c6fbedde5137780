package coord

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"idlepool/castore"
	"idlepool/pool"
)

// refSubmission returns the submission of result b by reference, cut in
// chunks of castore.ChunkSize.
func refSubmission(t *testing.T, b []byte) ResultSubmission {
	t.Helper()
	m, err := castore.Split(bytes.NewReader(b), castore.ChunkSize, func(castore.Digest, []byte) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	return ResultSubmission{Digest: HexDigest(pool.ReplicaDigest(b, false, "")), Ref: &m}
}

// TestServerResultsByReference: through the API, two devices submit a
// result by reference; malformed references are refused naming what is
// wrong, the coordinator counts the result bytes as kept (none inline),
// the merger gets the reference and its holders only when it asks with
// refs=1 (else 409 result_kept, never an empty result), devices learn
// what to keep, and a result reported lost is leased again.
func TestServerResultsByReference(t *testing.T) {
	ts := startServer(t, nil)
	alice, bob, carol, dave := newPeer(t, nil), newPeer(t, nil), newPeer(t, nil), newPeer(t, nil)
	for _, p := range []*testPeer{alice, bob, carol, dave} {
		ts.register(t, p, "", http.StatusCreated)
	}
	j := testJob(t, "refs", 1)
	id := j.ID.String()
	if a := ts.upload(t, alice, programBytes(t, j)); a.status != http.StatusCreated {
		t.Fatalf("upload: %d %s", a.status, a.body)
	}
	if a := ts.do(t, alice, "POST", "/v1/jobs", JobRequest{Canonical: j.Canonical}); a.status != http.StatusCreated {
		t.Fatalf("submit job: %d %s", a.status, a.body)
	}
	// Its merger says it fetches kept results only with every results
	// request (refs=1) or when it submits (fetches_kept).
	fetches := func(on bool) {
		t.Helper()
		if a := ts.do(t, alice, "POST", "/v1/jobs", JobRequest{Canonical: j.Canonical, FetchesKept: on}); a.status != http.StatusOK {
			t.Fatalf("submit job again: %d %s", a.status, a.body)
		}
	}
	lease := func(p *testPeer) LeaseGrant {
		t.Helper()
		var lr LeaseResponse
		a := ts.do(t, p, "POST", "/v1/leases", LeaseRequest{Max: 1})
		a.decode(t, &lr)
		if a.status != 200 || len(lr.Leases) != 1 {
			t.Fatalf("lease: %d %s", a.status, a.body)
		}
		return lr.Leases[0]
	}
	for _, p := range []*testPeer{bob, carol, dave} {
		ts.offer(t, p)
	}
	lb, lc := lease(bob), lease(carol)
	result := []byte(`{"x":1,"pad":"` + strings.Repeat("x", 3000) + `"}`)
	good := refSubmission(t, result)

	small := refSubmission(t, result[:pool.InlineResultBytes])
	other := refSubmission(t, result)
	other.Digest = HexDigest{1}
	withBytes := refSubmission(t, result)
	withBytes.Result = result
	chunked, _ := castore.Split(bytes.NewReader(result), castore.MinChunkSize, func(castore.Digest, []byte) error { return nil })
	smallChunks := ResultSubmission{Digest: good.Digest, Ref: &chunked}
	if a := ts.do(t, bob, "POST", "/v1/leases/"+lb.Lease+"/result", good); a.status != http.StatusConflict || a.errorBody(t).Code != "send_inline" {
		t.Errorf("a reference while the merger does not fetch: %d %s, want 409 send_inline", a.status, a.body)
	}
	fetches(true)
	for name, sub := range map[string]ResultSubmission{"of 1 KiB": small, "of another digest": other, "with the bytes": withBytes, "in 4 KiB chunks": smallChunks} {
		a := ts.do(t, bob, "POST", "/v1/leases/"+lb.Lease+"/result", sub)
		if e := a.errorBody(t); a.status != http.StatusBadRequest || !strings.Contains(e.Error, `field "ref"`) {
			t.Errorf("a reference %s: %d %s, want 400 naming the ref", name, a.status, a.body)
		}
	}
	for _, l := range []struct {
		p *testPeer
		l LeaseGrant
	}{{bob, lb}, {carol, lc}} {
		if a := ts.do(t, l.p, "POST", "/v1/leases/"+l.l.Lease+"/result", good); a.status != 200 {
			t.Fatalf("submit by reference: %d %s", a.status, a.body)
		}
	}
	if got := metricText(t, ts, `idlepool_coord_result_bytes_total{how="kept"}`); got != fmt.Sprint(2*len(result)) {
		t.Errorf("kept result bytes %s, want %d", got, 2*len(result))
	}
	if got := metricText(t, ts, `idlepool_coord_result_bytes_total{how="inline"}`); got != "0" {
		t.Errorf("inline result bytes %s, want 0", got)
	}

	// A merger that does not ask with refs=1 never gets an empty result,
	// and says with it that it does not fetch kept results.
	if a := ts.do(t, alice, "GET", "/v1/jobs/"+id+"/results?after=0", nil); a.status != http.StatusConflict || a.errorBody(t).Code != "result_kept" {
		t.Errorf("results without refs=1: %d %s, want 409 result_kept", a.status, a.body)
	}
	var res Results
	if a := ts.do(t, alice, "GET", "/v1/jobs/"+id+"/results?after=0&refs=1", nil); a.status != 200 {
		t.Fatalf("results: %d %s", a.status, a.body)
	} else {
		a.decode(t, &res)
	}
	want := []pool.Verified{{Seq: 1, Task: 0, Status: pool.OutcomeOK, Ref: good.Ref, Holders: []string{bob.ID(), carol.ID()}}}
	if diff := cmp.Diff(want, res.Results); diff != "" {
		t.Fatalf("results (-want +got):\n%s", diff)
	}

	held := HeldResults{Results: []pool.HeldResult{{Job: j.ID, Task: 0, Digest: pool.ReplicaDigest(result, false, "")}, {Job: j.ID, Task: 0}}}
	var keep KeepResults
	if a := ts.do(t, bob, "POST", "/v1/results/held", held); a.status != 200 {
		t.Fatalf("held: %d %s", a.status, a.body)
	} else {
		a.decode(t, &keep)
	}
	if diff := cmp.Diff([]bool{true, false}, keep.Keep); diff != "" {
		t.Errorf("what bob keeps (-want +got):\n%s", diff)
	}

	// Lost: only the merger says so; then the task is leased again.
	if a := ts.do(t, bob, "POST", "/v1/jobs/"+id+"/results/1/lost", nil); a.status != http.StatusForbidden {
		t.Errorf("lost by bob: %d %s, want 403", a.status, a.body)
	}
	if a := ts.do(t, alice, "POST", "/v1/jobs/"+id+"/results/x/lost", nil); a.status != http.StatusBadRequest {
		t.Errorf("lost of outcome x: %d %s, want 400", a.status, a.body)
	}
	if a := ts.do(t, alice, "POST", "/v1/jobs/"+id+"/results/1/lost", nil); a.status != 200 {
		t.Fatalf("lost: %d %s", a.status, a.body)
	}
	ld := lease(dave)
	if ld.Task != 0 {
		t.Errorf("dave leased %+v, want task 0 again", ld)
	}
	ts.do(t, alice, "GET", "/v1/jobs/"+id+"/results?after=0", nil) // a merger that does not fetch them
	if a := ts.do(t, dave, "POST", "/v1/leases/"+ld.Lease+"/result", good); a.status != http.StatusConflict || a.errorBody(t).Code != "send_inline" {
		t.Errorf("a reference after the merger asked without refs=1: %d %s, want 409 send_inline", a.status, a.body)
	}
	ts.do(t, alice, "GET", "/v1/jobs/"+id+"/results?after=0&refs=1", nil) // it fetches again
	if a := ts.do(t, dave, "POST", "/v1/leases/"+ld.Lease+"/result", good); a.status != 200 {
		t.Fatalf("submit the lost result again: %d %s", a.status, a.body)
	}
	ts.do(t, alice, "GET", "/v1/jobs/"+id+"/results?after=0&refs=1", nil).decode(t, &res)
	want[0].Holders = append(want[0].Holders, dave.ID())
	if diff := cmp.Diff(want, res.Results); diff != "" {
		t.Errorf("results after the result was computed again (-want +got):\n%s", diff)
	}
	if a := ts.do(t, alice, "POST", "/v1/jobs/"+id+"/ack", Ack{Upto: 1}); a.status != 200 {
		t.Fatalf("ack: %d %s", a.status, a.body)
	}
	ts.do(t, dave, "POST", "/v1/results/held", held).decode(t, &keep)
	if diff := cmp.Diff([]bool{false, false}, keep.Keep); diff != "" {
		t.Errorf("what dave keeps after the ack (-want +got):\n%s", diff)
	}
}

// metricText returns the value of the sample named name (with its
// labels, as /metrics writes it), or "" when /metrics has none.
func metricText(t *testing.T, ts *testServer, name string) string {
	t.Helper()
	a := ts.do(t, nil, "GET", "/metrics", nil)
	for _, line := range strings.Split(string(a.body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	return ""
}
