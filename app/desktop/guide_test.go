//go:build unix

package desktop

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestFindGuide lays out the places the packages install the program and
// the donor's guide to, and finds the guide from the program's path.
func TestFindGuide(t *testing.T) {
	write := func(t *testing.T, path string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("# The donor's guide\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name, exe, guide string
	}{
		{"Debian package", "usr/bin/idlepool-tray", "usr/share/doc/idlepool/donor.md"},
		{"tarball user-install", "home/ada/.local/bin/idlepool-tray", "home/ada/.local/share/doc/idlepool/donor.md"},
		{"Windows installer", "Programs/idlepool/idlepool-tray.exe", "Programs/idlepool/donor.md"},
		{"source checkout", "src/idlepool/bin/idlepool-tray", "src/idlepool/docs/donor.md"},
		{"none", "opt/bin/idlepool-tray", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			write(t, filepath.Join(root, tc.exe))
			if tc.guide != "" {
				write(t, filepath.Join(root, tc.guide))
			}
			want := ""
			if tc.guide != "" {
				want = filepath.Join(root, tc.guide)
			}
			if got := findGuide(filepath.Join(root, tc.exe)); got != want {
				t.Errorf("findGuide = %q, want %q", got, want)
			}
		})
	}

	// A symbolic link to the program (~/bin/idlepool-tray) finds the guide
	// beside the program itself.
	root := t.TempDir()
	write(t, filepath.Join(root, "usr/bin/idlepool-tray"))
	write(t, filepath.Join(root, "usr/share/doc/idlepool/donor.md"))
	link := filepath.Join(root, "home/bin/idlepool-tray")
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "usr/bin/idlepool-tray"), link); err != nil {
		t.Fatal(err)
	}
	if got, want := findGuide(link), filepath.Join(root, "usr/share/doc/idlepool/donor.md"); got != want {
		t.Errorf("findGuide through a link = %q, want %q", got, want)
	}
}

func TestOpenWith(t *testing.T) {
	defer func(d time.Duration) { openerWait = d }(openerWait)
	// An opener that ends is waited for as long as it takes: on a busy
	// machine a shell may take longer than any short wait to start and
	// exit, and a wait that ran out would report success (openWith cannot
	// tell a slow failure from an opener waiting for the person).
	openerWait = time.Hour
	if err := openWith("true"); err != nil {
		t.Errorf("an opener that succeeds: %v", err)
	}
	err := openWith("sh", "-c", "echo 'no method available for opening it' >&2; exit 3")
	if err == nil || !strings.Contains(err.Error(), "exit status 3: no method available for opening it") {
		t.Errorf("an opener that fails: %v", err)
	}
	if err := openWith(filepath.Join(t.TempDir(), "no-such-opener")); err == nil {
		t.Error("a missing opener gave no error")
	}
	// An opener that keeps running (it waits for the person) is left to
	// run: openWith returns after openerWait while it still runs (were
	// it waited for, the test would hang until its deadline).
	openerWait = 200 * time.Millisecond
	pidFile := filepath.Join(t.TempDir(), "opener.pid")
	if err := openWith("sh", "-c", `echo $$ > "$0"; exec sleep 3600`, pidFile); err != nil {
		t.Errorf("an opener still running: %v", err)
	}
	// A busy machine may start the shell after openWith returned: wait
	// for its PID (until the test's deadline, if it never comes).
	var b []byte
	for len(b) == 0 || b[len(b)-1] != '\n' {
		time.Sleep(10 * time.Millisecond) // polling a condition
		b, _ = os.ReadFile(pidFile)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("the opener's PID %q: %v", b, err)
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Errorf("openWith returned, but the opener is gone: %v", err)
	}
	syscall.Kill(pid, syscall.SIGKILL)
}
