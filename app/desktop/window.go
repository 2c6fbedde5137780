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
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

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

// WindowConfig is the window process's configuration, from its command
// line: `idlepool-window KIND... [--home DIR] [-v]`.
type WindowConfig struct {
	Home     string
	Verbose  bool
	FromTray bool     // started by the tray (--from-tray): quit at the end of stdin
	Windows  []string // the kinds to show, in order
}

// parseWindowFlags reads the window process's configuration from args
// (after "window"); the kinds and the flags may come in any order.
func parseWindowFlags(args []string, stderr io.Writer) (WindowConfig, error) {
	var cfg WindowConfig
	fs := flag.NewFlagSet(WindowProgram, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.Home, "home", "", "keep all state under `DIR` (also $IDLEPOOL_HOME)")
	fs.BoolVar(&cfg.Verbose, "v", false, "log diagnostics to stderr")
	fs.BoolVar(&cfg.FromTray, fromTrayFlag, false, "started by the tray process: quit when stdin ends")
	fs.Usage = func() { // all but the hidden --from-tray
		fmt.Fprintln(stderr, "Usage: "+WindowProgram+" KIND... [--home DIR] [-v]   (KIND: now, settings, browse, history, firstrun)")
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

// WindowRunner shows package app's windows over deps in a Fyne app: the
// kinds of cfg.Windows at once, then those ReadRequests reads from stdin
// ("show KIND..." lines from the tray), until the last window closes or
// ctx ends. cmd/idlepool-window passes window.Run; the tray program has
// none, so that it links no graphics toolkit.
type WindowRunner func(ctx context.Context, deps *app.Deps, cfg WindowConfig, stdin io.Reader, log *slog.Logger) error

// WindowMain is the window process (cmd/idlepool-window) with the
// command line args (without the program name): it shows the windows
// named there and on "show KIND..." lines of stdin with run, until the
// last window closes or a signal ends it; it returns the exit status (2
// for a usage error, 1 when it cannot start).
func WindowMain(args []string, run WindowRunner) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return windowMain(ctx, args, os.Stdin, os.Stderr, run)
}

func windowMain(ctx context.Context, args []string, stdin io.Reader, stderr io.Writer, run WindowRunner) int {
	cfg, err := parseWindowFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, WindowProgram+":", err)
		return 2
	}
	if err := runWindows(ctx, cfg, stdin, stderr, run); err != nil {
		fmt.Fprintln(stderr, WindowProgram+":", err)
		return 1
	}
	return 0
}

// runWindows makes Deps of this process's own (the same store file, the
// tray's engine through remoteEngine) and shows cfg.Windows with run; it
// returns when run does: when the last window closes, or when ctx ends.
func runWindows(ctx context.Context, cfg WindowConfig, stdin io.Reader, stderr io.Writer, run WindowRunner) error {
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

	return run(ctx, deps, cfg, stdin, log)
}

// ReadRequests reads "show KIND..." lines from stdin and calls show with
// their kinds, until stdin ends; then, for a window process started by the
// tray (fromTray), it calls quit: the tray stopped or died, and a window
// process left behind would be a second app beside the next one.
func ReadRequests(stdin io.Reader, fromTray bool, show func(kinds []string), quit func(), log *slog.Logger) {
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
