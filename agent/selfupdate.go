package agent

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"time"

	"idlepool/home"
	"idlepool/release"
	"idlepool/store"
	"idlepool/version"
)

// selfUpdateSettings reads the owner's update settings for a Keeper.
func selfUpdateSettings(local *store.Local) func(ctx context.Context) (release.Settings, error) {
	return func(ctx context.Context) (release.Settings, error) {
		s, err := local.Settings(ctx)
		if err != nil {
			return release.Settings{}, err
		}
		loc := s.Location()
		return release.Settings{On: !s.NoUpdates, URL: s.UpdateURL, BytesPerSecond: s.UpdateBytesPerSecond(),
			Allowed: func(t time.Time) bool { return s.Schedule.Allows(t, loc) }}, nil
	}
}

// UpdateDir is where the self-update keeps its trusted metadata, state
// and downloads: the data directory's "update".
func UpdateDir(dirs home.Dirs) string { return filepath.Join(dirs.Data, "update") }

// ServeUpdating runs d's Serve beside the self-update (release.Keeper of
// the programs in DonorConfig.ProgramDir, with the owner's settings
// updates, update_url and update_download, the donor's hours, and
// d.Busy) until ctx ends. When the Keeper installs a
// new version it stops d and returns ErrRestart: the caller restarts
// the program (Restart). The self-update is left out (and logged) where
// the installation trusts no release keys. What it does is written to
// events ("idlepool 1.5.0 is installed: restarting", or why an update
// was refused).
func (d *Donor) ServeUpdating(ctx context.Context) error {
	dirs, local, log, events := d.cfg.Home, d.cfg.Store, d.log, d.cfg.Events
	busy, serve := d.Busy, d.Serve
	bin, err := d.cfg.ProgramDir, error(nil)
	if bin == "" {
		bin, err = release.ProgramDir()
	}
	var u *release.Updater
	if err == nil {
		u, err = release.ForInstall(bin, UpdateDir(dirs), "", "", 0)
	}
	if err != nil {
		log.Info("Self-update is off", "why", err)
		return serve(ctx)
	}
	k := &release.Keeper{Updater: u, Settings: selfUpdateSettings(local), Busy: busy, Wake: d.updateNow,
		Report: func(r release.Result, err error) {
			words := r.Words
			if err != nil {
				if words = release.Words(err); words == "" {
					words = "could not check for an update: " + err.Error()
				}
				log.Warn("Update failed", "err", err)
			}
			if words != "" && r.State != release.StateUpToDate && r.State != release.StateOutside {
				if err := events.Addf("%s", words); err != nil {
					log.Warn("Cannot write the event log", "err", err)
				}
			}
		}}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var kerr error
	wg.Go(func() {
		if kerr = k.Serve(ctx); errors.Is(kerr, release.ErrInstalled) {
			cancel() // stop the engine: the new version takes over
		}
	})
	err = serve(ctx)
	cancel()
	wg.Wait()
	if errors.Is(kerr, release.ErrInstalled) {
		return ErrRestart
	}
	return err
}

// ErrRestart is returned by Donor.ServeUpdating once a new version was
// installed: the program restarts (Restart) to run it.
var ErrRestart = errors.New("agent: a new version of idlepool is installed: restart")

// tooOldWords says a pool's refusal of this version in words, with what
// is done about it: "this pool needs idlepool 1.4 or newer (this is
// 1.3.0): updating", or how the person updates when this device does
// not update itself.
func (d *Donor) tooOldWords(ctx context.Context, err error) string {
	var words string
	var te *TooOldError
	var ae *APIError
	switch {
	case errors.As(err, &te):
		words = te.Error()
	case errors.As(err, &ae) && ae.Message != "":
		words = ae.Message + " (this is " + version.Version + ")"
	default:
		words = (&TooOldError{Have: version.Version}).Error()
	}
	s, serr := d.cfg.Store.Settings(ctx)
	switch {
	case serr != nil:
		return words
	case s.NoUpdates:
		return words + ": updates are off; turn them on in Settings (updates=true) or install the new version by hand"
	case s.UpdateURL == "":
		return words + ": update it from your pool's release location (idlepool settings set update_url=...) or your package manager"
	}
	return words + ": updating"
}
