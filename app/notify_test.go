package app

import (
	"context"
	"sync"
	"testing"
	"time"

	"idlepool/agent"
	"idlepool/idle"
)

// notifyingEngine is a fakeEngine that tells of its changes, as
// agent.Donor does.
type notifyingEngine struct {
	*fakeEngine
	mu sync.Mutex
	ch chan struct{}
}

func (e *notifyingEngine) Changes() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.ch
}

// change sets the status and tells of it.
func (e *notifyingEngine) change(st agent.AgentStatus) {
	e.set(st)
	e.mu.Lock()
	defer e.mu.Unlock()
	close(e.ch)
	e.ch = make(chan struct{})
}

// menuRecorder is a TrayView safe for Serve's goroutine: each menu shown
// goes to menus.
type menuRecorder struct{ menus chan TrayMenu }

func (r menuRecorder) SetMenu(m TrayMenu) { r.menus <- m }
func (r menuRecorder) SetIcon(TrayState)  {}

// TestTrayFollowsEngineChanges: the tray's line follows the engine's
// change (a game starting, the owner's Resume) when the engine tells of
// it, not at its next periodic refresh, which here would come only in a
// day.
func TestTrayFollowsEngineChanges(t *testing.T) {
	computing := agent.AgentStatus{Pools: lab, Running: []agent.RunningTask{{Job: "j"}},
		Decision: idle.Decision{State: idle.StateComputing, Reason: "computing on 3 of 4 cores"}}
	computing.Pools = []agent.PoolState{lab[0]}
	computing.Pools[0].Running = 1
	e := &notifyingEngine{fakeEngine: &fakeEngine{}, ch: make(chan struct{})}
	e.set(computing)
	now := time.Date(2025, 6, 2, 14, 0, 0, 0, time.UTC)
	rec := menuRecorder{menus: make(chan TrayMenu, 16)}
	tray := NewTray(&Deps{Store: openStore(t), Engine: e, Now: func() time.Time { return now }}, rec, nil, nil)
	tray.every = 24 * time.Hour
	if got := (<-rec.menus).State; got != TrayComputing {
		t.Fatalf("first menu in state %q", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	clicks := make(chan TrayAction)
	done := make(chan error, 1)
	go func() { done <- tray.Serve(ctx, clicks) }()
	defer func() { cancel(); <-done }()
	clicks <- ActionNone // Serve runs: it waits for the engine's next change

	// waitMenu waits (at most 2 minutes) for a menu in state with line.
	waitMenu := func(what string, state TrayState, line string) {
		t.Helper()
		deadline := time.After(2 * time.Minute)
		for {
			select {
			case m := <-rec.menus:
				if m.State == state && m.Status == line {
					return
				}
			case <-deadline:
				t.Fatalf("%s: the tray did not show %s %q in 2 minutes", what, state, line)
			}
		}
	}
	game := computing
	game.Decision = idle.Decision{State: idle.StatePaused, Reason: "paused: steam is running"}
	game.Running = []agent.RunningTask{{Job: "j", Suspended: true}}
	game.Suspended = true
	e.change(game)
	waitMenu("a game starts", TrayPaused, "Paused: steam is running")

	// The owner pauses and resumes from the menu; the engine decides
	// to compute again a moment after the Resume.
	clicks <- ActionPauseHour
	waitMenu("paused by the owner", TrayPaused, "Paused by you until 15:00")
	e.set(agent.AgentStatus{Pools: lab, Decision: idle.Decision{State: idle.StatePaused, Reason: "paused by you until 15:00"}})
	clicks <- ActionResume
	e.change(computing)
	waitMenu("resumed", TrayComputing, "Computing: 1 task for pool lab-a")
}
