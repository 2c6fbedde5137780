// Package desktop is the donor's desktop app as a program, in two
// processes (cmd/idlepool-tray calls Main, cmd/idlepool-window
// WindowMain):
//
//   - The tray process (`idlepool-tray`) runs the donor engine
//     (agent.Donor, the same engine as `idlepool join`) and the system
//     tray, through fyne.io/systray directly: the menu is package app's
//     Tray model, shown as systray items. It creates no Fyne App, so that
//     at rest in the tray it loads no OpenGL and runs no event loop.
//   - The window process (`idlepool-window KIND... --home DIR`, the
//     program cmd/idlepool-window beside idlepool-tray: WindowMain with
//     package app/desktop/window's Run), the tray process's child,
//     creates the Fyne App (the only code that imports
//     fyne.io/fyne/v2/app, which needs cgo and GLFW) and shows package
//     app's windows: settings, browse, history, firstrun. It reads
//     and writes the same local store, reads the engine's status from the
//     tray's local API (agent.ReadStatus) and asks the tray to reload over
//     the single-instance socket (app.Ask). It exits when its last window
//     closes. The tray starts it when a window is wanted and, while it
//     runs, sends it "show KIND" lines on its standard input instead.
//
// The tray's program is also its own sandboxed worker: `idlepool-tray worker
// --cache DIR` speaks the worker protocol on stdin and stdout, and Main
// handles it before anything else.
//
// Where no system tray can work (Linux without a D-Bus session bus, on
// which fyne.io/systray panics when quitting), the tray process opens the
// settings window instead, and quits when the window process exits. Only
// one tray process runs per data directory; a second launch asks the
// first to show its settings window and exits.
//
// For screenshots, IDLEPOOL_TRAY_SHOW=now,settings,browse,history,firstrun
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
	"syscall"
	"time"

	"idlepool/agent"
	"idlepool/app"
	"idlepool/home"
	"idlepool/worker"
)

// AppID is the Fyne app's unique ID (its preferences and storage).
const AppID = "org.idlepool.tray"

// ShowEnv lists windows to open at start, comma-separated: settings,
// browse, history, firstrun (for screenshots of the windows).
const ShowEnv = "IDLEPOOL_TRAY_SHOW"

// WindowProgram is the name of the window process's program
// (cmd/idlepool-window), which the tray starts from its own directory;
// on Windows with ".exe".
const WindowProgram = "idlepool-window"

// WindowProgramEnv, when set, is the path of the window process's
// program the tray starts instead (for tests, and for running the tray
// from a directory without it).
const WindowProgramEnv = "IDLEPOOL_WINDOW_PROGRAM"

// windowCommand returns the window process's program for the tray
// program self: $IDLEPOOL_WINDOW_PROGRAM, else WindowProgram beside self.
func windowCommand(self string, getenv func(string) string) string {
	if p := getenv(WindowProgramEnv); p != "" {
		return p
	}
	name := WindowProgram
	if runtime.GOOS == "windows" {
		name += ".exe"
	}
	return filepath.Join(filepath.Dir(self), name)
}

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
// instance that already runs, when the window process's last window
// closed, or for a worker whose input ended; 2 for a usage error; 1 when
// the app cannot start.
func Main(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(args) > 0 && args[0] == "worker" {
		return workerMain(ctx, args[1:], os.Stdin, os.Stdout, os.Stderr)
	}
	if len(args) > 0 && args[0] == "window" {
		fmt.Fprintln(os.Stderr, "idlepool-tray: the windows are shown by the program "+WindowProgram+", beside idlepool-tray")
		return 2
	}
	cfg, err := parseFlags(args, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "idlepool-tray:", err)
		return 2
	}
	err = runTray(ctx, cfg, os.Stderr)
	if errors.Is(err, agent.ErrRestart) {
		// The new version, installed over this program, takes over.
		err = agent.Restart()
	}
	if err != nil {
		if errors.Is(err, app.ErrRunning) {
			fmt.Fprintln(os.Stderr, "idlepool-tray: already running; showing its window")
			return 0
		}
		fmt.Fprintln(os.Stderr, "idlepool-tray:", err)
		if hint := agent.KeyHint(err); hint != "" { // a damaged or exposed key file
			fmt.Fprintln(os.Stderr, "hint:", hint)
		}
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

// autostartHome is the home the start-at-login entry passes on: flag
// (--home), else $IDLEPOOL_HOME, as an absolute path; "" when neither is
// set (the OS's user directories).
func autostartHome(flag string) string {
	if flag == "" {
		flag = os.Getenv(home.EnvVar)
	}
	if flag == "" {
		return ""
	}
	if abs, err := filepath.Abs(flag); err == nil {
		return abs
	}
	return flag
}

func hostname() string {
	h, _ := os.Hostname()
	if len(h) > 64 {
		h = h[:64]
	}
	return h
}
