package main

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
)

func (t *trainer) plotPath() string { return filepath.Join(t.dir, "training.svg") }

// plot writes training.svg and training.png: the training loss and the
// held-out accuracy per round, one panel each, as an SVG that any browser
// opens and as a picture that any image viewer opens.
func (t *trainer) plot() error {
	if err := writeFileAtomic(t.plotPath(), []byte(trainSVG(t.tf.Name, t.lin.Rounds))); err != nil {
		return err
	}
	b, err := trainPNG(t.tf.Name, t.lin.Rounds)
	if err != nil {
		return err
	}
	return writeFileAtomic(t.pngPath(), b)
}

// trainSVG draws the two panels of rounds.
func trainSVG(name string, rounds []trainRound) string {
	const w, h, panelH, left, top = 720, 560, 220, 70, 40
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15">%s: %d rounds</text>`+"\n", left, xmlEscape(name), len(rounds))
	panel := func(rounds []trainRound, y0 int, title, color string, value func(trainRound) float64, format func(float64) string) {
		pw := w - left - 30
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
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", left, y0-8, title)
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>`+"\n", left, y0, pw, panelH)
		for i := range 5 {
			v := lo + (hi-lo)*float64(i)/4
			y := float64(y0+panelH) - float64(panelH)*float64(i)/4
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, y+4, format(v))
			fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", left, left+pw, y, y)
		}
		n := max(len(rounds), 2)
		x := func(i int) float64 { return float64(left) + float64(pw)*float64(i)/float64(n-1) }
		if len(rounds) > 0 {
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">round %d</text>`+"\n", left, y0+panelH+16, rounds[0].Round)
		}
		if len(rounds) > 1 { // ending at the panel's right edge, inside the picture
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="end">round %d</text>`+"\n", x(len(rounds)-1), y0+panelH+16, rounds[len(rounds)-1].Round)
		}
		var pts []string
		for i, r := range rounds {
			y := float64(y0+panelH) - float64(panelH)*(value(r)-lo)/(hi-lo)
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(i), y))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", color, strings.Join(pts, " "))
	}
	panel(rounds, top+20, "training loss (mean cross-entropy of the round's batch)", "#c0392b",
		func(r trainRound) float64 { return r.Loss }, func(v float64) string { return fmt.Sprintf("%.3f", v) })
	panel(measured(rounds), top+20+panelH+60, "held-out accuracy after the round", "#2471a3",
		func(r trainRound) float64 { return *r.Accuracy }, func(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) })
	b.WriteString("</svg>\n")
	return b.String()
}

// measured returns the rounds after which the held-out accuracy was
// measured: the accuracy panel's points.
func measured(rounds []trainRound) []trainRound {
	var out []trainRound
	for _, r := range rounds {
		if r.Accuracy != nil {
			out = append(out, r)
		}
	}
	return out
}

func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
