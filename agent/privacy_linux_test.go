//go:build linux

package agent_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"idlepool/agent"
	"idlepool/idle"
	"idlepool/offers"
)

// ownerInput is an input source whose owner was last active ago (set by
// the test).
type ownerInput struct{ ago atomic.Int64 }

func (o *ownerInput) IdleTime(context.Context) (time.Duration, string, error) {
	return time.Duration(o.ago.Load()), "test: the owner's input", nil
}

// startFakeGame runs a copy of sleep(1) named fakegame, a process the
// machine's process list shows by that name, until the returned function
// (or the test's end) kills it.
func startFakeGame(t *testing.T) (stop func()) {
	t.Helper()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skipf("no sleep(1) to copy: %v", err)
	}
	b, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "fakegame")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "3600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := false
	stop = func() {
		if !done {
			done = true
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}
	t.Cleanup(stop)
	return stop
}

// TestPoolViewsDoNotSayWhatTheOwnerDoes: a donor whose policy pauses
// because a program of the owner's list runs ("fakegame", a real process
// found in /proc), and then waits because the owner was active 14 s ago,
// says so in words on its own machine only. Everything another device of
// another owner reads from the pool on 127.0.0.1 (the offers, the job
// board, the jobs and their status, the pool's info and metrics, and the
// donors line of `idlepool status JOB` built from them) names neither the
// program nor the time, and carries the coarse hold: "owner".
func TestPoolViewsDoNotSayWhatTheOwnerDoes(t *testing.T) {
	stopGame := startFakeGame(t)
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	sub := newSubmitter(t, co.url, nil)
	ctx := context.Background()
	j := planJob(t, "squares-private", 3, "redundancy = 1\nquorum = 1")
	if err := sub.c.Submit(ctx, j); err != nil {
		t.Fatal(err)
	}

	settings := idle.Defaults()
	settings.PauseFor = []string{"fakegame"}
	settings.MaxOtherCPUShare, settings.MaxTemperatureC, settings.PauseOnBattery = 1, 0, false
	input := &ownerInput{}
	input.ago.Store(int64(time.Hour))
	sampler := idle.NewSampler(idle.SamplerConfig{
		Sources:  idle.Sources{InputIdle: []idle.InputIdleSource{input}, Processes: idle.DefaultSources(idle.SourceOptions{}).Processes},
		Programs: settings.PauseFor,
	})
	t.Cleanup(func() { _ = sampler.Close() })
	policy := idle.NewPolicy(settings)
	dev := newDevice(t, nil)
	a, err := agent.New(agent.Config{
		PoolURL: co.url, Home: dev.dirs, DeviceKey: dev.key, OwnerKey: dev.owner, Slots: 1,
		Executor: &fakeExec{}, Store: dev.local, HTTP: httpClient(t),
		MaxBackoff: 200 * time.Millisecond, IdlePoll: 50 * time.Millisecond, ReceiptPoll: 50 * time.Millisecond,
		Signals: sampler, Decide: policy.Decide,
		Logger: quietLogger(t).With("side", "agent"),
	})
	if err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Serve(actx) }()
	t.Cleanup(func() { cancel(); <-done })

	observerDev := newDevice(t, nil) // another owner's device in the pool
	observer := agentClient(t, co.url, observerDev)
	// views returns every view of the pool another device reads, by name.
	views := func() map[string]string {
		t.Helper()
		out := map[string]string{}
		for _, path := range []string{"/v1/offers", "/v1/listings", "/v1/jobs", "/v1/jobs/" + j.ID.String()} {
			b, err := agent.GetRaw(ctx, observer, path)
			if err != nil {
				t.Fatalf("GET %s: %v", path, err)
			}
			out[path] = string(b)
		}
		for _, path := range []string{"/v1/pool", "/metrics", "/healthz"} {
			resp, err := http.Get(co.url + path)
			if err != nil {
				t.Fatalf("GET %s: %v", path, err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatalf("GET %s: %v", path, err)
			}
			out[path] = string(b)
		}
		live, err := observer.Offers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		st, err := observer.Status(ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		act := agent.Describe(st, agent.ListingOf(j, st), live, time.Now())
		out["idlepool status JOB"] = act.Donors + "\n" + act.Stuck + "\n" + act.Quorum
		return out
	}
	// offerState waits until the pool lists the donor's offer in state
	// and returns it.
	offerState := func(state idle.State) offers.Offer {
		t.Helper()
		var got offers.Offer
		eventually(t, 2*time.Minute, "the donor's offer "+string(state), func() bool {
			live, err := observer.Offers(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range live {
				if o.Peer == dev.key.ID() && o.State == state {
					got = o
					return true
				}
			}
			return false
		})
		return got
	}
	check := func(phase string, secrets []string, state idle.State) {
		t.Helper()
		for name, body := range views() {
			for _, s := range secrets {
				if strings.Contains(body, s) {
					t.Errorf("%s: %s, read by another device, says %q:\n%s", phase, name, s, body)
				}
			}
		}
		v := views()
		if want := fmt.Sprintf(`"state":%q,"reason":"owner"`, state); !strings.Contains(v["/v1/offers"], want) {
			t.Errorf("%s: the offers lack %s:\n%s", phase, want, v["/v1/offers"])
		}
		if want := "1 " + string(state) + " (for its owner)"; !strings.Contains(v["idlepool status JOB"], want) {
			t.Errorf("%s: the donors line lacks %q:\n%s", phase, want, v["idlepool status JOB"])
		}
	}

	// A program of the owner's list runs: paused, and the reason names it
	// here, and only here.
	eventually(t, 2*time.Minute, "the donor paused for fakegame", func() bool {
		return a.Status().Decision.Reason == "paused: fakegame is running"
	})
	if o := offerState(idle.StatePaused); o.Hold != idle.HoldOwner {
		t.Errorf("paused offer's hold %q, want %q", o.Hold, idle.HoldOwner)
	}
	check("fakegame running", []string{"fakegame", "is running"}, idle.StatePaused)

	// The program ends, and the owner was active 14 s ago: waiting, and
	// the time is said here only.
	input.ago.Store(int64(14 * time.Second))
	stopGame()
	eventually(t, 2*time.Minute, "the donor waiting for its owner's idle time", func() bool {
		return strings.HasPrefix(a.Status().Decision.Reason, "waiting: you were active 14 s ago")
	})
	if o := offerState(idle.StateWaiting); o.Hold != idle.HoldOwner {
		t.Errorf("waiting offer's hold %q, want %q", o.Hold, idle.HoldOwner)
	}
	// Each secret holds a space or is too long for a device or owner ID
	// to contain it by chance: "ago" alone once matched an owner ID.
	check("owner active 14 s ago", []string{"fakegame", "you were active", "14 s", " ago", "5 min"}, idle.StateWaiting)
}
