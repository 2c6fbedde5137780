package pool_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
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
	return pool.Submission{Digest: pool.ReplicaDigest(b, false, ""), Ref: &m, Work: pooltest.Result(b).Work}
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
		{Seq: 1, Task: 0, Status: pool.OutcomeOK, Ref: m0, Holders: []string{bob, carol}, Work: pooltest.WorkCount},
		{Seq: 2, Task: 1, Status: pool.OutcomeOK, Result: r1, Work: pooltest.WorkCount},
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

// TestSchedLyingManifest: a replica that returns the accepted digest with
// a manifest of other chunks (which no fetch can make into the digest)
// is not named beside the replicas that agree on the manifest; when it is
// the only reference the outcome has, the replica computed after the
// merger reports it lost brings the right manifest, which replaces it.
func TestSchedLyingManifest(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), nil)
	ctx := context.Background()
	alice := h.Device("alice", "alice-1")
	peers := []string{h.Device("bob", "bob-1"), h.Device("carol", "carol-1"), h.Device("dave", "dave-1"), h.Device("erin", "erin-1")}
	j := h.Job("liar", 1, pooltest.Policy{Redundancy: 3, Quorum: 3}, alice)
	j2 := h.Job("liar-2", 1, pooltest.Policy{Redundancy: 2, Quorum: 2}, alice)
	for _, id := range []job.ID{j.ID, j2.ID} {
		if err := h.S.MergerFetchesKept(alice, id, true); err != nil {
			t.Fatal(err)
		}
	}
	r0 := bigResult(0, "ok")
	honest := byRef(t, r0)
	lie := byRef(t, r0)
	fake := *lie.Ref
	fake.Chunks = slices.Clone(fake.Chunks)
	fake.Chunks[0].Digest[0] ^= 1
	lie.Ref = &fake
	ls := [][]pool.Lease{h.Lease(peers[0], 1), h.Lease(peers[1], 1), h.Lease(peers[2], 1)}
	h.Submit(ls[0][0], lie)
	h.Submit(ls[1][0], honest)
	h.Submit(ls[2][0], honest)
	vs := h.Results(alice, j.ID)
	if len(vs) != 1 || vs[0].Ref == nil || vs[0].Ref.Chunks[0] != honest.Ref.Chunks[0] {
		t.Fatalf("results %+v, want the manifest two replicas agree on", vs)
	}
	if diff := cmp.Diff([]string{peers[1], peers[2]}, vs[0].Holders); diff != "" {
		t.Errorf("holders (-want +got):\n%s", diff)
	}

	// The liar's manifest against one honest one (a tie): the first is
	// named; the merger cannot fetch it, and the replica computed again
	// brings the right one.
	r1 := bigResult(1, "ok")
	lie1 := byRef(t, r1)
	fake1 := *lie1.Ref
	fake1.Chunks = slices.Clone(fake1.Chunks)
	fake1.Chunks[0].Digest[0] ^= 1
	lie1.Ref = &fake1
	l0, l1 := h.Lease(peers[0], 1), h.Lease(peers[1], 1)
	if len(l0) != 1 || len(l1) != 1 || l0[0].Job != j2.ID || l1[0].Job != j2.ID {
		t.Fatalf("leases of the second job: %v %v", l0, l1)
	}
	h.Submit(l0[0], lie1)
	h.Submit(l1[0], byRef(t, r1))
	vs = h.Results(alice, j2.ID)
	if len(vs) != 1 || !sameChunks(vs[0].Ref, &fake1) {
		t.Fatalf("results %+v, want the first of two manifests", vs)
	}
	if err := h.S.ResultLost(ctx, alice, j2.ID, 1); err != nil {
		t.Fatal(err)
	}
	le := h.Lease(peers[3], 1)
	if len(le) != 1 || le[0].Job != j2.ID {
		t.Fatalf("erin's leases %v, want the lost task", le)
	}
	h.Submit(le[0], byRef(t, r1))
	vs = h.Results(alice, j2.ID)
	if diff := cmp.Diff(byRef(t, r1).Ref, vs[0].Ref); diff != "" || !slices.Equal(vs[0].Holders, []string{peers[3]}) {
		t.Errorf("after the result was computed again: holders %v, manifest (-want +got):\n%s", vs[0].Holders, diff)
	}
}

// sameChunks reports whether manifests a and b list the same chunks.
func sameChunks(a, b *castore.Manifest) bool {
	return a != nil && b != nil && slices.Equal(a.Chunks, b.Chunks)
}
