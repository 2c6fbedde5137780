package release

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Programs are the names of the programs a tarball update replaces, each
// where it is installed (beside each other in a user install).
var Programs = []string{"idlepool", "idlepool-tray", "idlepool-window"}

// companions are programs an update installs beside another one even
// where they are not installed yet, when the tarball carries them, and
// leaves as they are when it does not: the tray app's window program
// (idlepool-window) came after idlepool-tray, whose new version needs
// it, and a tarball of an older version has none.
var companions = map[string]string{"idlepool-window": "idlepool-tray"}

// PreviousSuffix is appended to a program's name for the copy kept for
// one rollback.
const PreviousSuffix = ".previous"

// InstallTarball replaces the programs installed in binDir (those of
// Programs that are there, and idlepool-window beside idlepool-tray when
// the tarball carries it) by the ones in tarball (a gzip tar with them
// under a bin/ directory), so that each program is either the old one or
// the new one at any instant: each new program is written beside as
// .NAME.new, checked (idlepool must say `idlepool WANT` to `idlepool
// version`), then the old one is kept as NAME.previous (a hard link) and
// the new one renamed over it. A failure at any step puts back what it
// replaced and leaves the old programs working; it wraps ErrBadRelease
// when the tarball lacks a program or carries the wrong version.
func InstallTarball(ctx context.Context, tarball, binDir, want string) error {
	var names, optional []string
	installed := func(p string) bool { _, err := os.Stat(filepath.Join(binDir, p)); return err == nil }
	for _, p := range Programs {
		with, companion := companions[p]
		if installed(p) || companion && installed(with) {
			names = append(names, p)
		}
		if companion { // a tarball of an older version has none: what is there stays
			optional = append(optional, p)
		}
	}
	if len(names) == 0 {
		return fmt.Errorf("install %s: no idlepool program in %s", filepath.Base(tarball), binDir)
	}
	staged := map[string]string{} // name -> .NAME.new
	defer func() {
		for _, p := range staged {
			os.Remove(p)
		}
	}()
	if err := extract(tarball, binDir, names, optional, staged); err != nil {
		return err
	}
	if p, ok := staged["idlepool"]; ok {
		if err := checkVersion(ctx, p, want); err != nil {
			return err
		}
	}
	var done []string
	for _, n := range names {
		if _, ok := staged[n]; !ok {
			continue // a companion the tarball does not carry
		}
		cur := filepath.Join(binDir, n)
		prev := cur + PreviousSuffix
		os.Remove(prev)
		if installed(n) {
			if err := os.Link(cur, prev); err != nil {
				if err := copyFile(cur, prev); err != nil {
					undo(binDir, done)
					return fmt.Errorf("install: keep %s: %w", n, err)
				}
			}
		}
		if err := os.Rename(staged[n], cur); err != nil {
			undo(binDir, done)
			return fmt.Errorf("install: replace %s: %w", n, err)
		}
		delete(staged, n)
		done = append(done, n)
	}
	return nil
}

// undo puts the kept programs of names back, and removes those that had
// none kept (companions installed for the first time).
func undo(binDir string, names []string) {
	for _, n := range names {
		cur := filepath.Join(binDir, n)
		if err := os.Rename(cur+PreviousSuffix, cur); errors.Is(err, fs.ErrNotExist) {
			os.Remove(cur)
		}
	}
}

// Rollback puts back the programs InstallTarball kept in binDir (the
// version before the last update), once: the kept copies become the
// programs. Without kept copies it is an error.
func Rollback(binDir string) error {
	n := 0
	for _, p := range Programs {
		cur := filepath.Join(binDir, p)
		if _, err := os.Stat(cur + PreviousSuffix); err != nil {
			continue
		}
		if err := os.Rename(cur+PreviousSuffix, cur); err != nil {
			return fmt.Errorf("roll back %s: %w", p, err)
		}
		n++
	}
	if n == 0 {
		return fmt.Errorf("roll back: no previous version kept in %s", binDir)
	}
	return nil
}

// extract writes the entries bin/NAME of tarball for names to
// binDir/.NAME.new (mode 0755), recording them in staged.
func extract(tarball, binDir string, names, optional []string, staged map[string]string) error {
	f, err := os.Open(tarball)
	if err != nil {
		return fmt.Errorf("install: %w", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("%w: %s is not a gzip tarball: %w", ErrBadRelease, filepath.Base(tarball), err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrBadRelease, filepath.Base(tarball), err)
		}
		dir, base := path.Split(path.Clean(h.Name))
		if h.Typeflag != tar.TypeReg || path.Base(dir) != "bin" || !slices.Contains(names, base) {
			continue
		}
		p := filepath.Join(binDir, "."+base+".new")
		out, err := os.OpenFile(p, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
		if err != nil {
			return fmt.Errorf("install: %w", err)
		}
		staged[base] = p
		_, err = io.Copy(out, tr) // bounded: the tarball's length was signed
		if err == nil {
			err = out.Sync()
		}
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("install: write %s: %w", p, err)
		}
	}
	for _, n := range names {
		if _, ok := staged[n]; !ok && !slices.Contains(optional, n) {
			return fmt.Errorf("%w: %s has no bin/%s", ErrBadRelease, filepath.Base(tarball), n)
		}
	}
	return nil
}

// checkVersion runs `prog version` and wants "idlepool WANT".
func checkVersion(ctx context.Context, prog, want string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, prog, "version").Output()
	if err != nil {
		return fmt.Errorf("%w: the new idlepool does not run here: %w", ErrBadRelease, err)
	}
	if got := strings.TrimSpace(string(out)); got != "idlepool "+want {
		return fmt.Errorf("%w: the new idlepool says %q, the release %q", ErrBadRelease, got, want)
	}
	return nil
}

// cleanStaged removes the .NAME.new files an interrupted install left in
// binDir (the programs themselves were not touched yet).
func cleanStaged(binDir string) {
	for _, p := range Programs {
		os.Remove(filepath.Join(binDir, "."+p+".new"))
	}
}
