package release

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"idlepool/version"
)

// CheckEvery is the least time between two checks of the release
// location; each check adds a jitter of up to MaxJitter, so that a pool's
// devices do not all ask at once.
const (
	CheckEvery = 24 * time.Hour
	MaxJitter  = 6 * time.Hour
)

// State says where an Updater's last Step left things.
type State string

// States of Result.
const (
	StateNotDue    State = "not due"    // the next check is later
	StateOutside   State = "outside"    // outside the donor's hours: nothing downloaded
	StateUpToDate  State = "up to date" // no newer release
	StateReady     State = "ready"      // downloaded and verified, waiting for the tasks to finish
	StateInstalled State = "installed"  // installed: restart to run it
	StateManual    State = "manual"     // a system package: the person updates it
)

// Result is what a Step did: its State, the newer release's Version and
// a sentence for people.
type Result struct {
	State   State
	Version version.V
	Words   string
}

// Updater keeps an installation up to date from Source: Step checks at
// most every CheckEvery (plus jitter), within the donor's hours,
// downloads the newest release of Kind for OS and Arch to the side
// path, verifies it, and installs it when no task runs.
type Updater struct {
	Source   *Source
	Kind     string // KindTarball, KindDeb or KindWindowsInstaller
	OS, Arch string
	// BinDir is where the programs are installed (a tarball update
	// replaces them there).
	BinDir string
	// Current is the installed version; zero: version.Current().
	Current version.V
	// Now is the clock of the schedule; nil: time.Now.
	Now func() time.Time
	// Jitter returns the random part of the wait till the next check,
	// in [0, MaxJitter); nil: uniform random.
	Jitter func() time.Duration
	// Allowed says whether the donor lets the machine work (and
	// download) at t; nil: always.
	Allowed func(t time.Time) bool
	// Busy says whether a task runs now; nil: never. An update is
	// installed only when it says false.
	Busy func() bool
}

// updaterState is kept in Source.Dir/state.json between Steps and runs.
type updaterState struct {
	NextCheck time.Time `json:"next_check"`
	Ready     string    `json:"ready,omitempty"` // the verified download
	Version   string    `json:"version,omitempty"`
}

func (u *Updater) now() time.Time {
	if u.Now == nil {
		return time.Now()
	}
	return u.Now()
}

func (u *Updater) current() version.V {
	if u.Current.IsDev() {
		return version.Current()
	}
	return u.Current
}

func (u *Updater) statePath() string { return filepath.Join(u.Source.Dir, "state.json") }

func (u *Updater) load() updaterState {
	var st updaterState
	if b, err := os.ReadFile(u.statePath()); err == nil {
		_ = json.Unmarshal(b, &st) // a damaged state is a fresh one
	}
	return st
}

func (u *Updater) save(st updaterState) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(u.Source.Dir, 0o700); err != nil {
		return err
	}
	tmp := u.statePath() + ".new"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, u.statePath())
}

// nextCheck is now + CheckEvery + jitter.
func (u *Updater) nextCheck(now time.Time) time.Time {
	j := time.Duration(rand.Int64N(int64(MaxJitter)))
	if u.Jitter != nil {
		j = min(max(u.Jitter(), 0), MaxJitter)
	}
	return now.Add(CheckEvery + j)
}

// NextCheck is when Step next checks the release location (zero: at once).
func (u *Updater) NextCheck() time.Time { return u.load().NextCheck }

// Step does what is due now: install a release downloaded before once no
// task runs; else, when the check is due (or force), check the Source,
// and download, verify and (no task running) install a newer release. A
// refusal (see Words) leaves the installed version as it was and the
// next check a day later. force checks now, whatever the schedule and
// the hours.
func (u *Updater) Step(ctx context.Context, force bool) (Result, error) {
	now := u.now()
	st := u.load()
	cleanStaged(u.BinDir)
	if st.Ready != "" {
		if v, err := version.Parse(st.Version); err == nil && u.current().Less(v) {
			if _, err := os.Stat(st.Ready); err == nil {
				return u.install(ctx, st, v)
			}
		}
		st.Ready, st.Version = "", ""
		if err := u.save(st); err != nil {
			return Result{}, fmt.Errorf("update: %w", err)
		}
	}
	if !force && now.Before(st.NextCheck) {
		return Result{State: StateNotDue}, nil
	}
	if !force && u.Allowed != nil && !u.Allowed(now) {
		return Result{State: StateOutside}, nil
	}
	st.NextCheck = u.nextCheck(now)
	if err := u.save(st); err != nil {
		return Result{}, fmt.Errorf("update: %w", err)
	}
	r, err := u.Source.Latest(ctx, u.OS, u.Arch, u.Kind)
	if err != nil {
		return Result{}, err
	}
	if !u.current().Less(r.Version) {
		return Result{State: StateUpToDate, Version: u.current(), Words: "idlepool " + u.current().String() + " is the newest release"}, nil
	}
	if u.Kind == KindDeb {
		return Result{State: StateManual, Version: r.Version, Words: fmt.Sprintf("idlepool %s is out: update it with your package manager (sudo apt install ./idlepool_%s_*.deb, or apt upgrade)", r.Version, r.Version)}, nil
	}
	p, err := u.Source.Download(ctx, r)
	if err != nil {
		return Result{}, err
	}
	st.Ready, st.Version = p, r.Version.String()
	if err := u.save(st); err != nil {
		return Result{}, fmt.Errorf("update: %w", err)
	}
	return u.install(ctx, st, r.Version)
}

// install installs the verified download st.Ready when no task runs.
func (u *Updater) install(ctx context.Context, st updaterState, v version.V) (Result, error) {
	if u.Busy != nil && u.Busy() {
		return Result{State: StateReady, Version: v, Words: fmt.Sprintf("idlepool %s is downloaded: it installs once the running tasks finish", v)}, nil
	}
	var err error
	switch u.Kind {
	case KindTarball:
		err = InstallTarball(ctx, st.Ready, u.BinDir, v.String())
	case KindWindowsInstaller:
		err = runInstaller(ctx, st.Ready)
	default:
		err = fmt.Errorf("update: kind %q is not installed by idlepool itself", u.Kind)
	}
	// The download is spent either way: a release that failed to install
	// is downloaded and verified again at the next check.
	os.Remove(st.Ready)
	st.Ready, st.Version = "", ""
	if serr := u.save(st); err == nil && serr != nil {
		err = fmt.Errorf("update: %w", serr)
	}
	if err != nil {
		return Result{}, err
	}
	return Result{State: StateInstalled, Version: v, Words: fmt.Sprintf("idlepool %s is installed: restarting", v)}, nil
}

// runInstaller starts the per-user NSIS installer silently (/S
// /RESTART) and returns: it stops the running idlepool programs (this
// one too), replaces them where the person installed them, with no
// administrator rights and the data directory kept, and starts the tray
// app again (packaging/windows/idlepool.nsi).
func runInstaller(_ context.Context, setup string) error {
	cmd := exec.Command(setup, "/S", "/RESTART")
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("update: start the installer %s: %w", filepath.Base(setup), err)
	}
	return cmd.Process.Release()
}

// ErrNoProgramDir is returned by ProgramDir when the running program's
// directory cannot be found.
var ErrNoProgramDir = errors.New("release: cannot find the program's directory")

// ProgramDir is the directory of the running program (symbolic links
// resolved), where a tarball update replaces it.
func ProgramDir() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrNoProgramDir, err)
	}
	if r, err := filepath.EvalSymlinks(exe); err == nil {
		exe = r
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%w: %w", ErrNoProgramDir, err)
	}
	return filepath.Dir(exe), nil
}
