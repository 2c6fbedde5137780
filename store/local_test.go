package store_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/job"
	"idlepool/pool"
	"idlepool/pool/pooltest"
	"idlepool/store"
)

func openLocal(t *testing.T) (*store.Local, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "local.db")
	l, err := store.OpenLocal(path)
	if err != nil {
		t.Fatalf("OpenLocal: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l, path
}

func contribution(poolURL, lease string, task int64, day time.Time) store.Contribution {
	res := []byte("result " + lease)
	return store.Contribution{
		Pool: poolURL, Job: job.ID(sha256.Sum256([]byte("job"))), Task: task, Lease: lease,
		Digest: sha256.Sum256(res), Result: res, Cost: 2, Declared: 1000, Work: &pool.Work{Rule: 1, Count: 200_000_000 + uint64(task)},
		Created: day,
	}
}

// receipt is the signed receipt the coordinator would issue for c.
func receipt(t *testing.T, c store.Contribution, seq uint64, cost float64) pool.Entry {
	e := pool.Entry{Seq: seq, Kind: pool.KindReceipt, Pool: "p", Job: c.Job, Task: c.Task, Peer: "idme", Owner: "idowner",
		Lease: c.Lease, Digest: c.Digest, Cost: cost, Time: 1}
	if c.Work != nil {
		e.Work = c.Work.Count
	}
	e.Sig = pooltest.Key(t, "coordinator").Sign(e.Canonical(false))
	return e
}

func TestLocalLifecycle(t *testing.T) {
	ctx := context.Background()
	l, path := openLocal(t)
	day1 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.Local)
	day2 := day1.AddDate(0, 0, 1)
	a := contribution("http://a", "l1", 0, day1)
	b := contribution("http://a", "l2", 1, day1)
	c := contribution("http://a", "l3", 2, day2)
	d := contribution("http://b", "l4", 0, day2)
	for _, x := range []store.Contribution{a, b, c, d, a} { // a twice: idempotent
		if err := l.AddPending(ctx, x); err != nil {
			t.Fatalf("AddPending %s: %v", x.Lease, err)
		}
	}
	un, err := l.Unacknowledged(ctx, "http://a")
	if err != nil {
		t.Fatal(err)
	}
	var leases []string
	for _, x := range un {
		leases = append(leases, x.Lease)
		if string(x.Result) != "result "+x.Lease || x.State != store.StatePending || x.Submission().Digest != x.Digest ||
			x.Declared != 1000 || !cmp.Equal(x.Submission().Work, &pool.Work{Rule: 1, Count: 200_000_000 + uint64(x.Task)}) {
			t.Errorf("unacknowledged %+v", x)
		}
	}
	if diff := cmp.Diff([]string{"l1", "l2", "l3"}, leases); diff != "" {
		t.Errorf("Unacknowledged (-want +got):\n%s", diff)
	}
	if err := l.MarkAcknowledged(ctx, "l1"); err != nil {
		t.Fatal(err)
	}
	if err := l.MarkAcknowledged(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("MarkAcknowledged of an unknown lease: %v", err)
	}
	if un, _ := l.Unacknowledged(ctx, "http://a"); len(un) != 2 {
		t.Errorf("%d unacknowledged after one ack, want 2", len(un))
	}

	ra := receipt(t, a, 7, 2.5)
	if err := l.Confirm(ctx, "l1", ra); err != nil {
		t.Fatalf("Confirm: %v", err)
	}
	if err := l.Confirm(ctx, "l1", ra); err != nil {
		t.Errorf("Confirm again with the same entry: %v", err)
	}
	if err := l.Confirm(ctx, "l1", receipt(t, a, 9, 2.5)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("Confirm with another entry: %v, want ErrConflict", err)
	}
	if err := l.Confirm(ctx, "l2", receipt(t, a, 8, 1)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("Confirm with a receipt of another lease: %v, want ErrConflict", err)
	}
	dev := receipt(t, b, 8, 0)
	dev.Kind = pool.KindDeviation
	if err := l.Confirm(ctx, "l2", dev); !errors.Is(err, store.ErrConflict) {
		t.Errorf("Confirm with a deviation: %v, want ErrConflict", err)
	}
	if err := l.Reject(ctx, "l2", "deviation: a majority returned another result"); err != nil {
		t.Fatal(err)
	}
	if err := l.Reject(ctx, "l2", "again"); err != nil {
		t.Errorf("Reject again: %v", err)
	}
	if err := l.Reject(ctx, "l1", "late"); !errors.Is(err, store.ErrConflict) {
		t.Errorf("Reject of a confirmed contribution: %v, want ErrConflict", err)
	}
	if err := l.Confirm(ctx, "nope", ra); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Confirm of an unknown lease: %v", err)
	}
	// A receipt the pool revoked no longer counts.
	if err := l.Confirm(ctx, "l3", receipt(t, c, 10, 4)); err != nil {
		t.Fatal(err)
	}
	for range 2 { // again: nil
		if err := l.Revoke(ctx, "l3", "revoked: computed again, others agreed on other bytes"); err != nil {
			t.Fatalf("Revoke: %v", err)
		}
	}
	if err := l.Revoke(ctx, "nope", "x"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Revoke of an unknown lease: %v", err)
	}

	// Reopen: everything is still there.
	l.Close()
	l, err = store.OpenLocal(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	hist, err := l.History(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.DaySummary{
		{Pool: "http://a", Day: "2026-03-01", Confirmed: 1, Rejected: 1, ConfirmedCost: 2.5, DeclaredCost: 1000, Work: 200_000_000},
		{Pool: "http://a", Day: "2026-03-02", Rejected: 1},
		{Pool: "http://b", Day: "2026-03-02", Pending: 1},
	}
	if diff := cmp.Diff(want, hist); diff != "" {
		t.Errorf("History (-want +got):\n%s", diff)
	}
	got, err := l.Contributions(ctx, store.Filter{Pool: "http://a", State: store.StateConfirmed})
	if err != nil || len(got) != 1 || got[0].Lease != "l1" || got[0].Receipt.Seq != 7 || got[0].Cost != 2.5 || got[0].Result != nil || !got[0].Acknowledged {
		t.Errorf("confirmed contributions: %+v, %v", got, err)
	}
	if err := pool.VerifyEntry(got[0].Receipt, pooltest.Key(t, "coordinator").Public()); err != nil {
		t.Errorf("the stored receipt no longer verifies: %v", err)
	}
	all, _ := l.Contributions(ctx, store.Filter{Limit: 3})
	var order []string
	for _, x := range all {
		order = append(order, x.Lease)
	}
	if diff := cmp.Diff([]string{"l4", "l3", "l2"}, order); diff != "" {
		t.Errorf("Contributions newest first (-want +got):\n%s", diff)
	}
	rej, _ := l.Contributions(ctx, store.Filter{State: store.StateRejected})
	if len(rej) != 2 || rej[1].Reason != "deviation: a majority returned another result" || rej[0].Lease != "l3" {
		t.Errorf("rejected: %+v", rej)
	}
}

func TestLocalLedgerCursor(t *testing.T) {
	ctx := context.Background()
	l, _ := openLocal(t)
	steps := []struct {
		set  uint64
		want uint64
	}{{0, 0}, {5, 5}, {3, 5}, {9, 9}}
	for _, s := range steps {
		if s.set > 0 {
			if err := l.SetLedgerCursor(ctx, "http://a", s.set); err != nil {
				t.Fatal(err)
			}
		}
		got, err := l.LedgerCursor(ctx, "http://a")
		if err != nil || got != s.want {
			t.Errorf("after SetLedgerCursor(%d): %d, %v, want %d", s.set, got, err, s.want)
		}
	}
	if got, _ := l.LedgerCursor(ctx, "http://b"); got != 0 {
		t.Errorf("cursor of another pool: %d", got)
	}
}

// Opening a database written by a newer program is refused.
func TestMigrationsRefuseNewerSchema(t *testing.T) {
	_, path := openLocal(t)
	db, err := sql.Open("sqlite", path) // the driver store registers
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO schema_version(version, name) VALUES (999, '0999_future.sql')`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := store.OpenLocal(path); !errors.Is(err, store.ErrSchema) {
		t.Errorf("OpenLocal of a newer schema: %v, want ErrSchema", err)
	}
}
