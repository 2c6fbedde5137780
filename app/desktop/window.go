package desktop

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"fyne.io/fyne/v2"
	fyneapp "fyne.io/fyne/v2/app"

	"idlepool/agent"
	"idlepool/app"
	"idlepool/home"
	"idlepool/idle"
	"idlepool/store"
	"idlepool/worker"
)

// Window kinds: the windows of package app the window process shows.
const (
	WindowSettings = "settings"
	WindowBrowse   = "browse"
	WindowHistory  = "history"
	WindowFirstRun = "firstrun"
	WindowNow      = "now"
)

// windowKinds are the kinds the window process knows.
var windowKinds = []string{WindowSettings, WindowBrowse, WindowHistory, WindowFirstRun, WindowNow}

// checkKinds returns an error naming the first unknown kind, or when
// there is none.
func checkKinds(kinds []string) error {
	if len(kinds) == 0 {
		return errors.New("no window to show (one of settings, browse, history, firstrun, now)")
	}
	for _, k := range kinds {
		if !slices.Contains(windowKinds, k) {
			return fmt.Errorf("unknown window %q (one of settings, browse, history, firstrun, now)", k)
		}
	}
	return nil
}

// fromTrayFlag is the hidden flag with which the tray process starts the
// window process: that process quits when its input (a pipe from the
// tray) ends, so that it does not outlive a tray that was killed.
const fromTrayFlag = "from-tray"

// windowConfig is the window process's configuration, from its command
// line: `window KIND... [--home DIR] [-v]`.
type windowConfig struct {
	Home     string
	Verbose  bool
	FromTray bool     // started by the tray (--from-tray): quit at the end of stdin
	Windows  []string // the kinds to show, in order
}

// parseWindowFlags reads the window process's configuration from args
// (after "window"); the kinds and the flags may come in any order.
func parseWindowFlags(args []string, stderr io.Writer) (windowConfig, error) {
	var cfg windowConfig
	fs := flag.NewFlagSet("idlepool-tray window", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.Home, "home", "", "keep all state under `DIR` (also $IDLEPOOL_HOME)")
	fs.BoolVar(&cfg.Verbose, "v", false, "log diagnostics to stderr")
	fs.BoolVar(&cfg.FromTray, fromTrayFlag, false, "started by the tray process: quit when stdin ends")
	fs.Usage = func() { // all but the hidden --from-tray
		fmt.Fprintln(stderr, "Usage: idlepool-tray window KIND... [--home DIR] [-v]")
		fs.VisitAll(func(f *flag.Flag) {
			if f.Name != fromTrayFlag {
				name, usage := flag.UnquoteUsage(f)
				fmt.Fprintf(stderr, "  -%s\n    \t%s\n", strings.TrimSpace(f.Name+" "+name), usage)
			}
		})
	}
	for {
		if err := fs.Parse(args); err != nil {
			return cfg, err
		}
		if fs.NArg() == 0 {
			break
		}
		cfg.Windows = append(cfg.Windows, fs.Arg(0))
		args = fs.Args()[1:]
	}
	return cfg, checkKinds(cfg.Windows)
}

// windowMain is the window process: it shows the windows named on its
// command line, and those named on "show KIND..." lines of stdin, until
// the last window closes or ctx ends.
func windowMain(ctx context.Context, args []string, stdin io.Reader, stderr io.Writer) int {
	cfg, err := parseWindowFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "idlepool-tray window:", err)
		return 2
	}
	if err := runWindows(ctx, cfg, stdin, stderr); err != nil {
		fmt.Fprintln(stderr, "idlepool-tray window:", err)
		return 1
	}
	return 0
}

// runWindows creates the Fyne App over Deps of this process's own (the
// same store file, the tray's engine through remoteEngine) and shows
// cfg.Windows; it returns when the app quits: when its last window
// closes, or when ctx ends.
func runWindows(ctx context.Context, cfg windowConfig, stdin io.Reader, stderr io.Writer) error {
	log := logger(stderr, cfg.Verbose)
	tuneWindowGC(os.Getenv)
	dirs, err := home.Resolve(cfg.Home)
	if err != nil {
		return err
	}
	if err := dirs.Create(); err != nil {
		return err
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
	lister := worker.NewGPULister()
	defer lister.Close()
	gpus := agent.NVMLGPUs{Lister: lister}
	dcfg := agent.DonorConfig{Home: dirs, DeviceKey: dev, OwnerKey: owner, Name: hostname(), Store: local, GPUs: gpus, Logger: log}
	var autostart app.Autostart
	if self, err := os.Executable(); err == nil {
		autostart = app.NewAutostart(self, autostartHome(cfg.Home))
	}
	deps := &app.Deps{
		Store:     local,
		Engine:    newRemoteEngine(filepath.Join(dirs.Data, agent.LocalAPIFile), dirs.Data, log),
		GPUs:      gpus,
		Processes: programNames,
		CheckPool: func(ctx context.Context, url, invite string) (string, error) {
			return agent.CheckPool(ctx, dcfg, url, invite)
		},
		Board:        func(ctx context.Context) ([]agent.PoolBoard, error) { return board(ctx, dcfg) },
		Autostart:    autostart,
		Owner:        owner,
		OwnerProfile: agent.OwnerProfilePath(dirs),
		Events: func(_ context.Context, n int) ([]agent.Event, error) {
			return agent.ReadEvents(filepath.Join(dirs.Data, agent.EventsFile), n)
		},
	}

	plainLocale()
	fyneapp.SetMetadata(fyne.AppMetadata{ID: AppID, Name: "idlepool", Version: "dev", Build: 1, Icon: app.AppIcon()})
	fa := fyneapp.NewWithID(AppID)
	fa.SetIcon(app.AppIcon())
	ui := app.New(fa, deps)
	showWindows(ui, cfg.Windows, log)

	// The tray process asks for more windows on stdin. The reading
	// goroutine ends with stdin (the tray closes it when it stops this
	// process, and it ends when the tray dies) or with the process.
	// A quit asked for while Fyne is still opening the windows can be
	// lost (seen under load: the process kept running for 20 minutes
	// after SIGTERM), so the process ends by itself if Fyne has not
	// returned 10 s after the quit. Windows hold nothing unsaved: each
	// saves when its Save is pressed.
	quit := func() {
		fyne.Do(fa.Quit)
		time.AfterFunc(10*time.Second, func() {
			log.Warn("The windows did not close 10 s after quitting: exiting")
			os.Exit(0)
		})
	}
	go readRequests(stdin, cfg.FromTray, func(kinds []string) {
		fyne.Do(func() { showWindows(ui, kinds, log) })
	}, quit, log)
	// SIGINT or SIGTERM (the tray quitting) closes the windows.
	stop := context.AfterFunc(ctx, quit)
	defer stop()
	fa.Run()
	return nil
}

// readRequests reads "show KIND..." lines from stdin and calls show with
// their kinds, until stdin ends; then, for a window process started by the
// tray (fromTray), it calls quit: the tray stopped or died, and a window
// process left behind would be a second app beside the next one.
func readRequests(stdin io.Reader, fromTray bool, show func(kinds []string), quit func(), log *slog.Logger) {
	sc := bufio.NewScanner(stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || f[0] != app.CommandShow {
			log.Warn("Unknown request on stdin", "line", sc.Text())
			continue
		}
		show(f[1:])
	}
	if fromTray {
		log.Debug("The tray process's input ended: quitting", "err", sc.Err())
		quit()
	}
}

// showWindows opens the windows of kinds (or brings them to the front).
// UI goroutine.
func showWindows(ui *app.UI, kinds []string, log *slog.Logger) {
	for _, k := range kinds {
		switch k {
		case WindowSettings:
			ui.ShowSettings()
		case WindowBrowse:
			ui.ShowBrowse()
		case WindowHistory:
			ui.ShowHistory()
		case WindowFirstRun:
			ui.ShowFirstRun(nil)
		case WindowNow:
			ui.ShowNow()
		default:
			log.Warn("Unknown window", "window", k)
		}
	}
}

// board reads the job boards of the joined pools as agent.Donor.Board
// does, with this process's own reading of the machine and the GPUs.
func board(ctx context.Context, dcfg agent.DonorConfig) ([]agent.PoolBoard, error) {
	local := dcfg.Store
	pools, err := local.JoinedPools(ctx)
	if err != nil {
		return nil, err
	}
	prefs, err := local.Preferences(ctx)
	if err != nil {
		return nil, err
	}
	settings, err := local.Settings(ctx)
	if err != nil {
		return nil, err
	}
	machine, _ := idle.ReadMachine(ctx) // always usable; what is unknown stays empty
	gs, err := dcfg.GPUs.GPUs(ctx)
	reading := idle.Reading[[]idle.GPU]{Value: gs, Known: err == nil, Source: "nvml"}
	if err != nil {
		reading.Err = err.Error()
	}
	return agent.Board(ctx, agent.BoardConfig{
		Home: dcfg.Home, DeviceKey: dcfg.DeviceKey, OwnerKey: dcfg.OwnerKey, Name: dcfg.Name,
		Pools: pools, Capacity: idle.NewCapacity(machine, settings, reading), Preferences: prefs,
	}), nil
}

// plainLocale names English for Fyne when the locale is the C or POSIX
// one (a service, a bare session): Fyne cannot parse "C" as a language tag
// and logs an error at every start, then falls back to English anyway.
func plainLocale() {
	for _, k := range []string{"LC_ALL", "LC_MESSAGES", "LANG"} {
		switch v, _, _ := strings.Cut(os.Getenv(k), "."); v {
		case "":
			continue
		case "C", "POSIX":
			os.Setenv(k, "en")
		}
		return
	}
}
