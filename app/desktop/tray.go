package desktop

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"fyne.io/systray"

	"idlepool/agent"
	"idlepool/app"
	"idlepool/home"
	"idlepool/store"
	"idlepool/worker"
)

// runTray is the tray process: it starts the engine and the system tray
// (or, without one, the settings window), and returns when the app quits
// and the engine has handed its leases back (or quitWait passed). It
// returns app.ErrRunning when another tray process runs for the same
// data directory (which was asked to show its settings window).
func runTray(ctx context.Context, cfg Config, stderr io.Writer) error {
	log := logger(stderr, cfg.Verbose)
	dirs, err := home.Resolve(cfg.Home)
	if err != nil {
		return err
	}
	if err := dirs.Create(); err != nil {
		return err
	}
	inst, err := app.ClaimInstance(dirs.Data, app.TrayInstance, app.Request{Command: app.CommandShow, Args: []string{WindowSettings}})
	switch {
	case errors.Is(err, app.ErrRunning):
		return err
	case err != nil:
		log.Warn("Running without the single-instance check", "err", err)
	}
	if inst != nil {
		defer inst.Close()
	}

	// One agent per home: `idlepool join` takes the same lock.
	lock, err := home.Acquire(filepath.Join(dirs.Data, home.AgentLockFile), "idlepool-tray")
	switch le, locked := errors.AsType[*home.LockedError](err); {
	case locked:
		who := le.Command
		if who == "" {
			who = "another idlepool"
		}
		return fmt.Errorf("this device already computes with the data directory %s (%s runs as PID %d): stop it first, or start the tray with its own --home", dirs.Data, who, le.PID)
	case errors.Is(err, errors.ErrUnsupported):
		log.Warn("Cannot lock the data directory on this system; run one idlepool agent per home", "dir", dirs.Data)
	case err != nil:
		return err
	}
	defer lock.Release()

	local, err := store.OpenLocalRepairing(filepath.Join(dirs.Data, "local.db"))
	if err != nil {
		return fmt.Errorf("open the local store: %w", err)
	}
	defer local.Close()
	if r := local.Recovery(); r != nil {
		log.Warn("The local store was damaged and started anew", "movedTo", r.MovedTo, "cause", r.Cause, "lost", r.Lost)
	}
	dev, owner, err := agent.LoadKeys(dirs, "")
	if err != nil {
		return fmt.Errorf("load this device's keys: %w", err)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own executable to start workers: %w", err)
	}
	wp, err := agent.WorkerPool(dirs, []string{self, "worker", "--cache", agent.WorkerCache(dirs)}, cfg.Workers, log)
	if err != nil {
		return err
	}
	defer wp.Close()
	lister := worker.NewGPULister()
	defer lister.Close()
	donor, err := agent.NewDonor(agent.DonorConfig{
		Home: dirs, DeviceKey: dev, OwnerKey: owner, Name: hostname(),
		Workers: cfg.Workers, Executor: wp, Store: local, GPUs: agent.NVMLGPUs{Lister: lister, Workers: wp},
		Energy:    agent.NewEnergyMeter(lister, wp, cpuRatedW(local), local),
		LocalAPI:  filepath.Join(dirs.Data, agent.LocalAPIFile), // the window process and `idlepool status` read it
		StorePath: filepath.Join(dirs.Data, "local.db"),
		Events:    agent.NewEventLog(filepath.Join(dirs.Data, agent.EventsFile), 0, nil),
		Logger:    log,
	})
	if err != nil {
		return err
	}
	deps := &app.Deps{Store: local, Engine: donor, Autostart: app.NewAutostart(self, autostartHome(cfg.Home)),
		Guide: findGuide(self), OpenURL: openURL}

	var flags []string
	if cfg.Home != "" {
		flags = append(flags, "--home", cfg.Home)
	}
	if cfg.Verbose {
		flags = append(flags, "-v")
	}
	windows := &windowProcess{command: []string{windowCommand(self, os.Getenv)}, flags: flags, stderr: stderr, log: log}

	// The engine runs until quitting, then hands its leases back.
	engineCtx, stopEngine := context.WithCancel(context.Background())
	defer stopEngine()
	engineDone := make(chan struct{})
	// quit (the menu, a signal, the window process exiting where there
	// is no tray, or a new version installed) closes stopping once.
	stopping := make(chan struct{})
	var quitOnce sync.Once
	quit := func() { quitOnce.Do(func() { close(stopping) }) }
	var restart atomic.Bool // a new version is installed: run it
	go func() {
		defer close(engineDone)
		// The engine keeps itself up to date (the settings' updates):
		// once a new version is installed, the app quits and restarts.
		switch err := donor.ServeUpdating(engineCtx); {
		case errors.Is(err, agent.ErrRestart):
			log.Info("A new version is installed: restarting")
			restart.Store(true)
			quit()
		case err != nil:
			log.Error("The donor engine stopped", "err", err)
		}
	}()
	stopSignal := context.AfterFunc(ctx, quit)
	defer stopSignal()

	// Goroutines of the UI's lifetime: ended by stopUI, waited for by ui.
	uiCtx, stopUI := context.WithCancel(context.Background())
	defer stopUI()
	var ui sync.WaitGroup
	if inst != nil {
		ui.Go(func() {
			err := inst.Serve(uiCtx, func(r app.Request) error {
				switch r.Command {
				case app.CommandShow:
					return windows.Show(r.Args...)
				case app.CommandReload:
					donor.Reload()
					return nil
				}
				return fmt.Errorf("unknown command %q", r.Command)
			})
			if err != nil {
				log.Warn("The single-instance listener stopped", "err", err)
			}
		})
	}

	useTray, shown := trayAvailable(log)
	var show []string
	if first, err := app.NeedsFirstRun(ctx, local); err != nil {
		log.Warn("Cannot tell whether this is the first run", "err", err)
	} else if first {
		show = append(show, WindowFirstRun)
		// The first start sets up the start at login, so that a donor who
		// installed the app has it back after the next login; the
		// first-run window's box and the tray menu take it away.
		if err := enableAutostart(deps.Autostart); err != nil {
			log.Warn("Cannot set up the start at login", "err", err)
		}
	}
	if !useTray || !shown {
		show = append(show, WindowSettings) // so that the owner sees the app running
	}
	for _, k := range strings.Split(os.Getenv(ShowEnv), ",") {
		switch k = strings.TrimSpace(k); {
		case k == "" || slices.Contains(show, k):
		case checkKinds([]string{k}) != nil:
			log.Warn("Unknown window in "+ShowEnv, "window", k)
		default:
			show = append(show, k)
		}
	}
	if !useTray {
		log.Info("No system tray: the settings window is the main window")
		windows.exited = quit
	}
	var startErr error
	if len(show) > 0 {
		if err := windows.Show(show...); err != nil {
			log.Error("Cannot show the windows", "windows", show, "err", err)
			if !useTray {
				startErr = err
				quit()
			}
		}
	}

	// Quitting stops the window process, the UI's goroutines and the
	// engine, then the system tray (trayQuit), which ends runSystray.
	// The tray is quit only once its start (runSystray's onReady, under
	// mu) has finished and its goroutines have ended: quitting closes the
	// D-Bus connection, and fyne.io/systray panics when an icon or menu
	// is set on a closed one (a SIGTERM while the tray was starting did
	// that).
	var mu sync.Mutex // orders starting the tray's goroutines with waiting for them
	var trayGroup sync.WaitGroup
	trayQuit := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		<-stopping
		windows.Stop()
		stopUI()
		ui.Wait()
		stopEngine()
		select {
		case <-engineDone:
		case <-time.After(quitWait):
			log.Warn("Quitting before the engine handed every lease back", "waited", quitWait)
		}
		if useTray {
			mu.Lock()
			trayGroup.Wait()
			close(trayQuit)
			mu.Unlock()
		}
	}()
	if useTray {
		runSystray(func() {
			mu.Lock()
			defer mu.Unlock()
			if uiCtx.Err() != nil {
				return // quitting already
			}
			systray.SetTitle("idlepool") // some XDG trays fail without a title
			view := newSystrayView(uiCtx, &trayGroup)
			tray := app.NewTray(deps, view, func(a app.TrayAction) {
				switch a {
				case app.ActionNow, app.ActionSettings, app.ActionBrowse, app.ActionHistory:
					if err := windows.Show(actionWindow[a]); err != nil {
						log.Error("Cannot show the window", "window", actionWindow[a], "err", err)
					}
				case app.ActionQuit:
					quit()
				}
			}, log)
			trayGroup.Go(func() { _ = tray.Serve(uiCtx, view.clicks) })
		}, trayQuit)
	}
	<-finished
	if restart.Load() {
		return agent.ErrRestart
	}
	return startErr
}

// actionWindow is the window a tray menu action opens.
var actionWindow = map[app.TrayAction]string{
	app.ActionNow:      WindowNow,
	app.ActionSettings: WindowSettings,
	app.ActionBrowse:   WindowBrowse,
	app.ActionHistory:  WindowHistory,
}

// systrayView shows an app.Tray's menu as fyne.io/systray items: it adds
// them at the first SetMenu and changes their properties afterwards, and
// sends the action of each item clicked on clicks.
type systrayView struct {
	ctx    context.Context // ends the goroutines watching the items
	group  *sync.WaitGroup // holds them
	clicks chan app.TrayAction

	items []*systray.MenuItem // by the menu's index; nil for separators
	shown []app.TrayItem      // as last shown
}

var _ app.TrayView = (*systrayView)(nil)

// newSystrayView returns a view whose item watchers run in group until
// ctx ends.
func newSystrayView(ctx context.Context, group *sync.WaitGroup) *systrayView {
	return &systrayView{ctx: ctx, group: group, clicks: make(chan app.TrayAction)}
}

// SetMenu shows m: its status line as the tooltip, and its items.
func (v *systrayView) SetMenu(m app.TrayMenu) {
	systray.SetTooltip(m.Status)
	if len(m.Items) != len(v.shown) { // the first menu (a Tray keeps its items)
		if v.shown != nil {
			systray.ResetMenu()
		}
		v.items = make([]*systray.MenuItem, len(m.Items))
		for i, it := range m.Items {
			if it.Separator {
				systray.AddSeparator()
				continue
			}
			var mi *systray.MenuItem
			if it.Checkable {
				mi = systray.AddMenuItemCheckbox(it.Label, "", it.Checked)
			} else {
				mi = systray.AddMenuItem(it.Label, "")
			}
			if it.Disabled {
				mi.Disable()
			}
			if it.Hidden {
				mi.Hide()
			}
			v.items[i] = mi
			if it.Action != app.ActionNone {
				v.watch(mi, it.Action)
			}
		}
		v.shown = slices.Clone(m.Items)
		return
	}
	for i, it := range m.Items {
		mi, was := v.items[i], v.shown[i]
		if mi == nil {
			continue
		}
		if it.Label != was.Label {
			mi.SetTitle(it.Label)
		}
		if it.Disabled != was.Disabled {
			if it.Disabled {
				mi.Disable()
			} else {
				mi.Enable()
			}
		}
		if it.Checked != was.Checked {
			if it.Checked {
				mi.Check()
			} else {
				mi.Uncheck()
			}
		}
		if it.Hidden != was.Hidden {
			if it.Hidden {
				mi.Hide()
			} else {
				mi.Show()
			}
		}
	}
	v.shown = slices.Clone(m.Items)
}

// SetIcon shows the icon of state.
func (v *systrayView) SetIcon(state app.TrayState) { systray.SetIcon(osIcon(app.TrayIcon(state))) }

// watch sends a on v.clicks each time mi is clicked, until v.ctx ends.
func (v *systrayView) watch(mi *systray.MenuItem, a app.TrayAction) {
	v.group.Go(func() {
		for {
			select {
			case <-v.ctx.Done():
				return
			case <-mi.ClickedCh:
			}
			select {
			case <-v.ctx.Done():
				return
			case v.clicks <- a:
			}
		}
	})
}

// osIcon returns the tray icon the platform's systray takes, from a PNG:
// the PNG on Linux and macOS, an ICO holding it on Windows (Vista and
// later read PNGs inside ICOs).
func osIcon(png []byte) []byte {
	if runtime.GOOS != "windows" {
		return png
	}
	return icoOf(png)
}

// icoOf returns an ICO file holding png, its one image.
func icoOf(png []byte) []byte {
	if len(png) < 24 {
		return png
	}
	size := func(b []byte) byte { // 0 means 256 or more
		n := binary.BigEndian.Uint32(b)
		if n >= 256 {
			return 0
		}
		return byte(n)
	}
	ico := make([]byte, 22, 22+len(png))
	binary.LittleEndian.PutUint16(ico[2:], 1) // type: icon
	binary.LittleEndian.PutUint16(ico[4:], 1) // one image
	ico[6], ico[7] = size(png[16:20]), size(png[20:24])
	binary.LittleEndian.PutUint16(ico[10:], 1)  // planes
	binary.LittleEndian.PutUint16(ico[12:], 32) // bits per pixel
	binary.LittleEndian.PutUint32(ico[14:], uint32(len(png)))
	binary.LittleEndian.PutUint32(ico[18:], 22)
	return append(ico, png...)
}

// enableAutostart writes the start-at-login entry unless it is there.
func enableAutostart(a app.Autostart) error {
	if a == nil {
		return nil
	}
	on, err := a.Enabled()
	if err != nil || on {
		return err
	}
	return a.Enable()
}

// cpuRatedW is the owner's rated power of the processor (cpu_rated_w), 0
// when unset or unreadable (the meter's default).
func cpuRatedW(local *store.Local) float64 {
	s, err := local.Settings(context.Background())
	if err != nil {
		return 0
	}
	return s.CPURatedW
}
