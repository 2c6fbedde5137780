// Package app is the donor's desktop app: the windows (now, settings,
// browse jobs, contribution history, first run), built with Fyne, and the tray
// menu as a model (label, state and action of each item) that the tray
// process draws with fyne.io/systray. Only app and its sub-packages import
// Fyne; the sub-package desktop is the program: a tray process that runs
// the donor engine and the system tray without a Fyne App (no OpenGL at
// rest), and a window process, started when a window is asked for, that
// creates the Fyne App. cmd/idlepool-tray calls it.
//
// The windows are built from Deps: the local store (the same SQLite file
// `idlepool join` uses) and the donor engine (agent.Donor in process, or
// the tray's engine through its local API from the window process), so
// that tests drive them with Fyne's headless test driver
// (fyne.io/fyne/v2/test), a real store in a temporary directory and a real
// coordinator on 127.0.0.1. A window changes the store and then calls
// Engine.Reload: changes take effect at once, without a restart.
package app

import (
	"context"
	"net/url"
	"runtime"
	"time"

	"fyne.io/fyne/v2"

	"idlepool/agent"
	"idlepool/identity"
	"idlepool/idle"
	"idlepool/store"
)

// Engine is the donor engine the windows and the tray drive: an
// *agent.Donor in the app, which runs one agent per joined pool in this
// process.
type Engine interface {
	// Status is what the engine does now and why: the policy's decision
	// with its reason in words, the tasks held and each joined pool.
	Status() agent.AgentStatus
	// Reload makes the engine read the owner's settings and the joined
	// pools from the store now, instead of at its next periodic read.
	Reload()
}

// Autostart writes and removes the platform's entry that starts the app
// when the user logs in (an XDG autostart .desktop file on Linux, the Run
// key on Windows, a LaunchAgent on macOS).
type Autostart interface {
	// Enabled reports whether the entry exists and starts this program.
	Enabled() (bool, error)
	// Enable writes the entry; Disable removes it (nil if there is none).
	Enable() error
	Disable() error
}

// Deps is what the windows and the tray menu need. Store and Engine are
// required; a nil func or interface turns its feature off with a message
// saying so (a machine without NVML has no GPUs to list).
type Deps struct {
	// Store is the local store: settings, joined pools, preferences and
	// contributions.
	Store *store.Local
	// Engine is the donor engine.
	Engine Engine
	// GPUs lists the GPUs NVML finds (agent.NVMLGPUs in the app).
	GPUs idle.GPUSource
	// Processes lists the names of the programs running now, sorted and
	// without duplicates, for the settings window's program picker.
	Processes func(context.Context) ([]string, error)
	// CheckPool contacts the pool at url (pinning its key and registering
	// this device with the invite token) before the settings window joins
	// it; it returns the pool's name or an error in words for people
	// ("cannot reach the pool at http://...: connection refused").
	CheckPool func(ctx context.Context, url, invite string) (name string, err error)
	// Board reads the job boards of the joined pools, matched against
	// this machine's offer (agent.Board).
	Board func(ctx context.Context) ([]agent.PoolBoard, error)
	// Events reads the last n events of the donor's event log
	// (agent.ReadEvents of agent.EventsFile in the data directory), oldest
	// first, for the Now window; nil says the app keeps none.
	Events func(ctx context.Context, n int) ([]agent.Event, error)
	// Autostart is the start-at-login entry; nil hides the menu item.
	Autostart Autostart
	// Now is the wall clock; nil means time.Now.
	Now func() time.Time
	// Owner is the owner key this device belongs to, and OwnerProfile
	// the file beside it where the owner's signed display name and link
	// are kept (agent.OwnerProfilePath); with both, the Pools tab lets the
	// person give that name. nil or "" hides the section.
	Owner        *identity.Key
	OwnerProfile string
	// Ticks starts the periodic refresh of the History and Now windows:
	// a channel that delivers a tick every `every`, and a function that
	// stops it. nil means a time.Ticker; tests give a channel they drive
	// so that no refresh runs behind their back.
	Ticks func(every time.Duration) (ticks <-chan time.Time, stop func())
	// CPUs is the number of logical CPUs of this computer, for the
	// settings' cores; 0 means runtime.NumCPU().
	CPUs int
	// Guide is the absolute path of the donor's guide installed with the
	// app (docs/donor.md), which the tray's Help item opens; "" when none
	// was found, and the item says where to read it instead.
	Guide string
	// OpenURL opens a URL with the desktop's opener (a browser, or the
	// program files of its kind open with) and returns once it is
	// started; nil leaves the tray's Help item saying where the guide is.
	OpenURL func(*url.URL) error
}

// cpus returns d.CPUs or runtime.NumCPU().
func (d *Deps) cpus() int {
	if d.CPUs > 0 {
		return d.CPUs
	}
	return runtime.NumCPU()
}

// ticks returns d.Ticks(every) or a time.Ticker's channel and Stop.
func (d *Deps) ticks(every time.Duration) (<-chan time.Time, func()) {
	if d.Ticks != nil {
		return d.Ticks(every)
	}
	t := time.NewTicker(every)
	return t.C, t.Stop
}

// now returns d.Now() or time.Now().
func (d *Deps) now() time.Time {
	if d.Now != nil {
		return d.Now()
	}
	return time.Now()
}

// UI holds the app's windows: each Show method creates its window on
// first use and brings it to the front afterwards. Methods must be called
// on Fyne's UI goroutine (fyne.Do from elsewhere).
type UI struct {
	app  fyne.App
	deps *Deps

	windows map[string]fyne.Window // open windows by kind
}

// New returns the UI of the Fyne app a (the desktop app's, or
// fyne.io/fyne/v2/test.NewApp() in tests) over deps.
func New(a fyne.App, deps *Deps) *UI {
	return &UI{app: a, deps: deps, windows: map[string]fyne.Window{}}
}

// window returns the open window of kind, or makes one with build and
// shows it; closing it calls onClosed (when not nil: a view stops its
// timers and readings) and forgets it.
func (u *UI) window(kind, title string, size fyne.Size, build func(w fyne.Window) fyne.CanvasObject, onClosed func()) fyne.Window {
	if w, ok := u.windows[kind]; ok {
		w.Show()
		w.RequestFocus()
		return w
	}
	w := u.app.NewWindow(title)
	w.SetContent(build(w))
	w.Resize(size)
	w.SetOnClosed(func() {
		if onClosed != nil {
			onClosed()
		}
		if u.windows[kind] == w {
			delete(u.windows, kind)
		}
	})
	u.windows[kind] = w
	w.Show()
	return w
}
