package app

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/widget"

	"idlepool/agent"
	"idlepool/idle"
	jobpkg "idlepool/job"
	"idlepool/offers"
)

// This file is the Now window: what the donor does at this moment (the
// tray line and the decision in words, each running task with its pool,
// job, time and state, each pool's connection) and, below, the event log
// (agent.EventLog): what happened, newest first.

// NowRefresh is how often the Now window reads the engine's status and
// the event log again while it is open.
const NowRefresh = 2 * time.Second

// nowSplit is the share of the window's height the current state takes;
// the event log takes the rest.
const nowSplit = 0.68

// nowEvents is how many of the latest events the Events tab shows.
const nowEvents = 200

// nowColumns are the task table's column titles and widths.
var nowColumns = []struct {
	title string
	width float32
}{
	{"Pool", 110}, {"Job", 170}, {"Owner", 220}, {"Task", 50}, {"Time", 190}, {"State", 220},
}

// nowData is what one reading found: the engine's status, the owner's
// settings (for the tray line) and the latest events.
type nowData struct {
	status    agent.AgentStatus
	settings  idle.Settings
	today     energySum // the energy of the tasks finished today
	events    []agent.Event
	eventsErr error
	now       time.Time
}

// nowView is the Now window's content with the widgets tests read. Its
// methods run on Fyne's UI goroutine, except the reading, which runs on
// a goroutine of its own (tracked by loading) and hands its result back
// with do; the auto refresh's goroutine runs from start to stop.
type nowView struct {
	u       *UI
	content fyne.CanvasObject

	line     *widget.Label // the tray's status line
	decision *widget.Label // the policy's decision in words
	energy   *widget.Label // the power drawn now and today's energy
	pools    *widget.Label // one line per pool: its connection
	notices  *widget.Label // a clock off the pool's, tasks abandoned
	empty    *widget.Label // "No task runs now." when none does
	table    *widget.Table
	events   *widget.Label
	rows     [][]string // the table's cells, per task

	gen     int            // counts loads; a result of an older one is dropped
	loading sync.WaitGroup // the load goroutines, waited for by tests
	do      func(func())   // runs a load's result on the UI goroutine: fyne.Do
	refresher
}

// ShowNow shows the Now window: the tasks running on this machine with
// their pool, job and its owner, elapsed time against the job's time
// limit and state, the current decision in words, each pool's connection
// state, and the event log below. It reads the engine's status and the
// event log when it opens and every NowRefresh while open; closing it
// stops that. It must be called on Fyne's UI goroutine.
func (u *UI) ShowNow() fyne.Window {
	w, _ := u.showNow()
	return w
}

// showNow is ShowNow; it returns the view too when it made the window now
// (nil when the window was open already).
func (u *UI) showNow() (fyne.Window, *nowView) {
	var v *nowView
	w := u.window("now", "Now", fyne.NewSize(1020, 680), func(fyne.Window) fyne.CanvasObject {
		v = u.newNowView()
		return v.content
	}, func() { v.stop() })
	if v != nil { // made now
		v.load()
		v.start(NowRefresh)
	}
	return w, v
}

// newNowView builds the window's content; it reads nothing yet (load).
func (u *UI) newNowView() *nowView {
	v := &nowView{u: u, do: fyne.Do}
	wrapped := func(text string) *widget.Label {
		l := widget.NewLabel(text)
		l.Wrapping = fyne.TextWrapWord
		return l
	}
	bold := func(text string) *widget.Label {
		return widget.NewLabelWithStyle(text, fyne.TextAlignLeading, fyne.TextStyle{Bold: true})
	}
	v.line = widget.NewLabelWithStyle("Reading the status…", fyne.TextAlignLeading, fyne.TextStyle{Bold: true})
	v.line.Wrapping = fyne.TextWrapWord
	v.decision = wrapped("")
	v.energy = wrapped("")
	v.pools = wrapped("")
	v.notices = wrapped("")
	v.notices.Importance = widget.DangerImportance
	v.empty = widget.NewLabel("")
	v.table = widget.NewTable(
		func() (int, int) { return len(v.rows), len(nowColumns) },
		func() fyne.CanvasObject {
			l := widget.NewLabel("")
			l.Truncation = fyne.TextTruncateEllipsis
			return l
		},
		func(id widget.TableCellID, o fyne.CanvasObject) {
			l := o.(*widget.Label)
			if id.Row < len(v.rows) {
				l.SetText(v.rows[id.Row][id.Col])
			}
		},
	)
	widths := make([]float32, len(nowColumns))
	header := make([]fyne.CanvasObject, len(nowColumns))
	for i, c := range nowColumns {
		v.table.SetColumnWidth(i, c.width)
		widths[i] = c.width
		header[i] = bold(c.title)
	}
	headerRow := container.New(&columnsLayout{widths: widths}, header...)
	top := container.NewVBox(v.line, v.decision,
		widget.NewSeparator(), bold("What it costs"), v.energy,
		widget.NewSeparator(), bold("Pools"), v.pools, v.notices,
		widget.NewSeparator(), bold("Tasks on this machine"), headerRow, v.empty)
	now := container.NewBorder(top, nil, nil, nil, v.table)
	v.events = widget.NewLabel("Reading the event log…")
	v.events.Wrapping = fyne.TextWrapWord
	events := container.NewBorder(container.NewVBox(widget.NewSeparator(), bold("What happened (newest first)")), nil, nil, nil,
		container.NewVScroll(v.events))
	split := container.NewVSplit(now, events)
	split.Offset = nowSplit
	v.content = split
	return v
}

// start starts the auto refresh: load every every until stop.
func (v *nowView) start(every time.Duration) {
	ticks, stop := v.u.deps.ticks(every)
	v.autoRefresh(ticks, stop, v.load)
}

// stop ends the auto refresh and drops a load in progress.
func (v *nowView) stop() {
	v.refresher.stop()
	v.gen++
}

// load reads the engine's status (through the local API in the window
// process), the settings and the event log, off the UI goroutine.
func (v *nowView) load() {
	v.gen++
	gen := v.gen
	deps := v.u.deps
	v.loading.Add(1)
	go func() {
		defer v.loading.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		d := nowData{status: deps.Engine.Status(), settings: idle.Defaults(), now: deps.now()}
		if s, err := deps.Store.Settings(ctx); err == nil {
			d.settings = s
		}
		n := d.now.In(d.settings.Location())
		if tasks, err := deps.Store.Energy(ctx, time.Date(n.Year(), n.Month(), n.Day(), 0, 0, 0, 0, n.Location())); err == nil {
			p := pricesOf(d.settings)
			for _, t := range tasks {
				d.today.add(t, p)
			}
		}
		if deps.Events != nil {
			d.events, d.eventsErr = deps.Events(ctx, nowEvents)
		}
		v.do(func() {
			if gen == v.gen {
				v.show(d)
			}
		})
	}()
}

// show puts d into the widgets.
func (v *nowView) show(d nowData) {
	loc := d.settings.Location()
	st := d.status
	line := StatusOf(st, d.settings, d.now).Line
	v.line.SetText(line)
	v.decision.SetText(decisionWords(st, loc, d.now))
	switch {
	case strings.EqualFold("Decision: "+line, v.decision.Text):
		v.decision.Hide() // the line says it already
	case decidedBefore(st, d.settings, d.now):
		v.decision.Hide() // the reason it waited before compute now, which the line says is starting
	default:
		v.decision.Show()
	}

	v.energy.SetText(energyNowWords(st, d.today))

	var pools []string
	for _, p := range st.PoolsNow() {
		line := poolLabel(p) + ": " + p.Connection(loc, d.now)
		if p.Error == "" {
			line += fmt.Sprintf(" · %s, %s", plural(p.Slots, "worker"), plural(p.Running, "task"))
		}
		pools = append(pools, line)
	}
	if len(pools) == 0 {
		pools = []string{"No pool joined: join one in Settings."}
	}
	v.pools.SetText(strings.Join(pools, "\n"))
	notices := st.Notices(loc, d.now)
	var shown []string
	for _, n := range notices {
		if !strings.Contains(n, " unreachable since ") || strings.Contains(n, "abandoned") {
			shown = append(shown, capital(n)) // the pools' lines say which cannot be reached
		}
	}
	v.notices.SetText(strings.Join(shown, "\n"))
	if len(shown) == 0 {
		v.notices.Hide()
	} else {
		v.notices.Show()
	}

	v.rows = v.rows[:0]
	for _, t := range st.Running {
		v.rows = append(v.rows, taskRow(st, t, loc, d.now))
	}
	if len(v.rows) == 0 {
		v.empty.SetText("No task runs on this machine now.")
		v.empty.Show()
		v.table.Hide() // its empty columns' lines alone
	} else {
		v.empty.Hide()
		v.table.Show()
	}
	v.table.Refresh()

	switch {
	case v.u.deps.Events == nil:
		v.events.SetText("This app keeps no event log.")
	case d.eventsErr != nil:
		v.events.SetText("Cannot read the event log: " + d.eventsErr.Error())
	case len(d.events) == 0:
		v.events.SetText("Nothing has happened yet. Joining and leaving pools, pauses, a pool that cannot be reached, tasks handed back and results rejected show here.")
	default:
		lines := make([]string, 0, len(d.events))
		for i := len(d.events) - 1; i >= 0; i-- { // newest first
			lines = append(lines, d.events[i].Line(loc, d.now))
		}
		v.events.SetText(strings.Join(lines, "\n"))
	}
}

// decisionWords is the policy's decision for people: "Decision: computing
// on 4 of 8 cores (since 14:02)".
func decisionWords(st agent.AgentStatus, loc *time.Location, now time.Time) string {
	if st.Decision.State == "" {
		return "Decision: none yet (starting)"
	}
	s := "Decision: " + st.Decision.Reason
	if st.Suspended && !st.SuspendedSince.IsZero() && len(st.Running) > 0 {
		s += "; tasks suspended since " + clockText(st.SuspendedSince.In(loc), now.In(loc))
	}
	return s
}

// taskRow is a running task's cells: pool, job (its name and short ID),
// its owner (display name and short ID), task, time and state.
func taskRow(st agent.AgentStatus, t agent.RunningTask, loc *time.Location, now time.Time) []string {
	pool := t.Pool
	for _, p := range st.PoolsNow() {
		if p.URL == t.Pool {
			pool = poolLabel(p)
		}
	}
	if pool == t.Pool {
		pool = hostOf(pool)
	}
	job := offers.PlainLine(t.JobName, 40)
	if id, err := jobpkg.ParseDigest(t.Job); err == nil {
		job = jobText(id, t.JobName)
	} else if job == "" {
		job = t.Job[:min(len(t.Job), 12)]
	}
	owner := ""
	if t.Owner != "" {
		owner = offers.OwnerLabel(t.Owner, offers.PlainLine(t.OwnerName, 64))
	}
	var when string
	switch {
	case t.Started.IsZero():
		when = "starting"
	case t.TimeLimitMS > 0:
		when = durationWords(now.Sub(t.Started)) + " of " + durationWords(time.Duration(t.TimeLimitMS)*time.Millisecond) + " limit"
	default:
		when = durationWords(now.Sub(t.Started))
	}
	state := "computing"
	if t.Suspended {
		state = "suspended"
		if r := st.Decision.Reason; r != "" {
			state += ": " + strings.TrimPrefix(strings.TrimPrefix(r, "paused: "), "waiting: ")
		}
	}
	return []string{pool, job, owner, fmt.Sprint(t.Task), when, state}
}

// durationWords writes d for people to the second: "45 s", "3 min 12 s",
// "10 min", "1 h 05 min", "3 h".
func durationWords(d time.Duration) string {
	d = max(d, 0).Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%d s", int(d.Seconds()))
	case d < time.Hour && d%time.Minute == 0:
		return fmt.Sprintf("%d min", int(d.Minutes()))
	case d < time.Hour:
		return fmt.Sprintf("%d min %02d s", int(d.Minutes()), int(d.Seconds())%60)
	case d%time.Hour < time.Minute:
		return fmt.Sprintf("%d h", int(d.Hours()))
	}
	return fmt.Sprintf("%d h %02d min", int(d.Hours()), int(d.Minutes())%60)
}

// energyNowWords says what the donation draws now, what today's tasks
// used, and that none of it is part of a receipt.
func energyNowWords(st agent.AgentStatus, today energySum) string {
	var lines []string
	if st.Energy != nil {
		lines = append(lines, capital(st.Energy.Words())+".")
	} else {
		lines = append(lines, "This engine does not meter energy.")
	}
	if w := today.words(); w != "" {
		lines = append(lines, fmt.Sprintf("Today's finished tasks: %s.", w))
	}
	lines = append(lines, energyMeans)
	return strings.Join(lines, "\n")
}
