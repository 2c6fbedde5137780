package app

import (
	"context"
	"crypto/sha256"
	"strings"
	"testing"
	"time"

	"fyne.io/fyne/v2/test"

	"idlepool/agent"
	"idlepool/job"
	"idlepool/offers"
	"idlepool/store"
)

const choicesPool = "http://127.0.0.1:7421"

// joinedFixture is a settings window over a store where the pool
// choicesPool ("Physics lab") is joined.
func joinedFixture(t *testing.T, engine Engine) *settingsFixture {
	t.Helper()
	return newSettingsFixture(t, func(d *Deps) {
		ctx := context.Background()
		if err := d.Store.JoinPool(ctx, choicesPool, ""); err != nil {
			t.Fatal(err)
		}
		if err := d.Store.AddPool(ctx, choicesPool, "Physics lab"); err != nil {
			t.Fatal(err)
		}
		if engine != nil {
			d.Engine = engine
		}
	})
}

// TestSettingsCoresAboveTheMachine: a count of cores above the computer's
// is refused under the field with the words `idlepool settings set`
// uses, and nothing is saved.
func TestSettingsCoresAboveTheMachine(t *testing.T) {
	fx := newSettingsFixture(t, nil)
	f := fx.form
	f.cores.SetText("12")
	if f.saveSettings(context.Background()) {
		t.Fatal("12 cores of 8 saved")
	}
	if want := "Cores: this computer has 8 logical CPUs; 12 is more than it has"; !strings.Contains(f.coresErr.Text, want) || !f.coresErr.Visible() {
		t.Errorf("message under cores %q (shown %t), want %q", f.coresErr.Text, f.coresErr.Visible(), want)
	}
	if s, _ := fx.store.Settings(context.Background()); s.Cores != 0 {
		t.Errorf("Cores %d saved", s.Cores)
	}
	f.cores.SetText("8")
	if !f.saveSettings(context.Background()) {
		t.Fatalf("8 of 8 cores refused: %q", f.coresErr.Text)
	}
}

// TestSettingsPoolChoices: the Pools tab shows and saves each pool's
// weight, per-task limits and GPU programs, and those for every pool, as
// `idlepool jobs weight|limits|gpu-programs` do; a wrong value is refused
// with the same words, on the Pools tab, and nothing is saved.
func TestSettingsPoolChoices(t *testing.T) {
	ctx := context.Background()
	fx := joinedFixture(t, nil)
	f := fx.form
	r := f.choices.rows[choicesPool]
	if r == nil {
		t.Fatal("no choices for the joined pool")
	}
	if r.weight.Text != "1" || r.memory.Text != "" || r.time.Text != "" || r.gpu.Checked {
		t.Errorf("defaults shown: weight %q, memory %q, time %q, GPU %t", r.weight.Text, r.memory.Text, r.time.Text, r.gpu.Checked)
	}

	r.weight.SetText("-1")
	r.time.SetText("30")
	if f.saveSettings(ctx) {
		t.Fatal("weight -1 saved")
	}
	_, werr := offers.ParseWeight("-1")
	if !strings.Contains(r.weightErr.Text, werr.Error()[1:]) || !r.weightErr.Visible() {
		t.Errorf("message under the weight %q, want the CLI's %q", r.weightErr.Text, werr)
	}
	if !strings.Contains(r.timeErr.Text, "ime takes a duration such as 90s") {
		t.Errorf("message under the time %q", r.timeErr.Text)
	}
	if f.tabs.Selected().Text != "Pools" || !strings.Contains(f.saveErr.Text, "on the Pools tab") {
		t.Errorf("tab %q, save message %q", f.tabs.Selected().Text, f.saveErr.Text)
	}

	r.weight.SetText("2")
	r.time.SetText("30m")
	r.memory.SetText("2048")
	r.gpu.SetChecked(true)
	f.choices.global.memory.SetText("4096")
	if !f.saveSettings(ctx) {
		t.Fatalf("not saved: %q", f.saveErr.Text)
	}
	prefs, err := fx.store.Preferences(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pp, _ := prefs.Pool(choicesPool)
	if pp.Weight != 2 || pp.MaxMemoryMiB != 2048 || pp.MaxTaskTime != 30*time.Minute || !pp.GPUPrograms {
		t.Errorf("pool choices saved: %+v", pp)
	}
	if prefs.Global.MaxMemoryMiB != 4096 || prefs.Global.GPUPrograms || prefs.Global.MaxTaskTime != 0 {
		t.Errorf("choices for every pool saved: %+v", prefs.Global)
	}
	if n := fx.engine.Reloads(); n != 1 {
		t.Errorf("engine reloaded %d times, want 1", n)
	}

	// A window opened afterwards shows them.
	again := newSettingsForm(ctx, New(testApp(t), fx.deps), fx.window)
	r2 := again.choices.rows[choicesPool]
	if r2.weight.Text != "2" || r2.memory.Text != "2048" || r2.time.Text != "30m0s" || !r2.gpu.Checked || again.choices.global.memory.Text != "4096" {
		t.Errorf("shown again: weight %q, memory %q, time %q, GPU %t, every pool's memory %q",
			r2.weight.Text, r2.memory.Text, r2.time.Text, r2.gpu.Checked, again.choices.global.memory.Text)
	}
}

// leaveEngine reports two tasks running for choicesPool and one for
// another pool.
type leaveEngine struct{ settingsTestEngine }

func (e *leaveEngine) Status() agent.AgentStatus {
	return agent.AgentStatus{Running: []agent.RunningTask{
		{Pool: choicesPool, Job: "a", Task: 1, Lease: "l1"},
		{Pool: choicesPool, Job: "a", Task: 2, Lease: "l2"},
		{Pool: "http://other", Job: "b", Task: 1, Lease: "l3"},
	}}
}

// TestSettingsLeaveSaysWhatHappens: the confirmation before leaving
// counts the pool's running tasks and its results waiting for a receipt,
// and says what becomes of them.
func TestSettingsLeaveSaysWhatHappens(t *testing.T) {
	ctx := context.Background()
	fx := joinedFixture(t, &leaveEngine{})
	for i, lease := range []string{"p1", "p2", "p3"} {
		res := []byte("result " + lease)
		if err := fx.store.AddPending(ctx, store.Contribution{Pool: choicesPool, Job: job.ID(sha256.Sum256([]byte("j"))), Task: int64(i),
			Lease: lease, Digest: sha256.Sum256(res), Result: res, Cost: 1, Created: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}); err != nil {
			t.Fatal(err)
		}
	}
	f := fx.form
	leave := findButtons(f.poolList, "Leave")
	if len(leave) != 1 {
		t.Fatalf("%d Leave buttons", len(leave))
	}
	test.Tap(leave[0])
	if f.leaving == nil {
		t.Fatal("no confirmation")
	}
	if f.leaving.title != "Leave Physics lab?" {
		t.Errorf("title %q", f.leaving.title)
	}
	for _, want := range []string{
		"This computer stops taking tasks from Physics lab at once.",
		"The 2 tasks it is running now stop and are handed back to the pool, which gives them to other computers; they earn no receipt.",
		"3 results wait for the pool's receipt: they stay in your history as pending, and their receipts are collected only if you join Physics lab again.",
	} {
		if !strings.Contains(f.leaving.text, want) {
			t.Errorf("confirmation %q lacks %q", f.leaving.text, want)
		}
	}
	f.leaving.answer(true)
	if pools, _ := fx.store.JoinedPools(ctx); len(pools) != 0 {
		t.Errorf("still joined after Leave: %v", pools)
	}
	if !strings.Contains(f.poolStatus.Text, "Left Physics lab") {
		t.Errorf("status %q", f.poolStatus.Text)
	}
}
