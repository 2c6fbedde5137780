package agent_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/agent"
	"idlepool/idle"
)

// fixedClock returns a clock that starts at t and advances by a second
// at each reading.
func fixedClock(t time.Time) func() time.Time {
	var mu sync.Mutex
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		t = t.Add(time.Second)
		return t
	}
}

func TestEventLogKeepsLinesInOrder(t *testing.T) {
	path := filepath.Join(t.TempDir(), agent.EventsFile)
	start := time.Date(2026, 12, 1, 14, 2, 0, 0, time.UTC)
	l := agent.NewEventLog(path, 0, fixedClock(start))
	if evs, err := agent.ReadEvents(path, 0); err != nil || len(evs) != 0 {
		t.Fatalf("no log yet: %v, %v; want no events and no error", evs, err)
	}
	for _, w := range []string{"joined pool lanparty", "pool lanparty unreachable\n(retrying)", "pool lanparty reachable again"} {
		if err := l.Addf("%s", w); err != nil {
			t.Fatal(err)
		}
	}
	got, err := agent.ReadEvents(path, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := []agent.Event{
		{At: start.Add(2 * time.Second), Words: "pool lanparty unreachable (retrying)"},
		{At: start.Add(3 * time.Second), Words: "pool lanparty reachable again"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("last 2 events (-want +got):\n%s", d)
	}
	if line := got[0].Line(time.UTC, start); line != "14:02:02  pool lanparty unreachable (retrying)" {
		t.Errorf("line %q", line)
	}
	if line := got[0].Line(time.UTC, start.AddDate(0, 0, 1)); line != "Tue 1 Dec 14:02:02  pool lanparty unreachable (retrying)" {
		t.Errorf("line of another day %q", line)
	}
}

func TestEventLogIsBounded(t *testing.T) {
	// Many events: the two files never pass twice the cap, and the last
	// events are all kept.
	const maxBytes = 1000
	path := filepath.Join(t.TempDir(), agent.EventsFile)
	l := agent.NewEventLog(path, maxBytes, fixedClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)))
	const n = 500
	for i := range n {
		if err := l.Addf("event %d", i); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{path, path + ".1"} {
			if fi, err := os.Stat(p); err == nil && fi.Size() > maxBytes {
				t.Fatalf("after event %d, %s has %d bytes, over the cap of %d", i, filepath.Base(p), fi.Size(), maxBytes)
			}
		}
	}
	evs, err := agent.ReadEvents(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) < maxBytes/len("2026-12-01T00:00:00Z event 499\n") || len(evs) >= n {
		t.Fatalf("%d events kept of %d", len(evs), n)
	}
	for i, e := range evs {
		if want := fmt.Sprintf("event %d", n-len(evs)+i); e.Words != want {
			t.Fatalf("event %d of those kept is %q, want %q: the kept ones are not the last, in order", i, e.Words, want)
		}
	}
}

func TestEventLogConcurrentWriters(t *testing.T) {
	// Goroutines of one process write at once, across rotations: every
	// line is whole and none is lost from the files kept.
	path := filepath.Join(t.TempDir(), agent.EventsFile)
	l := agent.NewEventLog(path, 1<<20, nil)
	const writers, each = 8, 50
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				if err := l.Addf("writer %d event %d %s", w, i, strings.Repeat("x", 40)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	evs, err := agent.ReadEvents(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range evs {
		var w, i int
		var pad string
		if _, err := fmt.Sscanf(e.Words, "writer %d event %d %s", &w, &i, &pad); err != nil || len(pad) != 40 {
			t.Fatalf("torn line %q", e.Words)
		}
		seen[e.Words] = true
	}
	if len(seen) != writers*each {
		t.Errorf("%d distinct events, want %d", len(seen), writers*each)
	}
}

func TestNilEventLogDiscards(t *testing.T) {
	var l *agent.EventLog
	if err := l.Addf("nothing"); err != nil {
		t.Errorf("nil log: %v", err)
	}
}

func TestAgentLogsPoolUnreachableAndBack(t *testing.T) {
	// The coordinator goes down and comes back on the same address: the
	// event log says the pool is unreachable, then reachable again, and
	// the status says since when while it is down.
	data := t.TempDir()
	co := startCoordinator(t, data, "127.0.0.1:0")
	dev := newDevice(t, nil)
	path := filepath.Join(t.TempDir(), agent.EventsFile)
	events := agent.NewEventLog(path, 0, nil)
	ra := startAgentWith(t, co.url, dev, &fakeExec{}, func(c *agent.Config) {
		c.Events = events
		c.MaxBackoff = 200 * time.Millisecond
	})
	has := func(words string) func() bool {
		return func() bool {
			evs, err := agent.ReadEvents(path, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range evs {
				if strings.Contains(e.Words, words) {
					return true
				}
			}
			return false
		}
	}
	waitFor(t, "the log says the pool was joined", has("joined pool test"))
	co.Stop()
	waitFor(t, "the log says the pool is unreachable", has("pool test unreachable (retrying)"))
	// The event is written where the failure is met; the status follows
	// when the agent records it.
	waitFor(t, "the status says no pool answers", func() bool { return ra.Status().AllUnreachable() })
	st := ra.Status()
	if c := st.PoolsNow()[0].Connection(time.UTC, st.UnreachableSince); !strings.HasPrefix(c, "cannot reach the pool since ") {
		t.Errorf("connection with the pool down: %q", c)
	}
	startCoordinator(t, data, co.listen)
	waitFor(t, "the log says the pool is reachable again", has("pool test reachable again (unreachable since "))
	waitFor(t, "the status says the pool answers", func() bool { return !ra.Status().AllUnreachable() })
}

func TestDonorLogsPausesAndPools(t *testing.T) {
	// The owner pauses and resumes, and leaves the pool: each is an
	// event, in order. The owner's pause decides before any reading of
	// the machine, so the test does not depend on this machine's state.
	ctx := context.Background()
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	dev := newDevice(t, nil)
	if err := dev.local.JoinPool(ctx, co.url, ""); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), agent.EventsFile)
	d, err := agent.NewDonor(agent.DonorConfig{
		Home: dev.dirs, DeviceKey: dev.key, OwnerKey: dev.owner, Name: "donor", Workers: 1,
		Executor: &fakeExec{}, Store: dev.local, HTTP: httpClient(t), Events: agent.NewEventLog(path, 0, nil),
		PoolReload: 50 * time.Millisecond, RetryAfter: 100 * time.Millisecond, SettingsReload: 50 * time.Millisecond,
		Logger: quietLogger(t).With("side", "donor"),
		Adjust: func(c *agent.Config) {
			c.MaxBackoff, c.IdlePoll, c.ReceiptPoll = 200*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
			c.SamplePeriod, c.RestSamplePeriod = 50*time.Millisecond, 50*time.Millisecond
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Serve(sctx) }()
	t.Cleanup(func() { cancel(); <-done })
	words := func() []string {
		evs, err := agent.ReadEvents(path, 0)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range evs {
			out = append(out, e.Words)
		}
		return out
	}
	has := func(prefix string) func() bool {
		return func() bool {
			for _, w := range words() {
				if strings.HasPrefix(w, prefix) {
					return true
				}
			}
			return false
		}
	}
	waitFor(t, "the pool is joined", has("joined pool test"))
	setPause := func(until time.Time) {
		t.Helper()
		if _, err := dev.local.UpdateSettings(ctx, func(s *idle.Settings) error { s.PausedUntil = until; return nil }); err != nil {
			t.Fatal(err)
		}
		d.Reload()
	}
	setPause(time.Now().Add(time.Hour))
	waitFor(t, "the pause is an event", has("paused by you until "))
	setPause(time.Time{})
	waitFor(t, "the pause's end is an event", has("pause over; now "))
	if err := dev.local.LeavePool(ctx, co.url); err != nil {
		t.Fatal(err)
	}
	d.Reload()
	waitFor(t, "leaving is an event", has("left pool test"))
	var order []string
	for _, w := range words() {
		for _, p := range []string{"joined pool", "paused by you", "pause over", "left pool"} {
			if strings.HasPrefix(w, p) {
				order = append(order, p)
			}
		}
	}
	if d := cmp.Diff([]string{"joined pool", "paused by you", "pause over", "left pool"}, order); d != "" {
		t.Errorf("events (-want +got):\n%s\nall: %q", d, words())
	}
}
