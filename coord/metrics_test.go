package coord

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"idlepool/pool"
	"idlepool/pool/pooltest"
)

// A scrape reports the ledger's entries by kind without reading one of
// them from the store, however many were committed since the last.
func TestMetricsScrapeReadsNoLedger(t *testing.T) {
	st := pooltest.NewEntryCounter()
	h := pooltest.NewHarness(t, st, nil)
	pooltest.RunLedgerCounts(h)
	m := newMetrics(h.S.Jobs, h.S.LedgerCounts, h.S.CommitCounts)
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

// A scrape reports the scheduler's group commits: how many, the seconds
// they took and the records they held, as the scheduler counted them.
func TestMetricsCommits(t *testing.T) {
	h := pooltest.NewHarness(t, pool.NewMemStore(), nil)
	h.Decide("counted", 2)
	m := newMetrics(h.S.Jobs, h.S.LedgerCounts, h.S.CommitCounts)
	want := h.S.CommitCounts()
	if want.Commits == 0 || want.Outcomes != 2 {
		t.Fatalf("the scheduler counted %+v: want commits, and the 2 tasks' outcomes", want)
	}
	fams, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if after := h.S.CommitCounts(); after != want {
		t.Fatalf("the scheduler committed during the scrape: %+v, then %+v", want, after)
	}
	got := map[string]float64{}
	for _, f := range fams {
		for _, mt := range f.GetMetric() {
			name := f.GetName()
			if len(mt.GetLabel()) > 0 {
				name += "/" + mt.GetLabel()[0].GetValue()
			}
			got[name] = mt.GetCounter().GetValue()
		}
	}
	for name, v := range map[string]float64{
		"idlepool_coord_store_commits_total":                   float64(want.Commits),
		"idlepool_coord_store_commit_seconds_total":            want.Time.Seconds(),
		"idlepool_coord_store_committed_records_total/replica": float64(want.Replicas),
		"idlepool_coord_store_committed_records_total/outcome": float64(want.Outcomes),
		"idlepool_coord_store_committed_records_total/entry":   float64(want.Entries),
	} {
		if g, ok := got[name]; !ok || g != v {
			t.Errorf("%s: scraped %v (present %v), want %v", name, g, ok, v)
		}
	}
}
