package pool_test

import (
	"testing"

	"idlepool/pool"
	"idlepool/pool/pooltest"
)

// LedgerCounts equals the ledger counted by kind, across a restart, and
// reads no entry of the store to say so.
func TestLedgerCounts(t *testing.T) {
	st := pooltest.NewEntryCounter()
	h := pooltest.NewHarness(t, st, nil)
	pooltest.RunLedgerCounts(h)
	before := st.Read()
	for range 3 {
		h.S.LedgerCounts()
	}
	if n := st.Read() - before; n != 0 {
		t.Errorf("LedgerCounts read %d ledger entries, want 0", n)
	}
}

// A store that cannot count by kind is read page by page once, at start.
func TestLedgerCountsPaged(t *testing.T) {
	h := pooltest.NewHarness(t, struct{ pool.Store }{pool.NewMemStore()}, nil)
	pooltest.RunLedgerCounts(h)
}
