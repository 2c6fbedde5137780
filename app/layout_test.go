package app

import (
	"context"
	"fmt"
	"image/color"
	"math"
	"strings"
	"testing"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/test"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"
	"github.com/google/go-cmp/cmp"

	"idlepool/store"
)

// These tests check what a person sees at a window's usual size: text
// that wraps rather than runs past the edge, columns that fit, hints that
// can be read.

// walkDrawn calls fn for o and everything drawn under it: the children of
// containers and scrolls and the objects of widgets' renderers.
func walkDrawn(o fyne.CanvasObject, fn func(fyne.CanvasObject)) {
	fn(o)
	switch o := o.(type) {
	case *fyne.Container:
		for _, c := range o.Objects {
			walkDrawn(c, fn)
		}
	case fyne.Widget:
		for _, c := range test.WidgetRenderer(o).Objects() {
			walkDrawn(c, fn)
		}
	}
}

// labelsReading returns the visible labels under o that read text.
func labelsReading(o fyne.CanvasObject, text string) []*widget.Label {
	var out []*widget.Label
	walkDrawn(o, func(o fyne.CanvasObject) {
		if l, ok := o.(*widget.Label); ok && l.Visible() && l.Text == text {
			out = append(out, l)
		}
	})
	return out
}

// fitsWhole reports whether l is tall enough for its text at its width.
func fitsWhole(l *widget.Label) bool { return l.MinSize().Height <= l.Size().Height+0.5 }

// luminance is the relative luminance of c (WCAG 2).
func luminance(c color.Color) float64 {
	r, g, b, _ := c.RGBA()
	lin := func(v uint32) float64 {
		s := float64(v) / 0xffff
		if s <= 0.03928 {
			return s / 12.92
		}
		return math.Pow((s+0.055)/1.055, 2.4)
	}
	return 0.2126*lin(r) + 0.7152*lin(g) + 0.0722*lin(b)
}

// contrast is the WCAG contrast ratio of a and b, 1 to 21.
func contrast(a, b color.Color) float64 {
	la, lb := luminance(a), luminance(b)
	return (max(la, lb) + 0.05) / (min(la, lb) + 0.05)
}

// TestHintReadable: hints wrap, and their colour stands out from the
// background on the dark and the light theme, as the disabled colour of
// a LowImportance label does not on the dark one.
func TestHintReadable(t *testing.T) {
	h := hint("Paint the hours it may compute.")
	if h.Wrapping != fyne.TextWrapWord {
		t.Errorf("hint wrapping %v, want words", h.Wrapping)
	}
	setHint(h, "Joining a pool is not available.")
	if h.String() != "Joining a pool is not available." {
		t.Errorf("hint after setHint reads %q", h.String())
	}
	th := theme.DefaultTheme()
	for _, tc := range []struct {
		name    string
		variant fyne.ThemeVariant
	}{{"dark", theme.VariantDark}, {"light", theme.VariantLight}} {
		t.Run(tc.name, func(t *testing.T) {
			bg := th.Color(theme.ColorNameBackground, tc.variant)
			if c := contrast(th.Color(hintColor, tc.variant), bg); c < 3 {
				t.Errorf("hint contrast %.1f:1, want at least 3:1", c)
			}
		})
	}
	if c := contrast(th.Color(theme.ColorNameDisabled, theme.VariantDark), th.Color(theme.ColorNameBackground, theme.VariantDark)); c >= 3 {
		t.Errorf("the disabled colour has contrast %.1f:1 on the dark theme; the check above tells nothing", c)
	}
}

// TestBrowseTableFits: at the window's size every column of the job
// table shows without scrolling, headers whole, and a cell's long text
// (the GPU job's needs and why this machine does not match) wraps in a
// taller row rather than being cut.
func TestBrowseTableFits(t *testing.T) {
	v := newTestBrowse(t, "http://a")
	w := test.NewWindow(v.content)
	t.Cleanup(w.Close)
	w.Resize(fyne.NewSize(1000, 640))
	v.load()
	v.settle()
	w.Content().Refresh()

	total := -tableGap()
	for _, c := range browseColumns {
		total += c.width + tableGap()
		head := widget.NewLabelWithStyle(c.title, fyne.TextAlignLeading, fyne.TextStyle{Bold: true})
		if head.MinSize().Width > c.width {
			t.Errorf("header %q needs %.0f, column is %.0f wide", c.title, head.MinSize().Width, c.width)
		}
	}
	if got := v.table.Size().Width; total > got {
		t.Errorf("columns take %.0f, the table is %.0f wide: some need scrolling", total, got)
	} else {
		t.Logf("columns take %.0f of the table's %.0f", total, got)
	}
	for row := range v.rows {
		for col, c := range browseColumns {
			text := v.cell(row, col)
			labels := labelsReading(v.table, text)
			if len(labels) == 0 {
				t.Errorf("row %d column %q: %q not drawn", row, c.title, text)
			}
			for _, l := range labels {
				if l.Size().Width > c.width || !fitsWhole(l) {
					t.Errorf("row %d column %q: %q drawn at %v, needs height %.0f", row, c.title, text, l.Size(), l.MinSize().Height)
				}
			}
		}
	}
	if len(v.rows) != 2 || !strings.Contains(v.cell(1, browseMatchColumn), gpuWhy[0]) {
		t.Fatalf("rows %v", v.rows)
	}
	short := labelsReading(v.table, v.cell(0, browseMatchColumn))
	long := labelsReading(v.table, v.cell(1, browseMatchColumn))
	oneLine := newBrowseCell("✓ matches").MinSize().Height
	if len(short) != 1 || len(long) != 1 || long[0].Size().Height <= oneLine {
		t.Errorf("the reason why not does not wrap onto a taller row: %d, %d labels", len(short), len(long))
	}
}

// TestHistoryFits: at the window's size the details and totals wrap in
// their pane instead of widening the window, and the table's columns fit
// its side of the split, so that the header buttons stay over them.
func TestHistoryFits(t *testing.T) {
	v, _ := newTestHistory(t)
	size := fyne.NewSize(1100, 720)
	w := test.NewWindow(v.content)
	t.Cleanup(w.Close)
	w.Resize(size)
	v.table.Select(widgetCell(0)) // the rejected one, with a long reason
	w.Content().Refresh()

	if min := v.content.MinSize(); min.Width > size.Width {
		t.Errorf("the content needs %.0f wide, more than the window's %.0f", min.Width, size.Width)
	}
	total := -tableGap()
	for _, c := range historyColumns {
		total += c.width + tableGap()
	}
	if got := v.table.Size().Width; total > got {
		t.Errorf("columns take %.0f, the table is %.0f wide", total, got)
	} else {
		t.Logf("columns take %.0f of the table's %.0f", total, got)
	}
	right := v.table.Position().X + v.table.Size().Width
	for name, l := range map[string]*widget.Label{"details": v.details, "per pool": v.perPool, "per day": v.perDay} {
		if l.Wrapping != fyne.TextWrapWord {
			t.Errorf("%s: wrapping %v, want words", name, l.Wrapping)
		}
		if !fitsWhole(l) || l.Size().Width > size.Width-right {
			t.Errorf("%s: %v wide, %.0f left of the table; needs height %.0f", name, l.Size(), size.Width-right, l.MinSize().Height)
		}
	}
}

// TestHistoryPoolLabels: the pool filter names pools by name, adding the
// address only where a name does not tell pools apart.
func TestHistoryPoolLabels(t *testing.T) {
	for _, tc := range []struct {
		name  string
		names map[string]string
		want  []string
	}{
		{"names", map[string]string{"http://a": "alpha", "http://b": "beta"}, []string{historyAll, "alpha", "beta"}},
		{"no name", map[string]string{"http://a": "alpha"}, []string{historyAll, "alpha", "http://b"}},
		{"same name", map[string]string{"http://a": "lab", "http://b": "lab"}, []string{historyAll, "lab (http://a)", "lab (http://b)"}},
		{"named like all", map[string]string{"http://a": historyAll, "http://b": "beta"}, []string{historyAll, historyAll + " (http://a)", "beta"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := New(testApp(t), &Deps{})
			v := u.newHistoryView()
			v.data = historyData{names: tc.names, days: []store.DaySummary{{Pool: "http://a"}, {Pool: "http://b"}}}
			v.updatePools()
			if diff := cmp.Diff(tc.want, v.pool.Options); diff != "" {
				t.Errorf("options (-want +got):\n%s", diff)
			}
			if got := v.poolURLs[tc.want[2]]; got != "http://b" {
				t.Errorf("option %q selects %q", tc.want[2], got)
			}
		})
	}
}

func TestCountsText(t *testing.T) {
	for _, tc := range []struct {
		confirmed, pending, rejected int64
		want                         string
	}{
		{3, 0, 1, "; 3 confirmed, 1 rejected"},
		{0, 2, 0, "; 2 pending"},
		{1, 1, 1, "; 1 confirmed, 1 pending, 1 rejected"},
		{0, 0, 0, ""},
	} {
		if got := countsText(tc.confirmed, tc.pending, tc.rejected); got != tc.want {
			t.Errorf("countsText(%d, %d, %d) = %q, want %q", tc.confirmed, tc.pending, tc.rejected, got, tc.want)
		}
	}
}

// TestFirstRunPoolFieldsInView: choosing to compute for a pool scrolls
// the pool's fields into view where the window is too short for all.
func TestFirstRunPoolFieldsInView(t *testing.T) {
	fx := newFirstRunFixture(t)
	fx.form.w.Resize(fyne.NewSize(640, 420))
	fx.form.choice.SetSelected(choicePool)
	var scroll *container.Scroll
	walkDrawn(fx.form.content, func(o fyne.CanvasObject) {
		if s, ok := o.(*container.Scroll); ok && scroll == nil {
			scroll = s
		}
	})
	if scroll == nil {
		t.Fatal("no scroll in the window")
	}
	d := fyne.CurrentApp().Driver()
	top := d.AbsolutePositionForObject(scroll).Y
	for name, e := range map[string]*widget.Entry{"address": fx.form.poolURL, "invite": fx.form.poolInvite} {
		y := d.AbsolutePositionForObject(e).Y
		if y < top || y+e.Size().Height > top+scroll.Size().Height {
			t.Errorf("the pool %s field is at %.0f-%.0f, out of the view %.0f-%.0f", name, y, y+e.Size().Height, top, top+scroll.Size().Height)
		}
	}
}

// inView reports whether o lies whole within the visible part of scroll
// (at its offset now), both in window coordinates.
func inView(o fyne.CanvasObject, scroll *container.Scroll) bool {
	d := fyne.CurrentApp().Driver()
	p, top := d.AbsolutePositionForObject(o), d.AbsolutePositionForObject(scroll)
	return p.X >= top.X && p.Y >= top.Y &&
		p.X+o.Size().Width <= top.X+scroll.Size().Width+0.5 && p.Y+o.Size().Height <= top.Y+scroll.Size().Height+0.5
}

// TestSettingsJoinInView: the Pools tab shows its Join button when it
// opens, without scrolling, at the window's size and at a smaller one (a
// laptop's screen, where a desktop shrinks the window), also with a pool
// joined whose choices take most of the tab. It was at the tab's end,
// below the pools and their choices, cut off by the window's edge.
func TestSettingsJoinInView(t *testing.T) {
	for _, size := range []fyne.Size{{Width: 760, Height: 560}, {Width: 640, Height: 440}} {
		t.Run(fmt.Sprintf("%.0fx%.0f", size.Width, size.Height), func(t *testing.T) {
			fx := newSettingsFixture(t, func(d *Deps) {
				if err := d.Store.JoinPool(context.Background(), goodPool, ""); err != nil {
					t.Fatal(err)
				}
			})
			fx.window.Resize(size)
			fx.showTab("Pools")
			scroll := fx.form.tabs.Selected().Content.(*container.Scroll)
			if !inView(fx.form.poolJoin, scroll) || !inView(fx.form.poolURL, scroll) {
				d := fyne.CurrentApp().Driver()
				t.Errorf("Join at %v (%v) and the address at %v; the tab shows %v to %v",
					d.AbsolutePositionForObject(fx.form.poolJoin), fx.form.poolJoin.Size(), d.AbsolutePositionForObject(fx.form.poolURL),
					d.AbsolutePositionForObject(scroll), d.AbsolutePositionForObject(scroll).Add(scroll.Size()))
			}
		})
	}
}

// wheelTarget returns what Fyne's desktop driver gives a mouse wheel
// event at pos (window coordinates) under root: the last scrollable
// object under the pointer in the order the driver walks the objects
// (containers' children and widgets' renderer objects, depth first).
func wheelTarget(root fyne.CanvasObject, pos fyne.Position) fyne.Scrollable {
	d := fyne.CurrentApp().Driver()
	var found fyne.Scrollable
	walkDrawn(root, func(o fyne.CanvasObject) {
		s, ok := o.(fyne.Scrollable)
		if !ok || !o.Visible() {
			return
		}
		p := d.AbsolutePositionForObject(o)
		if pos.X >= p.X && pos.Y >= p.Y && pos.X < p.X+o.Size().Width && pos.Y < p.Y+o.Size().Height {
			found = s
		}
	})
	return found
}

// TestWheelScrollsOverFields: the mouse wheel scrolls a tab of the
// Settings window and the first-run window with the pointer over a
// field too; the field's own scroll took the wheel, and the page stopped
// moving as soon as a field came under the pointer.
func TestWheelScrollsOverFields(t *testing.T) {
	// check turns the wheel by dy (negative: down) over field, which
	// the page shows, and checks that the page moved.
	check := func(t *testing.T, root fyne.CanvasObject, scroll *container.Scroll, field *widget.Entry, dy float32) {
		t.Helper()
		if !inView(field, scroll) {
			t.Fatal("the field is out of view")
		}
		at := fyne.CurrentApp().Driver().AbsolutePositionForObject(field).AddXY(field.Size().Width/2, field.Size().Height/2)
		target := wheelTarget(root, at)
		if target == nil {
			t.Fatal("nothing takes the wheel over the field")
		}
		before := scroll.Offset.Y
		target.Scrolled(&fyne.ScrollEvent{Scrolled: fyne.NewDelta(0, dy)})
		if scroll.Offset.Y == before {
			t.Errorf("the wheel over the field went to a %T; the page stayed at %v", target, scroll.Offset.Y)
		}
	}
	t.Run("settings", func(t *testing.T) {
		fx := newSettingsFixture(t, nil)
		fx.showTab("Computer")
		check(t, fx.window.Content(), fx.form.tabs.Selected().Content.(*container.Scroll), fx.form.cores, -40)
	})
	t.Run("first run", func(t *testing.T) {
		// Choosing a pool in a short window scrolls to the pool's fields,
		// at the end: the wheel turns up from there.
		fx := newFirstRunFixture(t)
		fx.form.w.Resize(fyne.NewSize(640, 420))
		fx.form.choice.SetSelected(choicePool)
		var scroll *container.Scroll
		walkDrawn(fx.form.content, func(o fyne.CanvasObject) {
			if s, ok := o.(*container.Scroll); ok && scroll == nil {
				scroll = s
			}
		})
		check(t, fx.form.w.Content(), scroll, fx.form.poolURL, 40)
	})
}
