package desktop

import (
	"bytes"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// guidePlaces are where the donor's guide (docs/donor.md) may lie,
// relative to the directory of the running program, in the order they
// are tried: /usr/share/doc/idlepool/ beside /usr/bin (the Debian
// package), and likewise under /usr/local or ~/.local (the tarball's
// install and user-install); beside the program (the Windows installer's
// folder); and docs/ beside bin/ (a source checkout after make tray).
var guidePlaces = []string{
	"../share/doc/idlepool/donor.md",
	"donor.md",
	"../docs/donor.md",
}

// findGuide returns the absolute path of the donor's guide installed with
// the program exe (symbolic links followed), or "" when there is none.
func findGuide(exe string) string {
	if p, err := filepath.EvalSymlinks(exe); err == nil {
		exe = p
	}
	dir := filepath.Dir(exe)
	for _, rel := range guidePlaces {
		p, err := filepath.Abs(filepath.Join(dir, filepath.FromSlash(rel)))
		if err != nil {
			continue
		}
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p
		}
	}
	return ""
}

// openerWait is how long openURL waits for the desktop's opener to end:
// one that fails at once (no program for the file's type, no opener) is
// an error with what it printed; one still running then has started what
// it opens, or waits for the person, and is left to run.
var openerWait = 2 * time.Second

// openURL opens u with the desktop's opener: the commands fyne.App.OpenURL
// runs (xdg-open, rundll32's FileProtocolHandler, open), run here because
// the tray process has no Fyne App (no OpenGL at rest). It returns
// errors.ErrUnsupported where there is no opener.
func openURL(u *url.URL) error {
	name, args, err := opener(u.String())
	if err != nil {
		return err
	}
	return openWith(name, args...)
}

// openWith starts name with args and waits up to openerWait for it. An
// opener still running after that is waited for by a goroutine of its
// own, which ends when the opener does, so that it leaves no zombie.
func openWith(name string, args ...string) error {
	cmd := exec.Command(name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			return nil
		}
		if msg := strings.TrimSpace(out.String()); msg != "" {
			return fmt.Errorf("%s: %w: %s", name, err, msg)
		}
		return fmt.Errorf("%s: %w", name, err)
	case <-time.After(openerWait):
		return nil
	}
}
