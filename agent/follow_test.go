package agent_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"idlepool/agent"
	"idlepool/idle"
)

// TestFollowSaysWhatThePoolDoes: while no result comes, Follow reports
// what the pool is doing (a donor that waits, and its coarse hold), and a job its
// owner cancels ends the follow with ErrJobCancelled.
func TestFollowSaysWhatThePoolDoes(t *testing.T) {
	j := planJob(t, "squares-stalled", 3, "redundancy = 1\nquorum = 1")
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	sub := newSubmitter(t, co.url, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := sub.c.Submit(ctx, j); err != nil {
		t.Fatal(err)
	}
	donor := newDevice(t, nil)
	// The reason in words, as an agent from before holds sends it: the
	// pool shows only the coarse hold it stands for.
	publishOfferState(t, agentClient(t, co.url, donor), donor, idle.StateWaiting, "waiting: idle time unknown (no input source works)")

	var seen []agent.Activity
	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		_, err = agent.Follow(ctx, sub.c, j, agent.FollowConfig{
			Dir: filepath.Join(sub.dev.dirs.Data, "merges", j.ID.String()), Poll: 10 * time.Millisecond,
			StatusPoll: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, Logger: quietLogger(t),
			Activity: func(a agent.Activity) {
				seen = append(seen, a)
				if len(seen) == 1 {
					if _, err := sub.c.Cancel(context.Background(), j.ID); err != nil {
						t.Errorf("Cancel: %v", err)
					}
				}
			},
		})
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		cancel()
		<-done
		t.Fatal("Follow of a cancelled job did not end within a minute")
	}
	if !errors.Is(err, agent.ErrJobCancelled) {
		t.Errorf("Follow: %v, want ErrJobCancelled", err)
	}
	if len(seen) == 0 {
		t.Fatal("Follow reported no activity")
	}
	first := seen[0]
	if want := "0 of 1 donor computing: 1 waiting (for its owner)"; first.Donors != want {
		t.Errorf("donors %q, want %q", first.Donors, want)
	}
	if !strings.Contains(first.Stuck, "1 donor matches this job but not computing now") {
		t.Errorf("stuck %q, want it to say the matching donor does not compute", first.Stuck)
	}
}
