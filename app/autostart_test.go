//go:build linux

package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestXDGAutostart(t *testing.T) {
	cfg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfg)
	t.Setenv("XDG_CONFIG_DIRS", t.TempDir()) // no system-wide entry
	exe := "/opt/idle pool/idlepool-tray"
	a := NewAutostart(exe, "")
	file := filepath.Join(cfg, "autostart", "idlepool-tray.desktop")

	if on, err := a.Enabled(); err != nil || on {
		t.Fatalf("Enabled before Enable = %v, %v; want false, nil", on, err)
	}
	if err := a.Disable(); err != nil {
		t.Fatalf("Disable with no entry = %v, want nil", err)
	}
	if err := a.Enable(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"[Desktop Entry]", "Type=Application", `Exec="/opt/idle pool/idlepool-tray"`, "TryExec=/opt/idle pool/idlepool-tray", "Icon=" + appIconName} {
		if !strings.Contains(string(b), line+"\n") {
			t.Errorf("the entry lacks %q:\n%s", line, b)
		}
	}
	if on, err := a.Enabled(); err != nil || !on {
		t.Errorf("Enabled after Enable = %v, %v; want true, nil", on, err)
	}
	if on, _ := NewAutostart("/usr/bin/idlepool-tray", "").Enabled(); on {
		t.Error("an entry for another program counts as enabled")
	}

	// The desktop's own switch (GNOME writes Hidden=true) turns it off.
	if err := os.WriteFile(file, append(b, "Hidden=true\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	if on, _ := a.Enabled(); on {
		t.Error("a hidden entry counts as enabled")
	}
	if err := a.Enable(); err != nil { // rewrites it
		t.Fatal(err)
	}
	if on, _ := a.Enabled(); !on {
		t.Error("Enable did not rewrite a hidden entry")
	}

	if err := a.Disable(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("the entry is still there after Disable: %v", err)
	}
	if on, err := a.Enabled(); err != nil || on {
		t.Errorf("Enabled after Disable = %v, %v; want false, nil", on, err)
	}
}

// An app run with --home starts at login with the same home; an entry
// for another home (or none) does not count as this app's, and enabling
// replaces it.
func TestXDGAutostartHome(t *testing.T) {
	cfg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfg)
	t.Setenv("XDG_CONFIG_DIRS", t.TempDir())
	file := filepath.Join(cfg, "autostart", "idlepool-tray.desktop")
	const exe = "/usr/bin/idlepool-tray"
	x := NewAutostart(exe, "/x")
	plain := NewAutostart(exe, "")
	spaced := NewAutostart(exe, "/home/me/idle pool")

	if err := x.Enable(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if want := "Exec=/usr/bin/idlepool-tray --home /x\n"; !strings.Contains(string(b), want) {
		t.Errorf("the entry lacks %q:\n%s", want, b)
	}
	for _, tc := range []struct {
		name string
		a    Autostart
		want bool
	}{{"same home", x, true}, {"no home", plain, false}, {"another home", spaced, false}, {"another program", NewAutostart("/opt/idlepool-tray", "/x"), false}} {
		if on, err := tc.a.Enabled(); err != nil || on != tc.want {
			t.Errorf("%s: Enabled = %v, %v; want %v", tc.name, on, err, tc.want)
		}
	}

	// Enabling for another home replaces the entry.
	if err := spaced.Enable(); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(file)
	if want := `Exec=/usr/bin/idlepool-tray --home "/home/me/idle pool"` + "\n"; !strings.Contains(string(b), want) {
		t.Errorf("the entry lacks %q:\n%s", want, b)
	}
	if on, _ := spaced.Enabled(); !on {
		t.Error("Enabled after Enable for a home with a space = false")
	}
	if on, _ := x.Enabled(); on {
		t.Error("the entry for another home counts as enabled")
	}
	if err := plain.Enable(); err != nil {
		t.Fatal(err)
	}
	if on, _ := plain.Enabled(); !on {
		t.Error("Enabled after Enable with no home = false")
	}
	if on, _ := spaced.Enabled(); on {
		t.Error("an entry without --home counts as enabled for a home")
	}
}

func TestXDGAutostartDefaultDir(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", "")
	t.Setenv("XDG_CONFIG_DIRS", t.TempDir())
	if err := NewAutostart("/usr/bin/idlepool-tray", "").Enable(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(home, ".config", "autostart", "idlepool-tray.desktop")); err != nil {
		t.Error(err)
	}
}

// installProgram writes an executable file named idlepool-tray in a new
// directory and returns its path.
func installProgram(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "idlepool-tray")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestXDGAutostartSystemEntry: a system-wide entry (the Debian package's
// /etc/xdg/autostart/idlepool-tray.desktop) that starts the program turns
// start at login on with no file of the user's; turning it off writes the
// user's Hidden=true override, which names no program, and turning it on
// again removes that override. An app with a --home, or another copy of
// the program, needs a file of its own, with TryExec; an entry whose
// TryExec program is gone (the package removed, its /etc file kept) is
// not in force.
func TestXDGAutostartSystemEntry(t *testing.T) {
	cfg, sys := t.TempDir(), t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfg)
	t.Setenv("XDG_CONFIG_DIRS", filepath.Join(t.TempDir(), "none")+":"+sys)
	exe := installProgram(t)
	t.Setenv("PATH", filepath.Dir(exe))
	user := filepath.Join(cfg, "autostart", "idlepool-tray.desktop")
	system := filepath.Join(sys, "autostart", "idlepool-tray.desktop")
	writeSystem := func(body string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(system), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(system, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	userFile := func() string {
		t.Helper()
		b, err := os.ReadFile(user)
		if os.IsNotExist(err) {
			return ""
		}
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	enabled := func(what string, a Autostart, want bool) {
		t.Helper()
		if on, err := a.Enabled(); err != nil || on != want {
			t.Errorf("%s: Enabled = %v, %v; want %v", what, on, err, want)
		}
	}
	pkg, err := os.ReadFile("../packaging/deb/idlepool-tray.autostart.desktop")
	if err != nil {
		t.Fatal(err)
	}
	writeSystem(string(pkg))
	a := NewAutostart(exe, "")

	enabled("the package's entry alone", a, true)
	if err := a.Enable(); err != nil {
		t.Fatal(err)
	}
	if got := userFile(); got != "" {
		t.Errorf("Enable under the package's entry wrote a user file:\n%s", got)
	}

	if err := a.Disable(); err != nil {
		t.Fatal(err)
	}
	enabled("after Disable", a, false)
	got := userFile()
	if !strings.Contains(got, "\nHidden=true\n") || strings.Contains(got, "Exec") {
		t.Errorf("Disable under the package's entry wrote %q; want a Hidden=true override naming no program", got)
	}
	if err := a.Enable(); err != nil {
		t.Fatal(err)
	}
	enabled("after Enable", a, true)
	if got := userFile(); got != "" {
		t.Errorf("Enable left a user file:\n%s", got)
	}

	// A home to pass on, or another copy of the program, is the user's
	// own entry, overriding the package's.
	for _, tc := range []struct {
		name string
		a    Autostart
		exec string
	}{
		{"with a home", NewAutostart(exe, "/x"), "Exec=" + exe + " --home /x\n"},
		{"another copy", NewAutostart(installProgram(t), ""), ""},
	} {
		enabled(tc.name, tc.a, false)
		if err := tc.a.Enable(); err != nil {
			t.Fatal(err)
		}
		enabled(tc.name+" after Enable", tc.a, true)
		enabled("the package's program while "+tc.name+" starts", a, false)
		got := userFile()
		if !strings.Contains(got, tc.exec) || !strings.Contains(got, "\nTryExec=") {
			t.Errorf("%s: the user's entry lacks %q or TryExec:\n%s", tc.name, tc.exec, got)
		}
		if err := tc.a.Disable(); err != nil {
			t.Fatal(err)
		}
		enabled(tc.name+" after Disable", tc.a, false)
		enabled("the package's program after Disable "+tc.name, a, false)
		if got := userFile(); !strings.Contains(got, "Hidden=true") {
			t.Errorf("%s: Disable wrote %q; want the Hidden=true override", tc.name, got)
		}
		if err := a.Enable(); err != nil {
			t.Fatal(err)
		}
	}

	// The package's entry off for everyone, or its program gone: not in
	// force, so the user's entry is all there is.
	for _, body := range []string{
		strings.Replace(string(pkg), "[Desktop Entry]\n", "[Desktop Entry]\nHidden=true\n", 1),
		strings.ReplaceAll(string(pkg), "idlepool-tray", "idlepool-tray-removed"),
	} {
		writeSystem(body)
		enabled("an entry not in force", a, false)
		if err := a.Enable(); err != nil {
			t.Fatal(err)
		}
		enabled("an entry not in force, after Enable", a, true)
		if got := userFile(); !strings.Contains(got, "\nExec="+exe+"\n") {
			t.Errorf("Enable beside an entry not in force wrote:\n%s", got)
		}
		if err := a.Disable(); err != nil {
			t.Fatal(err)
		}
		if got := userFile(); got != "" {
			t.Errorf("Disable beside an entry not in force left:\n%s", got)
		}
	}
}

func TestDesktopQuote(t *testing.T) {
	tests := []struct{ in, want string }{
		{"/usr/bin/idlepool-tray", "/usr/bin/idlepool-tray"},
		{"/opt/my apps/idlepool-tray", `"/opt/my apps/idlepool-tray"`},
		{`/opt/a$b/x`, `"/opt/a\\$b/x"`},
		{`/opt/a\b/x`, `"/opt/a\\\\b/x"`},
		{"/opt/100%/x", "/opt/100%%/x"},
	}
	for _, tc := range tests {
		if got := desktopQuote(tc.in); got != tc.want {
			t.Errorf("desktopQuote(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
