package app

import (
	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"
)

// steadyLines keeps room for lines labels stacked in a VBox: the
// Settings window's message beside Save (an error of up to two lines,
// or the "Saved" line), so that the bar, and Save in it, stay where
// they are when a message appears or goes.
type steadyLines struct{ lines int }

// steady returns o in a box at least lines labels high.
func steady(lines int, o fyne.CanvasObject) *fyne.Container {
	return container.New(steadyLines{lines: lines}, o)
}

// Layout implements fyne.Layout: each object fills the box.
func (l steadyLines) Layout(objs []fyne.CanvasObject, size fyne.Size) {
	for _, o := range objs {
		o.Move(fyne.NewPos(0, 0))
		o.Resize(size)
	}
}

// MinSize implements fyne.Layout: the objects' size, and at least the
// height of lines labels with the theme's padding between them.
func (l steadyLines) MinSize(objs []fyne.CanvasObject) fyne.Size {
	line := widget.NewLabel("Saved").MinSize().Height
	h := float32(l.lines)*line + float32(l.lines-1)*theme.Padding()
	var m fyne.Size
	for _, o := range objs {
		m = m.Max(o.MinSize())
	}
	return fyne.NewSize(m.Width, max(m.Height, h))
}

// besideScrollBar lays o out clear of the vertical scroll bar of the
// scroll it is in, which Fyne draws over the content's right edge: the
// buttons at the end of a row (Remove, Leave) are not touched by it.
func besideScrollBar(o fyne.CanvasObject) *fyne.Container {
	return container.New(scrollBarInset{}, o)
}

// scrollBarInset leaves the scroll bar's width free on the right.
type scrollBarInset struct{}

func barWidth() float32 { return theme.Size(theme.SizeNameScrollBar) }

// Layout implements fyne.Layout.
func (scrollBarInset) Layout(objs []fyne.CanvasObject, size fyne.Size) {
	for _, o := range objs {
		o.Move(fyne.NewPos(0, 0))
		o.Resize(fyne.NewSize(max(0, size.Width-barWidth()), size.Height))
	}
}

// MinSize implements fyne.Layout.
func (scrollBarInset) MinSize(objs []fyne.CanvasObject) fyne.Size {
	var m fyne.Size
	for _, o := range objs {
		m = m.Max(o.MinSize())
	}
	return fyne.NewSize(m.Width+barWidth(), m.Height)
}
