package app

import (
	"strings"
	"testing"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/test"
	"fyne.io/fyne/v2/widget"
)

// after returns the object drawn right after o in the container that
// holds it, or nil.
func after(root, o fyne.CanvasObject) fyne.CanvasObject {
	var next fyne.CanvasObject
	walkDrawn(root, func(c fyne.CanvasObject) {
		box, ok := c.(*fyne.Container)
		if !ok {
			return
		}
		for i, x := range box.Objects {
			if x == o && i+1 < len(box.Objects) {
				next = box.Objects[i+1]
			}
		}
	})
	return next
}

// clearOf reports whether label l is drawn whole, above what follows it
// (nil: the bottom of its scroll's content), and within scroll's content.
func clearOf(t *testing.T, name string, l *widget.Label, next fyne.CanvasObject, scroll *container.Scroll) {
	t.Helper()
	d := fyne.CurrentApp().Driver()
	if !fitsWhole(l) {
		t.Errorf("%s: drawn %.0f high, its %d lines need %.0f", name, l.Size().Height, strings.Count(l.Text, "\n")+1, l.MinSize().Height)
	}
	bottom := d.AbsolutePositionForObject(l).Y + l.MinSize().Height
	if next != nil {
		if top := d.AbsolutePositionForObject(next).Y; top < bottom-0.5 {
			t.Errorf("%s: its text reaches %.0f, what follows it (%T) is drawn at %.0f, over the text", name, bottom, next, top)
		}
	}
	if scroll != nil {
		end := d.AbsolutePositionForObject(scroll.Content).Y + scroll.Content.Size().Height
		if end < bottom-0.5 {
			t.Errorf("%s: its text reaches %.0f, the scrolled content ends at %.0f: the rest cannot be scrolled to", name, bottom, end)
		}
	}
}

// TestHistoryTotalsWrapClear: when the totals per pool wrap onto more
// lines than before (long pool names, a narrower pane), the divider under
// them is drawn below their last line, not through it, without anything
// else laying the window out again.
func TestHistoryTotalsWrapClear(t *testing.T) {
	v, _ := newTestHistory(t)
	w := test.NewWindow(v.content)
	t.Cleanup(w.Close)
	w.Resize(fyne.NewSize(1100, 720))

	long := map[string]string{}
	for _, d := range v.data.days {
		long[d.Pool] = "the " + d.Pool + " pool of the physics department's teaching laboratory, second floor"
	}
	v.data.names = long
	v.showTotals() // as a load that found the pools' names does
	if n := len(v.perPool.Text); n < 150 {
		t.Fatalf("totals per pool %q: too short to wrap", v.perPool.Text)
	}
	clearOf(t, "per pool", v.perPool, after(v.content, v.perPool), nil)
	clearOf(t, "per day", v.perDay, nil, v.side.Scroll)

	// A narrower window wraps them onto more lines again.
	w.Resize(fyne.NewSize(800, 720))
	clearOf(t, "per pool, narrower", v.perPool, after(v.content, v.perPool), nil)
	clearOf(t, "per day, narrower", v.perDay, nil, v.side.Scroll)

	v.table.Select(widgetCell(0)) // details of several lines appear above
	clearOf(t, "details", v.details, after(v.content, v.details), nil)
	clearOf(t, "per pool under details", v.perPool, after(v.content, v.perPool), nil)
}

// TestBrowseDetailsWhole: a job's details, longer than the pane, can be
// scrolled to their last line: the scroll takes their height when they
// change, instead of keeping the height of the shorter text before.
func TestBrowseDetailsWhole(t *testing.T) {
	v := newTestBrowse(t, "http://a")
	w := test.NewWindow(v.content)
	t.Cleanup(w.Close)
	w.Resize(fyne.NewSize(1000, 640))
	v.load()
	v.settle()

	for row := range v.rows {
		v.table.Select(widget.TableCellID{Row: row, Col: 0})
		if !strings.Contains(v.details.Text, "Cost per task") {
			t.Fatalf("row %d: details %q", row, v.details.Text)
		}
		clearOf(t, "details of row "+v.rows[row].job.Listing.Name, v.details, nil, v.scroll.Scroll)
	}
	w.Resize(fyne.NewSize(640, 480))
	clearOf(t, "details, smaller window", v.details, nil, v.scroll.Scroll)
}
