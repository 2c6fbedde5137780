package agent_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"idlepool/agent"
	"idlepool/pool"
	"idlepool/store"
)

// reopenStore replaces dev's local store by the same file opened with
// opts, and returns the file's path.
func reopenStore(t *testing.T, dev *device, opts ...store.Option) string {
	t.Helper()
	path := filepath.Join(dev.dirs.Data, "local.db")
	dev.local.Close()
	l, err := store.OpenLocal(path, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	dev.local = l
	return path
}

// holdWriteLock takes the write lock of the SQLite file at path on a
// connection of its own, as another process would, until release.
func holdWriteLock(t *testing.T, path string) (release func()) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(context.Background(), `BEGIN IMMEDIATE`); err != nil {
		t.Fatalf("BEGIN IMMEDIATE: %v", err)
	}
	done := false
	release = func() {
		if !done {
			done = true
			conn.ExecContext(context.Background(), `ROLLBACK`)
			conn.Close()
			db.Close()
		}
	}
	t.Cleanup(release)
	return release
}

// fillStore fills the local store at path, whose size is capped at
// maxPages pages, until no contribution fits, as a full disk would leave
// it (the rows are of a pool nobody joined); the function it returns
// deletes them, like a person freeing space.
func fillStore(t *testing.T, path string, maxPages int64) (makeRoom func()) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1) // one connection: the page limit is per connection
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec(`PRAGMA max_page_count = ` + itoa(maxPages)); err != nil {
		t.Fatal(err)
	}
	n := 0
	for size := 64 << 10; size >= 1; {
		n++
		_, err := db.Exec(`INSERT INTO contributions (lease, pool, job, task, digest, state, created, day, result)
			VALUES (?, 'http://filler', zeroblob(32), 0, zeroblob(32), 'pending', 0, '2026-01-01', zeroblob(?))`,
			"filler-"+itoa(int64(n)), size)
		if err != nil {
			if !strings.Contains(err.Error(), "full") {
				t.Fatal(err)
			}
			size /= 2
		}
	}
	return func() {
		if _, err := db.Exec(`DELETE FROM contributions WHERE pool = 'http://filler'`); err != nil {
			t.Fatal(err)
		}
	}
}

// fullPages caps the store of the disk-full test: room for what the test
// writes before it fills the rest.
const fullPages = 256

// waitStatus polls ra's status until ok says yes, or fails after 30 s.
func waitStatus(t *testing.T, status func() agent.AgentStatus, what string, ok func(agent.AgentStatus) bool) agent.AgentStatus {
	t.Helper()
	var st agent.AgentStatus
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if st = status(); ok(st) {
			return st
		}
	}
	t.Fatalf("no status with %s within 30 s; last: %+v", what, st.Store)
	return st
}

// TestAgentWaitsOutStoreFaults: while another process holds the local
// store's write lock past the busy timeout, or the disk is full, the
// agent keeps running: the result it computed is kept in memory and sent
// to the pool, it leases nothing more, its status says why ("paused: disk
// full, 0 B free on DIR"); once the lock is gone or there is room again
// it records the result, resumes, and the job completes with every
// receipt of the device in its history.
func TestAgentWaitsOutStoreFaults(t *testing.T) {
	for _, tc := range []struct {
		name    string
		open    func(t *testing.T, dev *device) (path string)
		fault   func(t *testing.T, path string) (undo func())
		problem string
		message string
	}{
		{"locked", func(t *testing.T, dev *device) string {
			return reopenStore(t, dev, store.WithBusyTimeout(20*time.Millisecond))
		}, func(t *testing.T, path string) func() {
			return holdWriteLock(t, path)
		}, "locked", "is locked by another process"},
		{"disk full", func(t *testing.T, dev *device) string {
			return reopenStore(t, dev, store.WithMaxPages(fullPages))
		}, func(t *testing.T, path string) func() {
			return fillStore(t, path, fullPages)
		}, "disk full", "paused: disk full, 0 B free on "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exec := &fakeExec{Delay: time.Millisecond}
			j := planJob(t, "store-"+strings.ReplaceAll(tc.name, " ", "-"), 6, "")
			want := solo(t, j, exec)
			co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
			carol := newDevice(t, nil)
			startAgent(t, co.url, carol, exec, 1, nil)
			bob := newDevice(t, nil)
			path := tc.open(t, bob)
			bobExec := &fakeExec{Block: make(chan struct{})}

			a, err := agent.New(agent.Config{
				PoolURL: co.url, Home: bob.dirs, DeviceKey: bob.key, OwnerKey: bob.owner, Slots: 1,
				Executor: bobExec, Store: bob.local, HTTP: httpClient(t),
				StorePath:  path,
				FreeSpace:  func(string) (uint64, error) { return 0, nil },
				MaxBackoff: 200 * time.Millisecond, IdlePoll: 50 * time.Millisecond, ReceiptPoll: 50 * time.Millisecond,
				Logger: quietLogger(t).With("side", "agent", "peer", bob.key.ID()),
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			served := make(chan error, 1)
			go func() { served <- a.Serve(ctx) }()

			sub := newSubmitter(t, co.url, nil)
			fctx, fcancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer fcancel()
			followed := make(chan *pool.Outcome, 1)
			go func() {
				out, err := sub.run(t, fctx, j)
				if err != nil {
					t.Errorf("follow: %v", err)
				}
				followed <- out
			}()

			// The fault comes while bob computes a task.
			waitStatus(t, a.Status, "a running task", func(st agent.AgentStatus) bool { return len(st.Running) > 0 })
			undo := tc.fault(t, path)
			close(bobExec.Block)
			st := waitStatus(t, a.Status, "a held result", func(st agent.AgentStatus) bool {
				return st.Store.Problem == tc.problem && st.Store.Held > 0 && len(st.Running) == 0
			})
			dir := filepath.Join(bob.dirs.Data)
			if !strings.Contains(st.Store.Message, tc.message) || !strings.Contains(st.Store.Message, dir) {
				t.Errorf("status message %q, want one with %q and %s", st.Store.Message, tc.message, dir)
			}
			if st.Store.Since.IsZero() {
				t.Errorf("status without the problem's start: %+v", st.Store)
			}
			select {
			case err := <-served:
				t.Fatalf("the agent stopped: %v", err)
			default:
			}

			undo()
			got := <-followed
			if got == nil {
				t.FailNow()
			}
			same(t, got, want)
			settle(t, bob, carol)
			entries := ledger(t, sub.c)
			checkHistory(t, bob, entries)
			var bobs int
			for _, e := range entries {
				if e.Peer == bob.key.ID() {
					bobs++
				}
			}
			if bobs == 0 {
				t.Errorf("bob has no ledger entry: the test held no result")
			}
			waitStatus(t, a.Status, "no problem", func(st agent.AgentStatus) bool { return st.Store.Problem == "" && st.Store.Held == 0 })
			cancel()
			if err := <-served; err != nil {
				t.Errorf("Serve: %v", err)
			}
		})
	}
}

// TestAgentRecoversReceiptsFromLedger: a device whose local store was
// damaged and repaired (moved aside, a new one started) gets its
// contributions back from the pool's signed ledger: every entry naming
// it is in its new history, confirmed or rejected as the ledger says.
func TestAgentRecoversReceiptsFromLedger(t *testing.T) {
	exec := &fakeExec{Delay: time.Millisecond}
	j := planJob(t, "recover", 8, "")
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	bob, carol := newDevice(t, nil), newDevice(t, nil)
	rb := startAgent(t, co.url, bob, exec, 1, nil)
	startAgent(t, co.url, carol, exec, 1, nil)
	sub := newSubmitter(t, co.url, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := sub.run(t, ctx, j); err != nil {
		t.Fatal(err)
	}
	settle(t, bob, carol)
	rb.Stop(t)

	path := filepath.Join(bob.dirs.Data, "local.db")
	bob.local.Close()
	if err := os.WriteFile(path, []byte(strings.Repeat("not a database ", 1000)), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Remove(path + "-wal")
	if _, err := store.OpenLocal(path); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("OpenLocal of junk: %v, want ErrCorrupt", err)
	}
	l, err := store.OpenLocalRepairing(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	bob.local = l
	if l.Recovery() == nil {
		t.Fatal("no Recovery after repairing")
	}
	startAgent(t, co.url, bob, exec, 1, nil)
	entries := ledger(t, sub.c)
	var mine int
	for _, e := range entries {
		if e.Peer == bob.key.ID() {
			mine++
		}
	}
	if mine == 0 {
		t.Fatal("bob earned nothing: nothing to recover")
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		all, err := l.Contributions(context.Background(), store.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(all) >= mine || time.Now().After(deadline) {
			break
		}
	}
	checkHistory(t, bob, entries)
}
