package desktop

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"idlepool/app"
	"idlepool/home"
)

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    Config
		wantErr string
	}{
		{"defaults", nil, Config{Workers: runtime.NumCPU()}, ""},
		{"all", []string{"--home", "/tmp/h", "--workers", "3", "-v"}, Config{Home: "/tmp/h", Workers: 3, Verbose: true}, ""},
		{"no workers", []string{"--workers", "0"}, Config{}, "--workers must be at least 1"},
		{"stray argument", []string{"join"}, Config{}, `unexpected argument "join"`},
		{"unknown flag", []string{"--pool", "x"}, Config{}, "flag provided but not defined"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseFlags(tc.args, io.Discard)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parseFlags(%q) error = %v, want one containing %q", tc.args, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("parseFlags (-want +got):\n%s", diff)
			}
		})
	}
	var out bytes.Buffer
	if _, err := parseFlags([]string{"--help"}, &out); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("--help: %v, want flag.ErrHelp", err)
	}
	if !strings.Contains(out.String(), "Usage:") {
		t.Errorf("--help printed %q", out.String())
	}
}

func TestAutostartHome(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, flag, env, want string }{
		{"none", "", "", ""},
		{"flag", "/x", "", "/x"},
		{"relative flag", "h", "", filepath.Join(wd, "h")},
		{"environment", "", "/y", "/y"},
		{"relative environment", "", "e", filepath.Join(wd, "e")},
		{"flag before environment", "/x", "/y", "/x"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(home.EnvVar, tc.env)
			if got := autostartHome(tc.flag); got != tc.want {
				t.Errorf("autostartHome(%q) with $%s=%q = %q, want %q", tc.flag, home.EnvVar, tc.env, got, tc.want)
			}
		})
	}
}

func TestParseWindowFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    WindowConfig
		wantErr string
	}{
		{"one", []string{"settings"}, WindowConfig{Windows: []string{"settings"}}, ""},
		{"kinds then flags", []string{"browse", "history", "--home", "/tmp/h", "-v"},
			WindowConfig{Home: "/tmp/h", Verbose: true, Windows: []string{"browse", "history"}}, ""},
		{"flags between", []string{"firstrun", "--home", "/tmp/h", "settings"},
			WindowConfig{Home: "/tmp/h", Windows: []string{"firstrun", "settings"}}, ""},
		{"from the tray", []string{"settings", "--home", "/tmp/h", "--from-tray"},
			WindowConfig{Home: "/tmp/h", FromTray: true, Windows: []string{"settings"}}, ""},
		{"none", []string{"--home", "/tmp/h"}, WindowConfig{}, "no window to show"},
		{"unknown", []string{"settings", "tray"}, WindowConfig{}, `unknown window "tray"`},
		{"unknown flag", []string{"settings", "--workers", "2"}, WindowConfig{}, "flag provided but not defined"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseWindowFlags(tc.args, io.Discard)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parseWindowFlags(%q) error = %v, want one containing %q", tc.args, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("parseWindowFlags (-want +got):\n%s", diff)
			}
		})
	}
}

// TestWorkerEndsWithInput runs the worker mode on an input that ends at
// once, as a worker whose pool closed: it says hello and exits 0.
// TestReadRequests: the window process shows the windows asked on stdin;
// at its end it quits if the tray started it, and keeps running if it was
// started by hand.
func TestReadRequests(t *testing.T) {
	for _, fromTray := range []bool{true, false} {
		var shown [][]string
		quits := 0
		in := strings.NewReader("show settings\nnonsense\nshow browse history\n")
		ReadRequests(in, fromTray, func(k []string) { shown = append(shown, k) }, func() { quits++ }, slog.New(slog.DiscardHandler))
		if diff := cmp.Diff([][]string{{"settings"}, {"browse", "history"}}, shown); diff != "" {
			t.Errorf("fromTray %v: windows shown (-want +got):\n%s", fromTray, diff)
		}
		if want := map[bool]int{true: 1, false: 0}[fromTray]; quits != want {
			t.Errorf("fromTray %v: quit called %d times at the end of stdin, want %d", fromTray, quits, want)
		}
	}
}

func TestWorkerEndsWithInput(t *testing.T) {
	var out, errOut bytes.Buffer
	code := workerMain(context.Background(), []string{"--cache", t.TempDir()}, strings.NewReader(""), &out, &errOut)
	if code != 0 {
		t.Fatalf("workerMain = %d, stderr %q", code, errOut.String())
	}
	if !strings.Contains(out.String(), `"type":"hello"`) {
		t.Errorf("worker wrote %q, want its hello", out.String())
	}
}

func TestIcoOf(t *testing.T) {
	png := app.TrayIcon(app.TrayIdle)
	w, h := binary.BigEndian.Uint32(png[16:]), binary.BigEndian.Uint32(png[20:])
	ico := icoOf(png)
	if !bytes.Equal(ico[:6], []byte{0, 0, 1, 0, 1, 0}) {
		t.Errorf("ICO header % x", ico[:6])
	}
	if uint32(ico[6]) != w%256 || uint32(ico[7]) != h%256 {
		t.Errorf("ICO size %dx%d, the PNG's %dx%d", ico[6], ico[7], w, h)
	}
	if size, off := binary.LittleEndian.Uint32(ico[14:]), binary.LittleEndian.Uint32(ico[18:]); int(size) != len(png) || !bytes.Equal(ico[off:], png) {
		t.Errorf("the ICO's image is not the PNG (size %d, offset %d)", size, off)
	}
}

func TestProgramNames(t *testing.T) {
	// A program of another name runs meanwhile, to be listed.
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep program here")
	}
	cmd := exec.Command(sleep, "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })

	names, err := programNames(context.Background())
	if err != nil {
		t.Skipf("no process list here: %v", err)
	}
	if !slices.IsSorted(names) || len(slices.Compact(slices.Clone(names))) != len(names) {
		t.Errorf("names not sorted and unique: %q", names)
	}
	for _, n := range names {
		if strings.Contains(n, "/") {
			t.Errorf("name %q is a path, want a base name", n)
		}
		if strings.HasPrefix(n, "desktop.test") {
			t.Errorf("this test's own program %q is listed", n)
		}
		if runtime.GOOS == "linux" && (n == "kthreadd" || strings.HasPrefix(n, "kworker")) {
			t.Errorf("kernel thread %q is listed", n)
		}
	}
	if !slices.Contains(names, filepath.Base(sleep)) {
		t.Errorf("the running %s is not among %q", filepath.Base(sleep), names)
	}
}

func TestPickable(t *testing.T) {
	procs := []runningProcess{
		{PID: 1, PPID: 0, Name: "systemd", Exe: "/usr/lib/systemd/systemd"},
		{PID: 2, PPID: 0, Name: "kthreadd", NoExe: true},
		{PID: 40, PPID: 2, Name: "kworker/0:0-virtio_vsock", NoExe: true},
		{PID: 41, PPID: 2, Name: "kworker/0:1-cgroup_pidlist_destroy"},
		{PID: 90, PPID: 1, Name: "init-helper", NoExe: true}, // no executable
		{PID: 100, PPID: 1, Name: "blender", Exe: "/opt/blender/blender"},
		{PID: 101, PPID: 1, Name: "Steam.exe", Exe: `C:\Steam\Steam.exe`},
		{PID: 102, PPID: 1, Name: "someone-elses"}, // exe unreadable, not absent
		{PID: 200, PPID: 1, Name: "idlepool-tray", Exe: "/usr/bin/idlepool-tray"},
		{PID: 201, PPID: 200, Name: "idlepool-tray", Exe: "/usr/bin/idlepool-tray"},
		{PID: 202, PPID: 1, Name: "idlepool", Exe: "/usr/local/bin/idlepool"},
		{PID: 203, PPID: 1, Name: "IDLEPOOL.EXE", Exe: `C:\idlepool\idlepool.exe`},
		{PID: 204, PPID: 1, Name: "my-tray-build", Exe: "/home/me/bin/my-tray-build"},
	}
	own := append(slices.Clone(ownPrograms), "my-tray-build")
	tests := []struct {
		name  string
		linux bool
		want  []string
	}{
		{"linux", true, []string{"Steam.exe", "blender", "someone-elses", "systemd"}},
		// Elsewhere pid 2 and missing executables mean nothing special.
		{"other", false, []string{"0:0-virtio_vsock", "0:1-cgroup_pidlist_destroy", "Steam.exe", "blender", "init-helper", "kthreadd", "someone-elses", "systemd"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, pickable(procs, own, tc.linux)); diff != "" {
				t.Errorf("pickable (-want +got):\n%s", diff)
			}
		})
	}
}
