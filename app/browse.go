package app

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/widget"

	"idlepool/agent"
	"idlepool/idle"
	"idlepool/job"
	"idlepool/offers"
)

// This file is the Browse jobs window: the job boards of the pools this
// machine joined (Deps.Board), one row per job with what a task needs and
// whether this machine matches it, and a details pane where the donor
// accepts or refuses a job or its owner.

// boardTimeout bounds one reading of the job boards.
const boardTimeout = 2 * time.Minute

// Labels of the Browse jobs window, shared with its tests.
const (
	labelLoading     = "Loading..."
	labelAcceptJob   = "Accept this job"
	labelRefuseJob   = "Refuse this job"
	labelAcceptOwner = "Accept this owner"
	labelRefuseOwner = "Refuse this owner"
	labelClearChoice = "Clear choice"
	noPoolsText      = "This machine has not joined a pool yet: join one in Settings, and the jobs seeking compute there show here."
)

// browseColumns are the job table's column titles and widths. Together
// they fit the window's width (1000), so that every column shows without
// scrolling; a cell's text longer than its column wraps onto more lines
// of its row (rowHeights).
var browseColumns = []struct {
	title string
	width float32
}{
	{"Job", 135}, {"Owner", 110}, {"Pool", 95}, {"A task needs", 240}, {"Tasks left", 90}, {"This machine", 300},
}

// browseMatchColumn is the column of browseColumns that says whether this
// machine matches the job.
const browseMatchColumn = 5

// browseRow is one job on the board: the pool it is listed in and how it
// matches this machine.
type browseRow struct {
	poolURL  string
	poolName string
	job      agent.BoardJob
}

// browseView is the Browse jobs window's content with the widgets tests
// tap. Its methods run on Fyne's UI goroutine, except the reading of the
// boards, which runs on a goroutine of its own (tracked by loading) and
// hands its result back with fyne.Do.
type browseView struct {
	u       *UI
	content fyne.CanvasObject

	status  *widget.Label // "Loading...", the counts, or why there is nothing
	errors  *widget.Label // one line per pool that could not be read
	refresh *widget.Button
	table   *widget.Table
	details *widget.Label
	scroll  *wrapScroll   // scrolls details; laid out again when they change
	choice  *widget.Label // the donor's current choice about the selected job
	// The buttons of the details pane, disabled while no job is selected.
	acceptJob, refuseJob, acceptOwner, refuseOwner, clearChoice *widget.Button

	rows     []browseRow
	selected int // index in rows; -1 when none

	gen     int                // counts loads; a result of an older one is dropped
	cancel  context.CancelFunc // cancels the load in progress
	loading sync.WaitGroup     // the load goroutines, waited for by tests
	do      func(func())       // runs a load's result on the UI goroutine: fyne.Do
}

// ShowBrowse shows the Browse jobs window: the jobs seeking compute in the
// pools this machine joined, read from Deps.Board when the window opens
// and when Refresh is pressed, and the donor's choice about each. It must
// be called on Fyne's UI goroutine; closing the window cancels a reading
// in progress.
func (u *UI) ShowBrowse() fyne.Window {
	w, _ := u.showBrowse()
	return w
}

// showBrowse is ShowBrowse; it returns the view too when it made the
// window now (nil when the window was open already).
func (u *UI) showBrowse() (fyne.Window, *browseView) {
	var v *browseView
	w := u.window("browse", "Browse jobs", fyne.NewSize(1000, 640), func(fyne.Window) fyne.CanvasObject {
		v = u.newBrowseView()
		return v.content
	}, func() { v.stop() })
	if v != nil { // made now
		v.load()
	}
	return w, v
}

// newBrowseView builds the window's content; it reads nothing yet (load).
func (u *UI) newBrowseView() *browseView {
	v := &browseView{u: u, selected: -1, do: fyne.Do}
	v.status = widget.NewLabel("")
	v.status.Wrapping = fyne.TextWrapWord
	v.errors = widget.NewLabel("")
	v.errors.Wrapping = fyne.TextWrapWord
	v.errors.Importance = widget.DangerImportance
	v.errors.Hide()
	v.refresh = widget.NewButton("Refresh", v.load)

	v.table = widget.NewTableWithHeaders(
		func() (int, int) { return len(v.rows), len(browseColumns) },
		func() fyne.CanvasObject { return newBrowseCell("") },
		func(id widget.TableCellID, o fyne.CanvasObject) {
			l := o.(*widget.Label)
			l.Importance = widget.MediumImportance
			if id.Col == browseMatchColumn && id.Row < len(v.rows) && v.rows[id.Row].job.Match {
				l.Importance = widget.SuccessImportance
			}
			l.SetText(v.cell(id.Row, id.Col))
		},
	)
	v.table.ShowHeaderColumn = false
	v.table.CreateHeader = func() fyne.CanvasObject {
		return widget.NewLabelWithStyle("", fyne.TextAlignLeading, fyne.TextStyle{Bold: true})
	}
	v.table.UpdateHeader = func(id widget.TableCellID, o fyne.CanvasObject) {
		if id.Col >= 0 && id.Col < len(browseColumns) {
			o.(*widget.Label).SetText(browseColumns[id.Col].title)
		}
	}
	for i, c := range browseColumns {
		v.table.SetColumnWidth(i, c.width)
	}
	v.table.OnSelected = func(id widget.TableCellID) { v.selectRow(id.Row) }

	v.details = widget.NewLabel("Select a job to see its details.")
	v.details.Wrapping = fyne.TextWrapWord
	v.choice = widget.NewLabel("")
	v.choice.Wrapping = fyne.TextWrapWord
	v.acceptJob = widget.NewButton(labelAcceptJob, func() { v.choose(labelAcceptJob) })
	v.refuseJob = widget.NewButton(labelRefuseJob, func() { v.choose(labelRefuseJob) })
	v.acceptOwner = widget.NewButton(labelAcceptOwner, func() { v.choose(labelAcceptOwner) })
	v.refuseOwner = widget.NewButton(labelRefuseOwner, func() { v.choose(labelRefuseOwner) })
	v.clearChoice = widget.NewButton(labelClearChoice, func() { v.choose(labelClearChoice) })
	v.enableChoices(false)

	// The table takes the window's width, with every column in view; the
	// choices about the selected job and its details are under it.
	buttons := container.NewHBox(v.acceptJob, v.refuseJob, v.acceptOwner, v.refuseOwner, v.clearChoice)
	v.scroll = newWrapScroll(v.details)
	pane := container.NewBorder(container.NewVBox(buttons, v.choice, widget.NewSeparator()), nil, nil, nil,
		v.scroll)
	top := container.NewBorder(nil, v.errors, nil, v.refresh, v.status)
	split := container.NewVSplit(v.table, pane)
	split.Offset = 0.5
	v.content = container.NewBorder(top, nil, nil, nil, split)
	return v
}

// newBrowseCell returns a cell of the job table: a label that wraps,
// rather than cut, text longer than its column.
func newBrowseCell(text string) *widget.Label {
	l := widget.NewLabel(text)
	l.Wrapping = fyne.TextWrapWord
	return l
}

// rowHeights sets the height of each row of the table to that of its
// tallest cell, so that text wrapped in a cell shows whole.
func (v *browseView) rowHeights() {
	oneLine := newBrowseCell("").MinSize().Height
	for row := range v.rows {
		h := oneLine
		for col, c := range browseColumns {
			h = max(h, cellHeight(newBrowseCell(v.cell(row, col)), c.width))
		}
		v.table.SetRowHeight(row, h)
	}
}

// cellHeight is the height label needs to show its wrapped text at width.
func cellHeight(l *widget.Label, width float32) float32 {
	l.Resize(fyne.NewSize(width, l.MinSize().Height))
	return l.MinSize().Height
}

// load reads the boards again, off the UI goroutine, showing "Loading..."
// until they arrive.
func (v *browseView) load() {
	if v.cancel != nil {
		v.cancel()
	}
	v.gen++
	gen := v.gen
	v.status.SetText(labelLoading)
	deps := v.u.deps
	if deps.Board == nil {
		v.status.SetText("Browsing jobs is not available here: this app cannot read the pools' job boards.")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), boardTimeout)
	v.cancel = cancel
	v.loading.Add(1)
	go func() {
		defer v.loading.Done()
		defer cancel()
		joined, err := deps.Store.JoinedPools(ctx)
		var boards []agent.PoolBoard
		if err == nil && len(joined) > 0 {
			boards, err = deps.Board(ctx)
		}
		if errors.Is(ctx.Err(), context.Canceled) {
			return // the window closed, or a newer load started
		}
		v.do(func() {
			if gen == v.gen {
				v.show(len(joined), boards, err)
			}
		})
	}()
}

// stop cancels the load in progress, if any.
func (v *browseView) stop() {
	if v.cancel != nil {
		v.cancel()
	}
	v.gen++
}

// show puts the boards read by load in the window, keeping the selected
// job selected when it is still listed.
func (v *browseView) show(joined int, boards []agent.PoolBoard, err error) {
	var keep browseRow
	if v.selected >= 0 {
		keep = v.rows[v.selected]
	}
	v.rows = v.rows[:0]
	v.selected = -1
	v.table.UnselectAll()
	var failed []string
	for _, b := range boards {
		name := b.Name
		if name == "" {
			name = b.URL
		}
		if b.Error != "" {
			failed = append(failed, fmt.Sprintf("Pool %s: %s", name, b.Error))
			continue
		}
		for _, j := range b.Jobs {
			v.rows = append(v.rows, browseRow{poolURL: b.URL, poolName: name, job: j})
		}
	}
	v.errors.SetText(strings.Join(failed, "\n"))
	if len(failed) > 0 {
		v.errors.Show()
	} else {
		v.errors.Hide()
	}
	switch {
	case err != nil:
		v.status.SetText(fmt.Sprintf("Cannot read the job boards: %v", err))
	case joined == 0:
		v.status.SetText(noPoolsText)
	default:
		v.status.SetText(boardSummary(v.rows, len(boards)-len(failed)))
	}
	v.rowHeights()
	v.table.Refresh()
	v.showDetails()
	if keep.poolURL != "" {
		for i, r := range v.rows {
			if r.poolURL == keep.poolURL && r.job.Listing.Job == keep.job.Listing.Job {
				v.table.Select(widget.TableCellID{Row: i, Col: 0})
				break
			}
		}
	}
}

// boardSummary says how many jobs the pools list and how many match:
// "5 jobs in 2 pools; 3 match this machine."
func boardSummary(rows []browseRow, pools int) string {
	if len(rows) == 0 {
		if pools == 0 {
			return "No pool could be read."
		}
		return "No jobs seek compute in your pools right now."
	}
	match := 0
	for _, r := range rows {
		if r.job.Match {
			match++
		}
	}
	return fmt.Sprintf("%s in %s; %d match this machine.", countText(len(rows), "job"), countText(pools, "pool"), match)
}

// countText writes "1 job", "3 jobs".
func countText(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// cell is the text of the job table at row, col.
func (v *browseView) cell(row, col int) string {
	if row < 0 || row >= len(v.rows) {
		return ""
	}
	r := v.rows[row]
	l := r.job.Listing
	switch col {
	case 0:
		if d := cellDescription(l.Description); d != "" {
			return offers.PlainLine(l.Name, 40) + "\n" + d
		}
		return offers.PlainLine(l.Name, 40)
	case 1:
		// The name over the short ID, each on a line of its own, so that
		// neither is cut in the narrow column.
		if name := offers.OwnerName(l.Owner, l.OwnerProfile); name != "" {
			return offers.PlainLine(name, 64) + "\n" + offers.ShortID(l.Owner)
		}
		return offers.ShortID(l.Owner)
	case 2:
		return r.poolName
	case 3:
		return taskNeeds(l)
	case 4:
		return fmt.Sprint(l.TasksLeft)
	case browseMatchColumn:
		if r.job.Match {
			return "✓ matches"
		}
		if len(r.job.Why) == 0 {
			return "✗ does not match"
		}
		return "✗ " + r.job.Why[0]
	}
	return ""
}

// cellDescriptionRunes is the most of a job's description its cell in
// the job table shows; the details pane shows the whole.
const cellDescriptionRunes = 70

// cellDescription is the start of description d for the job table, on
// one line: up to cellDescriptionRunes, cut after a whole word and ended
// with "…" when there is more (selecting the job shows it whole).
func cellDescription(d string) string {
	d = offers.PlainLine(d, len(d)+1)
	r := []rune(d)
	if len(r) <= cellDescriptionRunes {
		return d
	}
	cut := string(r[:cellDescriptionRunes])
	if i := strings.LastIndex(cut, " "); i > 0 {
		cut = cut[:i]
	}
	return strings.TrimRight(cut, " ,;:.-") + "…"
}

// maxDescriptionRunes bounds the description the details pane shows:
// about ten pages, more than a job's description needs, while the pool's
// 1 MiB limit on a job's registration would let a page of text grow too
// long to lay out.
const maxDescriptionRunes = 20000

// wholeDescription is description d for the details pane: whole, its
// line breaks and paragraphs kept (runs of blank lines as one), each line
// with its spaces collapsed and control characters replaced
// (offers.PlainLine), up to maxDescriptionRunes with a note saying how
// much is left out.
func wholeDescription(d string) string {
	var lines []string
	blank := true // no blank line first
	for _, line := range strings.Split(d, "\n") {
		line = offers.PlainLine(line, len(line)+1) // bounded as a whole below
		if line == "" {
			if !blank {
				lines = append(lines, "")
			}
			blank = true
			continue
		}
		lines, blank = append(lines, line), false
	}
	out := strings.TrimSpace(strings.Join(lines, "\n"))
	if r := []rune(out); len(r) > maxDescriptionRunes {
		out = string(r[:maxDescriptionRunes]) + fmt.Sprintf("… (%d more characters not shown)", len(r)-maxDescriptionRunes)
	}
	return out
}

// taskNeeds writes what one task of l needs: "CPU, 256 MiB, up to 5 min"
// or "GPU 8 GiB cc 8.0+, 2 GiB, no time limit".
func taskNeeds(l offers.Listing) string {
	kind := l.Processor()
	limit := "no time limit"
	if l.TimeLimit > 0 {
		limit = "up to " + idle.DurationText(l.TimeLimit)
	}
	return kind + ", " + offers.MiBText(l.MemoryMiB) + ", " + limit
}

// selectRow shows the details of the job in row.
func (v *browseView) selectRow(row int) {
	if row < 0 || row >= len(v.rows) {
		v.selected = -1
	} else {
		v.selected = row
	}
	v.showDetails()
}

// showDetails fills the details pane with the selected job.
func (v *browseView) showDetails() {
	defer v.scroll.changed()
	if v.selected < 0 {
		v.details.SetText("Select a job to see its details.")
		v.setChoice("")
		v.enableChoices(false)
		return
	}
	v.details.SetText(jobDetails(v.rows[v.selected]))
	v.enableChoices(true)
	v.showChoice()
}

// jobDetails writes everything the board says about r's job, for people.
func jobDetails(r browseRow) string {
	l := r.job.Listing
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n", offers.PlainLine(l.Name, 100))
	if d := wholeDescription(l.Description); d != "" {
		fmt.Fprintf(&b, "%s\n", d)
	}
	if l.Link != "" {
		fmt.Fprintf(&b, "Job's page: %s\n", offers.PlainLine(l.Link, 300))
	}
	fmt.Fprintf(&b, "\nJob ID: %s\n", l.Job)
	if name := offers.OwnerName(l.Owner, l.OwnerProfile); name != "" {
		fmt.Fprintf(&b, "Owner: %s\n", ownerText(l.Owner, name, offers.OwnerLink(l.Owner, l.OwnerProfile)))
		fmt.Fprintf(&b, "Owner ID: %s (the name is the owner's own choice; the ID is what identifies the owner)\n", l.Owner)
	} else {
		fmt.Fprintf(&b, "Owner: %s (no name given)\n", l.Owner)
	}
	fmt.Fprintf(&b, "Pool: %s (%s)\n", r.poolName, r.poolURL)
	fmt.Fprintf(&b, "A task needs: %s\n", taskNeeds(l))
	switch {
	case l.Requirements.GPU.Required():
		b.WriteString("GPU: needs a GPU; only machines that offer one compute it\n")
	case l.Requirements.GPU.Optional():
		b.WriteString("GPU: uses a GPU if you allow one (GPU programs in this pool and a GPU switched on in Settings); otherwise it computes on the CPU\n")
	}
	if p := l.Requirements.Prefer; p != "" {
		fmt.Fprintf(&b, "Prefers machines with more %s\n", strings.ReplaceAll(p, "_", " "))
	}
	fmt.Fprintf(&b, "Tasks: %d left, %d done\n", l.TasksLeft, l.TasksDone)
	fmt.Fprintf(&b, "Quorum: %d agreeing results per task\n", l.Quorum)
	fmt.Fprintf(&b, "Participants: %s\n", participantsText(l.Participants))
	fmt.Fprintf(&b, "Cost per task: %s (%s)\n", costUnits(l.CostPerTask), costUnitShort)
	if r.job.Match {
		b.WriteString("\nThis machine matches this job.")
	} else {
		b.WriteString("\nThis machine does not match this job:")
		for _, why := range r.job.Why {
			fmt.Fprintf(&b, "\n• %s", why)
		}
	}
	return b.String()
}

// participantsText says who may compute a job's tasks.
func participantsText(p string) string {
	switch p {
	case "open":
		return "open to every peer of the pool"
	case "invite":
		return "the pool's invited peers"
	case "owner":
		return "only the owner's own devices"
	}
	return p
}

// enableChoices enables or disables the details pane's buttons.
func (v *browseView) enableChoices(on bool) {
	for _, b := range []*widget.Button{v.acceptJob, v.refuseJob, v.acceptOwner, v.refuseOwner, v.clearChoice} {
		if on {
			b.Enable()
		} else {
			b.Disable()
		}
	}
}

// choose records the choice of the button labelled label about the
// selected job or its owner in the job's pool, makes the engine read it
// and reads the boards again, as the choice changes what matches.
func (v *browseView) choose(label string) {
	if v.selected < 0 {
		return
	}
	r := v.rows[v.selected]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, url, id, owner := v.u.deps.Store, r.poolURL, r.job.Listing.Job, r.job.Listing.Owner
	var err error
	switch label {
	case labelAcceptJob:
		err = s.AcceptJob(ctx, url, id)
	case labelRefuseJob:
		err = s.RefuseJob(ctx, url, id)
	case labelAcceptOwner:
		err = s.AcceptOwner(ctx, url, owner)
	case labelRefuseOwner:
		err = s.RefuseOwner(ctx, url, owner)
	case labelClearChoice:
		if err = s.ClearJob(ctx, url, id); err == nil {
			err = s.ClearOwner(ctx, url, owner)
		}
	}
	if err != nil {
		v.setChoice(fmt.Sprintf("Cannot save your choice: %v", err))
		return
	}
	if v.u.deps.Engine != nil {
		v.u.deps.Engine.Reload()
	}
	v.showChoice()
	v.load()
}

// showChoice shows the donor's choice about the selected job and its
// owner, as the store has it.
func (v *browseView) showChoice() {
	if v.selected < 0 {
		return
	}
	r := v.rows[v.selected]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	prefs, err := v.u.deps.Store.Preferences(ctx)
	if err != nil {
		v.setChoice(fmt.Sprintf("Cannot read your choices: %v", err))
		return
	}
	v.setChoice(choiceText(prefs, r.poolURL, r.job.Listing.Job, r.job.Listing.Owner))
}

// setChoice shows text under the choice buttons, or nothing (not even an
// empty line) when text is "".
func (v *browseView) setChoice(text string) {
	v.choice.SetText(text)
	if text == "" {
		v.choice.Hide()
	} else {
		v.choice.Show()
	}
}

// choiceText writes the donor's choices about job id and its owner in
// the pool at url, and those made for every pool.
func choiceText(prefs offers.Preferences, url string, id job.ID, owner string) string {
	pp, _ := prefs.Pool(url)
	var lines []string
	for _, c := range []struct {
		pp    offers.PoolPreferences
		where string
	}{{pp, "in this pool"}, {prefs.Global, "in every pool"}} {
		switch {
		case slices.Contains(c.pp.AcceptJobs, id):
			lines = append(lines, "You accept this job "+c.where+".")
		case slices.Contains(c.pp.RefuseJobs, id):
			lines = append(lines, "You refuse this job "+c.where+".")
		}
		switch {
		case slices.Contains(c.pp.AcceptOwners, owner):
			lines = append(lines, "You prefer this owner's jobs "+c.where+".")
		case slices.Contains(c.pp.RefuseOwners, owner):
			lines = append(lines, "You refuse this owner's jobs "+c.where+".")
		}
	}
	if len(lines) == 0 {
		return "You have made no choice about this job or its owner."
	}
	return strings.Join(lines, "\n")
}
