package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// waitFor polls the file at path until it holds want, or fails after 30 s.
func waitFor(t *testing.T, d *daemon, path, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, _ := os.ReadFile(path)
		if strings.Contains(string(b), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s printed no %q within 30 s:\n%s", d.name, want, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSecondProcessRefused: a second `idlepool serve` on the same --data,
// and a second `idlepool join` with the same home, refuse at once with a
// message naming the running one's PID; the commands that only read
// (status, history) keep working beside the running agent.
func TestSecondProcessRefused(t *testing.T) {
	data := t.TempDir()
	first, url := startServe(t, data, "127.0.0.1:0")
	out := idlepool(t, t.TempDir(), "serve", "--listen", "127.0.0.1:0", "--data", data)
	want := fmt.Sprintf("idlepool: another coordinator already keeps its pool in %s: idlepool serve runs as PID %d\n", data, first.cmd.Process.Pid)
	if out.code != 1 || !strings.HasPrefix(out.stderr, want) || !strings.Contains(out.stderr, "hint: ") {
		t.Errorf("second serve on the same --data: exit %d, stderr:\n%s\nwant it to start with:\n%s", out.code, out.stderr, want)
	}

	home := t.TempDir()
	agent := startJoin(t, home, url)
	waitFor(t, agent, agent.stderr, "joining "+url)
	out = idlepool(t, home, "join", url, "--workers", "1", "--always")
	want = fmt.Sprintf("idlepool: this device already computes with the data directory %s: idlepool join runs as PID %d\n",
		filepath.Join(home, "data"), agent.cmd.Process.Pid)
	if out.code != 1 || !strings.HasPrefix(out.stderr, want) {
		t.Errorf("second join with the same home: exit %d, stderr:\n%s\nwant it to start with:\n%s", out.code, out.stderr, want)
	}
	for _, args := range [][]string{{"status"}, {"history"}, {"settings"}, {"settings", "set", "cores=2"}} {
		if out := idlepool(t, home, args...); out.code != 0 {
			t.Errorf("idlepool %s beside the running agent: exit %d: %s", strings.Join(args, " "), out.code, out.stderr)
		}
	}
	agent.stop()
	// Once it stopped, the home is free again.
	again := startJoin(t, home, url)
	waitFor(t, again, again.stderr, "joining "+url)
	again.stop()
}

// TestServeRefusesDamagedDatabase: a coordinator whose database is
// damaged does not start on an empty pool (its state exists nowhere
// else): it exits with a message that says what to do, and leaves the
// file as it was.
func TestServeRefusesDamagedDatabase(t *testing.T) {
	data := t.TempDir()
	junk := []byte(strings.Repeat("not a database ", 500))
	if err := os.WriteFile(filepath.Join(data, "coordinator.db"), junk, 0o600); err != nil {
		t.Fatal(err)
	}
	out := idlepool(t, t.TempDir(), "serve", "--listen", "127.0.0.1:0", "--data", data)
	if out.code != 1 || !strings.Contains(out.stderr, "idlepool: the coordinator's database in "+data+" is damaged") ||
		!strings.Contains(out.stderr, "hint: ") || !strings.Contains(out.stderr, "backup") {
		t.Errorf("serve on a damaged database: exit %d, stderr:\n%s", out.code, out.stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(data, "coordinator.db")); string(b) != string(junk) {
		t.Errorf("the damaged database was changed")
	}
}
