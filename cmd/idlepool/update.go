package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"path/filepath"

	"idlepool/agent"
	"idlepool/home"
	"idlepool/idle"
	"idlepool/release"
)

// newUpdater builds the self-update of this installation from the
// settings (update_url, update_download) and the root file beside the
// programs; url and root, when not empty, override them.
func newUpdater(dirs home.Dirs, s idle.Settings, url, root string) (*release.Updater, error) {
	if url == "" {
		url = s.UpdateURL
	}
	if url == "" {
		return nil, &userError{Msg: "no release location to update from",
			Hint: "set the one your pool's operator publishes: idlepool settings set update_url=https://..."}
	}
	bin, err := release.ProgramDir()
	if err != nil {
		return nil, err
	}
	u, err := release.ForInstall(bin, agent.UpdateDir(dirs), url, root, s.UpdateBytesPerSecond())
	if errors.Is(err, release.ErrNoRoot) {
		return nil, &userError{Msg: "this installation trusts no release keys yet: " + filepath.Join(bin, release.RootFile) + " is missing",
			Hint: "install idlepool from a release package, or give the release's root metadata: idlepool update --root FILE", Cause: err}
	}
	return u, err
}

const updateHelp = `Usage: idlepool update [--url URL] [--root FILE] [--rollback]

Checks the release location now (the setting update_url, or --url) for a
newer signed release of idlepool, downloads and verifies it, and
installs it: a user install from the tarball is replaced in place (the
previous version kept for one rollback), the Windows installer runs
silently, and for the Debian package it says to update with the package
manager. A release that fails verification is refused and the installed
version kept. The tray app and idlepool join do the same by themselves,
at most once a day, unless updates=false.

Flags:
`

func cmdUpdate(ctx context.Context, g *globals, args []string) error {
	fl := flag.NewFlagSet("idlepool update", flag.ContinueOnError)
	fl.SetOutput(g.stderr)
	fl.Usage = func() { fmt.Fprint(g.stderr, updateHelp); fl.PrintDefaults() }
	g.register(fl)
	url := fl.String("url", "", "the release location (default: the setting update_url)")
	root := fl.String("root", "", "the release's root metadata to trust first (default: "+release.RootFile+" beside the program)")
	rollback := fl.Bool("rollback", false, "put back the version installed before the last update")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if fl.NArg() > 0 {
		return &userError{Msg: "update takes no arguments", Hint: "idlepool update [--url URL]", Cause: errUsage}
	}
	if *rollback {
		bin, err := release.ProgramDir()
		if err != nil {
			return err
		}
		if err := release.Rollback(bin); err != nil {
			return &userError{Msg: err.Error(), Hint: "only the version before the last update is kept", Cause: err}
		}
		fmt.Fprintln(g.stdout, "put back the version installed before the last update")
		return nil
	}
	dirs, err := g.dirs()
	if err != nil {
		return err
	}
	s, err := loadSettings(ctx, dirs)
	if err != nil {
		return err
	}
	u, err := newUpdater(dirs, s, *url, *root)
	if err != nil {
		return err
	}
	r, err := u.Step(ctx, true)
	if err != nil {
		if w := release.Words(err); w != "" {
			return &userError{Msg: w, Hint: "tell the pool's operator; the details: " + err.Error(), Cause: err}
		}
		return &userError{Msg: "could not check for an update: " + err.Error(), Hint: "check update_url and the network; idlepool keeps the version installed", Cause: err}
	}
	fmt.Fprintln(g.stdout, r.Words)
	return nil
}
