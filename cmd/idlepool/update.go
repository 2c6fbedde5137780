package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"idlepool/home"
	"idlepool/idle"
	"idlepool/release"
)

// RootFile is the file beside the installed programs that holds the
// root metadata of the release repository this installation trusts
// first (make release's metadata/1.root.json).
const RootFile = "release-root.json"

// updateDir is where the self-update keeps its trusted metadata, state
// and downloads, under the data directory.
func updateDir(dirs home.Dirs) string { return filepath.Join(dirs.Data, "update") }

// installKind says how this installation is updated: the Windows
// installer on Windows, the package manager for programs under /usr/bin
// (the .deb), the tarball otherwise (a user install).
func installKind(binDir string) string {
	switch {
	case runtime.GOOS == "windows":
		return release.KindWindowsInstaller
	case strings.HasPrefix(binDir, "/usr/bin"):
		return release.KindDeb
	}
	return release.KindTarball
}

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
	if root == "" {
		root = filepath.Join(bin, RootFile)
	}
	rootBytes, err := os.ReadFile(root)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read the trusted release root: %w", err)
	}
	src := &release.Source{URL: strings.TrimRight(url, "/"), Root: rootBytes, Dir: updateDir(dirs), BytesPerSecond: s.UpdateBytesPerSecond()}
	if len(rootBytes) == 0 {
		if _, err := os.Stat(filepath.Join(src.Dir, "metadata", "root.json")); err != nil {
			return nil, &userError{Msg: "this installation trusts no release keys yet: " + root + " is missing",
				Hint: "install idlepool from a release package, or give the release's root metadata: idlepool update --root FILE"}
		}
	}
	return &release.Updater{Source: src, Kind: installKind(bin), OS: runtime.GOOS, Arch: runtime.GOARCH, BinDir: bin}, nil
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
	root := fl.String("root", "", "the release's root metadata to trust first (default: "+RootFile+" beside the program)")
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
