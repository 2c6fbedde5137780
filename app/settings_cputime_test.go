package app

import (
	"context"
	"strings"
	"testing"

	"fyne.io/fyne/v2/test"
)

// TestSettingsCPUTimeAndPriority: the Computer tab's time on each core
// and idle priority, beside the cores, show what the store holds, save
// what the owner typed or ticked, and refuse a percentage out of range
// with a message beside the field, saving nothing.
func TestSettingsCPUTimeAndPriority(t *testing.T) {
	fx := newSettingsFixture(t, nil)
	f := fx.form
	fx.showTab("Computer")
	if f.cpuTime.Text != "" || !f.idlePriority.Checked {
		t.Fatalf("defaults shown as time %q, idle priority %v; want empty and ticked", f.cpuTime.Text, f.idlePriority.Checked)
	}
	f.cpuTime.SetText("50%")
	test.Tap(f.idlePriority) // off: a low priority
	fx.tapSave()
	if f.saveErr.Visible() {
		t.Fatalf("save failed: %s", f.saveErr.Text)
	}
	if got := fx.saved(t); got.CPUTimeShare != 0.5 || !got.NoIdlePriority {
		t.Errorf("saved CPUTimeShare %g, NoIdlePriority %v; want 0.5, true", got.CPUTimeShare, got.NoIdlePriority)
	}

	// A window opened on those settings shows them.
	again := newSettingsFixtureOn(t, fx)
	if again.cpuTime.Text != "50" || again.idlePriority.Checked {
		t.Errorf("saved settings shown as time %q, idle priority %v; want 50 and not ticked", again.cpuTime.Text, again.idlePriority.Checked)
	}

	f.cpuTime.SetText("100")
	test.Tap(f.idlePriority)
	fx.tapSave()
	if got := fx.saved(t); got.CPUTimeShare != 0 || got.NoIdlePriority {
		t.Errorf("100%% and idle priority saved as CPUTimeShare %g, NoIdlePriority %v; want 0, false", got.CPUTimeShare, got.NoIdlePriority)
	}

	for _, bad := range []string{"2", "150", "hard"} {
		f.cpuTime.SetText(bad)
		fx.tapSave()
		if !f.cpuTimeErr.Visible() || !strings.Contains(f.cpuTimeErr.Text, "from 5 to 100") {
			t.Errorf("%q: message %q (visible %v), want one saying from 5 to 100", bad, f.cpuTimeErr.Text, f.cpuTimeErr.Visible())
		}
		if got := fx.saved(t); got.CPUTimeShare != 0 {
			t.Errorf("%q saved as CPUTimeShare %g", bad, got.CPUTimeShare)
		}
	}
	f.cpuTime.SetText("")
	fx.tapSave()
	if f.cpuTimeErr.Visible() || f.saveErr.Visible() {
		t.Errorf("messages still shown after emptying the field: %q, %q", f.cpuTimeErr.Text, f.saveErr.Text)
	}
}

// newSettingsFixtureOn builds a second settings form on fx's store and
// returns it.
func newSettingsFixtureOn(t *testing.T, fx *settingsFixture) *settingsForm {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	a := testApp(t)
	w := a.NewWindow("settings again")
	t.Cleanup(w.Close)
	f := newSettingsForm(ctx, New(a, fx.deps), w)
	w.SetContent(f.content)
	f.start(ctx)
	f.busy.Wait()
	return f
}
