package app

import (
	"image/color"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/canvas"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/widget"
)

// pageScroll returns a vertical scroll over content in which the mouse
// wheel scrolls the page wherever the pointer is. Fyne hands a wheel
// event to the innermost scrollable object under the pointer, and every
// one-line widget.Entry is one (its text scrolls inside it): with the
// pointer over a field the page stopped moving, so that a person who
// scrolled down the Settings window's Pools tab with the wheel never
// reached what lies below its fields. A wheelCatcher laid over the
// content takes the wheel for the page; taps, clicks, hovering and
// typing still reach the fields under it, as it takes nothing else.
func pageScroll(content fyne.CanvasObject) *container.Scroll {
	c := &wheelCatcher{}
	c.ExtendBaseWidget(c)
	c.scroll = container.NewVScroll(container.NewStack(content, c))
	return c.scroll
}

// wheelCatcher is an invisible widget over a page that passes the wheel
// events under it to the page's scroll (fyne.Scrollable) and is nothing
// else: not tappable, hoverable or focusable, so that every other event
// reaches the widgets it covers.
type wheelCatcher struct {
	widget.BaseWidget
	scroll *container.Scroll
}

var _ fyne.Scrollable = (*wheelCatcher)(nil)

// Scrolled scrolls the page (fyne.Scrollable).
func (c *wheelCatcher) Scrolled(ev *fyne.ScrollEvent) { c.scroll.Scrolled(ev) }

// MinSize is zero: the catcher takes the size of what it covers.
func (c *wheelCatcher) MinSize() fyne.Size { return fyne.Size{} }

// CreateRenderer implements fyne.Widget: nothing drawn.
func (c *wheelCatcher) CreateRenderer() fyne.WidgetRenderer {
	return widget.NewSimpleRenderer(canvas.NewRectangle(color.Transparent))
}
