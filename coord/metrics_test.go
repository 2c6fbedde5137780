package coord

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"idlepool/pool/pooltest"
)

// A scrape reports the ledger's entries by kind without reading one of
// them from the store, however many were committed since the last.
func TestMetricsScrapeReadsNoLedger(t *testing.T) {
	st := pooltest.NewEntryCounter()
	h := pooltest.NewHarness(t, st, nil)
	pooltest.RunLedgerCounts(h)
	m := newMetrics(h.S.Jobs, h.S.LedgerCounts)
	before := st.Read()
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
	if n := st.Read() - before; n != 0 {
		t.Errorf("two scrapes read %d ledger entries, want 0", n)
	}
	want := h.S.LedgerCounts()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("scraped counts (-scheduler +scraped):\n%s", diff)
	}
}
