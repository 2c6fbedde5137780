package app

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/test"
	"fyne.io/fyne/v2/widget"
	"github.com/google/go-cmp/cmp"

	"idlepool/agent"
	"idlepool/idle"
	"idlepool/store"
)

// settingsTestEngine is an Engine that counts Reload calls.
type settingsTestEngine struct {
	mu      sync.Mutex
	reloads int
}

func (e *settingsTestEngine) Status() agent.AgentStatus { return agent.AgentStatus{} }

func (e *settingsTestEngine) Reload() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.reloads++
}

func (e *settingsTestEngine) Reloads() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.reloads
}

// settingsTestGPUs is an idle.GPUSource that lists fixed GPUs or fails.
type settingsTestGPUs struct {
	gpus []idle.GPU
	err  error
}

func (g settingsTestGPUs) GPUs(context.Context) ([]idle.GPU, error) { return g.gpus, g.err }

var twoTestGPUs = []idle.GPU{
	{Index: 0, UUID: "GPU-0000", Name: "NVIDIA GeForce RTX 3060", MemoryTotalMiB: 12288},
	{Index: 1, UUID: "GPU-1111", Name: "NVIDIA GeForce RTX 4090", MemoryTotalMiB: 24564},
}

// Pool addresses the test CheckPool knows.
const (
	goodPool = "http://127.0.0.1:7420"
	deadPool = "http://127.0.0.1:1"
)

// testCheckPool answers like agent.CheckPool: the name of goodPool, and
// for anything else the error a refused connection gives. It records
// the calls.
type testCheckPool struct {
	mu    sync.Mutex
	calls []string // url + " " + invite
}

func (c *testCheckPool) check(ctx context.Context, url, invite string) (string, error) {
	c.mu.Lock()
	c.calls = append(c.calls, url+" "+invite)
	c.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if url == goodPool {
		return "Physics lab", nil
	}
	return "", errors.New("cannot reach the pool at " + url + ": connection refused (is the coordinator running?)")
}

func (c *testCheckPool) Calls() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.calls...)
}

// settingsFixture is a settings window over a real store in a temporary
// directory, with fake engine, GPUs and pool check.
type settingsFixture struct {
	deps   *Deps
	store  *store.Local
	engine *settingsTestEngine
	check  *testCheckPool
	form   *settingsForm
	window fyne.Window
}

// newSettingsFixture opens a store, lets seed prepare it and the Deps,
// then builds the settings form in a window and waits for its GPU probe.
func newSettingsFixture(t *testing.T, seed func(*Deps)) *settingsFixture {
	t.Helper()
	a := testApp(t)
	l, err := store.OpenLocal(filepath.Join(t.TempDir(), "local.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	fx := &settingsFixture{store: l, engine: &settingsTestEngine{}, check: &testCheckPool{}}
	fx.deps = &Deps{
		Store:     l,
		Engine:    fx.engine,
		GPUs:      settingsTestGPUs{gpus: twoTestGPUs},
		CheckPool: fx.check.check,
		CPUs:      8,
	}
	if seed != nil {
		seed(fx.deps)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	fx.window = a.NewWindow("settings")
	t.Cleanup(fx.window.Close)
	fx.form = newSettingsForm(ctx, New(a, fx.deps), fx.window)
	fx.window.SetContent(fx.form.content)
	fx.window.Resize(fyne.NewSize(760, 560))
	fx.form.start(ctx)
	fx.form.busy.Wait() // the GPU probe updates the form on its goroutine in tests
	return fx
}

// saved returns the settings in the store.
func (fx *settingsFixture) saved(t *testing.T) idle.Settings {
	t.Helper()
	s, err := fx.store.Settings(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// tapSave taps Save.
func (fx *settingsFixture) tapSave() { test.Tap(fx.form.save) }

// showTab selects a tab, so that its widgets are laid out at their size.
func (fx *settingsFixture) showTab(name string) {
	for _, it := range fx.form.tabs.Items {
		if it.Text == name {
			fx.form.tabs.Select(it)
		}
	}
	fx.window.Content().Refresh()
}

func TestSettingsPaintHoursAndSave(t *testing.T) {
	paused := time.Date(2030, 1, 2, 3, 4, 0, 0, time.UTC)
	fx := newSettingsFixture(t, func(d *Deps) {
		s := idle.Defaults()
		s.TimeZone = "UTC"
		s.PausedUntil = paused
		if err := d.Store.SaveSettings(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	})
	f := fx.form
	fx.showTab("Hours")
	if !f.anyTime.Checked {
		t.Fatal("the defaults (any time) should show Any time ticked")
	}
	test.Tap(f.anyTime)
	if !f.hours.Grid().empty() {
		t.Fatal("unticking Any time should leave an empty grid to paint on")
	}
	paint(f.hours, [2]int{0, 9}, [2]int{0, 17})  // Monday 09:00-18:00
	paint(f.hours, [2]int{1, 9}, [2]int{1, 17})  // Tuesday too
	paint(f.hours, [2]int{4, 22}, [2]int{4, 23}) // Friday night
	paint(f.hours, [2]int{5, 0}, [2]int{5, 6})   // into Saturday morning
	paint(f.hours, [2]int{1, 12}, [2]int{1, 12}) // a press on a painted cell erases it
	fx.tapSave()

	got := fx.saved(t)
	if want := "Mon 09:00-18:00; Tue 09:00-12:00; Tue 13:00-18:00; Fri 22:00-07:00"; got.Schedule.String() != want {
		t.Errorf("saved schedule = %q, want %q", got.Schedule, want)
	}
	if got.TimeZone != "UTC" || !got.PausedUntil.Equal(paused) {
		t.Errorf("fields the window does not show changed: time zone %q, paused until %v", got.TimeZone, got.PausedUntil)
	}
	if n := fx.engine.Reloads(); n != 1 {
		t.Errorf("Reload called %d times, want 1", n)
	}
	if !strings.Contains(f.status.Text, "Saved") {
		t.Errorf("status = %q, want it to say Saved", f.status.Text)
	}

	// Ticking Any time again saves the empty schedule.
	test.Tap(f.anyTime)
	fx.tapSave()
	if got := fx.saved(t); len(got.Schedule) != 0 {
		t.Errorf("after ticking Any time: schedule %q, want none (any time)", got.Schedule)
	}
}

// TestSettingsKeepsPartHours checks that a schedule with parts of hours,
// set with the CLI, survives a save that does not touch the grid.
func TestSettingsKeepsPartHours(t *testing.T) {
	fx := newSettingsFixture(t, func(d *Deps) {
		s := idle.Defaults()
		s.Schedule, _ = idle.ParseSchedule("Mon-Fri 22:30-07:15")
		s.IdleFor = 90 * time.Second
		if err := d.Store.SaveSettings(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	})
	fx.form.memory.SetText("40")
	fx.tapSave()
	got := fx.saved(t)
	if got.Schedule.String() != "Mon-Fri 22:30-07:15" || got.IdleFor != 90*time.Second || got.MemoryShare != 0.4 {
		t.Errorf("saved schedule %q, idle for %v, memory %g; want the schedule and idle time kept, memory 0.4", got.Schedule, got.IdleFor, got.MemoryShare)
	}
}

func TestSettingsComputerFields(t *testing.T) {
	fx := newSettingsFixture(t, nil)
	f := fx.form
	fx.showTab("Computer")
	f.cores.SetText("75%")
	f.idleMinutes.SetText("12")
	f.maxOtherCPU.SetText("30%")
	f.memory.SetText("25")
	test.Tap(f.pauseOnBattery) // off: computing on battery allowed
	f.minBattery.SetText("40")
	f.maxTemp.SetText("80")
	f.cache.SetText("2 GiB")
	f.shareDisk.SetText("500 MiB")
	f.shareUpload.SetText("1.5 MiB/s")
	test.Tap(f.updates) // off: never check for updates
	fx.tapSave()
	if f.saveErr.Visible() {
		t.Fatalf("save failed: %s", f.saveErr.Text)
	}
	want := idle.Defaults()
	want.NoUpdates = true
	want.CacheMiB = 2048
	want.ShareDiskMiB = 500
	want.ShareUploadKiBps = 1536
	want.CoresShare = 0.75
	want.IdleFor = 12 * time.Minute
	want.MaxOtherCPUShare = 0.3
	want.MemoryShare = 0.25
	want.PauseOnBattery = false
	want.MinBatteryPercent = 40
	want.MaxTemperatureC = 80
	if diff := cmp.Diff(want, fx.saved(t)); diff != "" {
		t.Errorf("saved settings (-want +got):\n%s", diff)
	}

	f.cores.SetText("6")
	fx.tapSave()
	if got := fx.saved(t); got.Cores != 6 || got.CoresShare != 0 {
		t.Errorf("cores 6 saved as Cores %d, CoresShare %g", got.Cores, got.CoresShare)
	}
	f.cores.SetText("")
	fx.tapSave()
	if got := fx.saved(t); got.Cores != 0 || got.CoresShare != 0 {
		t.Errorf("empty cores saved as Cores %d, CoresShare %g; want neither (all but one)", got.Cores, got.CoresShare)
	}
}

func TestSettingsInvalidValues(t *testing.T) {
	tests := []struct {
		name   string
		change func(f *settingsForm)
		errOf  func(f *settingsForm) *widget.Label
		want   string // in the inline message
		tab    string
	}{
		{"idle minutes not a number", func(f *settingsForm) { f.idleMinutes.SetText("abc") },
			func(f *settingsForm) *widget.Label { return f.idleErr }, "idle minutes must be a whole number from 0 to 1440", "Computer"},
		{"idle minutes too many", func(f *settingsForm) { f.idleMinutes.SetText("1441") },
			func(f *settingsForm) *widget.Label { return f.idleErr }, "idle minutes must be a whole number from 0 to 1440", "Computer"},
		{"cores", func(f *settingsForm) { f.cores.SetText("lots") },
			func(f *settingsForm) *widget.Label { return f.coresErr }, "cores must be a whole number", "Computer"},
		{"cores share zero", func(f *settingsForm) { f.cores.SetText("0%") },
			func(f *settingsForm) *widget.Label { return f.coresErr }, "cores must be", "Computer"},
		{"memory zero", func(f *settingsForm) { f.memory.SetText("0") },
			func(f *settingsForm) *widget.Label { return f.memoryErr }, "memory share must be a percentage from 1 to 100", "Computer"},
		{"other programs' share", func(f *settingsForm) { f.maxOtherCPU.SetText("half") },
			func(f *settingsForm) *widget.Label { return f.maxOtherCPUErr }, "percentage from 1 to 100", "Computer"},
		{"battery", func(f *settingsForm) { f.minBattery.SetText("120") },
			func(f *settingsForm) *widget.Label { return f.minBatteryErr }, "battery charge must be a percentage from 0 to 100", "Computer"},
		{"cache", func(f *settingsForm) { f.cache.SetText("2") },
			func(f *settingsForm) *widget.Label { return f.cacheErr }, "disk cache must be a size such as 2 gib", "Computer"},
		{"share disk", func(f *settingsForm) { f.shareDisk.SetText("lots") },
			func(f *settingsForm) *widget.Label { return f.shareDiskErr }, "disk to share must be a size", "Computer"},
		{"upload cap", func(f *settingsForm) { f.shareUpload.SetText("10 KB/s") },
			func(f *settingsForm) *widget.Label { return f.shareUploadErr }, "upload to share must be a rate of at least 64 kib/s", "Computer"},
		{"temperature", func(f *settingsForm) { f.maxTemp.SetText("hot") },
			func(f *settingsForm) *widget.Label { return f.maxTempErr }, "temperature limit must be a number of °c from 0 to 150", "Computer"},
		{"gpu memory", func(f *settingsForm) { f.gpuRows[0].memory.SetText("150") },
			func(f *settingsForm) *widget.Label { return f.gpuRows[0].memoryErr }, "gpu's memory share must be a percentage", "GPUs"},
		{"no hours painted", func(f *settingsForm) { test.Tap(f.anyTime) },
			func(f *settingsForm) *widget.Label { return f.hoursErr }, "paint at least one hour", "Hours"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fx := newSettingsFixture(t, nil)
			f := fx.form
			fx.showTab("Pools")
			tc.change(f)
			fx.tapSave()
			l := tc.errOf(f)
			if !l.Visible() || !strings.Contains(strings.ToLower(l.Text), tc.want) {
				t.Errorf("inline message = %q (visible %v), want one with %q", l.Text, l.Visible(), tc.want)
			}
			if !f.saveErr.Visible() || !strings.Contains(f.saveErr.Text, tc.tab) {
				t.Errorf("message by Save = %q, want one naming the %s tab", f.saveErr.Text, tc.tab)
			}
			if got := f.tabs.Selected().Text; got != tc.tab {
				t.Errorf("tab shown = %s, want %s, where the field is", got, tc.tab)
			}
			if saved, err := fx.store.SettingsSaved(context.Background()); err != nil || saved {
				t.Errorf("SettingsSaved = %v, %v: want nothing saved", saved, err)
			}
			if n := fx.engine.Reloads(); n != 0 {
				t.Errorf("Reload called %d times, want 0", n)
			}
			if strings.Contains(f.status.Text, "Saved") {
				t.Errorf("status says %q after a failed save", f.status.Text)
			}
		})
	}

	// Fixing the value clears its message and saves.
	fx := newSettingsFixture(t, nil)
	fx.form.idleMinutes.SetText("abc")
	fx.tapSave()
	fx.form.idleMinutes.SetText("7")
	fx.tapSave()
	if fx.form.idleErr.Visible() || fx.form.saveErr.Visible() {
		t.Errorf("messages still shown after fixing: %q, %q", fx.form.idleErr.Text, fx.form.saveErr.Text)
	}
	if got := fx.saved(t).IdleFor; got != 7*time.Minute {
		t.Errorf("IdleFor = %v, want 7m", got)
	}
}

func TestSettingsGPUs(t *testing.T) {
	fx := newSettingsFixture(t, func(d *Deps) {
		s := idle.Defaults()
		s.GPUs = map[string]idle.GPUSettings{
			"GPU-0000": {Use: false, MaxOtherShare: 0.2},
			"GPU-gone": {Use: true}, // not plugged in now: kept
		}
		if err := d.Store.SaveSettings(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	})
	f := fx.form
	fx.showTab("GPUs")
	if len(f.gpuRows) != 2 || f.gpuNote.Visible() {
		t.Fatalf("%d GPU rows, note %q; want 2 rows and no note", len(f.gpuRows), f.gpuNote.Text)
	}
	test.Tap(f.gpuRows[1].use)
	f.gpuRows[1].memory.SetText("80")
	f.gpuRows[1].maxTemp.SetText("83")
	test.Tap(f.gpuRows[0].use)
	test.Tap(f.gpuRows[0].use) // on and off again
	fx.tapSave()
	want := map[string]idle.GPUSettings{
		"GPU-0000": {Use: false, MemoryShare: 0.5, MaxOtherShare: 0.2},
		"GPU-1111": {Use: true, MemoryShare: 0.8, MaxTemperatureC: 83},
		"GPU-gone": {Use: true},
	}
	if diff := cmp.Diff(want, fx.saved(t).GPUs); diff != "" {
		t.Errorf("saved GPUs (-want +got):\n%s", diff)
	}
	if n := fx.engine.Reloads(); n != 1 {
		t.Errorf("Reload called %d times, want 1", n)
	}
}

func TestSettingsNoGPU(t *testing.T) {
	tests := []struct {
		name string
		src  idle.GPUSource
		want string
	}{
		{"no driver", nil, "No NVIDIA GPU found: there is no NVIDIA driver"},
		{"error", settingsTestGPUs{err: errors.New("nvml: driver not loaded")}, "No NVIDIA GPU found: nvml: driver not loaded"},
		{"none listed", settingsTestGPUs{}, "No NVIDIA GPU found: the NVIDIA driver lists none"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fx := newSettingsFixture(t, func(d *Deps) { d.GPUs = tc.src })
			if !strings.HasPrefix(fx.form.gpuNote.Text, tc.want) || !fx.form.gpuNote.Visible() {
				t.Errorf("GPU note = %q, want it to start %q", fx.form.gpuNote.Text, tc.want)
			}
			fx.tapSave() // saving works without GPUs and keeps none
			if g := fx.saved(t).GPUs; len(g) != 0 {
				t.Errorf("saved GPUs = %v, want none", g)
			}
		})
	}
}

func TestSettingsPrograms(t *testing.T) {
	fx := newSettingsFixture(t, func(d *Deps) {
		d.Processes = func(context.Context) ([]string, error) {
			return []string{"bash", "Game.exe", "steam", "steamwebhelper"}, nil
		}
		s := idle.Defaults()
		s.PauseFor = []string{"old.exe", "obs"}
		if err := d.Store.SaveSettings(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	})
	f := fx.form
	fx.showTab("Computer")

	// Remove old.exe with its button.
	remove := findButtons(f.programList, "Remove")
	if len(remove) != 2 {
		t.Fatalf("%d Remove buttons, want 2", len(remove))
	}
	test.Tap(remove[0])

	// Add one by name; an empty name is refused inline.
	test.Tap(f.programAdd)
	if !f.programErr.Visible() {
		t.Error("adding an empty name: want an inline message")
	}
	test.Type(f.programEntry, "blender")
	test.Tap(f.programAdd)
	if f.programErr.Visible() || f.programEntry.Text != "" {
		t.Errorf("after adding: message %q, entry %q", f.programErr.Text, f.programEntry.Text)
	}

	// Pick one from the running programs.
	test.Tap(f.programPick)
	f.busy.Wait()
	p := f.picker
	if p == nil {
		t.Fatalf("no picker shown (message %q)", f.programErr.Text)
	}
	test.Type(p.filter, "GAM")
	if diff := cmp.Diff([]string{"Game.exe"}, p.shown); diff != "" {
		t.Fatalf("filtered programs (-want +got):\n%s", diff)
	}
	p.list.Select(0)
	if f.picker != nil {
		t.Error("the picker is still open after a pick")
	}

	fx.tapSave()
	if diff := cmp.Diff([]string{"obs", "blender", "Game.exe"}, fx.saved(t).PauseFor); diff != "" {
		t.Errorf("saved programs (-want +got):\n%s", diff)
	}
}

func TestSettingsProgramsUnavailable(t *testing.T) {
	fx := newSettingsFixture(t, func(d *Deps) {
		d.Processes = func(context.Context) ([]string, error) { return nil, errors.New("permission denied") }
	})
	test.Tap(fx.form.programPick)
	fx.form.busy.Wait()
	if fx.form.picker != nil || !strings.Contains(fx.form.programErr.Text, "permission denied") {
		t.Errorf("picker %v, message %q: want no picker and the error inline", fx.form.picker, fx.form.programErr.Text)
	}

	fx = newSettingsFixture(t, nil) // no Processes
	if !fx.form.programPick.Disabled() {
		t.Error("the pick button is enabled without a process list")
	}
}

func TestSettingsJoinPool(t *testing.T) {
	tests := []struct {
		name      string
		url       string
		want      string // in the inline message
		wantCheck bool   // whether CheckPool is asked
	}{
		{"not a URL", "not a url", `"not a url" is not a pool address`, false},
		{"no scheme", "pool.example.org", "must start with http:// or https://", false},
		{"other scheme", "ftp://pool.example.org", "must start with http:// or https://", false},
		{"no host", "http://", "is not a pool address", false},
		{"empty", "  ", "Type the pool's address first", false},
		{"pool does not answer", deadPool, "Cannot reach the pool at " + deadPool + ": connection refused", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fx := newSettingsFixture(t, nil)
			f := fx.form
			fx.showTab("Pools")
			f.poolURL.SetText(tc.url)
			f.poolInvite.SetText("tok")
			test.Tap(f.poolJoin)
			f.busy.Wait()
			if !f.poolErr.Visible() || !strings.Contains(f.poolErr.Text, tc.want) {
				t.Errorf("inline message = %q (visible %v), want one with %q", f.poolErr.Text, f.poolErr.Visible(), tc.want)
			}
			if got := len(fx.check.Calls()) > 0; got != tc.wantCheck {
				t.Errorf("CheckPool asked: %v, want %v", got, tc.wantCheck)
			}
			if pools, err := fx.store.JoinedPools(context.Background()); err != nil || len(pools) != 0 {
				t.Errorf("JoinedPools = %v, %v; want none", pools, err)
			}
			if n := fx.engine.Reloads(); n != 0 {
				t.Errorf("Reload called %d times, want 0", n)
			}
			if f.poolJoin.Disabled() {
				t.Error("Join stays disabled after a failure")
			}
		})
	}
}

func TestSettingsJoinAndLeavePool(t *testing.T) {
	fx := newSettingsFixture(t, nil)
	f := fx.form
	ctx := context.Background()
	fx.showTab("Pools")
	f.poolURL.SetText(" " + goodPool + " ")
	f.poolInvite.SetText("invite-123")
	test.Tap(f.poolJoin)
	f.busy.Wait()
	if f.poolErr.Visible() {
		t.Fatalf("join failed: %s", f.poolErr.Text)
	}
	if diff := cmp.Diff([]string{goodPool + " invite-123"}, fx.check.Calls()); diff != "" {
		t.Errorf("CheckPool calls (-want +got):\n%s", diff)
	}
	pools, err := fx.store.JoinedPools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]store.JoinedPool{{URL: goodPool, Name: "Physics lab", Invite: "invite-123"}}, pools); diff != "" {
		t.Errorf("JoinedPools (-want +got):\n%s", diff)
	}
	if n := fx.engine.Reloads(); n != 1 {
		t.Errorf("Reload called %d times, want 1", n)
	}
	if !strings.Contains(f.poolStatus.Text, "Joined Physics lab") || f.poolURL.Text != "" {
		t.Errorf("status %q, URL entry %q: want Joined and an empty entry", f.poolStatus.Text, f.poolURL.Text)
	}
	if !hasLabel(f.poolList, "Physics lab") || !hasLabel(f.poolList, goodPool) {
		t.Error("the pool list does not show the pool joined")
	}

	leave := findButtons(f.poolList, "Leave")
	if len(leave) != 1 {
		t.Fatalf("%d Leave buttons, want 1", len(leave))
	}
	// Leave asks first, saying what happens; Cancel keeps the pool.
	test.Tap(leave[0])
	if f.leaving == nil || !strings.Contains(f.leaving.text, "This computer stops taking tasks from Physics lab at once.") {
		t.Fatalf("Leave did not ask first: %+v", f.leaving)
	}
	f.leaving.answer(false)
	if pools, err := fx.store.JoinedPools(ctx); err != nil || len(pools) != 1 {
		t.Fatalf("after Cancel: JoinedPools = %v, %v; want the pool still joined", pools, err)
	}
	test.Tap(leave[0])
	f.leaving.answer(true)
	if pools, err := fx.store.JoinedPools(ctx); err != nil || len(pools) != 0 {
		t.Errorf("after Leave: JoinedPools = %v, %v; want none", pools, err)
	}
	if n := fx.engine.Reloads(); n != 2 {
		t.Errorf("Reload called %d times after leaving, want 2", n)
	}
	if hasLabel(f.poolList, goodPool) {
		t.Error("the pool list still shows the pool left")
	}
}

// One pool typed two ways (spaces, trailing slashes) is joined once: the
// address is normalised, and a second Join says it is already joined.
func TestSettingsJoinPoolTwice(t *testing.T) {
	fx := newSettingsFixture(t, nil)
	f := fx.form
	ctx := context.Background()
	fx.showTab("Pools")
	f.poolURL.SetText(" " + goodPool + "/ ")
	test.Tap(f.poolJoin)
	f.busy.Wait()
	if f.poolErr.Visible() {
		t.Fatalf("join failed: %s", f.poolErr.Text)
	}
	for _, typed := range []string{goodPool, goodPool + "//", "  " + goodPool + "/"} {
		f.poolURL.SetText(typed)
		test.Tap(f.poolJoin)
		f.busy.Wait()
		if !f.poolErr.Visible() || !strings.Contains(f.poolErr.Text, "lready joined") {
			t.Errorf("joining %q again: inline message = %q (visible %v), want already joined", typed, f.poolErr.Text, f.poolErr.Visible())
		}
	}
	if diff := cmp.Diff([]string{goodPool + " "}, fx.check.Calls()); diff != "" {
		t.Errorf("CheckPool calls (-want +got):\n%s", diff)
	}
	pools, err := fx.store.JoinedPools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]store.JoinedPool{{URL: goodPool, Name: "Physics lab"}}, pools); diff != "" {
		t.Errorf("JoinedPools (-want +got):\n%s", diff)
	}

	// A pool recorded with a trailing slash (before this check) counts too.
	if err := fx.store.JoinPool(ctx, "http://127.0.0.1:35517/", ""); err != nil {
		t.Fatal(err)
	}
	f.poolURL.SetText("http://127.0.0.1:35517")
	test.Tap(f.poolJoin)
	f.busy.Wait()
	if !strings.Contains(f.poolErr.Text, "lready joined") {
		t.Errorf("inline message = %q, want already joined", f.poolErr.Text)
	}
}

func TestPoolAddress(t *testing.T) {
	tests := []struct{ in, want string }{
		{"http://127.0.0.1:35517", "http://127.0.0.1:35517"},
		{" http://127.0.0.1:35517/ ", "http://127.0.0.1:35517"},
		{"https://pool.example.org//", "https://pool.example.org"},
		{"https://example.org/pools/physics/", "https://example.org/pools/physics"},
		{"http://b:7421/, http://a:7420", "http://a:7420,http://b:7421"},
	}
	for _, tc := range tests {
		if got, err := poolAddress(tc.in); err != nil || got != tc.want {
			t.Errorf("poolAddress(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"127.0.0.1:7420", "http://:7420", "http://a:7420,", "ftp://a"} {
		if got, err := poolAddress(in); err == nil {
			t.Errorf("poolAddress(%q) = %q, want an error", in, got)
		}
	}
}

func TestShowSettings(t *testing.T) {
	a := testApp(t)
	l, err := store.OpenLocal(filepath.Join(t.TempDir(), "local.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	u := New(a, &Deps{Store: l, Engine: &settingsTestEngine{}})
	w := u.ShowSettings()
	defer w.Close()
	if w.Title() != "idlepool settings" || w.Content() == nil {
		t.Errorf("window %q with content %v", w.Title(), w.Content())
	}
	if again := u.ShowSettings(); again != w {
		t.Error("a second ShowSettings opened another window")
	}
}

// findButtons returns the buttons labelled text under o, in order.
func findButtons(o fyne.CanvasObject, text string) []*widget.Button {
	var out []*widget.Button
	walk(o, func(o fyne.CanvasObject) {
		if b, ok := o.(*widget.Button); ok && b.Text == text {
			out = append(out, b)
		}
	})
	return out
}

// hasLabel reports whether a label under o reads text.
func hasLabel(o fyne.CanvasObject, text string) bool {
	found := false
	walk(o, func(o fyne.CanvasObject) {
		if l, ok := o.(*widget.Label); ok && l.Text == text {
			found = true
		}
	})
	return found
}

// walk calls fn for o and every object in the containers under it.
func walk(o fyne.CanvasObject, fn func(fyne.CanvasObject)) {
	fn(o)
	if c, ok := o.(*fyne.Container); ok {
		for _, child := range c.Objects {
			walk(child, fn)
		}
	}
	if s, ok := o.(*container.Scroll); ok {
		walk(s.Content, fn)
	}
}

func TestSettingsSaveKeepsChangesMadeElsewhere(t *testing.T) {
	// The window was opened; then `idlepool settings set` changed the
	// hours and the programs. Saving a change of the idle minutes must not
	// put back the hours and programs the window showed.
	fx := newSettingsFixture(t, nil)
	elsewhere, err := idle.ParseSchedule("Mon-Fri 22:00-07:00")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fx.store.UpdateSettings(context.Background(), func(s *idle.Settings) error {
		s.Schedule, s.PauseFor = elsewhere, []string{"steam"}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	fx.showTab("Computer")
	fx.form.idleMinutes.SetText("12")
	fx.tapSave()
	if fx.form.saveErr.Visible() {
		t.Fatalf("save failed: %s", fx.form.saveErr.Text)
	}
	got := fx.saved(t)
	if got.IdleFor != 12*time.Minute {
		t.Errorf("idle minutes saved as %v, want 12m", got.IdleFor)
	}
	if !slices.Equal(got.Schedule, elsewhere) || !slices.Equal(got.PauseFor, []string{"steam"}) {
		t.Errorf("Save overwrote changes made elsewhere: hours %v, programs %v", got.Schedule, got.PauseFor)
	}
}

// inPlace reports, for a box of rows rebuilt while its tab is shown,
// whether it is tall enough for its rows (and so not drawn over what
// follows it) and each row fills its width at least at its own height.
func inPlace(t *testing.T, when string, list *fyne.Container) {
	t.Helper()
	if list.MinSize().Height > list.Size().Height+0.5 {
		t.Errorf("%s: the list is %v tall, its rows need %v", when, list.Size().Height, list.MinSize().Height)
	}
	for _, row := range list.Objects {
		if row.Size().Width != list.Size().Width || row.Size().Height < row.MinSize().Height-0.5 {
			t.Errorf("%s: a row of size %v in a list of %v (it needs %v)", when, row.Size(), list.Size(), row.MinSize())
		}
	}
}

// After Join and Leave, the Pools tab lays out again at once: the list
// of pools ends above the "For every pool" heading that follows it.
func TestSettingsPoolsRelayout(t *testing.T) {
	fx := newSettingsFixture(t, nil)
	f := fx.form
	fx.showTab("Pools")
	check := func(when string) {
		t.Helper()
		inPlace(t, when, f.poolList)
		heads := labelsReading(fx.window.Content(), "For every pool")
		if len(heads) != 1 {
			t.Fatalf("%s: %d For every pool headings, want 1", when, len(heads))
		}
		d := fyne.CurrentApp().Driver()
		if y, end := d.AbsolutePositionForObject(heads[0]).Y, d.AbsolutePositionForObject(f.poolList).Y+f.poolList.Size().Height; y < end {
			t.Errorf("%s: the For every pool heading at y=%v is above the list's end at %v", when, y, end)
		}
	}
	check("at first")
	f.poolURL.SetText(goodPool)
	test.Tap(f.poolJoin)
	f.busy.Wait()
	check("after Join")
	test.Tap(findButtons(f.poolList, "Leave")[0])
	check("after Leave")
}

// The programs list lays out again as programs are added and removed.
func TestSettingsProgramsRelayout(t *testing.T) {
	fx := newSettingsFixture(t, nil)
	f := fx.form
	fx.showTab("Computer")
	for _, name := range []string{"blender", "steam", "obs"} {
		f.programEntry.SetText(name)
		test.Tap(f.programAdd)
	}
	inPlace(t, "after Add", f.programList)
	test.Tap(findButtons(f.programList, "Remove")[0])
	inPlace(t, "after Remove", f.programList)
}

// GPUs found after the GPUs tab is shown are laid out in it.
func TestSettingsGPUsRelayout(t *testing.T) {
	fx := newSettingsFixture(t, nil)
	f := fx.form
	fx.showTab("GPUs")
	f.gpuBox.RemoveAll()
	f.gpuRows = nil
	f.showGPUs(twoTestGPUs, nil)
	inPlace(t, "after the probe", f.gpuBox)
}

// "Saved" clears once a field is edited after Save; Save keeps its own
// height while a message of two lines shows beside it.
func TestSettingsSaveBar(t *testing.T) {
	fx := newSettingsFixture(t, nil)
	f := fx.form
	fx.showTab("Computer")
	edits := []struct {
		name string
		edit func()
	}{
		{"an entry", func() { test.Type(f.idleMinutes, "5") }},
		{"a check", func() { test.Tap(f.pauseOnBattery) }},
		{"a program", func() { f.addProgram("blender") }},
		{"the hours", func() { test.Tap(f.anyTime); test.Tap(f.anyTime) }},
		{"a GPU", func() { test.Type(f.gpuRows[0].memory, "0") }},
	}
	for _, e := range edits {
		if !fx.form.saveSettings(context.Background()) {
			t.Fatalf("before editing %s: Save failed: %s", e.name, f.saveErr.Text)
		}
		if !strings.HasPrefix(f.status.Text, "Saved") {
			t.Fatalf("status after Save = %q", f.status.Text)
		}
		e.edit()
		if f.status.Text != "" {
			t.Errorf("after editing %s the status still reads %q", e.name, f.status.Text)
		}
		f.idleMinutes.SetText("5")
		f.gpuRows[0].memory.SetText("50%")
	}

	f.cores.SetText("lots")
	fx.tapSave()
	fx.window.Content().Refresh()
	if !f.saveErr.Visible() {
		t.Fatal("no Not saved message")
	}
	if h, want := f.save.Size().Height, f.save.MinSize().Height; h > want+0.5 {
		t.Errorf("Save is %v tall beside the message, want its own %v", h, want)
	}
}
