//go:build linux

package idle

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shirou/gopsutil/v4/process"
)

// countFS is a proc root that counts the files opened and links read
// through it.
type countFS struct {
	fs.FS
	opens atomic.Int64
}

func (c *countFS) Open(name string) (fs.File, error) {
	c.opens.Add(1)
	return c.FS.Open(name)
}

func (c *countFS) ReadLink(name string) (string, error) {
	c.opens.Add(1)
	return fs.ReadLink(c.FS, name)
}

func (c *countFS) Lstat(name string) (fs.FileInfo, error) { return fs.Lstat(c.FS, name) }

// fakeProc writes process pid into the fake /proc at root: its comm, its
// command line (words joined by NULs) and, unless exe is "", the exe link.
func fakeProc(t *testing.T, root string, pid int, comm string, cmdline []string, exe string) {
	t.Helper()
	dir := filepath.Join(root, strconv.Itoa(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var cmd []byte
	for _, w := range cmdline {
		cmd = append(append(cmd, w...), 0)
	}
	if err := os.WriteFile(filepath.Join(dir, "comm"), []byte(comm+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cmdline"), cmd, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, "exe"))
	if exe != "" {
		if err := os.Symlink(exe, filepath.Join(dir, "exe")); err != nil {
			t.Fatal(err)
		}
	}
}

// fakeClock is a clock that moves only when told.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func TestProcScanMatchesAsBefore(t *testing.T) {
	root := t.TempDir()
	fakeProc(t, root, 1, "systemd", []string{"/sbin/init"}, "/usr/lib/systemd/systemd")
	fakeProc(t, root, 10, "steam", []string{"/home/u/.steam/ubuntu12_32/steam", "-silent"}, "/home/u/.steam/ubuntu12_32/steam")
	// A game whose main thread renamed the process: found by executable.
	fakeProc(t, root, 11, "GameThread", []string{"./MyGame.x86_64"}, "/opt/games/MyGame.x86_64")
	// Wine names the process after the Windows program.
	fakeProc(t, root, 12, "Game.exe", []string{`C:\Games\Game.exe`}, "/usr/bin/wine64-preloader")
	// A 15-character short name completed from the command line.
	fakeProc(t, root, 13, "VeryLongGameNam", []string{"/opt/x/VeryLongGameName.bin", "--flag"}, "")
	// A 15-character short name the command line does not complete.
	fakeProc(t, root, 14, "truncatedprogra", []string{"python3", "script.py"}, "")
	fakeProc(t, root, 15, "bash", []string{"bash"}, "/usr/bin/bash")
	// Not processes.
	if err := os.Symlink("15", filepath.Join(root, "self")); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"sys", "0", "012", "+16"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, d, "comm"), []byte("ghost\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	s := newProcScan(os.DirFS(root), clock.now)
	names, err := s.ProgramNames(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	wantNames := []string{
		"systemd", "/usr/lib/systemd/systemd",
		"steam", "/home/u/.steam/ubuntu12_32/steam",
		"GameThread", "/opt/games/MyGame.x86_64",
		"Game.exe", "/usr/bin/wine64-preloader",
		"VeryLongGameName.bin",
		"truncatedprogra",
		"bash", "/usr/bin/bash",
	}
	if !slices.Equal(names, wantNames) {
		t.Errorf("names = %q\nwant    %q", names, wantNames)
	}

	tests := []struct {
		want, match []string
	}{
		{[]string{"steam", "Steam.exe"}, []string{"steam"}},
		{[]string{"STEAM.EXE"}, []string{"STEAM.EXE"}},
		{[]string{"MyGame.x86_64"}, []string{"MyGame.x86_64"}},
		{[]string{"GameThread"}, []string{"GameThread"}},
		{[]string{`C:\Games\GAME.EXE`, "game"}, []string{`C:\Games\GAME.EXE`}},
		{[]string{"wine64-preloader"}, []string{"wine64-preloader"}},
		{[]string{"VeryLongGameName.bin"}, []string{"VeryLongGameName.bin"}},
		{[]string{"VeryLongGameName"}, []string{}},
		{[]string{"truncatedprogram.exe"}, []string{"truncatedprogram.exe"}},
		{[]string{"ghost", "python3", "script.py", "sys"}, []string{}},
	}
	for _, tc := range tests {
		if got := MatchPrograms(tc.want, names); !slices.Equal(got, tc.match) {
			t.Errorf("MatchPrograms(%q) = %q, want %q", tc.want, got, tc.match)
		}
	}
}

func TestProcScanRestingSampleOpensFixedFiles(t *testing.T) {
	opens := map[int]int64{}
	for _, n := range []int{10, 300} {
		root := t.TempDir()
		for pid := 100; pid < 100+n; pid++ {
			fakeProc(t, root, pid, "proc"+strconv.Itoa(pid), []string{"proc"}, "/usr/bin/proc")
		}
		clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
		c := &countFS{FS: os.DirFS(root)}
		s := newProcScan(c, clock.now)
		if _, err := s.ProgramNames(t.Context()); err != nil {
			t.Fatal(err)
		}
		if first := c.opens.Load(); first != int64(1+2*n) {
			t.Errorf("%d processes: first sample opened %d files, want %d (the directory, then comm and exe of each)", n, first, 1+2*n)
		}
		// Processes there at the first sample are of unknown age, not
		// young: the next sample, a second later, rereads none of them
		// but its turn.
		clock.t = clock.t.Add(time.Second)
		c.opens.Store(0)
		names, err := s.ProgramNames(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(names) != 2*n {
			t.Errorf("%d processes: second sample has %d names, want %d", n, len(names), 2*n)
		}
		opens[n] = c.opens.Load()
		if want := int64(1 + 2*procRecheck); opens[n] != want {
			t.Errorf("%d processes: a sample at rest opened %d files, want %d", n, opens[n], want)
		}
	}
}

func TestProcScanSeesChanges(t *testing.T) {
	root := t.TempDir()
	const n = 20
	for pid := 100; pid < 100+n; pid++ {
		fakeProc(t, root, pid, "idle"+strconv.Itoa(pid), []string{"idle"}, "")
	}
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	s := newProcScan(os.DirFS(root), clock.now)
	sample := func() []string {
		t.Helper()
		names, err := s.ProgramNames(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return names
	}
	running := func(prog string) bool {
		t.Helper()
		return len(MatchPrograms([]string{prog}, sample())) == 1
	}
	sample()
	clock.t = clock.t.Add(time.Hour)

	// A new process is seen at the next sample.
	fakeProc(t, root, 500, "wine64-preload", []string{"/usr/bin/wine64-preloader"}, "/usr/bin/wine64-preloader")
	if running("game.exe") {
		t.Fatal("game.exe running before it started")
	}
	// A young process renamed (Wine, an exec) is seen at the next sample.
	clock.t = clock.t.Add(procYoung / 2)
	fakeProc(t, root, 500, "game.exe", []string{`C:\game.exe`}, "/usr/bin/wine64-preloader")
	if !running("game.exe") {
		t.Error("a renamed young process not seen at the next sample")
	}
	// An old process that execs another program is seen within a turn of
	// rechecks, however far from the turn's start it is.
	clock.t = clock.t.Add(time.Hour)
	fakeProc(t, root, 110, "steam", []string{"steam"}, "/usr/bin/steam")
	seen := false
	for range (n + 1 + procRecheck - 1) / procRecheck {
		if running("steam") {
			seen = true
			break
		}
	}
	if !seen {
		t.Error("an old process's exec not seen within a turn of rechecks")
	}
	// A process that exits is gone at the next sample, and forgotten.
	if err := os.RemoveAll(filepath.Join(root, "110")); err != nil {
		t.Fatal(err)
	}
	if running("steam") {
		t.Error("steam still running after it exited")
	}
	if _, ok := s.procs[110]; ok {
		t.Error("an exited process is still kept")
	}
	// The list itself unreadable is an error.
	if err := os.RemoveAll(root); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ProgramNames(t.Context()); err == nil {
		t.Error("no error with the proc root gone")
	}
}

// TestProcScanNamesAsGopsutil compares, process by process on this
// machine's /proc, the names a procScan reads with those gopsutil gave
// before (its Name and Exe). A process that changes while read is skipped.
func TestProcScanNamesAsGopsutil(t *testing.T) {
	s := newProcScan(os.DirFS("/proc"), time.Now)
	if _, err := s.ProgramNames(t.Context()); err != nil {
		t.Fatal(err)
	}
	compared := 0
	for pid, e := range s.procs {
		p, err := process.NewProcessWithContext(t.Context(), int32(pid))
		if err != nil {
			continue
		}
		var old []string
		if n, err := p.NameWithContext(t.Context()); err == nil && n != "" {
			old = append(old, n)
		}
		if exe, err := p.ExeWithContext(t.Context()); err == nil && exe != "" {
			old = append(old, exe)
		}
		if again := s.read(pid); !slices.Equal(again, e.names) {
			continue
		}
		compared++
		if !slices.Equal(e.names, old) {
			t.Errorf("process %d: names %q, gopsutil's %q", pid, e.names, old)
		}
	}
	if compared == 0 {
		t.Error("no process compared")
	}
}

// BenchmarkProcScan is a sample of this machine's /proc after a first one,
// with the files opened and links read per sample as opens/op.
func BenchmarkProcScan(b *testing.B) {
	c := &countFS{FS: os.DirFS("/proc")}
	s := newProcScan(c, time.Now)
	if _, err := s.ProgramNames(b.Context()); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(len(s.procs)), "processes")
	c.opens.Store(0)
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.ProgramNames(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(c.opens.Load())/float64(b.N), "opens/op")
}
