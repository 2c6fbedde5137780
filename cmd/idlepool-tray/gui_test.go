package main

import (
	"bufio"
	"bytes"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"idlepool/app/desktop"
	"idlepool/app/desktop/window"
)

// These tests run the real tray app (this test binary, re-executed as
// the program) on a private X server (Xvfb) and, where it needs one, a
// private D-Bus session bus, find its windows with xdotool and take
// screenshots of them with ImageMagick's import. The windows belong to
// the app's window process, a child of the tray process the test starts;
// the tray process itself must not load OpenGL. Without those programs
// they skip, unless IDLEPOOL_REQUIRE_GUI=1 (CI) makes that a failure.
// IDLEPOOL_SCREENSHOTS=DIR keeps the screenshots there (make screenshots
// writes docs/screenshots).

// mainEnv, set to "1", makes the test binary the tray app itself.
const mainEnv = "IDLEPOOL_TRAY_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) == "1" {
		// The tray (startApp) starts this binary as its window program
		// too ($IDLEPOOL_WINDOW_PROGRAM), always with --from-tray.
		if slices.Contains(os.Args[1:], "--from-tray") {
			os.Exit(desktop.WindowMain(os.Args[1:], window.Run))
		}
		os.Exit(desktop.Main(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// needTools skips (or, with IDLEPOOL_REQUIRE_GUI=1, fails) the test
// unless the programs are installed.
func needTools(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			if os.Getenv("IDLEPOOL_REQUIRE_GUI") == "1" {
				t.Fatalf("%s is not installed, and IDLEPOOL_REQUIRE_GUI=1 (apt-get install xvfb imagemagick xdotool dbus-daemon)", n)
			}
			t.Skipf("%s is not installed", n)
		}
	}
}

// background starts cmd and stops it (SIGKILL) when the test ends, if it
// still runs.
func background(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
}

// startXvfb starts a private X server and returns its DISPLAY. It runs
// with -noreset: by default an X server resets when its last client
// leaves, and a client that connects during the reset is dropped before
// its setup is answered ("Failed to open display"; xserver issue 1102),
// which is what a launch right after the app quit would hit.
func startXvfb(t *testing.T) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("Xvfb", "-displayfd", "3", "-screen", "0", "2600x1500x24", "-nolisten", "tcp", "-noreset")
	cmd.ExtraFiles = []*os.File{w}
	background(t, cmd)
	w.Close()
	defer r.Close()
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(r).ReadString('\n')
		line <- strings.TrimSpace(s)
	}()
	select {
	case n := <-line:
		if n == "" {
			t.Fatal("Xvfb did not report its display")
		}
		return ":" + n
	case <-time.After(20 * time.Second):
		t.Fatal("Xvfb did not start within 20 s")
	}
	return ""
}

// startSessionBus starts a private D-Bus session bus and returns its
// address.
func startSessionBus(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("dbus-daemon", "--session", "--nofork", "--print-address=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	background(t, cmd)
	addr := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		addr <- strings.TrimSpace(s)
	}()
	select {
	case a := <-addr:
		if a == "" {
			t.Fatal("dbus-daemon did not report its address")
		}
		return a
	case <-time.After(20 * time.Second):
		t.Fatal("dbus-daemon did not start within 20 s")
	}
	return ""
}

// trayApp is one running instance of the tray app.
type trayApp struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan struct{} // closed when it exited; cmd.ProcessState is set then
}

// syncBuffer is a bytes.Buffer safe for the writer goroutine of exec and
// the test reading it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startApp runs the tray app with its state under home, on display, with
// the extra environment; it is killed when the test ends if it still runs.
func startApp(t *testing.T, home, display string, env ...string) *trayApp {
	t.Helper()
	return startProgram(t, os.Args[0], home, display, append([]string{mainEnv + "=1", desktop.WindowProgramEnv + "=" + os.Args[0]}, env...)...)
}

// startProgram runs the tray app prog (this test binary with mainEnv
// set, or a built idlepool-tray) as startApp does.
func startProgram(t *testing.T, prog, home, display string, env ...string) *trayApp {
	t.Helper()
	cmd := exec.Command(prog, "--home", home, "--workers", "1", "-v")
	cmd.Env = append(os.Environ(), "DISPLAY="+display, "LANG=en_US.UTF-8",
		"HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, "xdg-config"))
	cmd.Env = append(cmd.Env, env...)
	a := &trayApp{cmd: cmd, stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stderr = a.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the tray app: %v", err)
	}
	go func() { _ = cmd.Wait(); close(a.done) }()
	t.Cleanup(func() {
		select {
		case <-a.done:
		default:
			_ = cmd.Process.Kill()
			<-a.done
		}
		if t.Failed() {
			t.Logf("tray app stderr:\n%s", a.stderr.String())
		}
	})
	return a
}

// quit sends SIGTERM and waits for a clean exit.
func (a *trayApp) quit(t *testing.T) {
	t.Helper()
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.done:
	case <-time.After(40 * time.Second):
		t.Fatal("the tray app did not quit within 40 s of SIGTERM")
	}
	if code := a.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("the tray app exited with %d, want 0", code)
	}
	if strings.Contains(a.stderr.String(), "panic:") {
		t.Errorf("the tray app panicked:\n%s", a.stderr.String())
	}
}

// findWindow waits until a visible window titled name exists on display
// and returns its X window ID.
func findWindow(t *testing.T, display, name string, a *trayApp) string {
	t.Helper()
	return findWindowWithin(t, display, name, a, 60*time.Second)
}

// tryFindWindow waits up to wait for a visible window titled name and
// returns its ID, or "" when none appeared.
func tryFindWindow(display, name string, wait time.Duration) string {
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		cmd := exec.Command("xdotool", "search", "--onlyvisible", "--name", "^"+name+"$")
		cmd.Env = append(os.Environ(), "DISPLAY="+display)
		out, _ := cmd.Output()
		if ids := strings.Fields(string(out)); len(ids) > 0 {
			return ids[len(ids)-1]
		}
		time.Sleep(200 * time.Millisecond)
	}
	return ""
}

// findWindowWithin is findWindow, failing after wait.
func findWindowWithin(t *testing.T, display, name string, a *trayApp, wait time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		cmd := exec.Command("xdotool", "search", "--onlyvisible", "--name", "^"+name+"$")
		cmd.Env = append(os.Environ(), "DISPLAY="+display)
		out, _ := cmd.Output()
		if ids := strings.Fields(string(out)); len(ids) > 0 {
			return ids[len(ids)-1]
		}
		select {
		case <-a.done:
			t.Fatalf("the tray app exited before showing %q (exit %d)", name, a.cmd.ProcessState.ExitCode())
		default:
		}
		if time.Now().After(deadline) {
			all := exec.Command("xdotool", "search", "--name", ".")
			all.Env = cmd.Env
			ids, _ := all.Output()
			var names []string
			for _, id := range strings.Fields(string(ids)) {
				n := exec.Command("xdotool", "getwindowname", id)
				n.Env = cmd.Env
				out, _ := n.Output()
				names = append(names, id+" "+strings.TrimSpace(string(out)))
			}
			ps, _ := exec.Command("ps", "-ef", "--forest").Output()
			t.Fatalf("no window %q appeared within %v; windows:\n%s\nprocesses:\n%s", name, wait, strings.Join(names, "\n"), ps)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// screenshot raises window id, captures it as PNG into dir/name.png and
// checks that it is not blank: a window of a plausible size with enough
// colours to be drawn widgets and text, not one flat fill.
func screenshot(t *testing.T, display, id, dir, name string) {
	t.Helper()
	env := append(os.Environ(), "DISPLAY="+display)
	raise := exec.Command("xdotool", "windowraise", id)
	raise.Env = env
	_ = raise.Run()
	path := filepath.Join(dir, name+".png")
	var img image.Image
	for try := 0; ; try++ {
		time.Sleep(time.Second) // let it draw
		// OpenGL windows read back black on their own (import -window
		// ID), so the window is cut out of the whole screen.
		geo := exec.Command("xdotool", "getwindowgeometry", "--shell", id)
		geo.Env = env
		out, err := geo.Output()
		if err != nil {
			t.Fatalf("xdotool getwindowgeometry %s: %v", id, err)
		}
		g := map[string]string{}
		for _, line := range strings.Fields(string(out)) {
			if k, v, ok := strings.Cut(line, "="); ok {
				g[k] = v
			}
		}
		crop := fmt.Sprintf("%sx%s+%s+%s", g["WIDTH"], g["HEIGHT"], g["X"], g["Y"])
		cmd := exec.Command("import", "-window", "root", "-crop", crop, "+repage", path)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("import -window root -crop %s: %v\n%s", crop, err, out)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		img, err = png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatalf("screenshot %s: %v", path, err)
		}
		if colours(img) >= 16 || try == 10 {
			break
		}
	}
	b := img.Bounds()
	if b.Dx() < 300 || b.Dy() < 200 {
		t.Errorf("window %s is %dx%d, too small to be the window", name, b.Dx(), b.Dy())
	}
	if n := colours(img); n < 16 {
		t.Errorf("screenshot of %s has %d colours: blank", name, n)
	}
	if keep := os.Getenv("IDLEPOOL_SCREENSHOTS"); keep != "" {
		data, err := os.ReadFile(path)
		if err == nil {
			err = os.WriteFile(filepath.Join(keep, name+".png"), data, 0o644)
		}
		if err != nil {
			t.Errorf("keep screenshot: %v", err)
		}
	}
}

// windowPID returns the process that owns window id (_NET_WM_PID).
func windowPID(t *testing.T, display, id string) int {
	t.Helper()
	cmd := exec.Command("xdotool", "getwindowpid", id)
	cmd.Env = append(os.Environ(), "DISPLAY="+display)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("xdotool getwindowpid %s: %v", id, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("xdotool getwindowpid %s: %q", id, out)
	}
	return pid
}

// checkWindowProcess checks that the window with pid win belongs to the
// window process, not to the tray process a, and that the tray process
// has loaded no OpenGL driver (Mesa's swrast and LLVM: tens of MB).
func checkWindowProcess(t *testing.T, a *trayApp, win int) {
	t.Helper()
	if win == a.cmd.Process.Pid {
		t.Errorf("the tray process %d owns a window; want its window process to", win)
	}
	if runtime.GOOS != "linux" {
		return
	}
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", a.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, lib := range []string{"libLLVM", "_dri.so", "libGLX_mesa", "libgallium"} {
		if strings.Contains(string(maps), lib) {
			t.Errorf("the tray process has loaded %s: it initialised OpenGL", lib)
		}
	}
}

// gone reports whether process pid has exited (a zombie counts as gone:
// its parent, the tray process, may have quit before reaping it).
func gone(pid int) bool {
	if runtime.GOOS != "linux" {
		return syscall.Kill(pid, 0) != nil
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	_, rest, _ := strings.Cut(string(stat), ") ")
	return strings.HasPrefix(rest, "Z")
}

// waitGone waits until process pid has exited.
func waitGone(t *testing.T, pid int, what string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !gone(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("%s (pid %d) still runs", what, pid)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// colours counts the distinct colours of img, up to 1000.
func colours(img image.Image) int {
	seen := map[[4]uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			r, g, bb, a := img.At(x, y).RGBA()
			seen[[4]uint32{r, g, bb, a}] = true
			if len(seen) >= 1000 {
				return len(seen)
			}
		}
	}
	return len(seen)
}

func TestWindowsUnderXvfb(t *testing.T) {
	needTools(t, "Xvfb", "dbus-daemon", "xdotool", "import")
	display := startXvfb(t)
	bus := startSessionBus(t)
	home := scene(t)
	shots := t.TempDir()

	// The welcome window as a new donor sees it: an app started in a
	// home of its own with nothing saved, so that it shows the default
	// rules (the scene's home has the hours of a gamer saved). It quits
	// before the scene's app starts, so that its windows (with no panel
	// on this bus it opens its settings window too) are not taken for
	// that app's.
	fresh := startApp(t, t.TempDir(), display, "DBUS_SESSION_BUS_ADDRESS="+bus)
	welcome := findWindow(t, display, "Welcome to idlepool", fresh)
	// Its settings window opens at the top left too: the welcome window
	// moves clear of it.
	move := exec.Command("xdotool", "windowmove", welcome, "1500", "700")
	move.Env = append(os.Environ(), "DISPLAY="+display)
	if out, err := move.CombinedOutput(); err != nil {
		t.Fatalf("xdotool windowmove: %v\n%s", err, out)
	}
	time.Sleep(2 * time.Second) // it redraws where it was moved
	screenshot(t, display, welcome, shots, "firstrun")
	freshWin := windowPID(t, display, welcome)
	fresh.quit(t)
	waitGone(t, freshWin, "the new donor's window process after its app quit")

	a := startApp(t, home, display, "DBUS_SESSION_BUS_ADDRESS="+bus,
		desktop.ShowEnv+"=settings,browse,history,now")
	var ids []string
	// With no window manager every window opens at the top left: each is
	// moved to a place of its own on the large screen before its
	// screenshot.
	for _, w := range []struct {
		title, name string
		x, y        int
	}{
		{"idlepool settings", "settings", 700, 0},
		{"Browse jobs", "browse", 0, 760},
		{"Contribution history", "history", 1100, 760},
		{"Now", "now", 1500, 0},
	} {
		id := findWindow(t, display, w.title, a)
		move := exec.Command("xdotool", "windowmove", id, fmt.Sprint(w.x), fmt.Sprint(w.y))
		move.Env = append(os.Environ(), "DISPLAY="+display)
		if out, err := move.CombinedOutput(); err != nil {
			t.Fatalf("xdotool windowmove: %v\n%s", err, out)
		}
		ids = append(ids, id)
	}
	time.Sleep(2 * time.Second) // the windows redraw where they were uncovered
	for i, name := range []string{"settings", "browse", "history", "now"} {
		screenshot(t, display, ids[i], shots, name)
	}
	win := windowPID(t, display, ids[0])
	for _, id := range ids {
		if p := windowPID(t, display, id); p != win {
			t.Errorf("the windows belong to processes %d and %d; want one window process", win, p)
		}
	}
	checkWindowProcess(t, a, win)

	// A second launch shows the first one's settings window and exits.
	second := startApp(t, home, display, "DBUS_SESSION_BUS_ADDRESS="+bus)
	select {
	case <-second.done:
		if code := second.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("second launch exited with %d, want 0:\n%s", code, second.stderr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a second launch did not exit within 30 s")
	}
	select {
	case <-a.done:
		t.Fatalf("the first instance exited when the second started:\n%s", a.stderr)
	default:
	}

	// Closing the windows (ending the window process) leaves the tray
	// running; a second launch then starts a new window process.
	if err := syscall.Kill(win, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitGone(t, win, "the window process")
	select {
	case <-a.done:
		t.Fatalf("the tray process exited with its window process:\n%s", a.stderr)
	default:
	}
	// Once in about twenty runs on a loaded machine this window did not
	// appear (not reproduced since; the app logs with -v to tell why):
	// a launch that shows nothing is retried once, as a person would
	// click again, and said in the log.
	var id string
	for try := 1; ; try++ {
		third := startApp(t, home, display, "DBUS_SESSION_BUS_ADDRESS="+bus)
		select {
		case <-third.done:
		case <-time.After(30 * time.Second):
			t.Fatal("a third launch did not exit within 30 s")
		}
		if try == 2 {
			id = findWindow(t, display, "idlepool settings", a)
			break
		}
		if id = tryFindWindow(display, "idlepool settings", 30*time.Second); id != "" {
			break
		}
		t.Logf("a launch after the window process ended showed no settings window within 30 s; launching again. The tray app's log:\n%s", a.stderr)
	}
	win = windowPID(t, display, id)

	// Quitting the tray process ends its window process.
	a.quit(t)
	waitGone(t, win, "the window process after the tray quit")
}

func TestWithoutSessionBus(t *testing.T) {
	// fyne.io/systray panics on quit without a session bus: the app must
	// keep its tray off and show the settings window as its main window.
	needTools(t, "Xvfb", "xdotool", "import")
	display := startXvfb(t)
	home := t.TempDir()
	a := startApp(t, home, display, "DBUS_SESSION_BUS_ADDRESS=unix:path="+filepath.Join(home, "no-bus"))
	id := findWindow(t, display, "idlepool settings", a)
	screenshot(t, display, id, t.TempDir(), "settings-no-tray")
	win := windowPID(t, display, id)
	checkWindowProcess(t, a, win)
	a.quit(t)
	waitGone(t, win, "the window process after the tray quit")

	// Closing the window (its process ends) quits the app.
	b := startApp(t, home, display, "DBUS_SESSION_BUS_ADDRESS=unix:path="+filepath.Join(home, "no-bus"))
	win = windowPID(t, display, findWindow(t, display, "idlepool settings", b))
	if err := syscall.Kill(win, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.done:
		if code := b.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("the app exited with %d after its window closed, want 0", code)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("the app did not quit within 40 s of its window closing")
	}
	if !strings.Contains(a.stderr.String(), "bus") {
		t.Logf("stderr did not mention the missing bus:\n%s", a.stderr)
	}
}
