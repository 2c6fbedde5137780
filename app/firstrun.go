package app

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/layout"
	"fyne.io/fyne/v2/widget"

	"idlepool/idle"
	"idlepool/store"
)

// This file is the first-run window: the rules a new installation starts
// with, in sentences, and the choice between computing for a pool and
// keeping the computer ready for solo runs.

// The first-run window's two choices.
const (
	choicePool = "Compute for a pool"
	choiceSolo = "Only my own jobs for now (solo, no account)"
)

// What each choice means, shown under the choices: solo lends nothing,
// so that a donor who starts with it knows that nothing is donated yet
// and how to join a pool later.
const (
	soloMeans = "Solo: this computer computes only the jobs you run yourself (with idlepool run, or in a pool of your own devices); " +
		"nothing is donated: no one else's job runs here and nothing leaves it. " +
		"To donate later, join a pool in Settings → Pools, from the tray icon."
	poolMeans = "A pool is run by a lab, a project or a group of friends; whoever runs it gives you its address " +
		"(on its web page or in an invitation) and, if it admits only invited devices, an invite token. " +
		"Once joined, Browse jobs in the tray menu lists the jobs seeking compute there, and you may refuse any of them."
)

// NeedsFirstRun reports whether the app should show the first-run window:
// true when the owner never saved settings and joined no pool. Its error
// is the store's.
func NeedsFirstRun(ctx context.Context, l *store.Local) (bool, error) {
	saved, err := l.SettingsSaved(ctx)
	if err != nil || saved {
		return false, err
	}
	pools, err := l.JoinedPools(ctx)
	if err != nil {
		return false, err
	}
	return len(pools) == 0, nil
}

// ShowFirstRun opens the first-run window (or brings it to the front) and
// returns it. Start saves the settings (the defaults on a first run),
// joins the pool when the owner chose one, tells the engine to reload,
// closes the window and calls done (which may be nil). Closing the window
// without Start saves nothing and does not call done, so NeedsFirstRun
// stays true.
func (u *UI) ShowFirstRun(done func()) fyne.Window {
	return u.window("firstrun", "Welcome to idlepool", fyne.NewSize(640, 680), func(w fyne.Window) fyne.CanvasObject {
		ctx, cancel := context.WithCancel(context.Background())
		w.SetCloseIntercept(func() {
			cancel() // stops a pool check in flight
			w.Close()
		})
		return newFirstRunForm(ctx, u, w, done).content
	}, nil)
}

// firstRunForm is the first-run window's contents; its fields are the
// widgets, kept so that tests can drive them.
type firstRunForm struct {
	u       *UI
	w       fyne.Window
	done    func()
	content fyne.CanvasObject

	choice     *widget.RadioGroup
	means      *widget.RichText // what the choice means: soloMeans or poolMeans
	poolForm   *fyne.Container  // the pool's address and invite; shown for choicePool
	poolURL    *widget.Entry
	poolInvite *widget.Entry
	poolErr    *widget.Label
	startErr   *widget.Label
	status     *widget.Label
	start      *widget.Button
	settings   *widget.Button
	autostart  *widget.Check // start at login; nil without an Autostart

	busy sync.WaitGroup // the pool check in flight; tests wait on it
}

// defaultsInWords describes s (idle.Defaults() in the window) as
// sentences a donor reads.
func defaultsInWords(s idle.Settings) []string {
	var out []string
	minutes := int(s.IdleFor / time.Minute)
	switch {
	case s.IdleFor == 0:
		out = append(out, "It computes whether or not someone uses the keyboard and mouse.")
	case minutes == 1:
		out = append(out, "It starts only when nobody has used the keyboard or mouse for a minute, and steps aside within a second when you come back.")
	default:
		out = append(out, fmt.Sprintf("It starts only when nobody has used the keyboard or mouse for %d minutes, and steps aside within a second when you come back.", minutes))
	}
	if len(s.Schedule) == 0 {
		out = append(out, "It may compute at any hour of the day.")
	} else {
		out = append(out, fmt.Sprintf("It computes only in these hours: %s.", s.Schedule))
	}
	if s.PauseOnBattery {
		out = append(out, "It computes only on mains power (AC), never on battery.")
	}
	cores := "all processor cores but one"
	switch {
	case s.Cores > 0:
		cores = fmt.Sprintf("%d processor cores", s.Cores)
	case s.CoresShare > 0:
		cores = fmt.Sprintf("%s%% of the processor cores", formatPercent(s.CoresShare))
	}
	out = append(out, fmt.Sprintf("It uses %s and at most %s%% of the memory, and steps aside when other programs use more than %s%% of the processor.",
		cores, formatPercent(s.MemoryShare), formatPercent(s.MaxOtherCPUShare)))
	if g := gameSignsInWords(s); g != "" {
		out = append(out, "It pauses while a game runs: "+g+", with no list of games to keep.")
	}
	if s.MaxTemperatureC > 0 {
		out = append(out, fmt.Sprintf("It pauses while the processor is hotter than %s °C.", formatNumber(s.MaxTemperatureC)))
	}
	if len(s.GPUs) == 0 {
		out = append(out, "Graphics cards (GPUs) stay off until you turn them on in Settings.")
	}
	return out
}

// gameSignsInWords names the game signs s switches on, "" for none:
// "a full-screen window, a game using GameMode or a Steam game".
func gameSignsInWords(s idle.Settings) string {
	var out []string
	for _, g := range s.Signs() {
		switch {
		case g == idle.GameFullScreen:
			out = append(out, "a full-screen window")
		case g == idle.GameGameMode && runtime.GOOS == "linux":
			out = append(out, "a game using GameMode")
		case g == idle.GameSteam:
			out = append(out, "a Steam game")
		}
	}
	if len(out) > 1 {
		return strings.Join(out[:len(out)-1], ", ") + " or " + out[len(out)-1]
	}
	return strings.Join(out, "")
}

// formatNumber writes f without needless decimals.
func formatNumber(f float64) string { return strings.TrimSuffix(fmt.Sprintf("%.1f", f), ".0") }

// newFirstRunForm builds the window's contents. ctx ends when the window
// closes; it bounds the pool check.
func newFirstRunForm(ctx context.Context, u *UI, w fyne.Window, done func()) *firstRunForm {
	f := &firstRunForm{u: u, w: w, done: done, poolErr: newErrorLabel(), startErr: newErrorLabel()}
	s, err := u.deps.Store.Settings(ctx)
	if err != nil {
		s = idle.Defaults()
	}
	// The rules are one paragraph of bullets, so that the window shows
	// them and the choice below without scrolling.
	rules := widget.NewLabel("• " + strings.Join(defaultsInWords(s), "\n• "))
	rules.Wrapping = fyne.TextWrapWord

	f.poolURL = widget.NewEntry()
	f.poolURL.SetPlaceHolder("https://pool.example.org")
	f.poolInvite = widget.NewEntry()
	f.poolInvite.SetPlaceHolder("only if the pool gave you one")
	f.poolForm = container.NewVBox(
		container.New(layout.NewFormLayout(),
			widget.NewLabel("Pool address"), f.poolURL,
			widget.NewLabel("Invite token"), f.poolInvite,
		),
		f.poolErr,
	)
	var scroll *container.Scroll
	f.means = hint("")
	f.choice = widget.NewRadioGroup([]string{choicePool, choiceSolo}, func(c string) {
		setError(f.poolErr, "")
		if c == choicePool {
			setHint(f.means, poolMeans)
		} else {
			setHint(f.means, soloMeans)
		}
		if c == choicePool {
			f.poolForm.Show()
			if scroll != nil {
				// The pool's fields, which a short window hides: lay
				// them out, then scroll to them.
				scroll.Refresh()
				scroll.ScrollToBottom()
			}
		} else {
			f.poolForm.Hide()
		}
	})
	f.choice.Required = true
	f.choice.SetSelected(choiceSolo)

	f.status = widget.NewLabel("")
	f.status.Wrapping = fyne.TextWrapWord
	f.start = widget.NewButton("Start", func() { f.begin(ctx) })
	f.start.Importance = widget.HighImportance
	f.settings = widget.NewButton("Change these in Settings...", func() { u.ShowSettings() })

	var login fyne.CanvasObject = layout.NewSpacer()
	if u.deps.Autostart != nil {
		f.autostart = widget.NewCheck("Start idlepool when I log in", nil)
		f.autostart.SetChecked(true)
		login = f.autostart
	}

	body := container.NewVBox(
		widget.NewLabelWithStyle("idlepool lends this computer's idle time to computations.", fyne.TextAlignLeading, fyne.TextStyle{Bold: true}),
		hint("It starts with sensible rules, so that you never notice it:"),
		rules,
		hint("You can change all of this later in Settings, from the tray icon."),
		widget.NewSeparator(),
		heading("What should it compute?"),
		f.choice,
		f.means,
		f.poolForm,
		f.startErr,
		f.status,
	)
	bar := container.NewHBox(f.settings, layout.NewSpacer(), login, f.start)
	scroll = pageScroll(container.NewPadded(body))
	f.content = container.NewBorder(nil, container.NewPadded(bar), nil, nil, scroll)
	return f
}

// begin saves the settings and, for a pool, checks and joins it first;
// then it finishes.
func (f *firstRunForm) begin(ctx context.Context) {
	setError(f.poolErr, "")
	setError(f.startErr, "")
	if f.choice.Selected != choicePool {
		f.finish(ctx, "")
		return
	}
	addr, err := newPoolAddress(ctx, f.u.deps.Store, f.poolURL.Text)
	if err != nil {
		setError(f.poolErr, sentence(err))
		return
	}
	invite := strings.TrimSpace(f.poolInvite.Text)
	f.start.Disable()
	f.status.SetText("Contacting the pool at " + addr + "...")
	f.busy.Go(func() {
		name, err := joinPool(ctx, f.u.deps, addr, invite)
		fyne.Do(func() {
			f.start.Enable()
			f.status.SetText("")
			if err != nil {
				setError(f.poolErr, sentence(err))
				return
			}
			if name == "" {
				name = addr
			}
			f.finish(ctx, name)
		})
	})
}

// finish saves the settings shown (the defaults on a first run), tells
// the engine, closes the window and calls done. pool is the name of the
// pool joined, or "".
func (f *firstRunForm) finish(ctx context.Context, pool string) {
	l := f.u.deps.Store
	s, err := l.Settings(ctx)
	if err == nil {
		err = l.SaveSettings(ctx, s)
	}
	if err != nil {
		msg := fmt.Sprintf("The settings could not be saved: %v", err)
		if pool != "" {
			msg = fmt.Sprintf("Joined %s, but the settings could not be saved: %v", pool, err)
		}
		setError(f.startErr, msg)
		return
	}
	// The start-at-login entry, which the tray app made on its first
	// start (so that it comes back after the next login), kept or taken
	// away as the box says; the tray menu's "Start at login" toggles it
	// later.
	if a := f.u.deps.Autostart; f.autostart != nil {
		on, err := a.Enabled()
		switch {
		case err != nil:
		case f.autostart.Checked && !on:
			err = a.Enable()
		case !f.autostart.Checked && on:
			err = a.Disable()
		}
		if err != nil {
			setError(f.startErr, fmt.Sprintf("Settings saved, but the start at login could not be changed: %v", err))
			return
		}
	}
	if f.u.deps.Engine != nil {
		f.u.deps.Engine.Reload()
	}
	f.w.Close()
	if f.done != nil {
		f.done()
	}
}
