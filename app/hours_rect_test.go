package app

import (
	"testing"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/driver/desktop"
	"fyne.io/fyne/v2/test"
)

// TestHoursGridPaintsRectangles: a drag paints the rectangle of days and
// hours from the pressed cell to the cell under the pointer, whatever path
// the pointer took, and moving back shrinks it to what it covers at the
// release.
func TestHoursGridPaintsRectangles(t *testing.T) {
	const mon, tue, wed, thu, fri, sun = 0, 1, 2, 3, 4, 6
	tests := []struct {
		name  string
		start string
		paint func(g *hoursGrid)
		want  string
	}{
		{
			name:  "a diagonal drag paints the whole block",
			start: "Sun 12:00-13:00",
			paint: func(g *hoursGrid) { paint(g, [2]int{mon, 9}, [2]int{fri, 16}) },
			want:  "Mon-Fri 09:00-17:00; Sun 12:00-13:00",
		},
		{
			name:  "dragged up and to the left from the press",
			start: "Sun 12:00-13:00",
			paint: func(g *hoursGrid) { paint(g, [2]int{thu, 20}, [2]int{tue, 18}) },
			want:  "Tue-Thu 18:00-21:00; Sun 12:00-13:00",
		},
		{
			name:  "moving back shrinks the block and restores what it left",
			start: "Wed 22:00-23:00",
			paint: func(g *hoursGrid) { paint(g, [2]int{mon, 20}, [2]int{sun, 23}, [2]int{tue, 21}) },
			want:  "Mon,Tue 20:00-22:00; Wed 22:00-23:00",
		},
		{
			name:  "a block started on a painted cell erases it",
			start: "Mon-Fri 08:00-18:00",
			paint: func(g *hoursGrid) { paint(g, [2]int{tue, 12}, [2]int{thu, 13}) },
			want:  "Mon,Fri 08:00-18:00; Tue-Thu 08:00-12:00; Tue-Thu 14:00-18:00",
		},
		{
			name:  "a block dragged past the edge stops at it",
			start: "Sun 12:00-13:00",
			paint: func(g *hoursGrid) {
				from := cellCentre(g, wed, 21)
				to := from.AddXY(500, 0)
				g.MouseDown(&desktop.MouseEvent{PointEvent: fyne.PointEvent{Position: from}, Button: desktop.MouseButtonPrimary})
				g.Dragged(&fyne.DragEvent{PointEvent: fyne.PointEvent{Position: to}, Dragged: fyne.NewDelta(500, 0)})
				g.MouseUp(&desktop.MouseEvent{PointEvent: fyne.PointEvent{Position: to}, Button: desktop.MouseButtonPrimary})
				g.DragEnd()
			},
			want: "Wed 21:00-24:00; Sun 12:00-13:00",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := newTestGrid(t, mustSchedule(t, tc.start))
			tc.paint(g)
			if got := g.Grid().schedule().String(); got != tc.want {
				t.Errorf("schedule = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestHoursGridMarksNow: the cell of the injected clock's day and hour, in
// the schedule's zone, is outlined; without a clock there is no outline.
func TestHoursGridMarksNow(t *testing.T) {
	g := newTestGrid(t, nil)
	r := test.WidgetRenderer(g).(*hoursRenderer)
	if r.marker.Visible() {
		t.Error("a marker without a clock")
	}
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Skipf("no time zone data: %v", err)
	}
	// Thursday 23:30 in UTC is Friday 00:30 in Berlin.
	now := time.Date(2026, 3, 12, 23, 30, 0, 0, time.UTC)
	g.SetClock(func() time.Time { return now }, berlin)
	if !r.marker.Visible() {
		t.Fatal("no marker with a clock")
	}
	if got, want := r.marker.Position(), g.cellPos(4, 0); got != want {
		t.Errorf("marker at %v, want Fri 00 at %v", got, want)
	}
	cw, ch := g.cellSize()
	if got := r.marker.Size(); got != fyne.NewSize(cw, ch) {
		t.Errorf("marker size %v, want a cell's %v×%v", got, cw, ch)
	}
	if _, _, _, a := r.marker.FillColor.RGBA(); a != 0 || r.marker.StrokeWidth <= 0 {
		t.Errorf("the marker hides the cell: fill alpha %d, stroke %g", a, r.marker.StrokeWidth)
	}
	now = now.Add(25 * time.Hour) // Saturday 01:30 in Berlin
	g.Refresh()
	if got, want := r.marker.Position(), g.cellPos(5, 1); got != want {
		t.Errorf("an hour and a day later the marker is at %v, want Sat 01 at %v", got, want)
	}
}
