package app

import (
	"fmt"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/canvas"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"
)

// This file is the contribution history's bar chart: one bar per day,
// drawn with Fyne's canvas primitives.

// chartBar is one bar of a barChart: its label ("03-14") and value.
type chartBar struct {
	label string
	value float64
}

// barChart is a widget drawing one vertical bar per value, scaled so that
// the largest value fills the plot's height, with the largest value
// written at the top and some of the labels under the bars (every
// labelEvery-th, and the last). Values below zero are drawn as zero. Its
// methods run on Fyne's UI goroutine.
type barChart struct {
	widget.BaseWidget

	title      string
	unit       string // after the largest value: "cost units"
	labelEvery int
	bars       []chartBar
}

// newBarChart returns an empty chart titled title.
func newBarChart(title, unit string, labelEvery int) *barChart {
	c := &barChart{title: title, unit: unit, labelEvery: max(labelEvery, 1)}
	c.ExtendBaseWidget(c)
	return c
}

// SetTitle changes the chart's title and the unit after its largest
// value; SetBars redraws it.
func (c *barChart) SetTitle(title, unit string) { c.title, c.unit = title, unit }

// SetBars replaces the chart's bars and redraws it.
func (c *barChart) SetBars(bars []chartBar) {
	c.bars = bars
	c.Refresh()
}

// maxValue returns the largest value, at least 0.
func (c *barChart) maxValue() float64 {
	m := 0.0
	for _, b := range c.bars {
		m = max(m, b.value)
	}
	return m
}

// CreateRenderer implements fyne.Widget.
func (c *barChart) CreateRenderer() fyne.WidgetRenderer {
	r := &barChartRenderer{c: c,
		title: canvas.NewText(c.title, theme.Color(theme.ColorNameForeground)),
		top:   canvas.NewText("", theme.Color(theme.ColorNameForeground)),
		axis:  canvas.NewRectangle(theme.Color(theme.ColorNameDisabled)),
	}
	r.title.TextStyle.Bold = true
	r.top.TextSize = theme.CaptionTextSize()
	r.rebuild()
	return r
}

// barChartRenderer draws a barChart: title, the largest value, an axis,
// one rectangle per bar and the labels.
type barChartRenderer struct {
	c      *barChart
	title  *canvas.Text
	top    *canvas.Text
	axis   *canvas.Rectangle
	rects  []*canvas.Rectangle
	labels []*canvas.Text // nil where a bar has no label shown
}

// chart geometry, in Fyne units.
const (
	chartLabelH = 16
	chartMinBar = 2 // a non-zero value is at least this tall, to be seen
)

// rebuild makes one rectangle and label per bar.
func (r *barChartRenderer) rebuild() {
	n := len(r.c.bars)
	if len(r.rects) != n {
		r.rects = make([]*canvas.Rectangle, n)
		r.labels = make([]*canvas.Text, n)
		for i := range r.rects {
			r.rects[i] = canvas.NewRectangle(theme.Color(theme.ColorNamePrimary))
			if i%r.c.labelEvery == 0 || i == n-1 {
				t := canvas.NewText("", theme.Color(theme.ColorNameForeground))
				t.TextSize = theme.CaptionTextSize()
				t.Alignment = fyne.TextAlignCenter
				r.labels[i] = t
			}
		}
	}
	for i, b := range r.c.bars {
		r.rects[i].FillColor = theme.Color(theme.ColorNamePrimary)
		if r.labels[i] != nil {
			r.labels[i].Text = b.label
		}
	}
	if m := r.c.maxValue(); m > 0 {
		r.top.Text = "max " + amountOf(fmt.Sprintf("%.4g", m), r.c.unit)
	} else {
		r.top.Text = "no " + r.c.unit + " yet"
	}
}

// plot returns the area the bars are drawn in: below the title, above
// the labels.
func (r *barChartRenderer) plot(size fyne.Size) (x, y, w, h float32) {
	head := r.title.MinSize().Height + 2
	return 0, head, size.Width, max(size.Height-head-chartLabelH-2, 0)
}

// Layout places the bars: bar i is 1/n of the width, its height value/max
// of the plot's.
func (r *barChartRenderer) Layout(size fyne.Size) {
	r.title.Move(fyne.NewPos(0, 0))
	r.title.Resize(r.title.MinSize())
	ts := r.top.MinSize()
	r.top.Move(fyne.NewPos(size.Width-ts.Width, 0))
	r.top.Resize(ts)
	x0, y0, w, h := r.plot(size)
	r.axis.Move(fyne.NewPos(x0, y0+h))
	r.axis.Resize(fyne.NewSize(w, 1))
	n := len(r.rects)
	if n == 0 {
		return
	}
	slot := w / float32(n)
	gap := min(slot/5, 4)
	m := r.c.maxValue()
	for i, rect := range r.rects {
		bh := float32(0)
		if v := r.c.bars[i].value; m > 0 && v > 0 {
			bh = max(float32(v/m)*h, chartMinBar)
		}
		rect.Move(fyne.NewPos(x0+float32(i)*slot+gap/2, y0+h-bh))
		rect.Resize(fyne.NewSize(slot-gap, bh))
		if t := r.labels[i]; t != nil {
			ls := t.MinSize()
			t.Move(fyne.NewPos(x0+float32(i)*slot+slot/2-ls.Width/2, y0+h+2))
			t.Resize(ls)
		}
	}
}

// MinSize is room for the title and a plot of a useful height.
func (r *barChartRenderer) MinSize() fyne.Size {
	return fyne.NewSize(max(float32(len(r.rects))*6, 200), r.title.MinSize().Height+chartLabelH+80)
}

// Refresh redraws the chart after its bars or the theme changed.
func (r *barChartRenderer) Refresh() {
	r.title.Text = r.c.title
	r.rebuild()
	fg := theme.Color(theme.ColorNameForeground)
	r.title.Color, r.top.Color = fg, fg
	r.axis.FillColor = theme.Color(theme.ColorNameDisabled)
	for _, t := range r.labels {
		if t != nil {
			t.Color = fg
		}
	}
	r.Layout(r.c.Size())
	canvas.Refresh(r.c)
}

// Objects returns the title, the largest value, the axis, the bars and
// the labels shown.
func (r *barChartRenderer) Objects() []fyne.CanvasObject {
	objs := []fyne.CanvasObject{r.title, r.top, r.axis}
	for _, rect := range r.rects {
		objs = append(objs, rect)
	}
	for _, t := range r.labels {
		if t != nil {
			objs = append(objs, t)
		}
	}
	return objs
}

// Destroy implements fyne.WidgetRenderer; there is nothing to release.
func (r *barChartRenderer) Destroy() {}
