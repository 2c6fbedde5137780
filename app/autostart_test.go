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
	a := NewAutostart(exe)
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
	for _, line := range []string{"[Desktop Entry]", "Type=Application", `Exec="/opt/idle pool/idlepool-tray"`} {
		if !strings.Contains(string(b), line+"\n") {
			t.Errorf("the entry lacks %q:\n%s", line, b)
		}
	}
	if on, err := a.Enabled(); err != nil || !on {
		t.Errorf("Enabled after Enable = %v, %v; want true, nil", on, err)
	}
	if on, _ := NewAutostart("/usr/bin/idlepool-tray").Enabled(); on {
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

func TestXDGAutostartDefaultDir(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", "")
	if err := NewAutostart("/usr/bin/idlepool-tray").Enable(); err != nil {
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
