package app

import (
	"image/color"
	"math"
	"slices"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/canvas"
	"fyne.io/fyne/v2/driver/desktop"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"

	"idlepool/idle"
)

// This file is the settings window's weekly hours grid: 7 rows (Monday to
// Sunday) of 24 one-hour cells that a person paints by pressing and
// dragging, and its conversion to and from idle.Schedule.

// hourGrid is which hours of the week are allowed: [row][hour], row 0 is
// Monday and row 6 Sunday, hour 0 is 00:00-01:00.
type hourGrid [7][24]bool

// rowDays are the weekdays of the grid's rows, Monday first.
var rowDays = [7]time.Weekday{time.Monday, time.Tuesday, time.Wednesday, time.Thursday, time.Friday, time.Saturday, time.Sunday}

// gridFromSchedule returns the hours s allows, each hour rounded to
// whole: an hour is on when s allows at least half of its minutes. An
// empty s (any time) is every hour.
func gridFromSchedule(s idle.Schedule) hourGrid {
	var g hourGrid
	// 2024-01-01 is a Monday; UTC has no daylight-saving changes, so every
	// day of that week has 24 hours on the wall clock.
	monday := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	for row := range g {
		for h := range g[row] {
			start := monday.AddDate(0, 0, row).Add(time.Duration(h) * time.Hour)
			n := 0
			for m := range 60 {
				if s.Allows(start.Add(time.Duration(m)*time.Minute), time.UTC) {
					n++
				}
			}
			g[row][h] = n >= 30
		}
	}
	return g
}

// full reports whether every hour is on.
func (g hourGrid) full() bool {
	for _, row := range g {
		for _, on := range row {
			if !on {
				return false
			}
		}
	}
	return true
}

// empty reports whether no hour is on.
func (g hourGrid) empty() bool {
	for _, row := range g {
		if slices.Contains(row[:], true) {
			return false
		}
	}
	return true
}

// schedule returns the windows of g: a run of hours ending at midnight
// that goes on into the next day's first hours is one window crossing
// midnight ("Fri 22:00-07:00"), and runs with the same hours on several
// days share one window ("Mon-Fri 22:00-07:00"). A full grid is the empty
// Schedule (any time); an empty grid is also the empty Schedule, so the
// caller must refuse it first (a Schedule cannot say "never").
func (g hourGrid) schedule() idle.Schedule {
	if g.full() || g.empty() {
		return nil
	}
	type run struct{ start, end int } // hours, end exclusive, 1..24
	runs := [7][]run{}
	for row := range g {
		for h := 0; h < 24; {
			if !g[row][h] {
				h++
				continue
			}
			e := h
			for e < 24 && g[row][e] {
				e++
			}
			runs[row] = append(runs[row], run{h, e})
			h = e
		}
	}
	// Join a run to midnight with the next day's run from midnight when
	// the result reads as one window crossing midnight: its end must be
	// before its start (equal would read as empty), and neither may be a whole day.
	type win struct{ start, end int }
	days := map[win]idle.Weekdays{}
	var order []win
	add := func(row int, w win) {
		if _, ok := days[w]; !ok {
			order = append(order, w)
		}
		days[w] |= 1 << rowDays[row]
	}
	// joined[row] is true when row's last run joins the next day's first.
	var joined [7]bool
	for row := range runs {
		next := (row + 1) % 7
		if len(runs[row]) == 0 || len(runs[next]) == 0 {
			continue
		}
		r, n := runs[row][len(runs[row])-1], runs[next][0]
		joined[row] = r.end == 24 && r.start > 0 && n.start == 0 && n.end < 24 && n.end < r.start
	}
	for row := range runs {
		prev := (row + 6) % 7
		for i, r := range runs[row] {
			switch {
			case i == 0 && joined[prev]:
				// part of the previous day's window
			case i == len(runs[row])-1 && joined[row]:
				add(row, win{r.start, runs[(row+1)%7][0].end})
			default:
				add(row, win(r))
			}
		}
	}
	s := make(idle.Schedule, 0, len(order))
	for _, w := range order {
		s = append(s, idle.Window{Days: days[w], Start: idle.Clock(w.start * 60), End: idle.Clock(w.end * 60)})
	}
	return s
}

// Geometry of the hours grid widget, in Fyne units.
const (
	hoursLabelWidth  = 40 // the day names on the left
	hoursHeaderH     = 18 // the hour numbers on top
	hoursMinCellW    = 18
	hoursMinCellH    = 22
	hoursCellPadding = 1
)

// hoursGrid is a widget that shows the weekly allowed hours as 7 rows of
// 24 cells and lets a person paint them: pressing a cell and dragging
// paints the rectangle of days and hours from the pressed cell to the one
// under the pointer (as a spreadsheet selects), on when the first cell
// was off and off when it was on; moving back shrinks the rectangle and
// gives the cells it leaves their colour back; tapping a cell toggles
// it. An outline marks the cell of now (the clock given by SetClock). It
// must be used on Fyne's UI goroutine only.
type hoursGrid struct {
	widget.BaseWidget

	// OnChanged, if set, is called after the person changes a cell.
	OnChanged func()

	cells    hourGrid
	disabled bool

	stroke      bool     // a press or drag is painting
	paint       bool     // what the stroke paints: on or off
	anchor      [2]int   // the stroke's first cell: row, hour
	before      hourGrid // the cells when the stroke began
	mouseDown   bool     // MouseDown began this click: its Tapped is not a toggle
	changedEver bool

	now func() time.Time // nil: no marker
	loc *time.Location   // the zone of the hours
}

// SetClock makes the grid mark the cell of now() in loc (the schedule's
// zone); a nil now hides the marker. The marker moves when the grid is
// refreshed.
func (g *hoursGrid) SetClock(now func() time.Time, loc *time.Location) {
	g.now, g.loc = now, loc
	g.Refresh()
}

// nowCell returns the row and hour of now, and false without a clock.
func (g *hoursGrid) nowCell() (row, hour int, ok bool) {
	if g.now == nil {
		return 0, 0, false
	}
	loc := g.loc
	if loc == nil {
		loc = time.Local
	}
	t := g.now().In(loc)
	return (int(t.Weekday()) + 6) % 7, t.Hour(), true
}

var (
	_ fyne.Widget       = (*hoursGrid)(nil)
	_ fyne.Draggable    = (*hoursGrid)(nil)
	_ fyne.Tappable     = (*hoursGrid)(nil)
	_ desktop.Mouseable = (*hoursGrid)(nil)
)

// newHoursGrid returns a grid showing g.
func newHoursGrid(g hourGrid) *hoursGrid {
	w := &hoursGrid{cells: g}
	w.ExtendBaseWidget(w)
	return w
}

// Grid returns the hours painted now.
func (g *hoursGrid) Grid() hourGrid { return g.cells }

// SetGrid shows c in place of the hours painted; it does not call
// OnChanged.
func (g *hoursGrid) SetGrid(c hourGrid) {
	g.cells = c
	g.Refresh()
}

// Changed reports whether the person changed a cell since the grid was
// made.
func (g *hoursGrid) Changed() bool { return g.changedEver }

// SetDisabled turns painting off (and greys the cells) or on again.
func (g *hoursGrid) SetDisabled(d bool) {
	g.disabled = d
	g.stroke = false
	g.Refresh()
}

// cellAt returns the cell under p (relative to the widget); ok is false
// outside the cells.
func (g *hoursGrid) cellAt(p fyne.Position) (row, hour int, ok bool) {
	cw, ch := g.cellSize()
	x, y := p.X-hoursLabelWidth, p.Y-hoursHeaderH
	if x < 0 || y < 0 || cw <= 0 || ch <= 0 {
		return 0, 0, false
	}
	hour, row = int(x/cw), int(y/ch)
	if hour >= 24 || row >= 7 {
		return 0, 0, false
	}
	return row, hour, true
}

// cellSize is the size of one cell at the widget's current size.
func (g *hoursGrid) cellSize() (w, h float32) {
	s := g.Size()
	return (s.Width - hoursLabelWidth) / 24, (s.Height - hoursHeaderH) / 7
}

// cellPos is the top-left corner of a cell.
func (g *hoursGrid) cellPos(row, hour int) fyne.Position {
	cw, ch := g.cellSize()
	return fyne.NewPos(hoursLabelWidth+float32(hour)*cw, hoursHeaderH+float32(row)*ch)
}

// begin starts a stroke at p: its cell decides what the stroke paints,
// and is painted.
func (g *hoursGrid) begin(p fyne.Position) bool {
	row, hour, ok := g.cellAt(p)
	if !ok {
		return false
	}
	g.stroke = true
	g.paint = !g.cells[row][hour]
	g.anchor, g.before = [2]int{row, hour}, g.cells
	g.paintTo(row, hour)
	return true
}

// clampedCell returns the cell under p, or the nearest cell of the grid
// when p is outside it: a rectangle dragged past an edge stops there.
func (g *hoursGrid) clampedCell(p fyne.Position) (row, hour int) {
	cw, ch := g.cellSize()
	if cw <= 0 || ch <= 0 {
		return g.anchor[0], g.anchor[1]
	}
	hour = int(math.Floor(float64((p.X - hoursLabelWidth) / cw)))
	row = int(math.Floor(float64((p.Y - hoursHeaderH) / ch)))
	return min(max(row, 0), 6), min(max(hour, 0), 23)
}

// paintTo paints the rectangle from the stroke's first cell to row and
// hour over the cells as they were when the stroke began.
func (g *hoursGrid) paintTo(row, hour int) {
	c := g.before
	for r := min(row, g.anchor[0]); r <= max(row, g.anchor[0]); r++ {
		for h := min(hour, g.anchor[1]); h <= max(hour, g.anchor[1]); h++ {
			c[r][h] = g.paint
		}
	}
	if c != g.cells {
		g.cells = c
		g.changed()
	}
}

func (g *hoursGrid) changed() {
	g.changedEver = true
	g.Refresh()
	if g.OnChanged != nil {
		g.OnChanged()
	}
}

// MouseDown starts painting at the pressed cell (desktop.Mouseable).
func (g *hoursGrid) MouseDown(ev *desktop.MouseEvent) {
	if g.disabled || ev.Button != desktop.MouseButtonPrimary {
		return
	}
	g.mouseDown = g.begin(ev.Position)
}

// MouseUp ends painting (desktop.Mouseable).
func (g *hoursGrid) MouseUp(*desktop.MouseEvent) { g.stroke = false }

// Dragged paints the rectangle from the stroke's first cell to the cell
// under the pointer (fyne.Draggable). ev.Position is where the pointer is now and
// ev.Dragged how far it moved since the last event, as Fyne's desktop
// driver reports them; a drag without a MouseDown first (a touch screen)
// starts its stroke where it began.
func (g *hoursGrid) Dragged(ev *fyne.DragEvent) {
	if g.disabled {
		return
	}
	prev := ev.Position.Subtract(ev.Dragged)
	if !g.stroke && !g.begin(prev) && !g.begin(ev.Position) {
		return
	}
	g.paintTo(g.clampedCell(ev.Position))
}

// DragEnd ends painting (fyne.Draggable).
func (g *hoursGrid) DragEnd() {
	g.stroke = false
	g.mouseDown = false
}

// Tapped toggles the tapped cell, unless MouseDown painted it already
// (fyne.Tappable).
func (g *hoursGrid) Tapped(ev *fyne.PointEvent) {
	if g.mouseDown {
		g.mouseDown = false
		return
	}
	if g.disabled {
		return
	}
	if g.begin(ev.Position) {
		g.stroke = false
	}
}

// MinSize is big enough for readable cells.
func (g *hoursGrid) MinSize() fyne.Size {
	return fyne.NewSize(hoursLabelWidth+24*hoursMinCellW, hoursHeaderH+7*hoursMinCellH)
}

// CreateRenderer implements fyne.Widget.
func (g *hoursGrid) CreateRenderer() fyne.WidgetRenderer {
	r := &hoursRenderer{g: g}
	for row := range g.cells {
		for range g.cells[row] {
			r.cells = append(r.cells, canvas.NewRectangle(color.Transparent))
		}
		name := rowDays[row].String()[:3]
		r.days = append(r.days, canvas.NewText(name, theme.Color(theme.ColorNameForeground)))
	}
	for h := 0; h < 24; h += 3 {
		t := canvas.NewText(twoDigits(h), theme.Color(theme.ColorNameForeground))
		t.TextSize = theme.CaptionTextSize()
		r.hours = append(r.hours, t)
	}
	for _, o := range r.cells {
		r.objects = append(r.objects, o)
	}
	for _, o := range r.days {
		r.objects = append(r.objects, o)
	}
	for _, o := range r.hours {
		r.objects = append(r.objects, o)
	}
	r.marker = canvas.NewRectangle(color.Transparent)
	r.marker.StrokeWidth = 2
	r.objects = append(r.objects, r.marker)
	r.Refresh()
	return r
}

// disabledCellFade is how far a painted cell of a disabled grid fades
// from the primary colour towards the background: 0 not at all, 1 gone.
const disabledCellFade = 0.35

// blend mixes a into b: share 0 gives a, 1 gives b. Alpha is a's.
func blend(a, b color.Color, share float64) color.Color {
	ar, ag, ab, aa := a.RGBA()
	br, bg, bb, _ := b.RGBA()
	mix := func(x, y uint32) uint8 {
		return uint8((float64(x)*(1-share) + float64(y)*share) / 0x101)
	}
	return color.NRGBA{R: mix(ar, br), G: mix(ag, bg), B: mix(ab, bb), A: uint8(aa / 0x101)}
}

func twoDigits(h int) string { return string([]byte{byte('0' + h/10), byte('0' + h%10)}) }

type hoursRenderer struct {
	g       *hoursGrid
	cells   []*canvas.Rectangle // row-major
	days    []*canvas.Text
	hours   []*canvas.Text    // every third hour
	marker  *canvas.Rectangle // outlines the cell of now
	objects []fyne.CanvasObject
}

func (r *hoursRenderer) Layout(fyne.Size) {
	cw, ch := r.g.cellSize()
	for row := range 7 {
		for h := range 24 {
			c := r.cells[row*24+h]
			c.Move(r.g.cellPos(row, h).AddXY(hoursCellPadding, hoursCellPadding))
			c.Resize(fyne.NewSize(max(cw-2*hoursCellPadding, 1), max(ch-2*hoursCellPadding, 1)))
		}
		d := r.days[row]
		ts := d.MinSize()
		d.Move(fyne.NewPos(0, hoursHeaderH+float32(row)*ch+(ch-ts.Height)/2))
	}
	for i, t := range r.hours {
		t.Move(fyne.NewPos(hoursLabelWidth+float32(i*3)*cw, 0))
	}
	if row, h, ok := r.g.nowCell(); ok {
		r.marker.Move(r.g.cellPos(row, h))
		r.marker.Resize(fyne.NewSize(cw, ch))
		r.marker.Show()
	} else {
		r.marker.Hide()
	}
}

func (r *hoursRenderer) MinSize() fyne.Size { return r.g.MinSize() }

func (r *hoursRenderer) Refresh() {
	on, off := theme.Color(theme.ColorNamePrimary), theme.Color(theme.ColorNameInputBackground)
	if r.g.disabled {
		// Greyed, a painted cell still reads as painted: the primary
		// colour half faded into the background ("Any time" shows every
		// hour filled), where the disabled grey of the theme is barely
		// apart from the background on the dark theme and the grid
		// looked empty.
		on = blend(on, theme.Color(theme.ColorNameBackground), disabledCellFade)
		off = theme.Color(theme.ColorNameDisabledButton)
	}
	for row := range 7 {
		for h := range 24 {
			c := r.cells[row*24+h]
			c.FillColor = off
			if r.g.cells[row][h] {
				c.FillColor = on
			}
			c.Refresh()
		}
	}
	fg := theme.Color(theme.ColorNameForeground)
	r.marker.StrokeColor = fg
	r.marker.Refresh()
	for _, t := range append(slices.Clone(r.days), r.hours...) {
		t.Color = fg
		t.Refresh()
	}
	r.Layout(r.g.Size())
}

func (r *hoursRenderer) Objects() []fyne.CanvasObject { return r.objects }

func (r *hoursRenderer) Destroy() {}
