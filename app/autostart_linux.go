//go:build linux

package app

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// xdgAutostart is the XDG autostart entry (the Desktop Application
// Autostart Specification): a .desktop file named idlepool-tray.desktop
// in the user's autostart directory ($XDG_CONFIG_HOME/autostart, default
// ~/.config/autostart), which overrides a system-wide entry of the same
// name in an $XDG_CONFIG_DIRS autostart directory (default
// /etc/xdg/autostart, where the Debian package installs one).
//
// A system-wide entry that starts this program (Exec names it alone,
// found on PATH or by its path, and no --home is asked) turns start at
// login on without any file of the user's: Enable then removes the
// user's file instead of writing one, so that uninstalling the package
// (which removes the system-wide entry) leaves nothing behind. Disable
// with a system-wide entry in force writes the user's override with
// Hidden=true (the specification's way to turn a system-wide entry off
// for one user), which names no program. Any entry the user's file must
// carry (another program, a --home) has TryExec naming the program, so
// that a session skips it once the program is gone.
//
// The directories are looked up at each call, so that a test's
// XDG_CONFIG_HOME and XDG_CONFIG_DIRS apply.
type xdgAutostart struct{ exe, home string }

// appIconName is the app's icon by its name in the desktop's icon theme
// (the app ID in FyneApp.toml): the Linux package installs the icon
// under it, and its menu entry names it too.
const appIconName = "org.idlepool.tray"

func newAutostart(exe, home string) Autostart { return xdgAutostart{exe: exe, home: home} }

// exec is the Exec key's value: each argument quoted by desktopQuote.
func (a xdgAutostart) exec() string {
	args := autostartArgs(a.exe, a.home)
	for i, s := range args {
		args[i] = desktopQuote(s)
	}
	return strings.Join(args, " ")
}

// path returns the user's .desktop file's path.
func (a xdgAutostart) path() (string, error) {
	dir := os.Getenv("XDG_CONFIG_HOME")
	if !filepath.IsAbs(dir) { // unset or relative: the spec's default
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("autostart: find the home directory: %w", err)
		}
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "autostart", autostartName+".desktop"), nil
}

// systemEntry reads the system-wide entry: the first
// autostart/idlepool-tray.desktop in $XDG_CONFIG_DIRS (colon-separated,
// most important first; /etc/xdg when unset), as the specification
// orders them. found is false when there is none.
func systemEntry() (e desktopEntry, found bool, err error) {
	dirs := os.Getenv("XDG_CONFIG_DIRS")
	if dirs == "" {
		dirs = "/etc/xdg"
	}
	for _, dir := range filepath.SplitList(dirs) {
		if !filepath.IsAbs(dir) {
			continue
		}
		b, found, err := readAutostartFile(filepath.Join(dir, "autostart", autostartName+".desktop"))
		if found || err != nil {
			return parseDesktopEntry(b), found, err
		}
	}
	return desktopEntry{}, false, nil
}

// desktopEntry is what the autostart rules need of a .desktop file's
// [Desktop Entry] group.
type desktopEntry struct {
	exec, tryExec string // the keys' values as written, trimmed
	off           bool   // Hidden=true or X-GNOME-Autostart-enabled=false
}

func parseDesktopEntry(b []byte) desktopEntry {
	var e desktopEntry
	group := ""
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "[") {
			group = line
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || group != "[Desktop Entry]" {
			continue
		}
		switch v = strings.TrimSpace(v); strings.TrimSpace(k) {
		case "Exec":
			e.exec = v
		case "TryExec":
			e.tryExec = v
		case "Hidden":
			e.off = e.off || v == "true"
		case "X-GNOME-Autostart-enabled":
			e.off = e.off || v == "false"
		}
	}
	return e
}

// inForce reports whether a session would start the entry: not turned
// off, and its TryExec program (if any) installed.
func (e desktopEntry) inForce() bool {
	if e.off {
		return false
	}
	if e.tryExec != "" {
		if _, err := exec.LookPath(e.tryExec); err != nil {
			return false
		}
	}
	return true
}

// startsAlone reports whether the entry's Exec is exe alone, named by its
// path or by a name found on PATH (the same file either way).
func (e desktopEntry) startsAlone(exe string) bool {
	if e.exec == "" || strings.ContainsAny(e.exec, " \t\"'\\%") {
		return false
	}
	p, err := exec.LookPath(e.exec)
	if err != nil {
		return false
	}
	a, errA := os.Stat(p)
	b, errB := os.Stat(exe)
	return errA == nil && errB == nil && os.SameFile(a, b)
}

// systemStarts reports whether a system-wide entry is in force and
// whether it starts this program with this home (only an app without a
// home can be started by it).
func (a xdgAutostart) systemStarts() (inForce, startsThis bool, err error) {
	sys, found, err := systemEntry()
	if !found || err != nil || !sys.inForce() {
		return false, false, err
	}
	return true, a.home == "" && sys.startsAlone(a.exe), nil
}

// Enabled reports whether this program starts at login with this home:
// the user's file, if there is one, starts exe with this home (and
// nothing else) and is not hidden or disabled; else a system-wide entry
// in force starts exe.
func (a xdgAutostart) Enabled() (bool, error) {
	p, err := a.path()
	if err != nil {
		return false, err
	}
	b, found, err := readAutostartFile(p)
	if err != nil {
		return false, err
	}
	if found {
		e := parseDesktopEntry(b)
		return !e.off && e.exec == a.exec(), nil
	}
	_, starts, err := a.systemStarts()
	return starts, err
}

// Enable makes this program start at login: it removes the user's file
// where a system-wide entry in force starts it, else writes the file
// (and the autostart directory, if missing).
func (a xdgAutostart) Enable() error {
	p, err := a.path()
	if err != nil {
		return err
	}
	if _, starts, err := a.systemStarts(); err != nil {
		return err
	} else if starts {
		return removeAutostartFile(p)
	}
	body := "[Desktop Entry]\n" +
		"Type=Application\n" +
		"Name=idlepool\n" +
		"Comment=Lend this computer's idle time to compute pools\n" +
		"Exec=" + a.exec() + "\n" +
		"TryExec=" + desktopString(a.exe) + "\n" +
		"Icon=" + appIconName + "\n" +
		"Terminal=false\n" +
		"X-GNOME-Autostart-enabled=true\n"
	return writeAutostartFile(p, []byte(body))
}

// Disable makes nothing named idlepool-tray start at login: it writes the
// user's override with Hidden=true where a system-wide entry is in force
// (whichever program it starts), else removes the user's file (nil if
// there is none).
func (a xdgAutostart) Disable() error {
	p, err := a.path()
	if err != nil {
		return err
	}
	if inForce, _, err := a.systemStarts(); err != nil {
		return err
	} else if inForce {
		body := "[Desktop Entry]\n" +
			"Type=Application\n" +
			"Name=idlepool\n" +
			"Comment=Turns off the system-wide start at login of idlepool for this user\n" +
			"Hidden=true\n"
		return writeAutostartFile(p, []byte(body))
	}
	return removeAutostartFile(p)
}

// desktopString writes s as a string value of a .desktop file (Desktop
// Entry Specification, "Possible value types"): backslash, newline, tab
// and carriage return escaped, and a leading space as \s.
func desktopString(s string) string {
	s = strings.NewReplacer(`\`, `\\`, "\n", `\n`, "\t", `\t`, "\r", `\r`).Replace(s)
	if strings.HasPrefix(s, " ") {
		s = `\s` + s[1:]
	}
	return s
}

// desktopQuote writes a program path or argument as one of the Exec key's arguments
// (Desktop Entry Specification, "The Exec key"): quoted in double quotes
// when it holds a space or a reserved character, with `"`, "`", `$` and
// `\` escaped by a backslash, and `%` doubled (field codes); then every
// backslash doubled once more, as the key's string escaping asks.
func desktopQuote(exe string) string {
	exe = strings.ReplaceAll(exe, "%", "%%")
	if !strings.ContainsAny(exe, " \t\n\"'\\><~|&;$*?#()`") {
		return exe
	}
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range exe {
		if strings.ContainsRune("\"`$\\", r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	b.WriteByte('"')
	return strings.ReplaceAll(b.String(), `\`, `\\`)
}
