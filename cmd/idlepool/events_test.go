package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestStatusAndEventsWithThePoolDown: a donor joined to a pool whose
// coordinator then stops: `idlepool status` says the pool cannot be
// reached (not "computing … 0 tasks held"), and `idlepool events` says it
// was joined and became unreachable.
func TestStatusAndEventsWithThePoolDown(t *testing.T) {
	serve, url := startServe(t, t.TempDir(), "127.0.0.1:0")
	home := t.TempDir()
	startJoin(t, home, url)
	waitOut := func(what string, args []string, want ...string) runOut {
		t.Helper()
		deadline := patient(t)
		for {
			out := idlepool(t, home, args...)
			ok := out.code == 0
			for _, w := range want {
				ok = ok && strings.Contains(out.stdout, w)
			}
			if ok {
				return out
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: idlepool %s never said %q; last exit %d:\n%s%s", what, strings.Join(args, " "), want, out.code, out.stdout, out.stderr)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitOut("pool up", []string{"status"}, "lab-a ("+url+"): 1 worker, 0 tasks, connected")
	waitOut("pool up", []string{"events"}, "joined pool lab-a")
	serve.stop()
	out := waitOut("pool down", []string{"status"}, "lab-a ("+url+"): 1 worker, 0 tasks, cannot reach the pool since ")
	if !strings.Contains(out.stdout, "\ndonor        no pool answers: lab-a: cannot reach the pool since ") {
		t.Errorf("status with the pool down does not say so on the donor line:\n%s", out.stdout)
	}
	out = waitOut("pool down", []string{"events", "-n", "1"}, "pool lab-a unreachable (retrying)")
	if n := strings.Count(out.stdout, "\n"); n != 1 {
		t.Errorf("events -n 1 printed %d lines:\n%s", n, out.stdout)
	}
	if out := idlepool(t, home, "events", "-n", "-1"); out.code != 2 || !strings.Contains(out.stderr, "-n -1 is negative") {
		t.Errorf("events -n -1: exit %d, stderr %q", out.code, out.stderr)
	}
}

// A local store found damaged as the donor starts is moved aside, and
// `idlepool events` says so afterwards, as `idlepool status` does while
// the donor runs.
func TestEventsRecordDamagedStore(t *testing.T) {
	_, url := startServe(t, t.TempDir(), "127.0.0.1:0")
	home := t.TempDir()
	data := filepath.Join(home, "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(data, localDBFile)
	if err := os.WriteFile(db, []byte(strings.Repeat("not a database ", 1000)), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startJoin(t, home, url)
	waitFile(t, d, d.stderr, "idlepool: the local store was damaged")
	waitFile(t, d, d.stderr, "Joined pool")
	d.stop()
	out := idlepool(t, home, "events")
	if out.code != 0 || !strings.Contains(out.stdout, "the local store was damaged (") ||
		!strings.Contains(out.stdout, "it was moved to "+db+".damaged-") {
		t.Errorf("events: exit %d\n%s%s", out.code, out.stdout, out.stderr)
	}
	if _, err := os.Stat(db); err != nil {
		t.Errorf("no new local store: %v", err)
	}
}
