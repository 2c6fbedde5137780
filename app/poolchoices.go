package app

import (
	"context"
	"fmt"
	"strconv"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/layout"
	"fyne.io/fyne/v2/widget"

	"idlepool/offers"
	"idlepool/store"
)

// This file is the settings window's choices per pool, on the Pools tab:
// each pool's weight (its share of this computer among the pools), and
// for every pool and each pool whether GPU programs are allowed and how
// much memory and time one task may take. They are what `idlepool jobs
// weight|gpu-programs|limits` sets, read by the same parsers (package
// offers), and saved with the window's Save.

// choiceRow is the controls of one pool's choices, or of every pool's
// (url "", without a weight).
type choiceRow struct {
	url       string
	weight    *widget.Entry // nil for every pool
	weightErr *widget.Label
	gpu       *widget.Check
	memory    *widget.Entry
	memoryErr *widget.Label
	time      *widget.Entry
	timeErr   *widget.Label
	form      fyne.CanvasObject
}

// poolChoices holds a row for every pool and one for all of them, made
// from the preferences in the store and kept across rebuilds of the pool
// list, so that an edit survives joining another pool.
type poolChoices struct {
	prefs   offers.Preferences // as read when the window opened or last saved
	readErr error
	global  *choiceRow
	rows    map[string]*choiceRow
}

// newPoolChoices reads the donor's preferences.
func newPoolChoices(ctx context.Context, st *store.Local) *poolChoices {
	c := &poolChoices{rows: map[string]*choiceRow{}}
	c.prefs, c.readErr = st.Preferences(ctx)
	if c.readErr != nil {
		c.prefs = offers.Preferences{Global: offers.PoolPreferences{Weight: 1}}
	}
	c.global = newChoiceRow(c.prefs.Global, false)
	return c
}

// row returns the controls of the pool at url, made on first use.
func (c *poolChoices) row(url string) *choiceRow {
	r, ok := c.rows[url]
	if !ok {
		pp, _ := c.prefs.Pool(url)
		r = newChoiceRow(pp, true)
		c.rows[url] = r
	}
	return r
}

// newChoiceRow makes the controls showing pp.
func newChoiceRow(pp offers.PoolPreferences, withWeight bool) *choiceRow {
	r := &choiceRow{url: pp.URL, memoryErr: newErrorLabel(), timeErr: newErrorLabel()}
	r.gpu = widget.NewCheck("Allow GPU programs (on the GPUs you turned on)", nil)
	r.gpu.SetChecked(pp.GPUPrograms)
	r.memory = widget.NewEntry()
	r.memory.SetPlaceHolder("no limit")
	if pp.MaxMemoryMiB > 0 {
		r.memory.SetText(strconv.FormatInt(pp.MaxMemoryMiB, 10))
	}
	r.time = widget.NewEntry()
	r.time.SetPlaceHolder("no limit, or such as 30m")
	if pp.MaxTaskTime > 0 {
		r.time.SetText(pp.MaxTaskTime.String())
	}
	var fields []fyne.CanvasObject
	if withWeight {
		r.weight, r.weightErr = widget.NewEntry(), newErrorLabel()
		r.weight.SetText(strconv.FormatFloat(pp.Weight, 'f', -1, 64))
		fields = append(fields, field("Weight", r.weight,
			"This pool's share of the computer among your pools: a pool of weight 2 gets twice the cores of one of weight 1. 0 offers it nothing.",
			r.weightErr)...)
	}
	fields = append(fields, widget.NewLabel(""), r.gpu)
	fields = append(fields, field("Memory per task (MiB)", r.memory, "Refuse tasks that ask for more. Empty: no limit.", r.memoryErr)...)
	fields = append(fields, field("Time per task", r.time, "Refuse jobs whose tasks may run longer, such as 30m or 2h. Empty: no limit.", r.timeErr)...)
	r.form = container.New(layout.NewFormLayout(), fields...)
	return r
}

// parse reads the row's fields with check (which shows or clears each
// field's message) into pp's copy.
func (r *choiceRow) parse(pp offers.PoolPreferences, check func(l *widget.Label, err error)) offers.PoolPreferences {
	if r.weight != nil {
		w, err := offers.ParseWeight(r.weight.Text)
		check(r.weightErr, err)
		pp.Weight = w
	}
	pp.GPUPrograms = r.gpu.Checked
	mem, err := offers.ParseTaskMemoryMiB(r.memory.Text)
	check(r.memoryErr, err)
	pp.MaxMemoryMiB = mem
	d, err := offers.ParseTaskTime(r.time.Text)
	check(r.timeErr, err)
	pp.MaxTaskTime = d
	return pp
}

// parse reads every row shown (the global one and those of the pools in
// urls); the map is by URL, "" for every pool.
func (c *poolChoices) parse(urls []string, check func(l *widget.Label, err error)) map[string]offers.PoolPreferences {
	out := map[string]offers.PoolPreferences{"": c.global.parse(c.prefs.Global, check)}
	for _, u := range urls {
		pp, _ := c.prefs.Pool(u)
		out[u] = c.row(u).parse(pp, check)
	}
	return out
}

// save writes the choices in parsed that differ from those read, and
// remembers them as read.
func (c *poolChoices) save(ctx context.Context, st *store.Local, parsed map[string]offers.PoolPreferences) error {
	for u, pp := range parsed {
		was := c.prefs.Global
		if u != "" {
			was, _ = c.prefs.Pool(u)
			if pp.Weight != was.Weight {
				if err := st.SetPoolWeight(ctx, u, pp.Weight); err != nil {
					return err
				}
			}
		}
		if pp.GPUPrograms != was.GPUPrograms {
			if err := st.SetGPUPrograms(ctx, u, pp.GPUPrograms); err != nil {
				return err
			}
		}
		if pp.MaxMemoryMiB != was.MaxMemoryMiB || pp.MaxTaskTime != was.MaxTaskTime {
			if err := st.SetTaskLimits(ctx, u, pp.MaxMemoryMiB, pp.MaxTaskTime); err != nil {
				return err
			}
		}
	}
	prefs, err := st.Preferences(ctx)
	if err != nil {
		return fmt.Errorf("read the choices back: %w", err)
	}
	c.prefs = prefs
	return nil
}

// globalBox is the section for every pool.
func (c *poolChoices) globalBox() fyne.CanvasObject {
	box := container.NewVBox(
		heading("For every pool"),
		hint("What a pool's own choices below do not say. A task within both limits is accepted."),
		c.global.form,
	)
	if c.readErr != nil {
		l := newErrorLabel()
		setError(l, fmt.Sprintf("Your choices could not be read, so these are the defaults: %v", c.readErr))
		box.Add(l)
	}
	return box
}
