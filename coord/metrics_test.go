package coord

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"idlepool/pool"
	"idlepool/pool/pooltest"
)

// readCounter is a MemStore that counts the ledger entries read from it.
type readCounter struct {
	*pool.MemStore
	read atomic.Int64
}

func (r *readCounter) Entries(ctx context.Context, q pool.EntryQuery) ([]pool.Entry, error) {
	es, err := r.MemStore.Entries(ctx, q)
	r.read.Add(int64(len(es)))
	return es, err
}

// A scrape reports the ledger's entries by kind without reading one of
// them from the store, however many were committed since the last.
func TestMetricsScrapeReadsNoLedger(t *testing.T) {
	st := &readCounter{MemStore: pool.NewMemStore()}
	h := pooltest.NewHarness(t, st, nil)
	pooltest.RunLedgerCounts(h)
	m := newMetrics(h.S.Jobs, h.S.LedgerCounts)
	before := st.read.Load()
	got := map[string]uint64{}
	for range 2 {
		fams, err := m.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			if f.GetName() != "idlepool_coord_ledger_entries_total" {
				continue
			}
			for _, mt := range f.GetMetric() {
				got[mt.GetLabel()[0].GetValue()] = uint64(mt.GetCounter().GetValue())
			}
		}
	}
	if n := st.read.Load() - before; n != 0 {
		t.Errorf("two scrapes read %d ledger entries, want 0", n)
	}
	want := h.S.LedgerCounts()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("scraped counts (-scheduler +scraped):\n%s", diff)
	}
}
