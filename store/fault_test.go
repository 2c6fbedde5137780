package store_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"idlepool/pool"
	"idlepool/pool/pooltest"
	"idlepool/store"
)

// holdWriteLock takes the write lock of the database at path on a
// connection of its own (as another process would) and returns the
// function that releases it.
func holdWriteLock(t *testing.T, path string) (release func()) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path)
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
		if done {
			return
		}
		done = true
		if _, err := conn.ExecContext(context.Background(), `ROLLBACK`); err != nil {
			t.Errorf("ROLLBACK: %v", err)
		}
		conn.Close()
		db.Close()
	}
	t.Cleanup(release)
	return release
}

// A write that finds the write lock held past the busy timeout fails with
// ErrBusy (a Transient fault) and changes nothing; once the lock is gone
// the same write works.
func TestLocalBusy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "local.db")
	l, err := store.OpenLocal(path, store.WithBusyTimeout(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	c := contribution("http://pool", "lease-1", 0, time.Now())
	release := holdWriteLock(t, path)
	err = l.AddPending(ctx, c)
	if !errors.Is(err, store.ErrBusy) || !store.Transient(err) || errors.Is(err, store.ErrFull) {
		t.Fatalf("AddPending under another's write lock: %v, want ErrBusy", err)
	}
	if err := l.MarkAcknowledged(ctx, "lease-1"); !errors.Is(err, store.ErrBusy) {
		t.Errorf("MarkAcknowledged under another's write lock: %v, want ErrBusy", err)
	}
	release()
	if err := l.AddPending(ctx, c); err != nil {
		t.Fatalf("AddPending after the lock was released: %v", err)
	}
	if got, err := l.Unacknowledged(ctx, "http://pool"); err != nil || len(got) != 1 {
		t.Fatalf("Unacknowledged: %d, %v; want the one result", len(got), err)
	}
}

// fullLocal opens a local store at path whose file cannot grow (its page
// limit is its size now), after writing a filler row that a test deletes
// to make room, like a person deleting files on a full disk.
func fullLocal(t *testing.T, path string) *store.Local {
	t.Helper()
	l, err := store.OpenLocal(path)
	if err != nil {
		t.Fatal(err)
	}
	filler := contribution("http://filler", "filler", 0, time.Now())
	filler.Result = bytes.Repeat([]byte{'x'}, 256<<10)
	if err := l.AddPending(context.Background(), filler); err != nil {
		t.Fatal(err)
	}
	l.Close() // checkpoints the write-ahead log into the file
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	l, err = store.OpenLocal(path, store.WithMaxPages(fi.Size()/4096))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// makeRoom deletes the filler row of fullLocal on a connection of its
// own: its pages become free pages the store can reuse.
func makeRoom(t *testing.T, path string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`DELETE FROM contributions WHERE lease = 'filler'`); err != nil {
		t.Fatal(err)
	}
}

// A write on a full disk fails with ErrFull (Transient) and changes
// nothing; once there is room the same write works.
func TestLocalFull(t *testing.T) {
	path := filepath.Join(t.TempDir(), "local.db")
	l := fullLocal(t, path)
	ctx := context.Background()
	c := contribution("http://pool", "lease-1", 0, time.Now())
	c.Result = bytes.Repeat([]byte{'r'}, 64<<10)
	err := l.AddPending(ctx, c)
	if !errors.Is(err, store.ErrFull) || !store.Transient(err) {
		t.Fatalf("AddPending on a full disk: %v, want ErrFull", err)
	}
	if got, _ := l.Unacknowledged(ctx, "http://pool"); len(got) != 0 {
		t.Fatalf("a failed write left %d rows", len(got))
	}
	makeRoom(t, path)
	if err := l.AddPending(ctx, c); err != nil {
		t.Fatalf("AddPending once there is room: %v", err)
	}
}

// junk overwrites length bytes of the file at path from off with bytes
// that are no SQLite page.
func junk(t *testing.T, path string, off, length int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(bytes.Repeat([]byte("junk\xff\x00\x13"), int(length/7)+1)[:length], off); err != nil {
		t.Fatal(err)
	}
}

// A damaged local database: OpenLocal refuses it with ErrCorrupt;
// OpenLocalRepairing moves it aside (kept, named with the time), starts a
// new one, copies what can be read, and says what it did. Then the
// receipts of the pool's ledger bring the lost contributions back
// (Recover).
func TestLocalRepair(t *testing.T) {
	for _, tc := range []struct {
		name      string
		damage    func(t *testing.T, path string, size int64)
		wantPools int // joined pools read back
	}{
		{"whole file junk", func(t *testing.T, path string, size int64) { junk(t, path, 0, size) }, 0},
		{"last pages junk", func(t *testing.T, path string, size int64) { junk(t, path, size-8*4096, 8*4096) }, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "local.db")
			ctx := context.Background()
			l, err := store.OpenLocal(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.JoinPool(ctx, "http://pool", "token"); err != nil {
				t.Fatal(err)
			}
			var cs []store.Contribution
			for i := range 40 {
				c := contribution("http://pool", "lease-"+string(rune('A'+i)), int64(i), time.Now())
				c.Result = bytes.Repeat([]byte{byte(i)}, 2000)
				if err := l.AddPending(ctx, c); err != nil {
					t.Fatal(err)
				}
				cs = append(cs, c)
			}
			l.Close()
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			tc.damage(t, path, fi.Size())
			damaged, _ := os.ReadFile(path)

			if l, err := store.OpenLocal(path); err == nil {
				// OpenLocal reads only what it needs: the damage may show
				// at the first read of a damaged page, or never.
				if _, err := l.Contributions(ctx, store.Filter{}); err != nil && !errors.Is(err, store.ErrCorrupt) {
					t.Errorf("reading a damaged page: %v, want ErrCorrupt", err)
				}
				l.Close()
			} else if !errors.Is(err, store.ErrCorrupt) {
				t.Errorf("OpenLocal of a damaged file: %v, want ErrCorrupt", err)
			}
			l, err = store.OpenLocalRepairing(path)
			if err != nil {
				t.Fatalf("OpenLocalRepairing: %v", err)
			}
			defer l.Close()
			r := l.Recovery()
			if r == nil {
				t.Fatal("Recovery is nil after opening a damaged database")
			}
			if !strings.HasPrefix(r.MovedTo, path+".damaged-") {
				t.Errorf("moved to %s, want %s.damaged-TIME", r.MovedTo, path)
			}
			if kept, err := os.ReadFile(r.MovedTo); err != nil || !bytes.Equal(kept, damaged) {
				t.Errorf("the damaged file was not kept as it was at %s: %v", r.MovedTo, err)
			}
			if msg := r.String(); !strings.Contains(msg, r.MovedTo) || !strings.Contains(msg, "damaged") {
				t.Errorf("Recovery.String() = %q", msg)
			}
			pools, err := l.JoinedPools(ctx)
			if err != nil || len(pools) != tc.wantPools {
				t.Errorf("joined pools read back: %v, %v; want %d", pools, err, tc.wantPools)
			}
			// The new store works, and the ledger gives the receipts back.
			for i, c := range cs[:3] {
				e := receipt(t, c, uint64(i+1), 2)
				if _, err := l.Recover(ctx, "http://pool", e, ""); err != nil {
					t.Fatalf("Recover: %v", err)
				}
				if added, err := l.Recover(ctx, "http://pool", e, ""); err != nil || added {
					t.Errorf("Recover again: %v, %v; want false, nil", added, err)
				}
			}
			got, err := l.Contributions(ctx, store.Filter{State: store.StateConfirmed})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 3 {
				t.Errorf("%d confirmed contributions after recovering 3 receipts", len(got))
			}
			// Opening it again is plain: nothing left to repair.
			l.Close()
			l2, err := store.OpenLocalRepairing(path)
			if err != nil {
				t.Fatal(err)
			}
			if l2.Recovery() != nil {
				t.Errorf("a healthy database was repaired: %+v", l2.Recovery())
			}
			l2.Close()
		})
	}
}

// A scheduler on a coordinator database whose disk is full keeps running:
// a submission waits (it is not acknowledged before it is stored), the
// scheduler says why (StoreFault, ErrFull) and refuses new leases; once
// there is room the batch is committed and the submission returns.
func TestSchedulerWaitsOutFullDisk(t *testing.T) {
	path := filepath.Join(t.TempDir(), "coordinator.db")
	db, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	raw, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Exec(`CREATE TABLE filler(b BLOB); INSERT INTO filler VALUES (zeroblob(512*1024))`); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	db, err = store.Open(path, store.WithMaxPages(fi.Size()/4096))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	h := pooltest.NewHarness(t, db, nil)
	alice, bob, carol := h.Device("alice", "alice-1"), h.Device("bob", "bob-1"), h.Device("carol", "carol-1")
	h.Job("full", 1, pooltest.Policy{}, alice)
	ls := h.Lease(bob, 1)
	big := pooltest.Result(bytes.Repeat([]byte{'r'}, 128<<10))
	submitted := make(chan error, 1)
	go func() { submitted <- h.S.Submit(context.Background(), bob, ls[0].ID, big) }()

	var fault error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if _, fault = h.S.StoreFault(); fault != nil {
			break
		}
	}
	if !errors.Is(fault, store.ErrFull) || !errors.Is(fault, pool.ErrStoreUnavailable) {
		t.Fatalf("StoreFault on a full disk: %v, want ErrFull", fault)
	}
	select {
	case err := <-submitted:
		t.Fatalf("Submit returned (%v) before its submission could be stored", err)
	default:
	}
	if _, err := h.S.Lease(context.Background(), carol, 1); !errors.Is(err, pool.ErrStoreUnavailable) {
		t.Errorf("Lease on a full disk: %v, want ErrStoreUnavailable", err)
	}

	if _, err := raw.Exec(`DELETE FROM filler`); err != nil {
		t.Fatal(err)
	}
	if err := <-submitted; err != nil {
		t.Fatalf("Submit once there is room: %v", err)
	}
	if _, fault := h.S.StoreFault(); fault != nil {
		t.Errorf("StoreFault once there is room: %v", fault)
	}
	if err := h.Stop(); err != nil {
		t.Fatalf("the scheduler stopped with %v", err)
	}
}
