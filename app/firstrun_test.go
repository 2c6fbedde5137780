package app

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/test"
	"github.com/google/go-cmp/cmp"

	"idlepool/idle"
	"idlepool/store"
)

func openTestStore(t *testing.T) *store.Local {
	t.Helper()
	l, err := store.OpenLocal(filepath.Join(t.TempDir(), "local.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestNeedsFirstRun(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		prepare func(l *store.Local) error
		want    bool
	}{
		{"new installation", func(*store.Local) error { return nil }, true},
		{"settings saved", func(l *store.Local) error { return l.SaveSettings(ctx, idle.Defaults()) }, false},
		{"a pool joined", func(l *store.Local) error { return l.JoinPool(ctx, goodPool, "") }, false},
		{"a pool joined and left", func(l *store.Local) error {
			if err := l.JoinPool(ctx, goodPool, ""); err != nil {
				return err
			}
			return l.LeavePool(ctx, goodPool)
		}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := openTestStore(t)
			if err := tc.prepare(l); err != nil {
				t.Fatal(err)
			}
			got, err := NeedsFirstRun(ctx, l)
			if err != nil || got != tc.want {
				t.Errorf("NeedsFirstRun = %v, %v; want %v, nil", got, err, tc.want)
			}
		})
	}
}

// firstRunFixture is a first-run form in a window over a real store.
type firstRunFixture struct {
	store  *store.Local
	engine *settingsTestEngine
	check  *testCheckPool
	form   *firstRunForm
	done   int
	closed bool
}

func newFirstRunFixture(t *testing.T) *firstRunFixture {
	t.Helper()
	a := testApp(t)
	fx := &firstRunFixture{store: openTestStore(t), engine: &settingsTestEngine{}, check: &testCheckPool{}}
	deps := &Deps{Store: fx.store, Engine: fx.engine, CheckPool: fx.check.check}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w := a.NewWindow("first run")
	w.SetOnClosed(func() { fx.closed = true })
	fx.form = newFirstRunForm(ctx, New(a, deps), w, func() { fx.done++ })
	w.SetContent(fx.form.content)
	w.Resize(fyne.NewSize(640, 680))
	return fx
}

func TestFirstRunSolo(t *testing.T) {
	fx := newFirstRunFixture(t)
	ctx := context.Background()
	if fx.form.choice.Selected != choiceSolo || fx.form.poolForm.Visible() {
		t.Errorf("choice %q, pool address shown %v: want solo first, without the pool form", fx.form.choice.Selected, fx.form.poolForm.Visible())
	}
	test.Tap(fx.form.start)
	got, err := fx.store.Settings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(idle.Defaults(), got); diff != "" {
		t.Errorf("settings saved (-want +got):\n%s", diff)
	}
	if need, err := NeedsFirstRun(ctx, fx.store); err != nil || need {
		t.Errorf("NeedsFirstRun after Start = %v, %v; want false", need, err)
	}
	if fx.done != 1 || !fx.closed || fx.engine.Reloads() != 1 {
		t.Errorf("done called %d times, window closed %v, Reload called %d times; want 1, true, 1", fx.done, fx.closed, fx.engine.Reloads())
	}
	if pools, _ := fx.store.JoinedPools(ctx); len(pools) != 0 {
		t.Errorf("solo joined pools %v", pools)
	}
}

func TestFirstRunPool(t *testing.T) {
	fx := newFirstRunFixture(t)
	ctx := context.Background()
	fx.form.choice.SetSelected(choicePool)
	if !fx.form.poolForm.Visible() {
		t.Fatal("choosing a pool does not show the pool's address")
	}
	fx.form.poolURL.SetText(goodPool)
	fx.form.poolInvite.SetText("invite-9")
	test.Tap(fx.form.start)
	fx.form.busy.Wait()
	if fx.form.poolErr.Visible() {
		t.Fatalf("join failed: %s", fx.form.poolErr.Text)
	}
	pools, err := fx.store.JoinedPools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]store.JoinedPool{{URL: goodPool, Name: "Physics lab", Invite: "invite-9"}}, pools); diff != "" {
		t.Errorf("JoinedPools (-want +got):\n%s", diff)
	}
	if saved, err := fx.store.SettingsSaved(ctx); err != nil || !saved {
		t.Errorf("SettingsSaved = %v, %v; want the defaults saved", saved, err)
	}
	if got, _ := fx.store.Settings(ctx); !cmp.Equal(idle.Defaults(), got) {
		t.Errorf("settings saved = %+v, want the defaults", got)
	}
	if fx.done != 1 || !fx.closed || fx.engine.Reloads() != 1 {
		t.Errorf("done called %d times, window closed %v, Reload called %d times; want 1, true, 1", fx.done, fx.closed, fx.engine.Reloads())
	}
}

func TestFirstRunPoolAlreadyJoined(t *testing.T) {
	fx := newFirstRunFixture(t)
	ctx := context.Background()
	if err := fx.store.JoinPool(ctx, goodPool, ""); err != nil {
		t.Fatal(err)
	}
	fx.form.choice.SetSelected(choicePool)
	fx.form.poolURL.SetText(" " + goodPool + "/ ")
	test.Tap(fx.form.start)
	fx.form.busy.Wait()
	if !fx.form.poolErr.Visible() || !strings.Contains(fx.form.poolErr.Text, "lready joined") {
		t.Errorf("inline message = %q (visible %v), want already joined", fx.form.poolErr.Text, fx.form.poolErr.Visible())
	}
	if calls := fx.check.Calls(); len(calls) != 0 {
		t.Errorf("CheckPool asked %q, want not asked", calls)
	}
	if pools, _ := fx.store.JoinedPools(ctx); len(pools) != 1 {
		t.Errorf("JoinedPools = %v, want the one pool", pools)
	}
	if fx.done != 0 || fx.closed {
		t.Errorf("done called %d times, closed %v; want the window open", fx.done, fx.closed)
	}
}

func TestFirstRunPoolErrors(t *testing.T) {
	tests := []struct {
		url  string
		want string
	}{
		{"not a url", `"not a url" is not a pool address`},
		{deadPool, "Cannot reach the pool at " + deadPool},
	}
	for _, tc := range tests {
		t.Run(tc.url, func(t *testing.T) {
			fx := newFirstRunFixture(t)
			ctx := context.Background()
			fx.form.choice.SetSelected(choicePool)
			fx.form.poolURL.SetText(tc.url)
			test.Tap(fx.form.start)
			fx.form.busy.Wait()
			if !fx.form.poolErr.Visible() || !strings.Contains(fx.form.poolErr.Text, tc.want) {
				t.Errorf("inline message = %q (visible %v), want one with %q", fx.form.poolErr.Text, fx.form.poolErr.Visible(), tc.want)
			}
			if need, err := NeedsFirstRun(ctx, fx.store); err != nil || !need {
				t.Errorf("NeedsFirstRun = %v, %v; want true: nothing saved or joined", need, err)
			}
			if fx.done != 0 || fx.closed || fx.engine.Reloads() != 0 {
				t.Errorf("done called %d times, closed %v, Reload called %d times; want none", fx.done, fx.closed, fx.engine.Reloads())
			}
			if fx.form.start.Disabled() {
				t.Error("Start stays disabled after a failure")
			}

			// Choosing solo instead still starts.
			fx.form.choice.SetSelected(choiceSolo)
			if fx.form.poolErr.Visible() {
				t.Error("the pool's message stays after choosing solo")
			}
			test.Tap(fx.form.start)
			if fx.done != 1 {
				t.Errorf("done called %d times after choosing solo, want 1", fx.done)
			}
		})
	}
}

func TestDefaultsInWords(t *testing.T) {
	text := strings.Join(defaultsInWords(idle.Defaults()), "\n")
	for _, want := range []string{
		"for 5 minutes",
		"only on mains power (AC), never on battery",
		"all processor cores but one",
		"at most 50% of the memory",
		"hotter than 85 °C",
		"Graphics cards (GPUs) stay off until you turn them on",
		"at any hour",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the defaults in words lack %q:\n%s", want, text)
		}
	}
}

func TestShowFirstRun(t *testing.T) {
	a := testApp(t)
	l := openTestStore(t)
	done := 0
	u := New(a, &Deps{Store: l, Engine: &settingsTestEngine{}})
	w := u.ShowFirstRun(func() { done++ })
	if w.Title() != "Welcome to idlepool" || u.ShowFirstRun(nil) != w {
		t.Errorf("window %q, or a second call opened another", w.Title())
	}
	w.Close()
	if done != 0 {
		t.Error("closing the window without Start called done")
	}
	if need, err := NeedsFirstRun(context.Background(), l); err != nil || !need {
		t.Errorf("NeedsFirstRun after closing = %v, %v; want true", need, err)
	}
}

// TestFirstRunSaysWhatEachChoiceMeans: under the choices the window says
// what the one chosen means: solo (the first choice) computes only the
// owner's own jobs and donates nothing, and where to join a pool later;
// a pool's address comes from whoever runs it, and Browse jobs lists its
// jobs. Both show whole in the window at its size, without scrolling.
func TestFirstRunSaysWhatEachChoiceMeans(t *testing.T) {
	fx := newFirstRunFixture(t)
	f := fx.form
	for _, tc := range []struct {
		choice string
		want   []string
	}{
		{choiceSolo, []string{"only the jobs you run yourself", "nothing is donated", "join a pool in Settings → Pools"}},
		{choicePool, []string{"gives you its address", "invite token", "Browse jobs in the tray menu lists the jobs"}},
	} {
		f.choice.SetSelected(tc.choice)
		f.w.Content().Refresh()
		text := f.means.String()
		for _, w := range tc.want {
			if !strings.Contains(text, w) {
				t.Errorf("%s: the window says %q, want it to say %q", tc.choice, text, w)
			}
		}
		if !f.means.Visible() || f.means.Size().Height < f.means.MinSize().Height-0.5 {
			t.Errorf("%s: the words are drawn %v (visible %v), need %v", tc.choice, f.means.Size(), f.means.Visible(), f.means.MinSize())
		}
		if tc.choice == choiceSolo {
			var scroll *container.Scroll
			walkDrawn(f.content, func(o fyne.CanvasObject) {
				if s, ok := o.(*container.Scroll); ok && scroll == nil {
					scroll = s
				}
			})
			if !inView(f.means, scroll) {
				t.Errorf("solo: the words on what it means are out of view at the window's size")
			}
		}
	}
}
