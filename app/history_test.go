package app

import (
	"context"
	"crypto/sha256"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/test"
	"fyne.io/fyne/v2/widget"
	"github.com/google/go-cmp/cmp"

	"idlepool/agent"
	"idlepool/job"
	"idlepool/pool"
	"idlepool/pool/pooltest"
	"idlepool/store"
)

// uiLoop stands in for Fyne's UI goroutine: the test driver's fyne.Do
// runs a function at once on the calling goroutine, so a view's loads
// would touch widgets while the test does; instead their results queue
// here and settle runs them on the test's goroutine, one at a time, as the
// desktop driver runs fyne.Do's on its own.
type uiLoop struct{ q chan func() }

func newUILoop() *uiLoop { return &uiLoop{q: make(chan func(), 64)} }

func (l *uiLoop) do(f func()) { l.q <- f }

// settle waits for the loads of wg to end and runs what they queued.
func (l *uiLoop) settle(wg *sync.WaitGroup) {
	for {
		wg.Wait()
		select {
		case f := <-l.q:
			f()
		default:
			return
		}
	}
}

// countingEngine is an Engine that counts Reload calls.
type countingEngine struct{ reloads atomic.Int64 }

func (e *countingEngine) Status() agent.AgentStatus { return agent.AgentStatus{} }
func (e *countingEngine) Reload()                   { e.reloads.Add(1) }

// openHistoryStore opens a real local store in a temporary directory.
func openHistoryStore(t *testing.T) *store.Local {
	t.Helper()
	l, err := store.OpenLocal(filepath.Join(t.TempDir(), "local.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// historyNow is the clock of the history tests: the chart's last day is
// 2026-03-10.
var historyNow = time.Date(2026, 3, 10, 15, 0, 0, 0, time.Local)

// seeded is one contribution of seedHistory and what became of it.
type seeded struct {
	pool, lease, job string
	task             int64
	created          time.Time
	estimate         float64 // the pending cost
	confirm          float64 // the receipt's cost; 0: not confirmed
	reject           string  // the rejection's reason; "": not rejected
}

// historySeed are the contributions the history tests start from: pool a
// (named alpha) and pool b (named beta), over three recent days and one
// more than four weeks ago.
var historySeed = []seeded{
	{"http://a", "l1", "squares", 0, historyNow.Add(-2 * time.Hour), 2, 2.5, ""},
	{"http://a", "l2", "squares", 1, historyNow.Add(-1 * time.Hour), 1, 0, "deviation: a majority returned another result"},
	{"http://a", "l3", "primes", 7, historyNow.AddDate(0, 0, -2), 4, 4, ""},
	{"http://a", "l4", "primes", 8, historyNow.AddDate(0, 0, -40), 10, 10, ""},
	{"http://b", "l5", "render", 3, historyNow.AddDate(0, 0, -1), 3, 0, ""},
	{"http://b", "l6", "render", 4, historyNow.AddDate(0, 0, -1).Add(time.Hour), 0.5, 1, ""},
}

// seedHistory fills l with historySeed: AddPending, then Confirm with a
// signed receipt or Reject with the reason.
func seedHistory(t *testing.T, l *store.Local) {
	t.Helper()
	ctx := context.Background()
	for _, p := range []struct{ url, name string }{{"http://a", "alpha"}, {"http://b", "beta"}} {
		if err := l.AddPool(ctx, p.url, p.name); err != nil {
			t.Fatal(err)
		}
	}
	key := pooltest.Key(t, "coordinator")
	for i, s := range historySeed {
		res := []byte("result " + s.lease)
		c := store.Contribution{Pool: s.pool, Job: job.ID(sha256.Sum256([]byte(s.job))), Task: s.task, Lease: s.lease,
			Digest: sha256.Sum256(res), Result: res, Cost: s.estimate, Created: s.created}
		if err := l.AddPending(ctx, c); err != nil {
			t.Fatal(err)
		}
		switch {
		case s.confirm > 0:
			e := pool.Entry{Seq: uint64(i + 1), Kind: pool.KindReceipt, Pool: "p", Job: c.Job, Task: c.Task, Peer: "idme",
				Owner: "idowner", Lease: c.Lease, Digest: c.Digest, Cost: s.confirm, Time: 1}
			e.Sig = key.Sign(e.Canonical(false))
			if err := l.Confirm(ctx, s.lease, e); err != nil {
				t.Fatal(err)
			}
		case s.reject != "":
			if err := l.Reject(ctx, s.lease, s.reject); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// testHistory is a history view whose loads deliver to loop.
type testHistory struct {
	*historyView
	loop *uiLoop
}

// settle runs the view's loads to their end, as the UI goroutine would.
func (v testHistory) settle() { v.loop.settle(&v.loading) }

// newTestHistory returns a history view over a seeded store, loaded.
func newTestHistory(t *testing.T) (testHistory, *store.Local) {
	t.Helper()
	l := openHistoryStore(t)
	seedHistory(t, l)
	u := New(testApp(t), &Deps{Store: l, Engine: &countingEngine{}, Now: func() time.Time { return historyNow }})
	v := testHistory{u.newHistoryView(), newUILoop()}
	v.do = v.loop.do
	v.load()
	v.settle()
	return v, l
}

// column returns the text of column col of every row of v's table.
func (v *historyView) column(col int) []string {
	var out []string
	for r := range v.data.rows {
		out = append(out, v.cell(r, col))
	}
	return out
}

func TestHistoryTableAndSorting(t *testing.T) {
	v, _ := newTestHistory(t)
	if got := v.status.Text; got != "6 contributions." {
		t.Errorf("status %q", got)
	}
	// Newest first by default.
	if diff := cmp.Diff([]string{"squares", "squares", "render", "render", "primes", "primes"}, jobNames(v)); diff != "" {
		t.Errorf("rows by date (-want +got):\n%s", diff)
	}
	row0 := []string{
		historyNow.Add(-time.Hour).Format("2006-01-02 15:04"), "alpha",
		job.ID(sha256.Sum256([]byte("squares"))).String()[:12], "1", "1", "-", "rejected",
		"deviation: a majority returned another result",
	}
	var got []string
	for c := range historyColumns {
		got = append(got, v.cell(0, c))
	}
	if diff := cmp.Diff(row0, got); diff != "" {
		t.Errorf("first row (-want +got):\n%s", diff)
	}
	if v.headers[colDate].Text != "Date ▼" {
		t.Errorf("date header %q, want it marked as sorted", v.headers[colDate].Text)
	}

	test.Tap(v.headers[colCost])
	if diff := cmp.Diff([]string{"10", "4", "3", "2.5", "1", "1"}, v.column(colCost)); diff != "" {
		t.Errorf("costs sorted by cost, largest first (-want +got):\n%s", diff)
	}
	if v.headers[colCost].Text != "Cost ▼" || v.headers[colDate].Text != "Date" {
		t.Errorf("headers %q, %q", v.headers[colCost].Text, v.headers[colDate].Text)
	}
	test.Tap(v.headers[colCost])
	if diff := cmp.Diff([]string{"1", "1", "2.5", "3", "4", "10"}, v.column(colCost)); diff != "" {
		t.Errorf("costs sorted by cost again, smallest first (-want +got):\n%s", diff)
	}
	test.Tap(v.headers[colTask])
	if diff := cmp.Diff([]string{"0", "1", "3", "4", "7", "8"}, v.column(colTask)); diff != "" {
		t.Errorf("tasks sorted (-want +got):\n%s", diff)
	}
}

func jobNames(v testHistory) []string {
	names := map[string]string{}
	for _, s := range historySeed {
		names[job.ID(sha256.Sum256([]byte(s.job))).String()[:12]] = s.job
	}
	var out []string
	for _, id := range v.column(colJob) {
		out = append(out, names[id])
	}
	return out
}

func TestHistoryFilters(t *testing.T) {
	v, _ := newTestHistory(t)
	if diff := cmp.Diff([]string{historyAll, "alpha", "beta"}, v.pool.Options); diff != "" {
		t.Fatalf("pool options (-want +got):\n%s", diff)
	}
	v.pool.SetSelected("beta")
	v.settle()
	if diff := cmp.Diff([]string{"beta", "beta"}, v.column(colPool)); diff != "" {
		t.Errorf("pools shown when filtered by beta (-want +got):\n%s", diff)
	}
	if v.pool.Selected != "beta" {
		t.Errorf("pool filter %q after loading", v.pool.Selected)
	}

	v.pool.SetSelected(historyAll)
	v.settle()
	v.state.SetSelected(store.StateRejected)
	v.settle()
	if len(v.data.rows) != 1 || v.cell(0, colReason) != "deviation: a majority returned another result" {
		t.Fatalf("rejected rows: %v", v.column(colReason))
	}
	v.table.Select(widgetCell(0))
	if !strings.Contains(v.details.Text, "Rejected: deviation: a majority returned another result") {
		t.Errorf("details of the rejected contribution: %q", v.details.Text)
	}

	v.state.SetSelected(store.StateConfirmed)
	v.settle()
	if diff := cmp.Diff([]string{"2.5", "1", "4", "10"}, v.column(colCost)); diff != "" {
		t.Errorf("confirmed costs, newest first (-want +got):\n%s", diff)
	}
	v.table.Select(widgetCell(0))
	if !strings.Contains(v.details.Text, "Receipt: entry 1 of the pool's ledger") {
		t.Errorf("details of a confirmed contribution: %q", v.details.Text)
	}
}

func TestHistoryTotals(t *testing.T) {
	v, _ := newTestHistory(t)
	wantPools := "alpha: 16.5 cost units confirmed; 3 confirmed, 1 rejected\n" +
		"beta: 1 cost unit confirmed; 1 confirmed, 1 pending"
	if diff := cmp.Diff(wantPools, v.perPool.Text); diff != "" {
		t.Errorf("totals per pool (-want +got):\n%s", diff)
	}
	day := func(d int) string { return historyNow.AddDate(0, 0, d).Format(time.DateOnly) }
	wantDays := day(0) + ": 2.5 cost units; 1 confirmed, 1 rejected\n" +
		day(-1) + ": 1 cost unit; 1 confirmed, 1 pending\n" +
		day(-2) + ": 4 cost units; 1 confirmed\n" +
		day(-40) + ": 10 cost units; 1 confirmed"
	if diff := cmp.Diff(wantDays, v.perDay.Text); diff != "" {
		t.Errorf("totals per day (-want +got):\n%s", diff)
	}

	v.pool.SetSelected("beta")
	v.settle()
	if diff := cmp.Diff(day(-1)+": 1 cost unit; 1 confirmed, 1 pending", v.perDay.Text); diff != "" {
		t.Errorf("totals per day of beta (-want +got):\n%s", diff)
	}
	if !strings.Contains(v.perPool.Text, "alpha:") {
		t.Errorf("totals per pool show every pool, whatever the filter: %q", v.perPool.Text)
	}
}

func TestHistoryChart(t *testing.T) {
	v, _ := newTestHistory(t)
	if len(v.chart.bars) != chartDays {
		t.Fatalf("%d bars, want %d", len(v.chart.bars), chartDays)
	}
	want := make([]float64, chartDays)
	want[chartDays-1], want[chartDays-2], want[chartDays-3] = 2.5, 1, 4 // today, yesterday, the day before
	var got []float64
	for _, b := range v.chart.bars {
		got = append(got, b.value)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("bar values, the day 40 days ago left out (-want +got):\n%s", diff)
	}
	if l := v.chart.bars[chartDays-1].label; l != "03-10" {
		t.Errorf("last bar's label %q", l)
	}

	v.chart.Resize(fyne.NewSize(560, 240))
	r := test.WidgetRenderer(v.chart).(*barChartRenderer)
	r.Layout(v.chart.Size())
	if len(r.rects) != chartDays {
		t.Fatalf("%d rectangles drawn, want %d", len(r.rects), chartDays)
	}
	_, _, _, plotH := r.plot(v.chart.Size())
	heights := map[int]float32{}
	for i, rect := range r.rects {
		if h := rect.Size().Height; h != 0 {
			heights[i] = h
		}
	}
	wantH := map[int]float32{chartDays - 1: plotH * 2.5 / 4, chartDays - 2: plotH * 1 / 4, chartDays - 3: plotH}
	if diff := cmp.Diff(wantH, heights); diff != "" {
		t.Errorf("bar heights in a plot %v high (-want +got):\n%s", plotH, diff)
	}
	if r.rects[chartDays-3].Position().Y+plotH != r.rects[chartDays-1].Position().Y+heights[chartDays-1] {
		t.Errorf("bars do not stand on the same axis")
	}
	if !strings.Contains(r.top.Text, "4 cost units") {
		t.Errorf("chart's top label %q", r.top.Text)
	}

	// Filtered by pool beta, only its day has a bar.
	v.pool.SetSelected("beta")
	v.settle()
	n := 0
	for _, b := range v.chart.bars {
		if b.value > 0 {
			n++
		}
	}
	if n != 1 || v.chart.bars[chartDays-2].value != 1 {
		t.Errorf("beta's chart: %d bars with a value, yesterday's %v", n, v.chart.bars[chartDays-2].value)
	}
}

func TestHistoryEmpty(t *testing.T) {
	l := openHistoryStore(t)
	u := New(testApp(t), &Deps{Store: l, Engine: &countingEngine{}})
	v := testHistory{u.newHistoryView(), newUILoop()}
	v.do = v.loop.do
	v.load()
	v.settle()
	if v.status.Text != "This machine has not returned any results yet." || len(v.data.rows) != 0 {
		t.Errorf("status %q, %d rows", v.status.Text, len(v.data.rows))
	}
	if len(v.chart.bars) != chartDays || v.chart.maxValue() != 0 {
		t.Errorf("empty chart: %d bars, max %v", len(v.chart.bars), v.chart.maxValue())
	}
}

// TestHistoryRefresh: Refresh and the auto refresh read the store again;
// closing the window stops the auto refresh.
func TestHistoryRefresh(t *testing.T) {
	v, l := newTestHistory(t)
	res := []byte("late")
	if err := l.AddPending(context.Background(), store.Contribution{Pool: "http://b", Job: job.ID(sha256.Sum256([]byte("late"))),
		Lease: "l7", Digest: sha256.Sum256(res), Result: res, Cost: 1, Created: historyNow}); err != nil {
		t.Fatal(err)
	}
	test.Tap(v.refresh)
	v.settle()
	if len(v.data.rows) != 7 || v.status.Text != "7 contributions." {
		t.Errorf("after Refresh: %d rows, status %q", len(v.data.rows), v.status.Text)
	}

	ticks := make(chan time.Time)
	refreshed := make(chan struct{}, 1)
	stopped := make(chan struct{})
	v.autoRefresh(ticks, func() { close(stopped) }, func() { refreshed <- struct{}{} })
	for range 2 {
		ticks <- time.Now()
		select {
		case <-refreshed:
		case <-time.After(10 * time.Second):
			t.Fatal("a tick did not refresh")
		}
	}
	v.stop()
	v.ticking.Wait()
	select {
	case <-stopped:
	default:
		t.Error("the ticker was not stopped")
	}
}

func TestShowHistoryWindow(t *testing.T) {
	l := openHistoryStore(t)
	seedHistory(t, l)
	ticks := make(chan time.Time)
	u := New(testApp(t), &Deps{Store: l, Engine: &countingEngine{}, Now: func() time.Time { return historyNow },
		Ticks: func(time.Duration) (<-chan time.Time, func()) { return ticks, func() {} }})
	w, v := u.showHistory()
	if v == nil || w.Title() != "Contribution history" {
		t.Fatalf("window %q, view %v", w.Title(), v)
	}
	v.loading.Wait()
	if len(v.data.rows) != 6 {
		t.Errorf("%d rows shown", len(v.data.rows))
	}
	if w2 := u.ShowHistory(); w2 != w {
		t.Error("a second ShowHistory made another window")
	}
	w.Close()
	v.ticking.Wait() // the auto refresh has ended
	if _, open := u.windows["history"]; open {
		t.Error("the closed window is still known")
	}
	w3, v3 := u.showHistory()
	if w3 == w || v3 == nil {
		t.Error("ShowHistory after closing did not make a new window")
	}
	v3.loading.Wait()
	w3.Close()
	v3.ticking.Wait()
}

// widgetCell is the first cell of row.
func widgetCell(row int) widget.TableCellID { return widget.TableCellID{Row: row, Col: 0} }

// The details of a contribution say what this machine fetched of its
// job's files, by path; a job it fetched nothing of says nothing.
func TestHistoryTransfer(t *testing.T) {
	v, l := newTestHistory(t)
	squares := job.ID(sha256.Sum256([]byte("squares")))
	if err := l.NoteTransfer(context.Background(), squares, "http://a", pool.Transfer{Direct: 3 << 20, Relayed: 512 << 10}); err != nil {
		t.Fatal(err)
	}
	v.load()
	v.settle()
	v.table.Select(widgetCell(0)) // squares, the newest
	want := "Job's files fetched here: " + agent.ByteSize(3<<20) + " from peers directly, " + agent.ByteSize(512<<10) + " from peers through a relay\n"
	if !strings.Contains(v.details.Text, want) {
		t.Errorf("details of a contribution to a job fetched from peers: %q, want the line %q", v.details.Text, want)
	}
	v.table.Select(widgetCell(2)) // render: nothing fetched
	if strings.Contains(v.details.Text, "fetched here") {
		t.Errorf("details of a contribution to a job fetched nothing of: %q", v.details.Text)
	}
	if got := transferLine(pool.Transfer{Coordinator: 2048}); got != "Job's files fetched here: "+agent.ByteSize(2048)+" from the pool's coordinator" {
		t.Errorf("transferLine of the coordinator alone = %q", got)
	}
}

// The details of a contribution say the work its task took and what its
// job declared: this machine's count while pending, the receipt's once
// confirmed; nothing for one from before metering.
func TestHistoryWorkLine(t *testing.T) {
	pending := store.Contribution{Declared: 1000, Work: &pool.Work{Rule: 1, Count: 250_000_000}}
	confirmed := pending
	confirmed.Receipt.Work = 240_000_000
	for _, tc := range []struct {
		c    store.Contribution
		want string
	}{
		{store.Contribution{Cost: 1}, ""},
		{pending, "Work: 2.5e+08 instructions; the job declared 1000 cost units, the most a receipt credits\n"},
		{confirmed, "Work: 2.4e+08 instructions; the job declared 1000 cost units, the most a receipt credits\n"},
	} {
		if got := workLine(tc.c); got != tc.want {
			t.Errorf("workLine(%+v) = %q, want %q", tc.c, got, tc.want)
		}
	}
}

// TestCostUnitsExplained: where a cost is shown, the app says what a cost
// unit is: the history window under its filters (its totals, chart and
// details count in them), drawn whole at the window's size, and a job's
// details in Browse jobs beside its cost per task.
func TestCostUnitsExplained(t *testing.T) {
	v, _ := newTestHistory(t)
	w := test.NewTempWindow(t, v.content)
	w.Resize(fyne.NewSize(1100, 720))
	w.Content().Refresh()
	var note *widget.RichText
	walkDrawn(v.content, func(o fyne.CanvasObject) {
		if r, ok := o.(*widget.RichText); ok && r.Visible() && strings.Contains(r.String(), "A cost unit is") {
			note = r
		}
	})
	if note == nil {
		t.Fatal("the history window does not say what a cost unit is")
	}
	for _, want := range []string{"what a job declares one of its tasks to be worth", "1 per task", "never from the time a task took"} {
		if !strings.Contains(note.String(), want) {
			t.Errorf("the history window's note %q lacks %q", note.String(), want)
		}
	}
	if note.Size().Height < note.MinSize().Height-0.5 || note.Size().Width > 1100 {
		t.Errorf("the note is drawn %v, needs %v", note.Size(), note.MinSize())
	}

	d := jobDetails(browseRow{poolURL: "http://a", poolName: "alpha", job: testBoards()[0].Jobs[0]})
	if !strings.Contains(d, "Cost per task: 1.5 cost units (the worth the job declares for a task, the same on every machine, never time)") {
		t.Errorf("the job's details do not say what its cost is:\n%s", d)
	}
}
