package app

import (
	"image/color"
	"math"
	"math/rand/v2"
	"testing"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/driver/desktop"
	"fyne.io/fyne/v2/test"
	"fyne.io/fyne/v2/theme"

	"idlepool/idle"
)

// cellCentre is the centre of a cell of g, relative to g.
func cellCentre(g *hoursGrid, row, hour int) fyne.Position {
	cw, ch := g.cellSize()
	return g.cellPos(row, hour).AddXY(cw/2, ch/2)
}

// paint presses the primary button on cell from, drags through the cells
// in via (in steps of half a cell, as a moving mouse reports) and
// releases, as Fyne's desktop driver delivers the events: MouseDown, then
// Dragged with the pointer's current position and the distance moved
// since the last event, then MouseUp and DragEnd; without via (a click)
// MouseDown, MouseUp and Tapped.
func paint(g *hoursGrid, from [2]int, via ...[2]int) {
	pos := cellCentre(g, from[0], from[1])
	g.MouseDown(&desktop.MouseEvent{PointEvent: fyne.PointEvent{Position: pos}, Button: desktop.MouseButtonPrimary})
	for _, c := range via {
		to := cellCentre(g, c[0], c[1])
		for pos != to {
			next := to
			if d := to.Subtract(pos); d.X*d.X+d.Y*d.Y > 81 { // more than 9 units: step
				next = pos.Add(fyne.NewDelta(d.X/2, d.Y/2))
			}
			g.Dragged(&fyne.DragEvent{PointEvent: fyne.PointEvent{Position: next}, Dragged: fyne.NewDelta(next.X-pos.X, next.Y-pos.Y)})
			pos = next
		}
	}
	g.MouseUp(&desktop.MouseEvent{PointEvent: fyne.PointEvent{Position: pos}, Button: desktop.MouseButtonPrimary})
	if len(via) > 0 {
		g.DragEnd()
	} else {
		g.Tapped(&fyne.PointEvent{Position: pos})
	}
}

func newTestGrid(t *testing.T, s idle.Schedule) *hoursGrid {
	t.Helper()
	testApp(t)
	g := newHoursGrid(gridFromSchedule(s))
	w := test.NewTempWindow(t, g)
	w.Resize(g.MinSize().AddWidthHeight(40, 40))
	g.Resize(g.MinSize())
	return g
}

func mustSchedule(t *testing.T, text string) idle.Schedule {
	t.Helper()
	s, err := idle.ParseSchedule(text)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestHoursGridPaint(t *testing.T) {
	const mon, tue, wed, sun = 0, 1, 2, 6
	tests := []struct {
		name  string
		start string // the schedule the grid shows first
		paint func(g *hoursGrid)
		want  string // the schedule after painting
	}{
		{
			name:  "drag along a row paints on",
			start: "Sat 00:00-01:00",
			paint: func(g *hoursGrid) { paint(g, [2]int{mon, 9}, [2]int{mon, 17}) },
			want:  "Mon 09:00-18:00; Sat 00:00-01:00",
		},
		{
			name:  "drag down a column paints every day",
			start: "Sat 00:00-01:00",
			paint: func(g *hoursGrid) { paint(g, [2]int{mon, 3}, [2]int{sun, 3}) },
			want:  "daily 03:00-04:00; Sat 00:00-01:00",
		},
		{
			name:  "a drag that starts on a painted cell erases",
			start: "Mon-Fri 09:00-18:00",
			paint: func(g *hoursGrid) { paint(g, [2]int{tue, 12}, [2]int{tue, 23}) },
			want:  "Mon,Wed-Fri 09:00-18:00; Tue 09:00-12:00",
		},
		{
			name:  "an erasing drag leaves cells that were off alone",
			start: "Mon 10:00-11:00; Wed 00:00-01:00",
			paint: func(g *hoursGrid) { paint(g, [2]int{mon, 10}, [2]int{wed, 10}) },
			want:  "Wed 00:00-01:00",
		},
		{
			name:  "a fast move paints every cell it passes over",
			start: "Sun 12:00-13:00",
			paint: func(g *hoursGrid) {
				from, to := cellCentre(g, wed, 1), cellCentre(g, wed, 20)
				g.MouseDown(&desktop.MouseEvent{PointEvent: fyne.PointEvent{Position: from}, Button: desktop.MouseButtonPrimary})
				g.Dragged(&fyne.DragEvent{PointEvent: fyne.PointEvent{Position: to}, Dragged: fyne.NewDelta(to.X-from.X, 0)})
				g.MouseUp(&desktop.MouseEvent{PointEvent: fyne.PointEvent{Position: to}, Button: desktop.MouseButtonPrimary})
				g.DragEnd()
			},
			want: "Wed 01:00-21:00; Sun 12:00-13:00",
		},
		{
			name:  "a press without moving paints one cell",
			start: "Sun 12:00-13:00",
			paint: func(g *hoursGrid) { paint(g, [2]int{wed, 5}) },
			want:  "Wed 05:00-06:00; Sun 12:00-13:00",
		},
		{
			name:  "nights painted across midnight are one window",
			start: "Sun 12:00-13:00",
			paint: func(g *hoursGrid) {
				for row := mon; row <= sun; row++ {
					paint(g, [2]int{row, 22}, [2]int{row, 23})
					paint(g, [2]int{row, 0}, [2]int{row, 6})
				}
				paint(g, [2]int{sun, 12})
			},
			want: "daily 22:00-07:00",
		},
		{
			name:  "painting every hour is any time",
			start: "Mon-Sat",
			paint: func(g *hoursGrid) { paint(g, [2]int{sun, 0}, [2]int{sun, 23}) },
			want:  "always",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := newTestGrid(t, mustSchedule(t, tc.start))
			changes := 0
			g.OnChanged = func() { changes++ }
			tc.paint(g)
			if got := g.Grid().schedule().String(); got != tc.want {
				t.Errorf("schedule = %q, want %q", got, tc.want)
			}
			if !g.Changed() || changes == 0 {
				t.Errorf("Changed() = %v after %d OnChanged calls, want true and some", g.Changed(), changes)
			}
		})
	}
}

func TestHoursGridTapAndDisabled(t *testing.T) {
	g := newTestGrid(t, mustSchedule(t, "Mon 00:00-01:00"))
	test.TapAt(g, cellCentre(g, 1, 4))
	if got, want := g.Grid().schedule().String(), "Mon 00:00-01:00; Tue 04:00-05:00"; got != want {
		t.Errorf("after a tap on Tue 04: %q, want %q", got, want)
	}
	test.TapAt(g, cellCentre(g, 1, 4))
	if got, want := g.Grid().schedule().String(), "Mon 00:00-01:00"; got != want {
		t.Errorf("after a second tap: %q, want %q", got, want)
	}

	// A click with the desktop driver is MouseDown, MouseUp, Tapped: one
	// toggle, not two.
	paint(g, [2]int{2, 2})
	if got, want := g.Grid().schedule().String(), "Mon 00:00-01:00; Wed 02:00-03:00"; got != want {
		t.Errorf("after a click: %q, want %q", got, want)
	}

	g.SetDisabled(true)
	paint(g, [2]int{3, 0}, [2]int{3, 23})
	test.TapAt(g, cellCentre(g, 4, 4))
	if got, want := g.Grid().schedule().String(), "Mon 00:00-01:00; Wed 02:00-03:00"; got != want {
		t.Errorf("painting while disabled changed the grid: %q, want %q", got, want)
	}

	// A drag that leaves the grid paints only cells inside it.
	g.SetDisabled(false)
	from := cellCentre(g, 0, 23)
	g.Dragged(&fyne.DragEvent{PointEvent: fyne.PointEvent{Position: from.AddXY(200, 0)}, Dragged: fyne.NewDelta(200, 0)})
	g.DragEnd()
	if got, want := g.Grid().schedule().String(), "Mon 00:00-01:00; Mon 23:00-24:00; Wed 02:00-03:00"; got != want {
		t.Errorf("after a touch drag off the right edge: %q, want %q", got, want)
	}
}

// TestHourGridRoundTrip checks that any painted grid survives the trip to
// an idle.Schedule and back, and that the schedule is valid.
func TestHourGridRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		var g hourGrid
		density := r.Float64()
		for row := range g {
			for h := range g[row] {
				g[row][h] = r.Float64() < density
			}
		}
		if i%3 == 0 { // blocks of hours, as people paint them
			for row := range g {
				a, b := r.IntN(24), r.IntN(24)
				for h := range g[row] {
					g[row][h] = (h >= a) != (h >= b)
				}
			}
		}
		s := g.schedule()
		if g.empty() || g.full() {
			if s != nil {
				t.Fatalf("grid %d: empty or full grid gave %q, want nil", i, s)
			}
			continue
		}
		if err := (idle.Settings{Schedule: s, MemoryShare: 0.5, MaxOtherCPUShare: 0.5}).Validate(); err != nil {
			t.Fatalf("grid %d: schedule %q: %v", i, s, err)
		}
		parsed, err := idle.ParseSchedule(s.String())
		if err != nil {
			t.Fatalf("grid %d: schedule %q does not parse: %v", i, s, err)
		}
		if back := gridFromSchedule(parsed); back != g {
			t.Fatalf("grid %d: schedule %q reads back as a different grid", i, s)
		}
	}
}

func TestGridFromSchedule(t *testing.T) {
	tests := []struct {
		text string
		want string
	}{
		{"always", "always"},
		{"Mon-Fri 22:00-07:00", "Mon-Fri 22:00-07:00"},
		{"Sat,Sun", "Sat,Sun 00:00-24:00"},
		{"Sun 23:00-02:00", "Sun 23:00-02:00"},
		// Part hours round to the nearest whole hour.
		{"Mon 09:20-17:45", "Mon 09:00-18:00"},
		{"Mon 09:40-10:10", "(empty)"}, // no hour is half allowed
	}
	for _, tc := range tests {
		t.Run(tc.text, func(t *testing.T) {
			g := gridFromSchedule(mustSchedule(t, tc.text))
			got := g.schedule().String()
			if g.empty() {
				got = "(empty)"
			}
			if got != tc.want {
				t.Errorf("grid of %q = %q, want %q", tc.text, got, tc.want)
			}
		})
	}
}

// variantTheme is the default theme in one variant, dark or light,
// whatever the app's settings say.
type variantTheme struct {
	fyne.Theme
	variant fyne.ThemeVariant
}

func (t variantTheme) Color(n fyne.ThemeColorName, _ fyne.ThemeVariant) color.Color {
	return t.Theme.Color(n, t.variant)
}

// colourDistance is the Euclidean distance of a and b in 8-bit RGB.
func colourDistance(a, b color.Color) float64 {
	ar, ag, ab, _ := a.RGBA()
	br, bg, bb, _ := b.RGBA()
	d := func(x, y uint32) float64 { return (float64(x) - float64(y)) / 0x101 }
	return math.Sqrt(d(ar, br)*d(ar, br) + d(ag, bg)*d(ag, bg) + d(ab, bb)*d(ab, bb))
}

// TestHoursAnyTimeShowsEveryHour: with "Any time" ticked the settings
// window's grid shows every hour filled, greyed but in the colour of a
// painted hour (nearer the primary colour than an empty cell's, and
// standing out from the background), on the dark and the light theme;
// the theme's disabled grey drew it as good as empty.
func TestHoursAnyTimeShowsEveryHour(t *testing.T) {
	for _, tc := range []struct {
		name    string
		variant fyne.ThemeVariant
	}{{"dark", theme.VariantDark}, {"light", theme.VariantLight}} {
		t.Run(tc.name, func(t *testing.T) {
			fx := newSettingsFixture(t, nil) // the defaults: any time
			th := variantTheme{theme.DefaultTheme(), tc.variant}
			fyne.CurrentApp().Settings().SetTheme(th)
			fx.showTab("Hours")
			f := fx.form
			if !f.anyTime.Checked || !f.hours.Grid().full() || !f.hours.disabled {
				t.Fatalf("Any time %v, grid full %v, disabled %v; want all three", f.anyTime.Checked, f.hours.Grid().full(), f.hours.disabled)
			}
			r := test.WidgetRenderer(f.hours).(*hoursRenderer)
			r.Refresh()
			primary, bg := th.Color(theme.ColorNamePrimary, 0), th.Color(theme.ColorNameBackground, 0)
			empty := newHoursGrid(hourGrid{})
			empty.SetDisabled(true)
			emptyFill := test.WidgetRenderer(empty).(*hoursRenderer).cells[0].FillColor
			for i, c := range r.cells {
				fill := c.FillColor
				if toPrimary, toEmpty := colourDistance(fill, primary), colourDistance(fill, emptyFill); toPrimary >= toEmpty {
					t.Fatalf("cell %d drawn %v: %.0f from the primary colour, %.0f from an empty cell's; want it to read as painted", i, fill, toPrimary, toEmpty)
				}
				if k := contrast(fill, bg); k < 1.5 {
					t.Fatalf("cell %d drawn %v: contrast %.2f:1 with the background, want at least 1.5:1", i, fill, k)
				}
			}
			// Unticked, the cells are painted again in full colour, and
			// the painting before Any time comes back (none here).
			test.Tap(f.anyTime)
			if f.hours.disabled || !f.hours.Grid().empty() {
				t.Errorf("after unticking: disabled %v, grid empty %v", f.hours.disabled, f.hours.Grid().empty())
			}
		})
	}
}
