package app

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"fyne.io/fyne/v2"

	"idlepool/agent"
	"idlepool/assets"
	"idlepool/idle"
	"idlepool/version"
)

// TrayState is what the tray icon shows.
type TrayState string

// States of the tray icon.
const (
	// TrayIdle: nothing runs (no pool joined, no tasks, or waiting for
	// the machine to be idle).
	TrayIdle TrayState = "idle"
	// TrayComputing: tasks run on this machine.
	TrayComputing TrayState = "computing"
	// TrayPaused: the owner paused computing, or a program that pauses it
	// runs.
	TrayPaused TrayState = "paused"
)

// TrayStatus is the tray's icon state and its status line in words.
type TrayStatus struct {
	State TrayState
	// Line is the status line for people: "Computing: 2 tasks for pool
	// lab-a", "Paused: game.exe is running", "Paused by you until
	// 15:00", "Waiting: on battery (43%)", "Idle: no pool joined".
	Line string
	// PausedUntil is the end of the owner's pause in force at the time
	// of the status; zero when none.
	PausedUntil time.Time
	// ComputeUntil is the end of the owner's compute now in force;
	// zero when none.
	ComputeUntil time.Time
	// Finishing reports that the owner asked to finish the tasks in hand
	// and then pause (finishing them, or paused after them).
	Finishing bool
}

// lineStarting is the status line while the engine has no decision to
// tell: it has just started, or the owner just asked to compute now.
const lineStarting = "Starting…"

// maxLineRunes is the longest status line shown; a longer one is cut
// with "…" (tray menus do not wrap).
const maxLineRunes = 90

// StatusOf says what the donor does and why, from the engine's status st,
// the owner's settings s (their PausedUntil) and the wall clock now. The
// first that applies wins: the owner's pause (read from the settings, so
// that it shows at once after the owner paused); a local store that takes
// no writes ("Paused: disk full, 0 B free on …"); no pool joined; no pool
// with an agent; no pool answering while no task is held and no pause is
// decided ("Idle: lanparty: cannot reach the pool since 14:02,
// retrying"); no decision yet; the policy's pause or wait, in its words;
// tasks running (with the GPU power ceiling's hold on them, "Computing:
// 1 task for pool lab-a; GPU held at 150 W of ~250 W (tasks run 50% of
// the time)"); allowed to compute with no task.
//
// The owner's finish then pause comes right after the pause ("Finishing
// 2 tasks, then pausing", "Paused by you after finishing the tasks in
// hand"); compute now names its end in the line ("Computing now until
// 15:00: 2 tasks for pool lab-a").
func StatusOf(st agent.AgentStatus, s idle.Settings, now time.Time) TrayStatus {
	return withOverrides(statusOf(st, s, now), st, s, now)
}

func statusOf(st agent.AgentStatus, s idle.Settings, now time.Time) TrayStatus {
	loc := s.Location()
	if !s.PausedUntil.IsZero() && now.Before(s.PausedUntil) {
		return TrayStatus{State: TrayPaused, PausedUntil: s.PausedUntil,
			Line: "Paused by you until " + clockText(s.PausedUntil.In(loc), now.In(loc))}
	}
	if s.FinishThenPause {
		return finishingStatus(st)
	}
	if st.Store.Message != "" { // the local store takes no writes: no new task
		return TrayStatus{State: TrayPaused, Line: cut(capital(st.Store.Message))}
	}
	if len(st.Pools) == 0 && st.Pool == "" {
		return TrayStatus{State: TrayIdle, Line: "Idle: no pool joined"}
	}
	if len(st.Pools) > 0 {
		working := false
		for _, p := range st.Pools {
			working = working || p.Error == ""
		}
		if !working {
			p := st.Pools[0]
			return TrayStatus{State: TrayIdle, Line: cut("Idle: " + poolLabel(p) + ": " + p.Error)}
		}
	}
	if st.AllUnreachable() && len(st.Running) == 0 && st.Decision.State != idle.StatePaused {
		p := st.PoolsNow()[0]
		return TrayStatus{State: TrayIdle, Line: cut("Idle: " + poolLabel(p) + ": " + p.Connection(loc, now))}
	}
	if refused, p := clockRefused(st); refused && len(st.Running) == 0 {
		why := agent.ClockWords(time.Duration(p.ClockOffsetMS) * time.Millisecond)
		if why == "" {
			why = "the pool refuses this device's clock"
		}
		return TrayStatus{State: TrayIdle, Line: cut("Waiting: " + why + ": set the clock right")}
	}
	d := st.Decision
	if decidedBefore(st, s, now) {
		// The owner just asked to compute now: the paused or waiting
		// decision is the one from before (the engine decides again
		// within a second of being told) and no longer says why.
		return TrayStatus{State: TrayIdle, Line: lineStarting}
	}
	switch d.State {
	case "":
		return TrayStatus{State: TrayIdle, Line: lineStarting}
	case idle.StatePaused:
		return TrayStatus{State: TrayPaused, Line: cut(capital(d.Reason))}
	case idle.StateWaiting:
		return TrayStatus{State: TrayIdle, Line: cut(capital(d.Reason))}
	}
	var busy []string
	tasks := 0
	for _, p := range st.Pools {
		if p.Running > 0 {
			busy = append(busy, poolLabel(p))
			tasks += p.Running
		}
	}
	if len(st.Pools) == 0 || tasks < len(st.Running) {
		tasks = len(st.Running) // a lone agent, or a pool's count not yet updated
	}
	if tasks == 0 {
		var names []string
		for _, p := range st.Pools {
			if p.Reachable() {
				names = append(names, poolLabel(p))
			}
		}
		if len(names) == 0 && st.Pool != "" {
			names = []string{hostOf(st.Pool)}
		}
		return TrayStatus{State: TrayIdle, Line: cut("Idle: no tasks from " + poolsText(names) + " right now")}
	}
	line := "Computing: " + plural(tasks, "task")
	if len(busy) > 0 {
		line += " for " + poolsText(busy)
	}
	if st.Energy != nil && st.Energy.GPUHeld != nil { // the owner's gpu_power holds the workers back
		line += "; " + st.Energy.GPUHeld.Words()
	}
	return TrayStatus{State: TrayComputing, Line: cut(line)}
}

// decidedBefore reports whether the engine's decision in st was made
// before the owner's compute now in s and holds computing back: the
// engine decides again within a second of being told, and until then its
// reason (outside the hours, the owner active) no longer says why.
func decidedBefore(st agent.AgentStatus, s idle.Settings, now time.Time) bool {
	d := st.Decision
	return s.ComputingNow(now) && !d.ComputeNow && d.State != "" && d.State != idle.StateComputing
}

// clockRefused reports whether a pool refuses this device's clock, and
// the first that does.
func clockRefused(st agent.AgentStatus) (bool, agent.PoolState) {
	if len(st.Pools) == 0 && st.ClockRefused {
		return true, agent.PoolState{URL: st.Pool, Name: st.PoolName, ClockOffsetMS: st.ClockOffsetMS, ClockRefused: true}
	}
	for _, p := range st.Pools {
		if p.ClockRefused {
			return true, p
		}
	}
	return false, agent.PoolState{}
}

// poolsText writes "pool a", "pools a and b", "pools a, b and c".
func poolsText(names []string) string {
	switch len(names) {
	case 0:
		return "the pools"
	case 1:
		return "pool " + names[0]
	}
	return "pools " + strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// poolLabel is a pool's name, or its URL's host until it has one.
func poolLabel(p agent.PoolState) string {
	if p.Name != "" {
		return p.Name
	}
	return hostOf(p.URL)
}

// hostOf returns the host (and port) of a pool URL, or the URL itself.
func hostOf(u string) string {
	if pu, err := url.Parse(u); err == nil && pu.Host != "" {
		return pu.Host
	}
	return u
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// capital upper-cases the first letter of a policy reason ("paused:
// game.exe is running").
func capital(s string) string {
	r, n := utf8.DecodeRuneInString(s)
	if n == 0 {
		return s
	}
	return string(unicode.ToUpper(r)) + s[n:]
}

// cut shortens s to maxLineRunes runes, ending in "…".
func cut(s string) string {
	if utf8.RuneCountInString(s) <= maxLineRunes {
		return s
	}
	r := []rune(s)
	return strings.TrimRight(string(r[:maxLineRunes-1]), " ;,:") + "…"
}

// clockText writes t as the policy's reasons do (idle.ClockText): "15:04"
// on now's day, "Mon 15:04" within the week ahead, "2 Jan 15:04" later this
// year, "2 Jan 2027 15:04" in another.
func clockText(t, now time.Time) string { return idle.ClockText(t, now) }

// MorningHour is the hour of the day "Pause until tomorrow" pauses until.
//
// Not midnight: the owner who pauses in the evening (to play) does not
// want computing to start at 00:00 while still at the machine; by 08:00
// they have usually slept or left. The pause ends at the next 08:00 in the
// settings' time zone, which, pausing between midnight and 08:00, is the
// same day's (the menu then says "Pause until 08:00").
const MorningHour = 8

// nextMorning returns the first MorningHour:00 after now in loc.
func nextMorning(now time.Time, loc *time.Location) time.Time {
	n := now.In(loc)
	m := time.Date(n.Year(), n.Month(), n.Day(), MorningHour, 0, 0, 0, loc)
	if !m.After(n) {
		m = time.Date(n.Year(), n.Month(), n.Day()+1, MorningHour, 0, 0, 0, loc)
	}
	return m
}

// TrayIcon returns the PNG of a tray state's icon (TrayIdle's for an
// unknown one), from package assets: what fyne.io/systray's SetIcon takes
// on Linux.
func TrayIcon(s TrayState) []byte {
	switch s {
	case TrayComputing:
		return assets.ComputingPNG
	case TrayPaused:
		return assets.PausedPNG
	}
	return assets.IdlePNG
}

// AppIcon is the app's icon, for fyne.App.SetIcon and windows.
func AppIcon() fyne.Resource { return appIcon }

var appIcon = fyne.NewStaticResource("idlepool.png", assets.AppPNG)

// TrayRefresh is how often Tray.Serve brings the menu and icon up to
// date (a menu action refreshes at once). Each refresh reads the settings
// from the store, which is most of what the app does at rest.
const TrayRefresh = 5 * time.Second

// TrayTextRefresh is how often at most the status line changes while the
// state and the other items stay the same (see Tray.Refresh).
const TrayTextRefresh = 15 * time.Second

// trayTimeout bounds each store access of the tray.
const trayTimeout = 5 * time.Second

// TrayAction is what clicking a tray menu item does.
type TrayAction int

// Actions of the tray menu's items.
const (
	// ActionNone: the item is a line of text (the status, a problem) or
	// a separator.
	ActionNone TrayAction = iota
	// ActionPauseHour pauses computing for an hour.
	ActionPauseHour
	// ActionPauseTomorrow pauses computing until the next MorningHour.
	ActionPauseTomorrow
	// ActionResume ends the owner's pause.
	ActionResume
	// ActionSettings, ActionBrowse and ActionHistory open a window.
	ActionSettings
	ActionBrowse
	ActionHistory
	// ActionToggleAutostart writes or removes the start-at-login entry.
	ActionToggleAutostart
	// ActionQuit quits the app.
	ActionQuit
	// ActionNow opens the Now window: the tasks running, the decision,
	// the pools' connections and the event log.
	ActionNow
	// ActionComputeHour, ActionComputeHours and ActionComputeUntilHours
	// compute now (outside the hours, without waiting for idle) for 1
	// hour, for ComputeHours hours, or until the owner's hours start;
	// ActionComputeStop ends compute now.
	ActionComputeHour
	ActionComputeHours
	ActionComputeUntilHours
	ActionComputeStop
	// ActionFinishThenPause takes no new task, lets the running ones
	// finish and report, and then pauses until Resume.
	ActionFinishThenPause
	// ActionHelp opens the donor's guide (Deps.Guide) with the desktop's
	// opener (Deps.OpenURL).
	ActionHelp
)

// TrayItem is one item of the tray's menu.
type TrayItem struct {
	// Action is what clicking the item does.
	Action TrayAction
	// Label is the item's text; "" for a separator.
	Label     string
	Separator bool
	// Hidden items are not shown (the menu's items stay in their places,
	// so that a tray can keep its items and change their properties).
	Hidden   bool
	Disabled bool
	// Checkable items show a check box, ticked when Checked.
	Checkable, Checked bool
}

// TrayMenu is the tray's menu and icon as data, for a system tray to show
// (fyne.io/systray in the app). Its Items are the same ones, in the same
// order, for the life of a Tray: only their labels and flags change.
type TrayMenu struct {
	// State picks the icon (TrayIcon).
	State TrayState
	// Status is the status line, the first item's label (also a good
	// tooltip).
	Status string
	Items  []TrayItem
}

// TrayView is where a Tray shows its menu: the system tray. Its methods
// are called on the goroutine that calls the Tray's methods, and must not
// call back into the Tray.
type TrayView interface {
	// SetMenu shows m's items; called when they change.
	SetMenu(m TrayMenu)
	// SetIcon shows the icon of state (TrayIcon); called when it changes.
	SetIcon(state TrayState)
}

// Tray is the system tray's menu and icon as a model over Deps (Store,
// Engine, Autostart and Now): the status line, the owner's pause and
// resume, the windows, start at login and quit. It reads the engine's
// status, the settings and the autostart entry, shows the result through
// its TrayView, and carries out pausing, resuming and toggling start at
// login itself; it hands the other actions (windows, quit) to its caller.
//
// A Tray is not safe for concurrent use: while Serve runs, it alone calls
// the Tray's methods.
type Tray struct {
	deps *Deps
	view TrayView
	do   func(TrayAction)
	log  *slog.Logger

	menu     TrayMenu
	line     string    // the status line now shown
	rest     string    // the other items now shown, as text
	built    time.Time // when the items shown last changed
	decided  decided   // the engine's decision when they were shown
	icon     TrayState // the icon set; "" before the first
	settings idle.Settings
	problem  string       // the last failed action, shown under the status
	cached   traySettings // the settings last read (see snapshot)

	every time.Duration // Serve's refresh period; 0: TrayRefresh (tests set it)
}

// NewTray returns the tray over deps, showing itself in view. do is given
// the actions that leave the tray: ActionNow, ActionSettings, ActionBrowse,
// ActionHistory and ActionQuit (quit should stop the engine and the app).
// log, if not nil, receives failures of the menu's actions. The menu is
// built and shown at once; call Refresh or Serve to keep it current.
func NewTray(deps *Deps, view TrayView, do func(TrayAction), log *slog.Logger) *Tray {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := &Tray{deps: deps, view: view, do: do, log: log, settings: idle.Defaults()}
	t.apply(t.snapshot())
	return t
}

// Menu is the menu shown now.
func (t *Tray) Menu() TrayMenu { return t.menu }

// Refresh reads the engine's status, the settings and the autostart
// entry now and updates the menu and icon: at once when the state or the
// items change, and at most every TrayTextRefresh when only the status
// line's words do.
func (t *Tray) Refresh() { t.apply(t.snapshot()) }

// Serve refreshes the tray every TrayRefresh, and at once when an engine
// that is a Notifier changes, and carries out each action received on
// clicks (Do), until ctx ends; it returns nil then.
func (t *Tray) Serve(ctx context.Context, clicks <-chan TrayAction) error {
	every := TrayRefresh
	if t.every > 0 {
		every = t.every
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	changes := changesOf(t.deps.Engine)
	for {
		select {
		case <-ctx.Done():
			return nil
		case a := <-clicks:
			t.Do(a)
		case <-tick.C:
			t.Refresh()
		case <-changes:
			changes = changesOf(t.deps.Engine)
			t.Refresh()
		}
	}
}

// Do carries out the action of a clicked item: pausing, resuming and
// start at login here (then refreshing the menu), the others by the do
// func given to NewTray.
func (t *Tray) Do(a TrayAction) {
	switch a {
	case ActionNone:
	case ActionPauseHour:
		t.pause(t.deps.now().Add(time.Hour))
	case ActionPauseTomorrow:
		t.pause(nextMorning(t.deps.now(), t.settings.Location()))
	case ActionResume:
		t.pause(time.Time{})
	case ActionComputeHour, ActionComputeHours, ActionComputeUntilHours, ActionComputeStop, ActionFinishThenPause:
		t.override(a)
	case ActionToggleAutostart:
		if t.deps.Autostart != nil {
			t.toggleAutostart(t.deps.Autostart)
		}
	case ActionHelp:
		t.openGuide()
	default:
		if t.do != nil {
			t.do(a)
		}
	}
}

// traySnapshot is what a refresh reads.
type traySnapshot struct {
	status      agent.AgentStatus
	settings    idle.Settings
	settingsErr error
	autostart   bool
	autoErr     error
	now         time.Time
}

// snapshot reads the engine, the settings and the autostart entry.
func (t *Tray) snapshot() traySnapshot {
	d := t.deps
	ctx, cancel := context.WithTimeout(context.Background(), trayTimeout)
	defer cancel()
	var s traySnapshot
	s.status = d.Engine.Status()
	s.now = d.now()
	// The settings are read again only when they may have changed: the
	// policy's state changed (a pause begins or ends), a menu action ran,
	// or TraySettingsAge passed. A store read is most of what the app
	// does at rest, so it is not done at every refresh.
	c := &t.cached
	if c.fresh && c.state == s.status.Decision.State && s.now.Sub(c.at) < TraySettingsAge && c.err == nil {
		s.settings = c.settings
	} else {
		s.settings, s.settingsErr = d.Store.Settings(ctx)
		*c = traySettings{fresh: true, at: s.now, state: s.status.Decision.State, settings: s.settings, err: s.settingsErr}
	}
	if d.Autostart != nil {
		s.autostart, s.autoErr = d.Autostart.Enabled()
	}
	return s
}

// decided is what of the engine's decision makes a new status line
// show at once (see Tray.apply).
type decided struct {
	state      idle.State
	computeNow bool
}

// TraySettingsAge is how old the settings the tray shows may be when
// nothing suggests they changed (see Tray.Refresh): `idlepool settings
// set pause=...` shows in the menu's items within it, and in its status
// line at once.
const TraySettingsAge = time.Minute

// traySettings are the settings the tray read last, and when.
type traySettings struct {
	fresh    bool // false: read them at the next refresh
	at       time.Time
	state    idle.State // the policy's state then
	settings idle.Settings
	err      error
}

// apply shows the menu built from s when its items changed, and sets the
// icon when the state changed.
func (t *Tray) apply(s traySnapshot) {
	if s.settingsErr == nil {
		t.settings = s.settings
	} else {
		t.log.Warn("Cannot read the owner's settings for the tray, keeping the last ones", "err", s.settingsErr)
	}
	if s.autoErr != nil {
		t.log.Warn("Cannot read the start-at-login entry", "err", s.autoErr)
	}
	st := StatusOf(s.status, t.settings, s.now)
	items := t.items(st, s)
	var key strings.Builder
	for _, it := range items[1:] {
		fmt.Fprintf(&key, "%s|%t|%t|%t\n", it.Label, it.Checked, it.Disabled, it.Hidden)
	}
	for _, p := range s.status.Pools {
		// A pool joined or left shows at once, not with the status
		// line's next timed change.
		fmt.Fprintf(&key, "pool %s\n", p.URL)
	}
	rest := key.String()
	if t.menu.Items == nil || items[0].Label != t.line || rest != t.rest {
		// A status line that only counts seconds ("you were active 3 s
		// ago") would redraw the tray's menu at every refresh, closing it
		// under the owner's pointer on some desktops: with the same state
		// and items, the line changes at most every TrayTextRefresh.
		// A new decision of the engine (it computes, or waits for
		// another reason, as the owner's compute now or resume made it
		// decide again) is news, not a count: it shows at once.
		dec := decided{s.status.Decision.State, s.status.Decision.ComputeNow}
		lineOnly := t.menu.Items != nil && rest == t.rest && st.State == t.icon && dec == t.decided
		if !lineOnly || s.now.Sub(t.built) >= TrayTextRefresh || s.now.Before(t.built) {
			t.line, t.rest, t.built, t.decided = items[0].Label, rest, s.now, dec
			t.menu = TrayMenu{State: st.State, Status: st.Line, Items: items}
			if t.view != nil {
				t.view.SetMenu(t.menu)
			}
		}
	}
	if st.State != t.icon {
		t.icon = st.State
		t.menu.State = st.State
		if t.view != nil {
			t.view.SetIcon(st.State)
		}
	}
}

// Labels of the tray menu's items.
const (
	labelPauseHour = "Pause for 1 hour"
	labelResume    = "Resume"
	labelNow       = "Now…"
	labelSettings  = "Settings…"
	labelBrowse    = "Browse jobs…"
	labelHistory   = "Contribution history…"
	labelHelp      = "Help…"
	labelAutostart = "Start at login"
	labelQuit      = "Quit"
)

// items builds the menu for status st: always the same items, some of
// them hidden.
func (t *Tray) items(st TrayStatus, s traySnapshot) []TrayItem {
	sep := TrayItem{Separator: true}
	loc := t.settings.Location()
	morning := nextMorning(s.now, loc)
	problem := t.problem
	if problem == "" && s.status.Store.Recovered != "" {
		problem = capital(s.status.Store.Recovered) // a damaged store was started anew
	}
	notices := s.status.Notices(loc, s.now)
	notice := func(i int) string {
		if i < len(notices) {
			return notices[i]
		}
		return ""
	}
	items := []TrayItem{
		{Label: st.Line, Disabled: true},
		{Label: cut(problem), Disabled: true, Hidden: problem == ""},
		// What keeps the donor from computing as it should: a clock off
		// the pool's, a pool unreachable, a task abandoned.
		{Label: cut(capital(notice(0))), Disabled: true, Hidden: notice(0) == ""},
		{Label: cut(capital(notice(1))), Disabled: true, Hidden: notice(1) == ""},
		sep,
		{Action: ActionPauseHour, Label: labelPauseHour, Hidden: !st.PausedUntil.IsZero()},
		{Action: ActionPauseTomorrow, Label: morningLabel(morning, s.now.In(loc)), Hidden: !st.PausedUntil.Before(morning)},
		{Action: ActionFinishThenPause, Label: labelFinishThenPause, Hidden: st.Finishing},
		{Action: ActionResume, Label: labelResume, Hidden: st.PausedUntil.IsZero() && !st.Finishing},
		sep,
	}
	items = append(items, t.computeItems(st, s)...)
	items = append(items, []TrayItem{
		sep,
		{Action: ActionNow, Label: labelNow},
		{Action: ActionSettings, Label: labelSettings},
		{Action: ActionBrowse, Label: labelBrowse},
		{Action: ActionHistory, Label: labelHistory},
		{Action: ActionHelp, Label: labelHelp},
		// About: which idlepool this is (the version the build was given,
		// which the self-update compares with a release's).
		{Label: AboutLabel(), Disabled: true},
	}...)
	if t.deps.Autostart != nil {
		items = append(items, sep,
			TrayItem{Action: ActionToggleAutostart, Label: labelAutostart, Checkable: true, Checked: s.autostart})
	}
	return append(items, sep, TrayItem{Action: ActionQuit, Label: labelQuit})
}

// AboutLabel is the tray menu's About line: "idlepool 1.4.0", the
// version of this build (version.Version; "idlepool dev" for a build
// not given one).
func AboutLabel() string { return "idlepool " + version.Version }

// morningLabel is "Pause until tomorrow, 08:00", or "Pause until 08:00"
// when the next morning is today (pausing after midnight).
func morningLabel(morning, now time.Time) string {
	hm := morning.Format("15:04")
	if y, m, d := morning.Date(); y == now.Year() && m == now.Month() && d == now.Day() {
		return "Pause until " + hm
	}
	return "Pause until tomorrow, " + hm
}

// pause sets the owner's pause to end at until (zero: resume), makes the
// engine read it, and refreshes the menu.
func (t *Tray) pause(until time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), trayTimeout)
	defer cancel()
	_, err := t.deps.Store.UpdateSettings(ctx, func(s *idle.Settings) error {
		s.SetPause(until) // Resume also ends finish then pause
		return nil
	})
	t.problem = ""
	if err != nil {
		what := "pause"
		if until.IsZero() {
			what = "resume"
		}
		t.problem = "Could not " + what + ": " + err.Error()
		t.log.Error("Cannot change the owner's pause", "err", err)
	} else {
		t.deps.Engine.Reload()
	}
	t.cached.fresh = false
	t.Refresh()
}

// GuideSource is where the donor's guide comes from (docs/donor.md in the
// idlepool source), named when no copy of it was installed with the app.
const GuideSource = "docs/donor.md in the idlepool source"

// openGuide opens the donor's guide with the desktop's opener, or says
// under the status line why it cannot, and refreshes the menu. The guide
// is opened whole: it begins with what a donor may want to do, its
// troubleshooting first, and an opener given a file URL with a fragment
// finds no file on some desktops.
func (t *Tray) openGuide() {
	d := t.deps
	t.problem = ""
	switch {
	case d.Guide == "":
		t.problem = "The donor's guide is not installed here: read " + GuideSource
	case d.OpenURL == nil:
		t.problem = "Cannot open the donor's guide here: it is " + d.Guide
	default:
		if err := d.OpenURL(FileURL(d.Guide)); err != nil {
			t.problem = "Could not open the donor's guide (" + d.Guide + "): " + err.Error()
			t.log.Error("Cannot open the donor's guide", "path", d.Guide, "err", err)
		}
	}
	t.Refresh()
}

// FileURL is the file:// URL of the absolute path p, with a Windows
// drive letter as RFC 8089 writes it (file:///C:/Users/...).
func FileURL(p string) *url.URL {
	p = filepath.ToSlash(p)
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	return &url.URL{Scheme: "file", Path: p}
}

// toggleAutostart removes the start-at-login entry when it exists, writes
// it otherwise, and refreshes the menu.
func (t *Tray) toggleAutostart(a Autostart) {
	on, err := a.Enabled()
	if err == nil {
		if on {
			err = a.Disable()
		} else {
			err = a.Enable()
		}
	}
	t.problem = ""
	if err != nil {
		t.problem = "Could not change start at login: " + err.Error()
		t.log.Error("Cannot change the start-at-login entry", "err", err)
	}
	t.Refresh()
}
