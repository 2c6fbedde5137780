package app

import (
	"strings"
	"testing"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/test"
	"fyne.io/fyne/v2/widget"
)

// TestSettingsSaveBarStays: a message beside Save (the error of a refused
// Save, or "Saved") leaves Save and the tabs where they were.
func TestSettingsSaveBarStays(t *testing.T) {
	for _, width := range []float32{760, 520} {
		fx := newSettingsFixture(t, nil)
		f := fx.form
		fx.window.Resize(fyne.NewSize(width, 560))
		d := fyne.CurrentApp().Driver()
		where := func() (fyne.Position, fyne.Size) {
			// Lay the window out as the desktop driver does when a
			// size changed (the test driver does not by itself).
			fx.window.Content().Refresh()
			return d.AbsolutePositionForObject(f.save), f.tabs.Size()
		}
		save0, tabs0 := where()

		f.tabs.SelectIndex(1)
		f.cores.SetText("lots")
		test.Tap(f.save)
		if !f.saveErr.Visible() || f.saveErr.Text == "" {
			t.Fatalf("width %.0f: no error after saving a wrong value", width)
		}
		lines := f.saveErr.MinSize().Height / widget.NewLabel("x").MinSize().Height
		save1, tabs1 := where()
		if save1 != save0 || tabs1 != tabs0 {
			t.Errorf("width %.0f: with the error (%.1f label heights) Save moved from %v to %v, the tabs from %v to %v", width, lines, save0, save1, tabs0, tabs1)
		}

		f.cores.SetText("")
		test.Tap(f.save)
		if f.saveErr.Visible() || f.status.Text == "" {
			t.Fatalf("width %.0f: not saved after fixing the value: %q", width, f.saveErr.Text)
		}
		if save2, tabs2 := where(); save2 != save0 || tabs2 != tabs0 {
			t.Errorf("width %.0f: with %q Save moved from %v to %v, the tabs from %v to %v", width, f.status.Text, save0, save2, tabs0, tabs2)
		}
	}
}

// TestSettingsRowButtonsClearOfScrollBar: the Remove buttons at the end
// of the programs' rows end left of where the scroll bar is drawn (over
// the right edge of the scrolled content) when the tab scrolls.
func TestSettingsRowButtonsClearOfScrollBar(t *testing.T) {
	fx := newSettingsFixture(t, nil)
	f := fx.form
	f.tabs.SelectIndex(1)
	for _, p := range []string{"steam", "game.exe", "blender", "obs", "dota2", "factorio", "witcher3.exe"} {
		f.addProgram(p)
	}
	fx.window.Resize(fyne.NewSize(760, 420)) // short: the tab scrolls
	d := fyne.CurrentApp().Driver()
	scroll, ok := f.tabs.Items[1].Content.(*container.Scroll)
	if !ok {
		t.Fatalf("the Computer tab is a %T, not a scroll", f.tabs.Items[1].Content)
	}
	if scroll.Content.MinSize().Height <= scroll.Size().Height {
		t.Fatalf("the tab does not scroll: content %.0f high in %.0f", scroll.Content.MinSize().Height, scroll.Size().Height)
	}
	bar := d.AbsolutePositionForObject(scroll).X + scroll.Size().Width - barWidth()
	removes := 0
	walkDrawn(f.programList, func(o fyne.CanvasObject) {
		b, ok := o.(*widget.Button)
		if !ok || b.Text != "Remove" {
			return
		}
		removes++
		if right := d.AbsolutePositionForObject(b).X + b.Size().Width; right > bar+0.5 {
			t.Errorf("a Remove button ends at %.0f, the scroll bar begins at %.0f", right, bar)
		}
	})
	if removes != 7 {
		t.Errorf("%d Remove buttons, want 7", removes)
	}
}

// TestSettingsGPUSupportInWords: the GPU tab tells the owner of an AMD or
// Intel GPU, which NVML does not list, what is supported and what the app
// does on such a computer, with or without an NVIDIA GPU found.
func TestSettingsGPUSupportInWords(t *testing.T) {
	for name, src := range map[string]func(*Deps){
		"no NVIDIA driver": func(d *Deps) { d.GPUs = nil },
		"two NVIDIA GPUs":  nil,
	} {
		t.Run(name, func(t *testing.T) {
			fx := newSettingsFixture(t, src)
			var text strings.Builder
			walkDrawn(fx.form.tabs.Items[2].Content, func(o fyne.CanvasObject) {
				switch o := o.(type) {
				case *widget.Label:
					if o.Visible() {
						text.WriteString(o.Text + "\n")
					}
				case *widget.RichText:
					text.WriteString(o.String() + "\n")
				}
			})
			for _, want := range []string{"NVIDIA", "NVML", "AMD and Intel graphics", "not used yet", "processor (CPU)"} {
				if !strings.Contains(text.String(), want) {
					t.Errorf("the GPU tab does not say %q:\n%s", want, text.String())
				}
			}
		})
	}
}

// TestCostUnitsPlural: one cost unit is "1 cost unit" wherever the app
// writes an amount of them; other amounts keep the plural.
func TestCostUnitsPlural(t *testing.T) {
	for c, want := range map[float64]string{1: "1 cost unit", 1.00001: "1 cost unit", 0: "0 cost units", 2.5: "2.5 cost units", 0.0123: "0.0123 cost units", 11: "11 cost units"} {
		if got := costUnits(c); got != want {
			t.Errorf("costUnits(%v) = %q, want %q", c, got, want)
		}
	}
	v, _ := newTestHistory(t)
	for i := range v.data.rows {
		v.table.Select(widgetCell(i))
		if strings.Contains(v.details.Text, " 1 cost units") {
			t.Errorf("details: %q", v.details.Text)
		}
	}
	for _, text := range []string{v.perPool.Text, v.perDay.Text} {
		if strings.Contains(text, " 1 cost units") || !strings.Contains(text, "cost unit") {
			t.Errorf("totals: %q", text)
		}
	}
	c := newBarChart("t", "cost units", 1)
	c.SetBars([]chartBar{{label: "a", value: 1}})
	w := test.NewWindow(c)
	defer w.Close()
	if top := test.WidgetRenderer(c).(*barChartRenderer).top.Text; top != "max 1 cost unit" {
		t.Errorf("chart's scale %q, want \"max 1 cost unit\"", top)
	}
}
