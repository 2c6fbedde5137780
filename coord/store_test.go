package coord

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"idlepool/home"
	"idlepool/pool"
)

// holdWriteLock takes coordinator.db's write lock in dir on a connection
// of its own, as another process would, until release.
func holdWriteLock(t *testing.T, dir string) (release func()) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, dbFile))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(context.Background(), `BEGIN IMMEDIATE`); err != nil {
		t.Fatalf("BEGIN IMMEDIATE: %v", err)
	}
	done := false
	release = func() {
		if !done {
			done = true
			conn.ExecContext(context.Background(), `ROLLBACK`)
			conn.Close()
			db.Close()
		}
	}
	t.Cleanup(release)
	return release
}

// healthz returns GET /healthz's status and body.
func (ts *testServer) healthz(t *testing.T) (int, string) {
	t.Helper()
	resp, err := ts.client.Get(ts.URL() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// While another process holds coordinator.db's write lock past the busy
// timeout, the coordinator keeps running: a submission waits and is not
// answered 200 until it is stored, new leases are refused with 503,
// /healthz says why; once the lock is gone the submission is stored and
// answered, the task decided, and /healthz is ok again.
func TestStoreLockedWaits(t *testing.T) {
	dir := t.TempDir()
	ts := startServer(t, func(c *Config) { c.DataDir, c.StoreBusyTimeout = dir, 20*time.Millisecond })
	alice, bob, carol, dave := newPeer(t, nil), newPeer(t, nil), newPeer(t, nil), newPeer(t, nil)
	for _, p := range []*testPeer{alice, bob, carol, dave} {
		ts.register(t, p, "", http.StatusCreated)
		ts.offer(t, p)
	}
	j := testJob(t, "locked", 1)
	ts.upload(t, alice, programBytes(t, j))
	if a := ts.do(t, alice, "POST", "/v1/jobs", JobRequest{Canonical: j.Canonical}); a.status != http.StatusCreated {
		t.Fatalf("submit job: %d %s", a.status, a.body)
	}
	lease := func(p *testPeer) LeaseGrant {
		var lr LeaseResponse
		ts.do(t, p, "POST", "/v1/leases", LeaseRequest{Max: 1}).decode(t, &lr)
		if len(lr.Leases) != 1 {
			t.Fatalf("leases %+v", lr)
		}
		return lr.Leases[0]
	}
	lb, lc := lease(bob), lease(carol)
	r := []byte(`{"x":1}`)
	sub := ResultSubmission{Digest: HexDigest(pool.ReplicaDigest(r, false, "")), Result: r}
	if a := ts.do(t, bob, "POST", "/v1/leases/"+lb.Lease+"/result", sub); a.status != 200 {
		t.Fatalf("bob's submission: %d %s", a.status, a.body)
	}

	release := holdWriteLock(t, dir)
	answered := make(chan answer, 1)
	go func() {
		answered <- ts.do(t, carol, "POST", "/v1/leases/"+lc.Lease+"/result", sub)
	}()
	// /healthz says why, within a bounded wait (the commit waits out the
	// busy timeout first).
	var status int
	var body string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		if status, body = ts.healthz(t); status != 200 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if status != http.StatusServiceUnavailable || !strings.Contains(body, "locked by another process") {
		t.Fatalf("healthz while the store is locked: %d %q", status, body)
	}
	select {
	case a := <-answered:
		t.Fatalf("carol's submission was answered (%d %s) while it could not be stored", a.status, a.body)
	default:
	}
	a := ts.do(t, dave, "POST", "/v1/leases", LeaseRequest{Max: 1})
	if a.status != http.StatusServiceUnavailable || a.errorBody(t).Code != "store_unavailable" ||
		!strings.Contains(a.errorBody(t).Error, "locked") {
		t.Errorf("lease while the store is locked: %d %s", a.status, a.body)
	}
	if es, err := ts.sched.Ledger(0, 100); err != nil || len(es) != 0 {
		t.Errorf("ledger while locked: %d entries, %v; want none committed", len(es), err)
	}

	release()
	if a := <-answered; a.status != 200 {
		t.Fatalf("carol's submission after the lock was released: %d %s", a.status, a.body)
	}
	if es, err := ts.sched.Ledger(0, 100); err != nil || len(es) != 2 {
		t.Errorf("ledger after the lock was released: %d entries, %v; want the 2 receipts", len(es), err)
	}
	if status, body := ts.healthz(t); status != 200 || body != "ok\n" {
		t.Errorf("healthz after the lock was released: %d %q", status, body)
	}
}

// A second coordinator on the same data directory is refused at once,
// with the first one's PID, and starts once the first has stopped.
func TestSecondCoordinatorRefused(t *testing.T) {
	dir := t.TempDir()
	useDir := func(c *Config) { c.DataDir = dir }
	_, stop := runServer(t, useDir)
	_, err := New(context.Background(), Config{Listen: "127.0.0.1:0", DataDir: dir})
	le, ok := errors.AsType[*home.LockedError](err)
	if !ok || !errors.Is(err, home.ErrLocked) {
		t.Fatalf("second New on the same directory: %v, want a *home.LockedError", err)
	}
	if want := fmt.Sprintf("PID %d", le.PID); le.PID == 0 || !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not name the holder's PID", err)
	}
	stop()
	startServer(t, useDir)
}
