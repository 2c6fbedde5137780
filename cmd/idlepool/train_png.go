package main

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"path/filepath"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

func (t *trainer) pngPath() string { return filepath.Join(t.dir, "training.png") }

// The PNG plot's size and layout, in pixels.
const (
	pngW, pngH      = 720, 560
	pngLeft, pngTop = 70, 40
	pngPanelH       = 200
	pngPanelGap     = 70
)

// trainPNG draws the same two panels as trainSVG (training loss and
// held-out accuracy per round) into a PNG picture, with the text in
// basicfont's 7×13 bitmap face.
func trainPNG(name string, rounds []trainRound) ([]byte, error) {
	img := image.NewRGBA(image.Rect(0, 0, pngW, pngH))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	text := func(x, y int, s string, anchor int) { // anchor: 0 left, 1 middle, 2 right
		d := &font.Drawer{Dst: img, Src: image.Black, Face: basicfont.Face7x13}
		w := d.MeasureString(s).Round()
		d.Dot = fixed.P(x-anchor*w/2, y)
		d.DrawString(s)
	}
	text(pngLeft, 22, fmt.Sprintf("%s: %d rounds", name, len(rounds)), 0)
	panel := func(rounds []trainRound, y0 int, title string, col color.RGBA, value func(trainRound) float64, format func(float64) string) {
		pw := pngW - pngLeft - 30
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, r := range rounds {
			v := value(r)
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
		if len(rounds) == 0 {
			lo, hi = 0, 1
		}
		if hi-lo < 1e-12 {
			lo, hi = lo-0.5, hi+0.5
		}
		text(pngLeft, y0-8, title, 0)
		grid := color.RGBA{0xe4, 0xe4, 0xe4, 0xff}
		for i := range 5 {
			y := y0 + pngPanelH - pngPanelH*i/4
			hline(img, pngLeft, pngLeft+pw, y, grid)
			text(pngLeft-6, y+4, format(lo+(hi-lo)*float64(i)/4), 2)
		}
		frame := color.RGBA{0x88, 0x88, 0x88, 0xff}
		hline(img, pngLeft, pngLeft+pw, y0, frame)
		hline(img, pngLeft, pngLeft+pw, y0+pngPanelH, frame)
		vline(img, pngLeft, y0, y0+pngPanelH, frame)
		vline(img, pngLeft+pw, y0, y0+pngPanelH, frame)
		n := max(len(rounds), 2)
		x := func(i int) float64 { return float64(pngLeft) + float64(pw)*float64(i)/float64(n-1) }
		y := func(r trainRound) float64 {
			return float64(y0+pngPanelH) - float64(pngPanelH)*(value(r)-lo)/(hi-lo)
		}
		if len(rounds) > 0 {
			text(pngLeft, y0+pngPanelH+16, fmt.Sprintf("round %d", rounds[0].Round), 1)
		}
		if len(rounds) > 1 { // ending at the panel's right edge, inside the picture
			text(int(x(len(rounds)-1)), y0+pngPanelH+16, fmt.Sprintf("round %d", rounds[len(rounds)-1].Round), 2)
		}
		for i := 1; i < len(rounds); i++ {
			thickLine(img, x(i-1), y(rounds[i-1]), x(i), y(rounds[i]), col)
		}
		if len(rounds) == 1 {
			thickLine(img, x(0)-2, y(rounds[0]), x(0)+2, y(rounds[0]), col)
		}
	}
	panel(rounds, pngTop+20, "training loss (mean cross-entropy of the round's batch)", color.RGBA{0xc0, 0x39, 0x2b, 0xff},
		func(r trainRound) float64 { return r.Loss }, func(v float64) string { return fmt.Sprintf("%.3f", v) })
	panel(measured(rounds), pngTop+20+pngPanelH+pngPanelGap, "held-out accuracy after the round", color.RGBA{0x24, 0x71, 0xa3, 0xff},
		func(r trainRound) float64 { return *r.Accuracy }, func(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) })
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		return nil, fmt.Errorf("encode the plot: %w", err)
	}
	return b.Bytes(), nil
}

func hline(img *image.RGBA, x0, x1, y int, c color.RGBA) {
	for x := x0; x <= x1; x++ {
		img.SetRGBA(x, y, c)
	}
}

func vline(img *image.RGBA, x, y0, y1 int, c color.RGBA) {
	for y := y0; y <= y1; y++ {
		img.SetRGBA(x, y, c)
	}
}

// thickLine draws a line two pixels wide from (x0, y0) to (x1, y1), a
// square of 2×2 pixels at each step of the longer axis.
func thickLine(img *image.RGBA, x0, y0, x1, y1 float64, c color.RGBA) {
	steps := int(math.Max(math.Abs(x1-x0), math.Abs(y1-y0))) + 1
	for s := 0; s <= steps; s++ {
		f := float64(s) / float64(steps)
		x, y := int(math.Round(x0+(x1-x0)*f)), int(math.Round(y0+(y1-y0)*f))
		img.SetRGBA(x, y, c)
		img.SetRGBA(x+1, y, c)
		img.SetRGBA(x, y+1, c)
		img.SetRGBA(x+1, y+1, c)
	}
}
