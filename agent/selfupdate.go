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

// ServeUpdating runs d's Serve beside the self-update (release.Keeper,
// with the owner's settings updates, update_url and update_download, the
// donor's hours, and d.Busy) until ctx ends. When the Keeper installs a
// new version it stops d and returns ErrRestart: the caller restarts
// the program (Restart). The self-update is left out (and logged) where
// the installation trusts no release keys. What it does is written to
// events ("idlepool 1.5.0 is installed: restarting", or why an update
// was refused).
func (d *Donor) ServeUpdating(ctx context.Context) error {
	dirs, local, log, events := d.cfg.Home, d.cfg.Store, d.log, d.cfg.Events
	busy, serve := d.Busy, d.Serve
	bin, err := release.ProgramDir()
	var u *release.Updater
	if err == nil {
		u, err = release.ForInstall(bin, UpdateDir(dirs), "", "", 0)
	}
	if err != nil {
		log.Info("No self-update", "err", err)
		return serve(ctx)
	}
	k := &release.Keeper{Updater: u, Settings: selfUpdateSettings(local), Busy: busy,
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
