package store_test

import (
	"path/filepath"
	"testing"

	"idlepool/pool"
	"idlepool/pool/pooltest"
	"idlepool/store"
)

// openDB opens a coordinator database in a temporary directory and
// returns it with a function that closes and reopens it.
func openDB(t *testing.T) (pool.Store, func(pool.Store) pool.Store) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "coordinator.db")
	db, err := store.Open(path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	cur := db
	t.Cleanup(func() { cur.Close() })
	return db, func(old pool.Store) pool.Store {
		t.Helper()
		if err := old.(*store.DB).Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		db, err := store.Open(path)
		if err != nil {
			t.Fatalf("reopen: %v", err)
		}
		cur = db
		return db
	}
}

func TestDBConformance(t *testing.T) {
	pooltest.StoreConformance(t, openDB)
}

// A scheduler on SQLite, restarted (store closed and reopened) three times
// in the middle of a job, loses and duplicates nothing.
func TestDBRestart(t *testing.T) {
	st, reopen := openDB(t)
	h := pooltest.NewHarness(t, st, nil)
	h.Reopen = reopen
	pooltest.RunRestart(h)
}

// On SQLite, which hands over every outcome, a job whose merger
// acknowledges outcomes between restarts goes on as on a store that
// summarises them (pool.MemStore.ForgetAcked).
func TestDBAckedRestart(t *testing.T) {
	st, reopen := openDB(t)
	h := pooltest.NewHarness(t, st, nil)
	h.Reopen = reopen
	pooltest.RunAckedRestart(h)
}

// On SQLite, across restarts, a timeout is no vote and no receipt, and
// the device that timed out is not leased the task again while others may
// take it.
func TestDBMachineFailures(t *testing.T) {
	st, reopen := openDB(t)
	h := pooltest.NewHarness(t, st, nil)
	h.Reopen = reopen
	pooltest.RunMachineFailures(h)
}

// A job cancelled on SQLite stays cancelled across a reopen.
func TestDBCancel(t *testing.T) {
	st, reopen := openDB(t)
	h := pooltest.NewHarness(t, st, nil)
	h.Reopen = reopen
	pooltest.RunCancel(h)
}

// On SQLite, settled replicas leave the scheduler's memory and are
// answered from the database, across a reopen.
func TestDBArchive(t *testing.T) {
	st, reopen := openDB(t)
	h := pooltest.NewHarness(t, st, nil)
	h.Reopen = reopen
	pooltest.RunArchive(h)
}

// On SQLite, trust records survive closing and reopening the database.
func TestDBTrustRestart(t *testing.T) {
	st, reopen := openDB(t)
	h := pooltest.NewHarness(t, st, nil)
	h.Reopen = reopen
	pooltest.RunTrustRestart(h)
}

// On SQLite, the ledger's counts by kind are the same after the store is
// closed and opened again (DB.CountEntries) as before.
func TestDBLedgerCounts(t *testing.T) {
	st, reopen := openDB(t)
	h := pooltest.NewHarness(t, st, nil)
	h.Reopen = reopen
	pooltest.RunLedgerCounts(h)
}
