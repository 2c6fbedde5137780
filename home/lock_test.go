package home_test

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"idlepool/home"
)

// lockChildEnv makes the test binary a child that holds the lock named by
// the variable until its input ends.
const lockChildEnv = "IDLEPOOL_HOME_LOCK_CHILD"

func TestMain(m *testing.M) {
	if p := os.Getenv(lockChildEnv); p != "" {
		l, err := home.Acquire(p, "lock test child")
		if err != nil {
			os.Stdout.WriteString("error " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Stdout.WriteString("locked\n")
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		l.Release()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestLockExcludesAnotherProcess: while one process holds the lock a
// second one is refused at once, told the holder's PID and command; after
// the holder is killed (no chance to clean up) the lock is free again.
func TestLockExcludesAnotherProcess(t *testing.T) {
	if runtime.GOOS != "linux" && runtime.GOOS != "darwin" && runtime.GOOS != "windows" && !strings.Contains(runtime.GOOS, "bsd") {
		t.Skip("no file locks on " + runtime.GOOS)
	}
	path := filepath.Join(t.TempDir(), home.AgentLockFile)
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), lockChildEnv+"="+path)
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); child.Process.Kill(); child.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "locked\n" {
		t.Fatalf("child: %q, %v", line, err)
	}

	_, err = home.Acquire(path, "second")
	var le *home.LockedError
	if !errors.Is(err, home.ErrLocked) || !errors.As(err, &le) {
		t.Fatalf("second Acquire: %v, want ErrLocked", err)
	}
	want := home.LockedError{Path: path, PID: child.Process.Pid, Command: "lock test child"}
	if *le != want {
		t.Errorf("LockedError %+v, want %+v", *le, want)
	}
	if msg := err.Error(); !strings.Contains(msg, "PID") || !strings.Contains(msg, "lock test child") {
		t.Errorf("message %q does not name the holder", msg)
	}

	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	child.Wait()
	l, err := home.Acquire(path, "third")
	if err != nil {
		t.Fatalf("Acquire after the holder died: %v", err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(); err != nil {
		t.Errorf("second Release: %v", err)
	}
}
