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
	for _, line := range []string{"[Desktop Entry]", "Type=Application", `Exec="/opt/idle pool/idlepool-tray"`, "Icon=" + appIconName} {
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
	if err := NewAutostart("/usr/bin/idlepool-tray", "").Enable(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(home, ".config", "autostart", "idlepool-tray.desktop")); err != nil {
		t.Error(err)
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
