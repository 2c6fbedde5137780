package app

import (
	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/theme"
)

// wrapScroll is a vertical scroll over a column of objects some of which
// are labels that wrap (details, totals). Fyne's VBox asks a wrapping
// label for its height before telling it its new width, and a label's
// new text does not lay out the box around it, so a label that wraps onto
// more lines than before was drawn over what follows it (a separator
// striking the text through) or cut at the scroll's bottom. The column
// here gives each object its width first, then stacks them at the
// heights they need at that width, and makes the scroll take the new
// height; call changed after setting a label's text.
type wrapScroll struct {
	*container.Scroll
	box *fyne.Container
}

// newWrapScroll returns the scroll over objs, stacked top to bottom with
// the theme's padding between them, as container.NewVBox does.
func newWrapScroll(objs ...fyne.CanvasObject) *wrapScroll {
	l := &wrapColumn{}
	s := &wrapScroll{box: container.New(l, objs...)}
	s.Scroll = container.NewVScroll(s.box)
	l.scroll = s.Scroll
	return s
}

// changed lays the column out again at its width after a text in it
// changed. UI goroutine.
func (s *wrapScroll) changed() { s.box.Refresh() }

// wrapColumn is the layout of a wrapScroll's column.
type wrapColumn struct {
	scroll *container.Scroll // sized to the column's height when it changes
}

// Layout implements fyne.Layout: each visible object gets the full width
// first, and then the height it needs at that width.
func (l *wrapColumn) Layout(objs []fyne.CanvasObject, size fyne.Size) {
	pad := theme.Padding()
	y := float32(0)
	shown := 0
	for _, o := range objs {
		if !o.Visible() {
			continue
		}
		if shown > 0 {
			y += pad
		}
		shown++
		o.Resize(fyne.NewSize(size.Width, o.Size().Height)) // the width a wrapped text's height follows
		h := o.MinSize().Height
		o.Move(fyne.NewPos(0, y))
		o.Resize(fyne.NewSize(size.Width, h))
		y += h
	}
	// The scroll sized the column from heights at the old width (or
	// before a text changed): it sizes it again from the heights now.
	// Container.Resize does nothing at an unchanged size, which ends
	// this.
	if l.scroll != nil && abs32(y-size.Height) > 0.5 && (y > size.Height || size.Height > l.scroll.Size().Height) {
		l.scroll.Refresh()
	}
}

// MinSize implements fyne.Layout: the objects' heights at the width they
// were last laid out at, stacked.
func (l *wrapColumn) MinSize(objs []fyne.CanvasObject) fyne.Size {
	pad := theme.Padding()
	var w, h float32
	shown := 0
	for _, o := range objs {
		if !o.Visible() {
			continue
		}
		if shown > 0 {
			h += pad
		}
		shown++
		m := o.MinSize()
		w = max(w, m.Width)
		h += m.Height
	}
	return fyne.NewSize(w, h)
}

func abs32(f float32) float32 {
	if f < 0 {
		return -f
	}
	return f
}
