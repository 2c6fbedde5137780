//go:build linux

package app

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// xdgAutostart is the XDG autostart entry (the Desktop Application
// Autostart Specification): a .desktop file in $XDG_CONFIG_HOME/autostart.
// The directory is looked up at each call, so that a test's
// XDG_CONFIG_HOME applies.
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

// path returns the .desktop file's path.
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

// Enabled reports whether the file exists, is not hidden or disabled,
// and its Exec line starts exe with this home (and nothing else).
func (a xdgAutostart) Enabled() (bool, error) {
	p, err := a.path()
	if err != nil {
		return false, err
	}
	b, found, err := readAutostartFile(p)
	if !found || err != nil {
		return false, err
	}
	exec, on := "", true
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "Exec":
			exec = strings.TrimSpace(v)
		case "Hidden":
			on = on && strings.TrimSpace(v) != "true"
		case "X-GNOME-Autostart-enabled":
			on = on && strings.TrimSpace(v) != "false"
		}
	}
	return on && exec == a.exec(), nil
}

// Enable writes the file (and the autostart directory, if missing).
func (a xdgAutostart) Enable() error {
	p, err := a.path()
	if err != nil {
		return err
	}
	body := "[Desktop Entry]\n" +
		"Type=Application\n" +
		"Name=idlepool\n" +
		"Comment=Lend this computer's idle time to compute pools\n" +
		"Exec=" + a.exec() + "\n" +
		"Icon=" + appIconName + "\n" +
		"Terminal=false\n" +
		"X-GNOME-Autostart-enabled=true\n"
	return writeAutostartFile(p, []byte(body))
}

// Disable removes the file; nil if there is none.
func (a xdgAutostart) Disable() error {
	p, err := a.path()
	if err != nil {
		return err
	}
	return removeAutostartFile(p)
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
