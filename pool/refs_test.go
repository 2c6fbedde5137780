package pool_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/castore"
	"idlepool/job"
	"idlepool/pool"
	"idlepool/pool/pooltest"
)

// bigResult is a result over pool.InlineResultBytes, different per task
// and per tag.
func bigResult(task int64, tag string) []byte {
	return bytes.Repeat(fmt.Appendf(nil, "%s %d;", tag, task), 400)
}

// byRef returns the submission of b by reference: its chunk manifest.
func byRef(t *testing.T, b []byte) pool.Submission {
	t.Helper()
	m, err := castore.Split(bytes.NewReader(b), castore.MinChunkSize, func(castore.Digest, []byte) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	return pool.Submission{Digest: pool.ReplicaDigest(b, false, ""), Ref: &m}
}

// TestSchedResultsByReference: replicas that keep their results submit
// chunk manifests; agreement compares digests as for inline results, an
// accepted outcome names the reference and its agreeing holders (or the
// bytes, when an agreeing replica sent them inline), devices learn what
// to keep, and a result reported lost is computed again, one device at a
// time, until a replica returns the accepted digest.
func TestSchedResultsByReference(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), nil)
	ctx := context.Background()
	alice := h.Device("alice", "alice-1")
	bob := h.Device("bob", "bob-1")
	carol := h.Device("carol", "carol-1")
	dave := h.Device("dave", "dave-1")
	erin := h.Device("erin", "erin-1")
	j := h.Job("refs", 2, pooltest.Policy{TaskCost: 1, LeaseTimeout: time.Hour}, alice)

	lb, lc := h.Lease(bob, 2), h.Lease(carol, 2)
	if len(lb) != 2 || len(lc) != 2 {
		t.Fatalf("leases: bob %v, carol %v", tasksOf(lb), tasksOf(lc))
	}
	r0, r1 := bigResult(0, "ok"), bigResult(1, "ok")

	// References only while the merger says it fetches them.
	if err := h.S.Submit(ctx, bob, lb[0].ID, byRef(t, r0)); !errors.Is(err, pool.ErrSendInline) {
		t.Errorf("a reference before the merger fetches: %v, want ErrSendInline", err)
	}
	if err := h.S.MergerFetchesKept(bob, j.ID, true); !errors.Is(err, pool.ErrNotMerger) {
		t.Errorf("MergerFetchesKept by a device that does not merge: %v, want ErrNotMerger", err)
	}
	if err := h.S.MergerFetchesKept(alice, j.ID, true); err != nil {
		t.Fatal(err)
	}
	h.Clock.Advance(pool.KeptWindow)
	if err := h.S.Submit(ctx, bob, lb[0].ID, byRef(t, r0)); !errors.Is(err, pool.ErrSendInline) {
		t.Errorf("a reference a KeptWindow after the merger last fetched: %v, want ErrSendInline", err)
	}
	if err := h.S.MergerFetchesKept(alice, j.ID, true); err != nil {
		t.Fatal(err)
	}

	// Malformed references are refused, naming what is wrong.
	small := byRef(t, r0[:pool.InlineResultBytes])
	wrong := byRef(t, r0)
	wrong.Digest = pool.ReplicaDigest(r1, false, "")
	withBytes := byRef(t, r0)
	withBytes.Result = r0
	for name, sub := range map[string]pool.Submission{"1 KiB": small, "another digest": wrong, "bytes too": withBytes} {
		if err := h.S.Submit(ctx, bob, lb[0].ID, sub); !errors.Is(err, pool.ErrBadSubmission) {
			t.Errorf("a reference with %s: %v, want ErrBadSubmission", name, err)
		}
	}

	h.Submit(lb[0], byRef(t, r0))
	h.Submit(lc[0], byRef(t, r0))
	h.Submit(lb[1], byRef(t, r1))
	h.Submit(lc[1], pooltest.Result(r1)) // a device that does not share sends the bytes
	m0 := byRef(t, r0).Ref
	want := []pool.Verified{
		{Seq: 1, Task: 0, Status: pool.OutcomeOK, Ref: m0, Holders: []string{bob, carol}},
		{Seq: 2, Task: 1, Status: pool.OutcomeOK, Result: r1},
	}
	if diff := cmp.Diff(want, h.Results(alice, j.ID)); diff != "" {
		t.Fatalf("results (-want +got):\n%s", diff)
	}
	d0 := pool.ReplicaDigest(r0, false, "")
	keep := func(peer string, hs ...pool.HeldResult) []bool {
		t.Helper()
		out, err := h.S.KeepResults(peer, hs)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	asked := []pool.HeldResult{{Job: j.ID, Task: 0, Digest: d0}, {Job: j.ID, Task: 0, Digest: job.Digest{1}},
		{Job: j.ID, Task: 1, Digest: pool.ReplicaDigest(r1, false, "")}, {Job: job.ID{9}, Task: 0, Digest: d0}}
	if diff := cmp.Diff([]bool{true, false, false, false}, keep(bob, asked...)); diff != "" {
		t.Errorf("what bob keeps (-want +got):\n%s", diff)
	}

	// Lost: only the merger says so, only of a result by reference.
	if err := h.S.ResultLost(ctx, bob, j.ID, 1); !errors.Is(err, pool.ErrNotMerger) {
		t.Errorf("ResultLost by a device that does not merge: %v, want ErrNotMerger", err)
	}
	if err := h.S.ResultLost(ctx, alice, j.ID, 2); !errors.Is(err, pool.ErrBadRequest) {
		t.Errorf("ResultLost of an inline result: %v, want ErrBadRequest", err)
	}
	if ls := h.Lease(dave, 2); len(ls) != 0 {
		t.Fatalf("dave leased %v of a decided job", tasksOf(ls))
	}
	for range 2 { // the second report is nil: computed again already
		if err := h.S.ResultLost(ctx, alice, j.ID, 1); err != nil {
			t.Fatalf("ResultLost: %v", err)
		}
	}
	if st, _ := h.S.Status(j.ID); st.Recomputing != 1 || !st.Complete {
		t.Errorf("status while a lost result is computed again: %+v, want 1 recomputing (and every task with an outcome)", st)
	}
	ld := h.Lease(dave, 2)
	if diff := cmp.Diff([]int64{0}, tasksOf(ld)); diff != "" {
		t.Fatalf("dave's leases after the loss (-want +got):\n%s", diff)
	}
	if ls := h.Lease(erin, 2); len(ls) != 0 {
		t.Fatalf("erin leased %v while dave computes the lost result", tasksOf(ls))
	}
	h.Submit(ld[0], byRef(t, bigResult(0, "lie"))) // another digest: a deviation, and leased again
	le := h.Lease(erin, 2)
	if diff := cmp.Diff([]int64{0}, tasksOf(le)); diff != "" {
		t.Fatalf("erin's leases after dave's deviation (-want +got):\n%s", diff)
	}
	h.Submit(le[0], byRef(t, r0))
	want[0].Holders = []string{bob, carol, erin}
	if diff := cmp.Diff(want, h.Results(alice, j.ID)); diff != "" {
		t.Fatalf("results after the result was computed again (-want +got):\n%s", diff)
	}
	if st, _ := h.S.Status(j.ID); !st.Complete || st.Accepted != 2 || st.Recomputing != 0 {
		t.Errorf("status after the result was computed again: %+v", st)
	}
	es := h.Ledger()
	got := summarize(es[len(es)-2:])
	wantE := summarize([]pool.Entry{{Kind: pool.KindDeviation, Task: 0, Peer: dave}, {Kind: pool.KindReceipt, Task: 0, Peer: erin, Cost: 1}})
	if diff := cmp.Diff(wantE, got); diff != "" {
		t.Errorf("the last ledger entries (-want +got):\n%s", diff)
	}
	if ls := h.Lease(dave, 2); len(ls) != 0 {
		t.Errorf("dave leased %v once the result came back", tasksOf(ls))
	}

	// Acknowledged: nobody keeps it any more.
	if err := h.S.Ack(ctx, alice, j.ID, 2); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]bool{false}, keep(erin, asked[0])); diff != "" {
		t.Errorf("what erin keeps after the ack (-want +got):\n%s", diff)
	}
	if err := h.S.ResultLost(ctx, alice, j.ID, 1); !errors.Is(err, pool.ErrBadRequest) {
		t.Errorf("ResultLost of an acknowledged outcome: %v, want ErrBadRequest", err)
	}
}

// TestSchedRefusesReferenceUnderTolerance: a job compared within a
// tolerance needs the results' bytes to agree.
func TestSchedRefusesReferenceUnderTolerance(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), nil)
	alice := h.Device("alice", "alice-1")
	bob := h.Device("bob", "bob-1")
	h.Job("tol", 1, pooltest.Policy{Verify: toleranceVerify}, alice)
	l := h.Lease(bob, 1)
	if len(l) != 1 {
		t.Fatalf("leases %v", tasksOf(l))
	}
	err := h.S.Submit(context.Background(), bob, l[0].ID, byRef(t, bigResult(0, "ok")))
	if !errors.Is(err, pool.ErrBadSubmission) {
		t.Fatalf("a reference under a tolerance rule: %v, want ErrBadSubmission", err)
	}
	t.Log(err)
}
