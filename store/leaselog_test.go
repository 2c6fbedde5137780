package store_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/job"
	"idlepool/pool"
	"idlepool/pool/pooltest"
	"idlepool/store"
)

// leaseLogDB opens a coordinator database at a fresh path, with a
// peer and a job committed, and returns it, its path, a reopen function
// and a maker of replica records of that job.
func leaseLogDB(t *testing.T) (db *store.DB, path string, reopen func() *store.DB,
	rec func(lease string, task int64, state string, version, prev int64) pool.ReplicaRecord) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "coordinator.db")
	open := func() *store.DB {
		t.Helper()
		d, err := store.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	db = open()
	at := time.UnixMilli(1_767_000_000_000)
	jobID := job.ID(sha256.Sum256([]byte("lease log job")))
	peer := pooltest.Device(t, pooltest.Key(t, "owner/bob"), "bob-1")
	if err := db.Commit(context.Background(), &pool.Batch{Peers: []pool.Peer{peer}, Jobs: []pool.JobRecord{{ID: jobID,
		Canonical: []byte("c"), Owner: peer.Owner, Merger: peer.ID, Order: 1, Added: at}}}); err != nil {
		t.Fatal(err)
	}
	rec = func(lease string, task int64, state string, version, prev int64) pool.ReplicaRecord {
		return pool.ReplicaRecord{Lease: lease, Job: jobID, Task: task, Peer: peer.ID, Owner: peer.Owner, State: state,
			Created: at.Add(time.Duration(task) * time.Millisecond), Deadline: at.Add(time.Minute), Version: version, Prev: prev}
	}
	reopen = func() *store.DB {
		t.Helper()
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		db = open()
		return db
	}
	return db, path, reopen, rec
}

// count returns the rows of table in the database at path, read by a
// connection of its own.
func count(t *testing.T, path, table string) int {
	t.Helper()
	raw, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var n int
	if err := raw.QueryRow(`SELECT count(*) FROM ` + table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A plain lease is written to the lease log, not to replicas, until its
// first change, which inserts its row; Load and Replica see it either
// way, a restart restores it from the log, and Compact deletes the log's
// rows once every replica in them has a row of its own.
func TestLeaseLog(t *testing.T) {
	ctx := context.Background()
	db, path, reopen, rec := leaseLogDB(t)
	commit := func(rs ...pool.ReplicaRecord) error { return db.Commit(ctx, &pool.Batch{Replicas: rs}) }
	// Stamped leases as pool.NewLeaseID mints them, and one that is not.
	ids := make([]string, 4)
	for i := range ids {
		ids[i] = pool.NewLeaseID()
	}
	if err := commit(rec(ids[0], 0, pool.ReplicaLeased, 1, 0), rec(ids[1], 1, pool.ReplicaLeased, 1, 0)); err != nil {
		t.Fatal(err)
	}
	if err := commit(rec(ids[2], 2, pool.ReplicaLeased, 1, 0), rec("other-lease", 3, pool.ReplicaLeased, 1, 0)); err != nil {
		t.Fatal(err)
	}
	if n, m := count(t, path, "replicas"), count(t, path, "lease_log"); n != 0 || m != 2 {
		t.Fatalf("after two commits of plain leases: %d rows of replicas and %d of lease_log, want 0 and 2", n, m)
	}
	want := []pool.ReplicaRecord{rec(ids[0], 0, pool.ReplicaLeased, 1, 0), rec(ids[1], 1, pool.ReplicaLeased, 1, 0),
		rec(ids[2], 2, pool.ReplicaLeased, 1, 0), rec("other-lease", 3, pool.ReplicaLeased, 1, 0)}
	for i := range want {
		want[i].Prev = 0
	}
	check := func(when string) {
		t.Helper()
		if diff := cmp.Diff(want, mustLoad(t, db).Replicas); diff != "" {
			t.Errorf("Load %s (-want +got):\n%s", when, diff)
		}
		for _, w := range want {
			got, err := db.Replica(ctx, w.Lease)
			if err != nil || !cmp.Equal(got, w) {
				t.Errorf("Replica(%s) %s: %+v, %v; want %+v", w.Lease, when, got, err, w)
			}
		}
	}
	check("of logged leases")
	db = reopen()
	check("after a restart")

	// Refused: a lease inserted twice (logged, or in this batch), and a
	// change from a version it is not at. Nothing of such a batch stays.
	for name, b := range map[string][]pool.ReplicaRecord{
		"a logged lease again":       {rec(ids[3], 4, pool.ReplicaLeased, 1, 0), rec(ids[1], 1, pool.ReplicaLeased, 1, 0)},
		"a logged unstamped lease":   {rec(ids[3], 4, pool.ReplicaLeased, 1, 0), rec("other-lease", 3, pool.ReplicaReturned, 1, 0)},
		"a lease twice in one batch": {rec(ids[3], 4, pool.ReplicaLeased, 1, 0), rec(ids[3], 4, pool.ReplicaLeased, 1, 0)},
		"a logged lease at version 2": {rec(ids[3], 4, pool.ReplicaLeased, 1, 0),
			rec(ids[0], 0, pool.ReplicaReturned, 3, 2)},
	} {
		if err := commit(b...); !errors.Is(err, pool.ErrConflict) {
			t.Errorf("%s: %v, want pool.ErrConflict", name, err)
		}
	}
	check("after refused batches")

	// First changes: a result returned, a heartbeat; each inserts its
	// row with what the lease fixed and what the change set.
	returned := rec(ids[0], 0, pool.ReplicaReturned, 2, 1)
	returned.Digest, returned.Result = job.Digest{7}, []byte("result")
	returned.Created = returned.Created.Add(time.Hour) // what a lease fixed is the log's, as replicaUpdate leaves it
	hb := rec("other-lease", 3, pool.ReplicaLeased, 2, 1)
	hb.Deadline = hb.Deadline.Add(time.Minute)
	if err := commit(returned, hb); err != nil {
		t.Fatal(err)
	}
	returned.Created, returned.Prev, hb.Prev = want[0].Created, 0, 0
	want[0], want[3] = returned, hb
	if n := count(t, path, "replicas"); n != 2 {
		t.Errorf("after two first changes: %d rows of replicas, want 2", n)
	}
	check("after first changes")
	db = reopen()
	check("after a restart after first changes")
	if err := commit(rec(ids[0], 0, pool.ReplicaReturned, 2, 0)); !errors.Is(err, pool.ErrConflict) {
		t.Errorf("lease %s inserted again once in replicas: %v, want pool.ErrConflict", ids[0], err)
	}

	// A lease logged and changed in one batch: its row, no log entry.
	if err := commit(rec(ids[3], 4, pool.ReplicaLeased, 1, 0), rec(ids[3], 4, pool.ReplicaExpired, 2, 1)); err != nil {
		t.Fatal(err)
	}
	want = append(want, rec(ids[3], 4, pool.ReplicaExpired, 2, 0))
	if n, m := count(t, path, "replicas"), count(t, path, "lease_log"); n != 3 || m != 2 {
		t.Errorf("after a lease changed in its own batch: %d rows of replicas and %d of lease_log, want 3 and 2", n, m)
	}
	check("after a lease changed in its own batch")

	// Compact writes the two leases still only in the log (ids[1] and
	// ids[2]) into one new row and deletes the two rows before it.
	compact := func() store.Compaction {
		t.Helper()
		c, err := db.Compact(ctx, time.UnixMilli(1_767_000_000_000))
		if err != nil {
			t.Fatalf("Compact: %v", err)
		}
		return c
	}
	if c := compact(); c.LeaseLog != 2 || count(t, path, "lease_log") != 1 {
		t.Fatalf("Compact with two leases only in the log: %+v, %d rows left; want 2 rows deleted, 1 left", c, count(t, path, "lease_log"))
	}
	check("after the lease log was compacted")
	if c := compact(); c.LeaseLog != 0 || count(t, path, "lease_log") != 1 {
		t.Errorf("Compact with nothing logged since: %+v, %d rows left; want nothing deleted, 1 left", c, count(t, path, "lease_log"))
	}
	db = reopen()
	check("after a restart on the compacted log")
	if err := commit(rec(ids[1], 1, pool.ReplicaReleased, 2, 1)); err != nil {
		t.Fatal(err)
	}
	want[1] = rec(ids[1], 1, pool.ReplicaReleased, 2, 0)
	db = reopen()
	check("after a restart with a relogged lease changed since")
	if err := commit(rec(ids[2], 2, pool.ReplicaReleased, 2, 1)); err != nil {
		t.Fatal(err)
	}
	want[2] = rec(ids[2], 2, pool.ReplicaReleased, 2, 0)
	if c := compact(); c.LeaseLog != 1 {
		t.Fatalf("Compact once no lease is only in the log: %+v; want its last row deleted", c)
	}
	if m := count(t, path, "lease_log"); m != 0 {
		t.Errorf("lease_log holds %d rows once all are superseded", m)
	}
	db = reopen()
	check("after a restart on an empty log")
	// New rows after an emptied log are read from the mark on: their
	// numbers never go back below it (AUTOINCREMENT).
	fresh := pool.NewLeaseID()
	if err := commit(rec(fresh, 5, pool.ReplicaLeased, 1, 0)); err != nil {
		t.Fatal(err)
	}
	w := rec(fresh, 5, pool.ReplicaLeased, 1, 0)
	w.Prev = 0
	want = append(want, w)
	db = reopen()
	check("after a restart with a lease logged after the trim")
}

// The lease log's memory changes only with a committed batch: a batch
// refused for another record's conflict leaves its leases unlogged, and
// they may be committed again.
func TestLeaseLogRefusedBatch(t *testing.T) {
	ctx := context.Background()
	db, _, reopen, rec := leaseLogDB(t)
	id := pool.NewLeaseID()
	bad := &pool.Batch{Replicas: []pool.ReplicaRecord{rec(id, 0, pool.ReplicaLeased, 1, 0), rec("nowhere", 1, pool.ReplicaReturned, 2, 1)}}
	if err := db.Commit(ctx, bad); !errors.Is(err, pool.ErrConflict) {
		t.Fatalf("a batch changing an unknown replica: %v, want pool.ErrConflict", err)
	}
	if _, err := db.Replica(ctx, id); !errors.Is(err, pool.ErrUnknownLease) {
		t.Errorf("Replica(%s) after the refused batch: %v, want pool.ErrUnknownLease", id, err)
	}
	if err := db.Commit(ctx, &pool.Batch{Replicas: []pool.ReplicaRecord{rec(id, 0, pool.ReplicaLeased, 1, 0)}}); err != nil {
		t.Fatalf("the lease again, alone: %v", err)
	}
	db = reopen()
	if got := leases(mustLoad(t, db)); !cmp.Equal(got, []string{id}) {
		t.Errorf("Load after a restart: %v, want [%s]", got, id)
	}
}

// A lease_log row whose bytes do not decode keeps the database from
// opening, with an error naming the row and wrapping ErrCorrupt: the
// leases in it would otherwise be lost without a word.
func TestLeaseLogDamaged(t *testing.T) {
	ctx := context.Background()
	db, path, _, rec := leaseLogDB(t)
	if err := db.Commit(ctx, &pool.Batch{Replicas: []pool.ReplicaRecord{rec(pool.NewLeaseID(), 0, pool.ReplicaLeased, 1, 0)}}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	for name, spoil := range map[string]func([]byte) []byte{
		"cut short":      func(b []byte) []byte { return b[:20] },
		"unknown format": func(b []byte) []byte { return append([]byte{9}, b[1:]...) },
		"trailing bytes": func(b []byte) []byte { return append(b, 1) },
		"empty":          func([]byte) []byte { return []byte{} },
	} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "coordinator.db")
			copyFile(t, path, p)
			raw, err := sql.Open("sqlite", "file:"+p)
			if err != nil {
				t.Fatal(err)
			}
			var body []byte
			if err := raw.QueryRow(`SELECT body FROM lease_log WHERE seq = 1`).Scan(&body); err != nil {
				t.Fatal(err)
			}
			if _, err := raw.Exec(`UPDATE lease_log SET body = ? WHERE seq = 1`, spoil(body)); err != nil {
				t.Fatal(err)
			}
			raw.Close()
			d, err := store.Open(p)
			if err == nil {
				d.Close()
				t.Fatal("Open of a damaged lease log succeeded")
			}
			if !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), "lease log row 1") {
				t.Errorf("Open: %v, want ErrCorrupt naming lease log row 1", err)
			}
		})
	}
}

// Many leases over many commits, changed in a random order with
// compactions between, load the same from the running database and from
// a restart.
func TestLeaseLogRestartsMatch(t *testing.T) {
	ctx := context.Background()
	db, path, reopen, rec := leaseLogDB(t)
	type live struct {
		task    int64
		version int64
	}
	open := map[string]*live{}
	var order []string
	task := int64(0)
	for round := range 40 {
		var rs []pool.ReplicaRecord
		for range 3 {
			id := pool.NewLeaseID()
			rs = append(rs, rec(id, task, pool.ReplicaLeased, 1, 0))
			open[id] = &live{task: task, version: 1}
			order = append(order, id)
			task++
		}
		// Change a few older ones: a heartbeat, a return, an expiry.
		for i, id := range order {
			l := open[id]
			if l == nil || (i+round)%4 != 0 {
				continue
			}
			state := []string{pool.ReplicaLeased, pool.ReplicaReturned, pool.ReplicaExpired}[(i+round)%3]
			r := rec(id, l.task, state, l.version+1, l.version)
			rs = append(rs, r)
			l.version++
			if state == pool.ReplicaExpired {
				delete(open, id)
			}
		}
		if err := db.Commit(ctx, &pool.Batch{Replicas: rs}); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if round%7 == 3 {
			if _, err := db.Compact(ctx, time.UnixMilli(1_767_000_000_000)); err != nil {
				t.Fatalf("round %d: Compact: %v", round, err)
			}
			// However old the oldest lease in play: one row left.
			if n := count(t, path, "lease_log"); n != 1 {
				t.Errorf("round %d: %d rows of lease_log after Compact, want 1", round, n)
			}
		}
		if round%5 == 4 {
			before := mustLoad(t, db)
			db = reopen()
			if diff := cmp.Diff(before.Replicas, mustLoad(t, db).Replicas); diff != "" {
				t.Fatalf("round %d: Load after a restart differs (-before +after):\n%s", round, diff)
			}
		}
	}
	s := mustLoad(t, db)
	if len(s.Replicas) != len(order) {
		t.Errorf("Load: %d replicas, want %d", len(s.Replicas), len(order))
	}
	for _, r := range s.Replicas {
		if l := open[r.Lease]; l != nil && r.Version != l.version {
			t.Errorf("replica %s at version %d, want %d", r.Lease, r.Version, l.version)
		}
	}
}

// copyFile copies the closed database file from to to.
func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
