package app

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/test"

	"idlepool/idle"
)

// TestSettingsGameSigns: the game signs are on at first; unticking one in
// the Computer tab saves it off, and ticking it again on.
func TestSettingsGameSigns(t *testing.T) {
	fx := newSettingsFixture(t, nil)
	f := fx.form
	fx.showTab("Computer")
	if !f.gameFullScreen.Checked || !f.gameMode.Checked || !f.gameSteam.Checked {
		t.Fatalf("game signs shown off by default: %v %v %v", f.gameFullScreen.Checked, f.gameMode.Checked, f.gameSteam.Checked)
	}
	test.Tap(f.gameFullScreen)
	test.Tap(f.gameSteam)
	fx.tapSave()
	if f.saveErr.Visible() {
		t.Fatalf("save failed: %s", f.saveErr.Text)
	}
	got := fx.saved(t)
	if got.PauseForFullScreen || !got.PauseForGameMode || got.PauseForSteam {
		t.Errorf("saved full screen %v, GameMode %v, Steam %v; want false, true, false", got.PauseForFullScreen, got.PauseForGameMode, got.PauseForSteam)
	}
	test.Tap(f.gameSteam)
	fx.tapSave()
	if got := fx.saved(t); !got.PauseForSteam || got.PauseForFullScreen {
		t.Errorf("Steam ticked again: saved Steam %v, full screen %v", got.PauseForSteam, got.PauseForFullScreen)
	}
}

// newFirstRunWithAutostart is newFirstRunFixture with a start-at-login
// entry held in memory.
func newFirstRunWithAutostart(t *testing.T, a *fakeAutostart) *firstRunFixture {
	t.Helper()
	fa := testApp(t)
	fx := &firstRunFixture{store: openTestStore(t), engine: &settingsTestEngine{}, check: &testCheckPool{}}
	deps := &Deps{Store: fx.store, Engine: fx.engine, CheckPool: fx.check.check, Autostart: a}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w := fa.NewWindow("first run")
	w.SetOnClosed(func() { fx.closed = true })
	fx.form = newFirstRunForm(ctx, New(fa, deps), w, func() { fx.done++ })
	w.SetContent(fx.form.content)
	w.Resize(fyne.NewSize(640, 680))
	return fx
}

// TestFirstRunStartsAtLogin: Start keeps or sets up the start at login
// (ticked by default); unticked, it takes it away; a failure is said and
// keeps the window open.
func TestFirstRunStartsAtLogin(t *testing.T) {
	a := &fakeAutostart{}
	fx := newFirstRunWithAutostart(t, a)
	if fx.form.autostart == nil || !fx.form.autostart.Checked {
		t.Fatal("no ticked start-at-login box on the first run")
	}
	test.Tap(fx.form.start)
	if !a.on || fx.done != 1 {
		t.Errorf("after Start: start at login %v, done %d; want true, 1", a.on, fx.done)
	}

	a = &fakeAutostart{on: true} // as the tray app's first start left it
	fx = newFirstRunWithAutostart(t, a)
	test.Tap(fx.form.autostart)
	test.Tap(fx.form.start)
	if a.on || fx.done != 1 {
		t.Errorf("unticked: start at login %v, done %d; want false (removed), 1", a.on, fx.done)
	}

	a = &fakeAutostart{fail: fmt.Errorf("read-only home")}
	fx = newFirstRunWithAutostart(t, a)
	test.Tap(fx.form.start)
	if fx.done != 0 || fx.closed || !strings.Contains(fx.form.startErr.Text, "read-only home") {
		t.Errorf("failing autostart: done %d, closed %v, message %q", fx.done, fx.closed, fx.form.startErr.Text)
	}

	if fx := newFirstRunFixture(t); fx.form.autostart != nil {
		t.Error("a start-at-login box without an Autostart")
	}
}

func TestGameSignsInWords(t *testing.T) {
	s := idle.Defaults()
	if got := strings.Join(defaultsInWords(s), "\n"); !strings.Contains(got, "It pauses while a game runs: a full-screen window") {
		t.Errorf("the defaults in words do not say games pause it:\n%s", got)
	}
	s.PauseForFullScreen, s.PauseForGameMode = false, false
	if got := gameSignsInWords(s); got != "a Steam game" {
		t.Errorf("Steam alone: %q", got)
	}
	s.PauseForSteam = false
	if got := strings.Join(defaultsInWords(s), "\n"); strings.Contains(got, "game") {
		t.Errorf("no signs, yet the words speak of games:\n%s", got)
	}
}
