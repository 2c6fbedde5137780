package app

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/layout"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"

	"idlepool/agent"
	"idlepool/energy"
	"idlepool/job"
	"idlepool/offers"
	"idlepool/pool"
	"idlepool/store"
)

// This file is the Contribution history window: the results this machine
// returned to its pools (store.Local.Contributions), pending, confirmed
// or rejected with the reason, as a sortable table filtered by pool and
// state; totals per pool and per day (store.Local.History); and a bar
// chart of the confirmed cost units of the last four weeks.

// HistoryRefresh is how often the Contribution history window reads the
// store again while it is open.
const HistoryRefresh = 10 * time.Second

// Limits of the history window.
const (
	historyRows   = 5000 // the newest contributions the table shows
	chartDays     = 28   // the chart's days, ending today
	historyAll    = "All pools"
	historyStates = "All states"
)

// historyColumns are the table's column titles and widths; the header
// buttons sort by them. Together they fit the table's side of the window
// (historySplit of 1100), so that the side pane shows whole; a reason
// longer than its column ends in "…" and shows whole in the details.
var historyColumns = []struct {
	title string
	width float32
}{
	{"Date", 130}, {"Pool", 90}, {"Job", 140}, {"Task", 50}, {"Cost", 55}, {"Energy", 105}, {"State", 80}, {"Reason", 75},
}

// historySplit is the share of the window's width the table takes; the
// details and totals take the rest.
const historySplit = 0.69

// Column indexes of historyColumns.
const (
	colDate = iota
	colPool
	colJob
	colTask
	colCost
	colEnergy
	colState
	colReason
)

// historyData is what one reading of the store found.
type historyData struct {
	rows  []store.Contribution // newest first, as filtered
	days  []store.DaySummary   // every pool and day
	names map[string]string    // pool URL → name, where known
	err   error

	energy map[string]store.TaskEnergy // by lease: what each task used here
	prices store.EnergyPrices          // the owner's tariff and CO2 intensity

	jobs map[job.ID]store.JobNote // what the agent noted of each job: names, owner
}

// historyView is the Contribution history window's content with the
// widgets tests tap. Its methods run on Fyne's UI goroutine, except the
// reading of the store, which runs on a goroutine of its own (tracked by
// loading) and hands its result back with fyne.Do; the auto-refresh
// ticker's goroutine runs from start to stop.
type historyView struct {
	u       *UI
	content fyne.CanvasObject

	refresh  *widget.Button
	pool     *widget.Select // historyAll or a pool's label (poolURLs)
	state    *widget.Select // historyStates or a store.State*
	status   *widget.Label
	headers  []*widget.Button // one per column: tap to sort
	table    *widget.Table
	details  *widget.Label
	perPool  *widget.Label
	perDay   *widget.Label
	perJob   *widget.Label
	side     *wrapScroll // details, per pool, per day and per job
	chart    *barChart
	chartOf  *widget.Select    // what the chart shows: chartCost or chartEnergy
	poolURLs map[string]string // the pool select's labels → URLs

	data     historyData
	sortCol  int
	sortDesc bool
	selected int // index in data.rows; -1 when none

	gen     int            // counts loads; a result of an older one is dropped
	loading sync.WaitGroup // the load goroutines, waited for by tests
	do      func(func())   // runs a load's result on the UI goroutine: fyne.Do
	refresher
}

// ShowHistory shows the Contribution history window: the results this
// machine returned to its pools, with their receipts' state, totals and a
// chart of the last four weeks. It reads the store when it opens, when
// Refresh is pressed, when a filter changes and every HistoryRefresh
// while open; closing it stops that. It must be called on Fyne's UI
// goroutine.
func (u *UI) ShowHistory() fyne.Window {
	w, _ := u.showHistory()
	return w
}

// showHistory is ShowHistory; it returns the view too when it made the
// window now (nil when the window was open already).
func (u *UI) showHistory() (fyne.Window, *historyView) {
	var v *historyView
	w := u.window("history", "Contribution history", fyne.NewSize(1100, 720), func(fyne.Window) fyne.CanvasObject {
		v = u.newHistoryView()
		return v.content
	}, func() { v.stop() })
	if v != nil { // made now
		v.load()
		v.start(HistoryRefresh)
	}
	return w, v
}

// newHistoryView builds the window's content; it reads nothing yet
// (load).
func (u *UI) newHistoryView() *historyView {
	v := &historyView{u: u, sortCol: colDate, sortDesc: true, selected: -1, poolURLs: map[string]string{}, do: fyne.Do}
	v.refresh = widget.NewButton("Refresh", v.load)
	v.pool = widget.NewSelect([]string{historyAll}, nil)
	v.pool.SetSelected(historyAll)
	v.state = widget.NewSelect([]string{historyStates, store.StatePending, store.StateConfirmed, store.StateRejected}, nil)
	v.state.SetSelected(historyStates)
	// The filters read the store again when changed, not when set above.
	v.pool.OnChanged = func(string) { v.load() }
	v.state.OnChanged = func(string) { v.load() }
	v.status = widget.NewLabel("Loading...")

	header := make([]fyne.CanvasObject, len(historyColumns))
	for i := range historyColumns {
		b := widget.NewButton("", func() { v.sortBy(i) })
		b.Alignment = widget.ButtonAlignLeading
		b.Importance = widget.LowImportance
		v.headers = append(v.headers, b)
		header[i] = b
	}
	v.labelHeaders()
	v.table = widget.NewTable(
		func() (int, int) { return len(v.data.rows), len(historyColumns) },
		func() fyne.CanvasObject {
			l := widget.NewLabel("")
			l.Truncation = fyne.TextTruncateEllipsis
			return l
		},
		func(id widget.TableCellID, o fyne.CanvasObject) {
			l := o.(*widget.Label)
			l.SetText(v.cell(id.Row, id.Col))
			l.Importance = widget.MediumImportance
			if id.Row < len(v.data.rows) && v.data.rows[id.Row].State == store.StateRejected {
				l.Importance = widget.DangerImportance
			}
			l.Refresh()
		},
	)
	widths := make([]float32, len(historyColumns))
	for i, c := range historyColumns {
		v.table.SetColumnWidth(i, c.width)
		widths[i] = c.width
	}
	v.table.OnSelected = func(id widget.TableCellID) { v.selectRow(id.Row) }

	v.details = widget.NewLabel("Select a contribution to see its details.")
	v.details.Wrapping = fyne.TextWrapWord
	v.perPool = widget.NewLabel("")
	v.perPool.Wrapping = fyne.TextWrapWord
	v.perDay = widget.NewLabel("")
	v.perDay.Wrapping = fyne.TextWrapWord
	v.perJob = widget.NewLabel("")
	v.perJob.Wrapping = fyne.TextWrapWord
	v.chart = newBarChart("Confirmed cost units per day, last 4 weeks", "cost units", 7)
	v.chartOf = widget.NewSelect([]string{chartCost, chartEnergy}, nil)
	v.chartOf.SetSelected(chartCost)
	v.chartOf.OnChanged = func(string) { v.showTotals() }

	filters := container.NewHBox(widget.NewLabel("Pool:"), v.pool, widget.NewLabel("State:"), v.state,
		widget.NewLabel("Chart:"), v.chartOf, layout.NewSpacer(), v.refresh)
	headerRow := container.New(&columnsLayout{widths: widths}, header...)
	tablePane := container.NewBorder(headerRow, nil, nil, nil, v.table)
	v.side = newWrapScroll(
		widget.NewLabelWithStyle("Details", fyne.TextAlignLeading, fyne.TextStyle{Bold: true}), v.details,
		widget.NewSeparator(),
		widget.NewLabelWithStyle("Per pool", fyne.TextAlignLeading, fyne.TextStyle{Bold: true}), v.perPool,
		widget.NewSeparator(),
		widget.NewLabelWithStyle("Per day", fyne.TextAlignLeading, fyne.TextStyle{Bold: true}), v.perDay,
		widget.NewSeparator(),
		widget.NewLabelWithStyle("Energy per job", fyne.TextAlignLeading, fyne.TextStyle{Bold: true}), v.perJob,
	)
	split := container.NewHSplit(tablePane, v.side)
	split.Offset = historySplit
	top := container.NewVBox(filters, v.status, hint(costUnitMeans), hint(energyMeans))
	v.content = container.NewBorder(top, v.chart, nil, nil, split)
	return v
}

// columnsLayout places objects side by side at the given widths, with
// the table's gap between them (widget.Table puts the theme's padding
// between columns), so that header buttons sit over the table's columns.
type columnsLayout struct{ widths []float32 }

// tableGap is the space widget.Table leaves between columns.
func tableGap() float32 { return theme.Size(theme.SizeNamePadding) }

// Layout implements fyne.Layout.
func (l *columnsLayout) Layout(objs []fyne.CanvasObject, size fyne.Size) {
	sep := tableGap()
	x := float32(0)
	for i, o := range objs {
		w := l.widths[min(i, len(l.widths)-1)]
		o.Move(fyne.NewPos(x, 0))
		o.Resize(fyne.NewSize(w, size.Height))
		x += w + sep
	}
}

// MinSize implements fyne.Layout.
func (l *columnsLayout) MinSize(objs []fyne.CanvasObject) fyne.Size {
	var w, h float32
	for i, o := range objs {
		if i > 0 {
			w += tableGap()
		}
		w += l.widths[min(i, len(l.widths)-1)]
		h = max(h, o.MinSize().Height)
	}
	return fyne.NewSize(w, h)
}

// start starts the auto refresh: load every every until stop.
func (v *historyView) start(every time.Duration) {
	ticks, stop := v.u.deps.ticks(every)
	v.autoRefresh(ticks, stop, v.load)
}

// stop ends the auto refresh and drops a load in progress.
func (v *historyView) stop() {
	v.refresher.stop()
	v.gen++
}

// filter is what the selects ask for.
func (v *historyView) filter() store.Filter {
	f := store.Filter{Limit: historyRows}
	if s := v.pool.Selected; s != historyAll {
		f.Pool = v.poolURLs[s]
	}
	if s := v.state.Selected; s != historyStates {
		f.State = s
	}
	return f
}

// load reads the store again, off the UI goroutine.
func (v *historyView) load() {
	v.gen++
	gen := v.gen
	f := v.filter()
	s := v.u.deps.Store
	v.loading.Add(1)
	go func() {
		defer v.loading.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		d := readHistory(ctx, s, f)
		v.do(func() {
			if gen == v.gen {
				v.show(d)
			}
		})
	}()
}

// readHistory reads the contributions f selects, the per-day summaries
// and the pools' names.
func readHistory(ctx context.Context, s *store.Local, f store.Filter) historyData {
	d := historyData{names: map[string]string{}}
	if d.rows, d.err = s.Contributions(ctx, f); d.err != nil {
		return d
	}
	if d.days, d.err = s.History(ctx); d.err != nil {
		return d
	}
	if notes, err := s.JobNotes(ctx); err == nil {
		d.jobs = notes
	}
	d.prices = store.EnergyPrices{}
	if set, err := s.Settings(ctx); err == nil {
		d.prices = pricesOf(set)
	}
	if tasks, err := s.Energy(ctx, time.Time{}); err == nil {
		d.energy = make(map[string]store.TaskEnergy, len(tasks))
		for _, t := range tasks {
			d.energy[t.Lease] = t
		}
	}
	if prefs, err := s.Preferences(ctx); err == nil {
		for _, p := range prefs.Pools {
			if p.Name != "" {
				d.names[p.URL] = p.Name
			}
		}
	}
	return d
}

// show puts what load read in the window.
func (v *historyView) show(d historyData) {
	if d.err != nil {
		v.status.SetText(fmt.Sprintf("Cannot read the history: %v", d.err))
		return
	}
	var keep string
	if v.selected >= 0 {
		keep = v.data.rows[v.selected].Lease
	}
	v.data = d
	v.selected = -1
	v.table.UnselectAll()
	v.updatePools()
	v.sortRows()
	v.table.Refresh()
	defer v.side.changed()
	v.showTotals()

	n := len(d.rows)
	switch {
	case n == 0 && len(d.days) == 0:
		v.status.SetText("This machine has not returned any results yet.")
	case n == 0:
		v.status.SetText("No contributions match these filters.")
	case n == historyRows:
		v.status.SetText(fmt.Sprintf("The newest %d contributions.", n))
	default:
		v.status.SetText(countText(n, "contribution") + ".")
	}
	v.details.SetText("Select a contribution to see its details.")
	if keep != "" {
		for i, c := range v.data.rows {
			if c.Lease == keep {
				v.table.Select(widget.TableCellID{Row: i, Col: 0})
				break
			}
		}
	}
}

// poolText names the pool at url for people: its name, else its URL.
func (v *historyView) poolText(url string) string {
	if n := v.data.names[url]; n != "" {
		return n
	}
	return url
}

// updatePools sets the pool select's options: every pool with a
// contribution, by name (and URL when names repeat).
func (v *historyView) updatePools() {
	var urls []string
	for _, s := range v.data.days {
		urls = append(urls, s.Pool)
	}
	slices.Sort(urls)
	urls = slices.Compact(urls)
	named := map[string]int{} // how many pools have each label
	for _, u := range urls {
		named[v.poolText(u)]++
	}
	selURL := v.poolURLs[v.pool.Selected]
	v.poolURLs = map[string]string{}
	opts := []string{historyAll}
	sel := historyAll
	for _, u := range urls {
		label := v.poolText(u)
		if _, taken := v.poolURLs[label]; taken || named[label] > 1 || label == historyAll {
			label = fmt.Sprintf("%s (%s)", label, u)
		}
		v.poolURLs[label] = u
		opts = append(opts, label)
		if u == selURL {
			sel = label
		}
	}
	v.pool.Options = opts
	if v.pool.Selected != sel {
		// Selecting in place, without the change callback, which would
		// load again.
		v.pool.Selected = sel
	}
	v.pool.Refresh()
}

// sortBy sorts the table by column col, or reverses it when it is sorted
// by col already.
func (v *historyView) sortBy(col int) {
	if v.sortCol == col {
		v.sortDesc = !v.sortDesc
	} else {
		v.sortCol, v.sortDesc = col, col == colDate || col == colCost || col == colEnergy
	}
	var keep string
	if v.selected >= 0 {
		keep = v.data.rows[v.selected].Lease
	}
	v.sortRows()
	v.labelHeaders()
	v.table.UnselectAll()
	v.selected = -1
	v.table.Refresh()
	for i, c := range v.data.rows {
		if keep != "" && c.Lease == keep {
			v.table.Select(widget.TableCellID{Row: i, Col: 0})
		}
	}
}

// labelHeaders writes the column titles, the sorted one with an arrow.
func (v *historyView) labelHeaders() {
	for i, b := range v.headers {
		t := historyColumns[i].title
		if i == v.sortCol {
			if v.sortDesc {
				t += " ▼"
			} else {
				t += " ▲"
			}
		}
		b.SetText(t)
	}
}

// sortRows sorts the rows by the sort column, newest first among equals.
func (v *historyView) sortRows() {
	by := func(a, b store.Contribution) int {
		switch v.sortCol {
		case colPool:
			return cmp.Compare(v.poolText(a.Pool), v.poolText(b.Pool))
		case colJob:
			return cmp.Or(cmp.Compare(v.data.jobs[a.Job].Name, v.data.jobs[b.Job].Name), cmp.Compare(a.Job.String(), b.Job.String()))
		case colTask:
			return cmp.Compare(a.Task, b.Task)
		case colCost:
			return cmp.Compare(a.Cost, b.Cost)
		case colEnergy:
			return cmp.Compare(v.data.energy[a.Lease].Joules(), v.data.energy[b.Lease].Joules())
		case colState:
			return cmp.Compare(a.State, b.State)
		case colReason:
			return cmp.Compare(a.Reason, b.Reason)
		}
		return a.Created.Compare(b.Created)
	}
	slices.SortStableFunc(v.data.rows, func(a, b store.Contribution) int {
		c := by(a, b)
		if v.sortDesc {
			c = -c
		}
		if c == 0 {
			c = b.Created.Compare(a.Created)
		}
		return cmp.Or(c, cmp.Compare(a.Lease, b.Lease))
	})
}

// cell is the text of the table at row, col.
func (v *historyView) cell(row, col int) string {
	if row < 0 || row >= len(v.data.rows) {
		return ""
	}
	c := v.data.rows[row]
	switch col {
	case colDate:
		return c.Created.Local().Format("2006-01-02 15:04")
	case colPool:
		return v.poolText(c.Pool)
	case colJob:
		return jobText(c.Job, v.data.jobs[c.Job].Name)
	case colTask:
		return fmt.Sprint(c.Task)
	case colCost:
		return costText(c.Cost)
	case colEnergy:
		if e, ok := v.data.energy[c.Lease]; ok {
			return energy.FormatKWh(e.Joules(), e.How())
		}
		return "-"
	case colState:
		return c.State
	case colReason:
		return c.Reason
	}
	return ""
}

// costText writes cost units: "2.5", "0.0123".
func costText(c float64) string { return fmt.Sprintf("%.4g", c) }

// selectRow shows the details of the contribution in row.
func (v *historyView) selectRow(row int) {
	defer v.side.changed()
	if row < 0 || row >= len(v.data.rows) {
		v.selected = -1
		v.details.SetText("Select a contribution to see its details.")
		return
	}
	v.selected = row
	c := v.data.rows[row]
	var b strings.Builder
	fmt.Fprintf(&b, "Pool: %s (%s)\n", v.poolText(c.Pool), c.Pool)
	n := v.data.jobs[c.Job]
	fmt.Fprintf(&b, "Job: %s\n", jobText(c.Job, n.Name))
	if d := offers.PlainLine(n.Description, 300); d != "" {
		fmt.Fprintf(&b, "%s\n", d)
	}
	if n.Link != "" {
		fmt.Fprintf(&b, "Job's page: %s\n", offers.PlainLine(n.Link, 300))
	}
	if n.Owner != "" {
		fmt.Fprintf(&b, "Job's owner: %s\n", ownerText(n.Owner, n.OwnerName, n.OwnerLink))
	}
	fmt.Fprintf(&b, "Job ID: %s\n", c.Job)
	if line := transferLine(n.Transfer); line != "" {
		fmt.Fprintf(&b, "%s\n", line)
	}
	fmt.Fprintf(&b, "Task: %d\n", c.Task)
	fmt.Fprintf(&b, "Returned: %s\n", c.Created.Local().Format("2006-01-02 15:04:05"))
	fmt.Fprintf(&b, "Cost: %s", costUnits(c.Cost))
	if c.State == store.StatePending {
		b.WriteString(" (this machine's estimate until the receipt arrives)")
	}
	fmt.Fprintf(&b, "\n%s", workLine(c))
	fmt.Fprintf(&b, "State: %s\n", c.State)
	if e, ok := v.data.energy[c.Lease]; ok {
		fmt.Fprintf(&b, "%s\n  (your own figure: never part of the receipt's cost)\n", taskEnergyWords(e, v.data.prices))
	}
	if c.State == store.StateConfirmed && c.Receipt.Seq > 0 {
		fmt.Fprintf(&b, "Receipt: entry %d of the pool's ledger, owner %s\n", c.Receipt.Seq, offers.ShortID(c.Receipt.Owner))
	}
	if c.Failed {
		fmt.Fprintf(&b, "The task failed here: %s\n", c.Failure)
	}
	if c.State == store.StateRejected {
		reason := c.Reason
		if reason == "" {
			reason = "no reason recorded"
		}
		fmt.Fprintf(&b, "Rejected: %s\n", reason)
	}
	fmt.Fprintf(&b, "Lease: %s", c.Lease)
	v.details.SetText(b.String())
}

// workLine says what a contribution's task took and what its job
// offered, "" for one from before metering: "Work: 2.5e+08 instructions;
// the job declared 1000 cost units, the most a receipt credits\n". The
// instructions are the receipt's once confirmed, else this machine's
// count.
func workLine(c store.Contribution) string {
	if c.Work == nil && c.Declared == 0 {
		return ""
	}
	work := c.Receipt.Work
	if work == 0 && c.Work != nil {
		work = c.Work.Count
	}
	return fmt.Sprintf("Work: %.3g instructions; the job declared %s, the most a receipt credits\n", float64(work), costUnits(c.Declared))
}

// poolTotal is one pool's contributions summed over its days.
type poolTotal struct {
	pool                         string
	pending, confirmed, rejected int64
	confirmedCost                float64
}

// totalsPerPool sums days per pool, in pool order.
func totalsPerPool(days []store.DaySummary) []poolTotal {
	var out []poolTotal
	for _, d := range days {
		if len(out) == 0 || out[len(out)-1].pool != d.Pool {
			out = append(out, poolTotal{pool: d.Pool})
		}
		t := &out[len(out)-1]
		t.pending += d.Pending
		t.confirmed += d.Confirmed
		t.rejected += d.Rejected
		t.confirmedCost += d.ConfirmedCost
	}
	return out
}

// totalsPerDay sums days over the pools, or those of pool when it is not
// "", by day ascending.
func totalsPerDay(days []store.DaySummary, pool string) []store.DaySummary {
	byDay := map[string]*store.DaySummary{}
	var order []string
	for _, d := range days {
		if pool != "" && d.Pool != pool {
			continue
		}
		t, ok := byDay[d.Day]
		if !ok {
			t = &store.DaySummary{Pool: pool, Day: d.Day}
			byDay[d.Day] = t
			order = append(order, d.Day)
		}
		t.Pending += d.Pending
		t.Confirmed += d.Confirmed
		t.Rejected += d.Rejected
		t.ConfirmedCost += d.ConfirmedCost
	}
	slices.Sort(order)
	out := make([]store.DaySummary, 0, len(order))
	for _, day := range order {
		out = append(out, *byDay[day])
	}
	return out
}

// chartBars are the confirmed cost units of each of the chartDays days
// ending on now's local day, oldest first, from per-day totals.
func chartBars(perDay []store.DaySummary, now time.Time) []chartBar {
	cost := map[string]float64{}
	for _, d := range perDay {
		cost[d.Day] += d.ConfirmedCost
	}
	y, m, dd := now.Local().Date()
	today := time.Date(y, m, dd, 12, 0, 0, 0, time.Local)
	bars := make([]chartBar, chartDays)
	for i := range bars {
		day := today.AddDate(0, 0, i-chartDays+1)
		key := day.Format(time.DateOnly)
		bars[i] = chartBar{label: day.Format("01-02"), value: cost[key]}
	}
	return bars
}

// countsText writes the counts of results that are not zero, after a
// semicolon: "; 3 confirmed, 1 rejected", or "" when all are zero. The
// zeros are left out so that a line of the narrow totals pane fits.
func countsText(confirmed, pending, rejected int64) string {
	var parts []string
	for _, c := range []struct {
		n    int64
		what string
	}{{confirmed, "confirmed"}, {pending, "pending"}, {rejected, "rejected"}} {
		if c.n != 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "; " + strings.Join(parts, ", ")
}

// showTotals writes the totals per pool (every pool) and per day (the
// pool selected, or all), and draws the chart of the same days.
func (v *historyView) showTotals() {
	defer v.side.changed()
	var b strings.Builder
	poolEnergy, dayEnergy, jobEnergy := v.energyTotals()
	for _, t := range totalsPerPool(v.data.days) {
		fmt.Fprintf(&b, "%s: %s confirmed%s%s\n",
			v.poolText(t.pool), costUnits(t.confirmedCost), countsText(t.confirmed, t.pending, t.rejected), energyText(poolEnergy[t.pool]))
	}
	if b.Len() == 0 {
		b.WriteString("Nothing yet.")
	}
	v.perPool.SetText(strings.TrimSpace(b.String()))

	pool := ""
	if s := v.pool.Selected; s != historyAll {
		pool = v.poolURLs[s]
	}
	perDay := totalsPerDay(v.data.days, pool)
	b.Reset()
	for i := len(perDay) - 1; i >= 0; i-- { // newest first
		d := perDay[i]
		fmt.Fprintf(&b, "%s: %s%s%s\n",
			d.Day, costUnits(d.ConfirmedCost), countsText(d.Confirmed, d.Pending, d.Rejected), energyText(dayEnergy[d.Day]))
	}
	if b.Len() == 0 {
		b.WriteString("Nothing yet.")
	}
	v.perDay.SetText(strings.TrimSpace(b.String()))

	b.Reset()
	ids := slices.SortedFunc(maps.Keys(jobEnergy), func(a, b job.ID) int {
		return cmp.Compare(jobEnergy[b].joules, jobEnergy[a].joules) // the costliest first
	})
	for _, id := range ids {
		fmt.Fprintf(&b, "%s: %s (%s)\n", jobText(id, v.data.jobs[id].Name), jobEnergy[id].words(), plural(jobEnergy[id].tasks, "task"))
	}
	if b.Len() == 0 {
		b.WriteString("No task metered yet.")
	}
	v.perJob.SetText(strings.TrimSpace(b.String()))

	if v.chartOf.Selected == chartEnergy {
		v.chart.SetTitle("Energy your tasks added per day, last 4 weeks", "kWh")
		v.chart.SetBars(energyBars(dayEnergy, v.u.deps.now()))
		return
	}
	v.chart.SetTitle("Confirmed cost units per day, last 4 weeks", "cost units")
	v.chart.SetBars(chartBars(perDay, v.u.deps.now()))
}

// What the history's chart shows.
const (
	chartCost   = "Cost units"
	chartEnergy = "Energy (kWh)"
)

// energyTotals sums the energy of the tasks metered here per pool, per
// local day of their end (of the pool selected, or all) and per job (of
// the pool selected, or all).
func (v *historyView) energyTotals() (perPool, perDay map[string]energySum, perJob map[job.ID]energySum) {
	perPool, perDay, perJob = map[string]energySum{}, map[string]energySum{}, map[job.ID]energySum{}
	pool := ""
	if s := v.pool.Selected; s != historyAll {
		pool = v.poolURLs[s]
	}
	for _, t := range v.data.energy {
		add := func(s energySum) energySum { s.add(t, v.data.prices); return s }
		perPool[t.Pool] = add(perPool[t.Pool])
		if pool != "" && t.Pool != pool {
			continue
		}
		day := t.End.Local().Format(time.DateOnly)
		perDay[day] = add(perDay[day])
		perJob[t.Job] = add(perJob[t.Job])
	}
	return perPool, perDay, perJob
}

// energyText is a total's energy after a semicolon, or "" when none of
// its tasks was metered.
func energyText(s energySum) string {
	if w := s.words(); w != "" {
		return "; " + w
	}
	return ""
}

// energyBars are the kWh of each of the chartDays days ending on now's
// local day, oldest first.
func energyBars(perDay map[string]energySum, now time.Time) []chartBar {
	y, m, dd := now.Local().Date()
	today := time.Date(y, m, dd, 12, 0, 0, 0, time.Local)
	bars := make([]chartBar, chartDays)
	for i := range bars {
		day := today.AddDate(0, 0, i-chartDays+1)
		bars[i] = chartBar{label: day.Format("01-02"), value: energy.KWh(perDay[day.Format(time.DateOnly)].joules)}
	}
	return bars
}

// transferLine says for people what this machine fetched of a job's
// files, by path (store.JobNote.Transfer): "Job's files fetched here:
// 12 MiB from peers directly, 3 MiB relayed, 1.0 KiB from the pool", or
// "" when it fetched none (the job's files were cached, or it was only
// browsed).
func transferLine(t pool.Transfer) string {
	if t.Zero() {
		return ""
	}
	var parts []string
	for _, p := range []struct {
		n    int64
		what string
	}{{t.Direct, "from peers directly"}, {t.Relayed, "from peers through a relay"}, {t.Coordinator, "from the pool's coordinator"}} {
		if p.n > 0 {
			parts = append(parts, agent.ByteSize(p.n)+" "+p.what)
		}
	}
	return "Job's files fetched here: " + strings.Join(parts, ", ")
}
