// Package desktop is the donor's desktop app as a program: it creates the
// Fyne App (the only package that imports fyne.io/fyne/v2/app, which needs
// cgo and GLFW), runs the donor engine (agent.Donor, the same engine as
// `idlepool join`) in this process, and shows the system tray and the
// windows of package app over them. cmd/idlepool-tray calls Main.
//
// The same binary is its own sandboxed worker: `idlepool-tray worker
// --cache DIR` speaks the worker protocol on stdin and stdout, and Main
// handles it before anything starts Fyne.
//
// Where no system tray can work (Linux without a D-Bus session bus, on
// which fyne.io/systray panics when quitting), the settings window is the
// main window instead: closing it quits. Only one app runs per data
// directory; a second launch shows the first one's settings window and
// exits.
//
// For screenshots, IDLEPOOL_TRAY_SHOW=settings,browse,history,firstrun
// opens those windows at start.
package desktop

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"fyne.io/fyne/v2"
	fyneapp "fyne.io/fyne/v2/app"
	"fyne.io/fyne/v2/driver/desktop"

	"idlepool/agent"
	"idlepool/app"
	"idlepool/home"
	"idlepool/idle"
	"idlepool/store"
	"idlepool/worker"
)

// AppID is the Fyne app's unique ID (its preferences and storage).
const AppID = "org.idlepool.tray"

// ShowEnv lists windows to open at start, comma-separated: settings,
// browse, history, firstrun (for screenshots of the windows).
const ShowEnv = "IDLEPOOL_TRAY_SHOW"

// quitWait bounds how long quitting waits for the engine to hand its
// leases back; the pools re-lease the tasks of a machine that vanished
// anyway.
const quitWait = 30 * time.Second

const usage = `idlepool-tray lends this computer's idle time to compute pools, from the
system tray: it shows whether it computes, waits or is paused, and why.

Usage:
  idlepool-tray [--home DIR] [--workers N] [-v]

Flags:
`

// Config is the tray app's configuration, from its flags.
type Config struct {
	// Home keeps all state under one directory ("" : $IDLEPOOL_HOME, or
	// the OS's user directories); the same as `idlepool --home`.
	Home string
	// Workers is how many tasks run at once; default the number of CPUs
	// (the owner's settings limit how many of them compute).
	Workers int
	// Verbose logs diagnostics.
	Verbose bool
}

// Validate checks the configuration once.
func (c Config) Validate() error {
	if c.Workers < 1 {
		return fmt.Errorf("--workers must be at least 1, got %d", c.Workers)
	}
	return nil
}

// Main runs the tray app with the command line args (without the program
// name) and returns the exit status: 0 after Quit, after showing an
// instance that already runs, or for a worker whose input ended; 2 for a
// usage error; 1 when the app cannot start.
func Main(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(args) > 0 && args[0] == "worker" {
		return workerMain(ctx, args[1:], os.Stdin, os.Stdout, os.Stderr)
	}
	cfg, err := parseFlags(args, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "idlepool-tray:", err)
		return 2
	}
	if err := run(ctx, cfg, os.Stderr); err != nil {
		if errors.Is(err, app.ErrRunning) {
			fmt.Fprintln(os.Stderr, "idlepool-tray: already running; showing its window")
			return 0
		}
		fmt.Fprintln(os.Stderr, "idlepool-tray:", err)
		return 1
	}
	return 0
}

// parseFlags reads the configuration from args.
func parseFlags(args []string, stderr io.Writer) (Config, error) {
	cfg := Config{Workers: runtime.NumCPU()}
	fs := flag.NewFlagSet("idlepool-tray", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.Home, "home", "", "keep all state under `DIR` (also $IDLEPOOL_HOME)")
	fs.IntVar(&cfg.Workers, "workers", cfg.Workers, "run at most `N` tasks at once, each in its own worker process")
	fs.BoolVar(&cfg.Verbose, "v", false, "log diagnostics to stderr")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q (run idlepool-tray --help)", fs.Arg(0))
	}
	return cfg, cfg.Validate()
}

// workerMain is the sandboxed task subprocess, as `idlepool worker`: it
// speaks the worker protocol on stdin and stdout until stdin closes.
func workerMain(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("idlepool-tray worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	homeDir := fs.String("home", "", "keep all state under `DIR`")
	fs.Bool("v", false, "ignored")
	cache := fs.String("cache", "", "compilation cache `DIR` (default: under the home cache)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *cache == "" {
		*cache = os.Getenv(worker.CacheDirEnv)
	}
	if *cache == "" {
		d, err := home.Resolve(*homeDir)
		if err != nil {
			fmt.Fprintln(stderr, "idlepool-tray worker:", err)
			return 1
		}
		*cache = agent.WorkerCache(d)
	}
	if err := worker.Serve(ctx, stdin, stdout, *cache); err != nil {
		fmt.Fprintln(stderr, "idlepool-tray worker:", err)
		return 1
	}
	return 0
}

// logger is the app's log on stderr: informational messages, everything
// with -v.
func logger(w io.Writer, verbose bool) *slog.Logger {
	lvl := slog.LevelInfo
	if verbose {
		lvl = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: lvl}))
}

// run starts the engine and the app and returns when the app quits and
// the engine has handed its leases back (or quitWait passed). It returns
// app.ErrRunning when another instance runs for the same data directory
// (which was asked to show its settings window).
func run(ctx context.Context, cfg Config, stderr io.Writer) error {
	log := logger(stderr, cfg.Verbose)
	dirs, err := home.Resolve(cfg.Home)
	if err != nil {
		return err
	}
	if err := dirs.Create(); err != nil {
		return err
	}
	inst, err := app.ClaimInstance(dirs.Data)
	switch {
	case errors.Is(err, app.ErrRunning):
		return err
	case err != nil:
		log.Warn("Running without the single-instance check", "err", err)
	}
	if inst != nil {
		defer inst.Close()
	}

	local, err := store.OpenLocal(filepath.Join(dirs.Data, "local.db"))
	if err != nil {
		return fmt.Errorf("open the local store: %w", err)
	}
	defer local.Close()
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
	gpus := agent.NVMLGPUs{Lister: lister, Workers: wp}

	dcfg := agent.DonorConfig{
		Home: dirs, DeviceKey: dev, OwnerKey: owner, Name: hostname(),
		Workers: cfg.Workers, Executor: wp, Store: local, GPUs: gpus,
		LocalAPI: filepath.Join(dirs.Data, agent.LocalAPIFile), // `idlepool status` reads it
		Logger:   log,
	}
	donor, err := agent.NewDonor(dcfg)
	if err != nil {
		return err
	}
	deps := &app.Deps{
		Store:     local,
		Engine:    donor,
		GPUs:      gpus,
		Processes: programNames,
		CheckPool: func(ctx context.Context, url, invite string) (string, error) {
			return agent.CheckPool(ctx, dcfg, url, invite)
		},
		Board:     donor.Board,
		Autostart: app.NewAutostart(self),
	}

	// The name titles the tray item (StatusNotifierItem) and windows.
	fyneapp.SetMetadata(fyne.AppMetadata{ID: AppID, Name: "idlepool", Version: "dev", Build: 1, Icon: app.AppIcon()})
	fa := fyneapp.NewWithID(AppID)
	fa.SetIcon(app.AppIcon())
	ui := app.New(fa, deps)

	// The engine runs until quitting, then hands its leases back.
	engineCtx, stopEngine := context.WithCancel(ctx)
	defer stopEngine()
	engineDone := make(chan struct{})
	go func() {
		defer close(engineDone)
		if err := donor.Serve(engineCtx); err != nil {
			log.Error("The donor engine stopped", "err", err)
		}
	}()
	waitEngine := func() {
		stopEngine()
		select {
		case <-engineDone:
		case <-time.After(quitWait):
			log.Warn("Quitting before the engine handed every lease back", "waited", quitWait)
		}
	}
	quitting := false
	quit := func() { // UI goroutine
		if quitting {
			return
		}
		quitting = true
		go func() {
			waitEngine()
			fyne.Do(fa.Quit)
		}()
	}

	// Goroutines of the UI's lifetime, ended and waited for after Run.
	uiCtx, stopUI := context.WithCancel(ctx)
	var uiGroup sync.WaitGroup
	trayOn := false
	desk, ok := fa.(desktop.App)
	useTray, shown := false, false
	if ok {
		useTray, shown = trayAvailable(log)
	}
	if useTray {
		tray := ui.NewTray(quit, func(r fyne.Resource) {
			if trayOn {
				desk.SetSystemTrayIcon(r)
			}
		}, log)
		desk.SetSystemTrayMenu(tray.Menu())
		desk.SetSystemTrayIcon(tray.Icon())
		trayOn = true
		uiGroup.Go(func() { _ = tray.Serve(uiCtx) })
		if !shown {
			ui.ShowSettings() // so that the owner sees the app running
		}
	} else {
		log.Info("No system tray: the settings window is the main window")
		ui.ShowSettings().SetMaster()
	}
	if inst != nil {
		uiGroup.Go(func() {
			if err := inst.Serve(uiCtx, func() { fyne.Do(func() { ui.ShowSettings() }) }); err != nil {
				log.Warn("The single-instance listener stopped", "err", err)
			}
		})
	}
	// SIGINT or SIGTERM quits as the menu does.
	stopSignal := context.AfterFunc(ctx, func() { fyne.Do(quit) })
	defer stopSignal()

	if first, err := app.NeedsFirstRun(ctx, local); err != nil {
		log.Warn("Cannot tell whether this is the first run", "err", err)
	} else if first {
		ui.ShowFirstRun(nil)
	}
	showRequested(ui, os.Getenv(ShowEnv), log)

	fa.Run()

	stopUI()
	uiGroup.Wait()
	waitEngine()
	return nil
}

// showRequested opens the windows named in list (ShowEnv).
func showRequested(ui *app.UI, list string, log *slog.Logger) {
	for _, name := range strings.Split(list, ",") {
		switch strings.TrimSpace(name) {
		case "":
		case "settings":
			ui.ShowSettings()
		case "browse":
			ui.ShowBrowse()
		case "history":
			ui.ShowHistory()
		case "firstrun":
			ui.ShowFirstRun(nil)
		default:
			log.Warn("Unknown window in "+ShowEnv, "window", name)
		}
	}
}

// programNames lists the names of the programs running now, sorted and
// without duplicates (executables by their base names), for the settings
// window's program picker.
func programNames(ctx context.Context) ([]string, error) {
	src := idle.DefaultSources().Processes
	if src == nil {
		return nil, errors.ErrUnsupported
	}
	names, err := src.ProgramNames(ctx)
	if err != nil {
		return nil, err
	}
	for i, n := range names {
		names[i] = filepath.Base(n)
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

func hostname() string {
	h, _ := os.Hostname()
	if len(h) > 64 {
		h = h[:64]
	}
	return h
}
