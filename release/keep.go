package release

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// RootFile is the file beside the installed programs that holds the root
// metadata of the release repository an installation trusts first
// (make release's metadata/1.root.json).
const RootFile = "release-root.json"

// BuildRoot is the root metadata this build trusts first, in base64,
// set by make release (-ldflags "-X idlepool/release.BuildRoot=...",
// the repository's metadata/1.root.json); "" for a build not made for a
// release. A RootFile beside the programs takes precedence.
var BuildRoot string

// ErrInstalled is returned by Keeper.Serve once it installed a new
// version: its owner stops the engine and restarts the program.
var ErrInstalled = errors.New("release: a new version is installed: restart")

// ErrNoRoot: the installation trusts no release keys (no RootFile
// beside the programs and nothing trusted before).
var ErrNoRoot = errors.New("release: no trusted release root")

// Settings are the owner's update settings as a Keeper reads them before
// each step.
type Settings struct {
	On             bool   // updates=true
	URL            string // the release location; "" means none
	BytesPerSecond int    // the download's cap; 0: none
	// Allowed says whether the donor lets the machine work at t (its
	// hours); nil: always.
	Allowed func(t time.Time) bool
}

// InstallKind says how an installation whose programs are in binDir is
// updated: the Windows installer on Windows, the package manager for
// programs in /usr/bin (the .deb), the tarball otherwise (a user
// install; one into /usr/local/bin needs the rights to replace it).
func InstallKind(binDir string) string {
	switch {
	case runtime.GOOS == "windows":
		return KindWindowsInstaller
	case binDir == "/usr/bin" || binDir == "/bin":
		return KindDeb
	}
	return KindTarball
}

// ForInstall returns the Updater of the installation whose programs are
// in binDir, keeping its state in stateDir, reading url with the root
// metadata in rootFile ("": binDir/RootFile, else BuildRoot). With no
// root and nothing trusted in stateDir before, it is an error wrapping
// ErrNoRoot.
func ForInstall(binDir, stateDir, url, rootFile string, bytesPerSecond int) (*Updater, error) {
	if rootFile == "" {
		rootFile = filepath.Join(binDir, RootFile)
	}
	root, err := os.ReadFile(rootFile)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read the trusted release root: %w", err)
	}
	if len(root) == 0 && BuildRoot != "" {
		if root, err = base64.StdEncoding.DecodeString(BuildRoot); err != nil {
			return nil, fmt.Errorf("%w: this build's root metadata is not base64: %w", ErrNoRoot, err)
		}
	}
	if len(root) == 0 {
		if _, err := os.Stat(filepath.Join(stateDir, "metadata", "root.json")); err != nil {
			return nil, fmt.Errorf("%w: %s is missing", ErrNoRoot, rootFile)
		}
	}
	src := &Source{URL: strings.TrimRight(url, "/"), Root: root, Dir: stateDir, BytesPerSecond: bytesPerSecond}
	return &Updater{Source: src, Kind: InstallKind(binDir), OS: runtime.GOOS, Arch: runtime.GOARCH, BinDir: binDir}, nil
}

// Keeper keeps the running installation up to date in the background:
// the tray app's and idlepool join's self-update.
type Keeper struct {
	// Updater does the steps; Serve sets its Source's URL and pace, its
	// Allowed and its Busy from Settings and Busy before each step.
	Updater *Updater
	// Settings reads the owner's update settings.
	Settings func(ctx context.Context) (Settings, error)
	// Busy says whether a task runs now.
	Busy func() bool
	// Poll is how often Serve looks whether a step is due (default 10
	// minutes): the schedule itself is the Updater's (daily with jitter).
	Poll time.Duration
	// After is the timer; nil: time.After. Tests give their own.
	After func(time.Duration) <-chan time.Time
	// Wake, when it delivers, makes Serve check now, outside the
	// schedule and the hours (a pool said it needs a newer version), at
	// most once per WakeEvery. nil: never.
	Wake <-chan struct{}
	// Report is told each step's outcome other than "not due" when it
	// differs from the last one told (a download waiting for the tasks is
	// told once, not at every poll); nil: none.
	Report func(Result, error)
}

// WakeEvery is the least time between two checks a Keeper's Wake forces.
const WakeEvery = time.Hour

// Serve steps the Updater every Poll until ctx ends (then it returns
// nil) or a new version is installed (then it returns ErrInstalled). A
// failed step is reported and retried at the next check (a day later):
// the installed version keeps running.
func (k *Keeper) Serve(ctx context.Context) error {
	poll := k.Poll
	if poll <= 0 {
		poll = 10 * time.Minute
	}
	after := k.After
	if after == nil {
		after = time.After
	}
	var forced time.Time // the last check Wake forced
	force := false
	last := "" // the last outcome reported
	for {
		s, err := k.Settings(ctx)
		if err == nil && s.On && s.URL != "" {
			u := k.Updater
			u.Source.URL = strings.TrimRight(s.URL, "/")
			u.Source.BytesPerSecond = s.BytesPerSecond
			u.Allowed = s.Allowed
			u.Busy = k.Busy
			if force {
				forced = u.now()
			}
			r, err := u.Step(ctx, force)
			if ctx.Err() != nil {
				return nil
			}
			if err != nil || r.State != StateNotDue {
				if told := fmt.Sprint(r, err); told != last && k.Report != nil {
					k.Report(r, err)
					last = told
				}
			}
			if err == nil && r.State == StateInstalled {
				return ErrInstalled
			}
		}
		force = false
		select {
		case <-ctx.Done():
			return nil
		case <-after(poll):
		case <-k.Wake:
			force = forced.IsZero() || k.Updater.now().Sub(forced) >= WakeEvery
		}
	}
}
