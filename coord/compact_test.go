package coord

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"idlepool/pool"
)

// A coordinator compacts its store as it serves (store.DB.Compact): once
// a job's decided tasks are acknowledged, its store hands a restart a
// summary and the work in play only, and the coordinator started again
// on it goes on where it was: the decided tasks stay decided, the others
// are leased.
func TestCompactedRestart(t *testing.T) {
	dir := t.TempDir()
	useDir := func(c *Config) { c.DataDir = dir; c.CompactEvery = 10 * time.Millisecond }
	ts, stop := runServer(t, useDir)
	alice, bob, carol := newPeer(t, nil), newPeer(t, nil), newPeer(t, nil)
	for _, p := range []*testPeer{alice, bob, carol} {
		ts.register(t, p, "", http.StatusCreated)
	}
	j := testJob(t, "compacted", 6)
	ts.upload(t, alice, programBytes(t, j))
	if a := ts.do(t, alice, "POST", "/v1/jobs", JobRequest{Canonical: j.Canonical}); a.status != http.StatusCreated {
		t.Fatalf("submit: %d %s", a.status, a.body)
	}
	id := j.ID.String()
	lease := func(ts *testServer, p *testPeer, max int) []LeaseGrant {
		t.Helper()
		var lr LeaseResponse
		a := ts.do(t, p, "POST", "/v1/leases", LeaseRequest{Max: max})
		if a.status != 200 {
			t.Fatalf("lease: %d %s", a.status, a.body)
		}
		a.decode(t, &lr)
		return lr.Leases
	}
	ts.offer(t, bob)
	ts.offer(t, carol)
	for _, p := range []*testPeer{bob, carol} {
		for _, l := range lease(ts, p, 4) {
			r := fmt.Appendf(nil, `{"x":%d}`, l.Task)
			sub := ResultSubmission{Digest: HexDigest(pool.ReplicaDigest(r, false, "")), Result: r}
			if a := ts.do(t, p, "POST", "/v1/leases/"+l.Lease+"/result", sub); a.status != 200 {
				t.Fatalf("submit task %d: %d %s", l.Task, a.status, a.body)
			}
		}
	}
	var res Results
	waitUntil(t, patience(t), "four outcomes", func() bool {
		ts.do(t, alice, "GET", "/v1/jobs/"+id+"/results?after=0&max=10", nil).decode(t, &res)
		return len(res.Results) == 4
	})
	if a := ts.do(t, alice, "POST", "/v1/jobs/"+id+"/ack", Ack{Upto: 4}); a.status != 200 {
		t.Fatalf("ack: %d %s", a.status, a.body)
	}
	waitUntil(t, patience(t), "the store compacted", func() bool {
		snap, err := ts.db.Load(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return len(snap.Summaries) == 1 && len(snap.Outcomes) == 0 && len(snap.Replicas) == 0
	})
	stop()

	ts = startServer(t, useDir)
	var info JobInfo
	ts.do(t, alice, "GET", "/v1/jobs/"+id, nil).decode(t, &info)
	if info.Tasks != 6 || info.Accepted != 4 || info.Acked != 4 || info.Complete {
		t.Errorf("job after a compacted restart: %+v", info)
	}
	ts.offer(t, bob)
	var tasks []int64
	for _, l := range lease(ts, bob, 4) {
		tasks = append(tasks, l.Task)
	}
	if fmt.Sprint(tasks) != "[4 5]" {
		t.Errorf("tasks leased after a compacted restart: %v, want [4 5]", tasks)
	}
}
