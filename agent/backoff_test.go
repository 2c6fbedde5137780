package agent

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestBackoffBounds(t *testing.T) {
	tests := []struct {
		name     string
		failures int // failures counted before the delay
		lo, hi   time.Duration
	}{
		{"first", 0, 50 * time.Millisecond, 100 * time.Millisecond},
		{"second", 1, 100 * time.Millisecond, 200 * time.Millisecond},
		{"fourth", 3, 400 * time.Millisecond, 800 * time.Millisecond},
		{"capped", 10, 5 * time.Second, 10 * time.Second},
		{"capped long after", 100, 5 * time.Second, 10 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for range 200 {
				b := backoff{Base: 100 * time.Millisecond, Max: 10 * time.Second, n: tc.failures}
				if d := b.next(); d < tc.lo || d > tc.hi {
					t.Fatalf("delay %v after %d failures, want within [%v, %v]", d, tc.failures, tc.lo, tc.hi)
				}
			}
		})
	}
	b := backoff{Base: time.Second, Max: time.Minute}
	b.next()
	b.next()
	b.reset()
	if d := b.next(); d > time.Second {
		t.Errorf("after reset: %v, want at most the base", d)
	}
}

// A cluster node's 503 "no_leader" (a take-over, ending in seconds) is
// asked again within TakeOverPoll however many failures came before;
// anything else backs off as before.
func TestBackoffAfterATakeOver(t *testing.T) {
	noLeader := &APIError{Method: "GET", Path: "/v1/jobs/x", Status: 503, Code: "no_leader", Message: "no coordinator is in charge of shard 1"}
	other := &APIError{Method: "GET", Path: "/v1/jobs/x", Status: 503, Code: "unavailable"}
	if !InTakeOver(fmt.Errorf("status: %w", noLeader)) || InTakeOver(other) || InTakeOver(errors.New("EOF")) {
		t.Fatal("InTakeOver does not tell a no_leader answer from others")
	}
	for range 100 {
		b := backoff{Base: 100 * time.Millisecond, Max: 10 * time.Second, n: 8}
		if d := b.after(noLeader); d > TakeOverPoll {
			t.Fatalf("after 8 failures, a no_leader answer waits %v, want at most %v", d, TakeOverPoll)
		}
		if d := b.after(other); d < 5*time.Second {
			t.Fatalf("after 9 failures, another 503 waits %v, want the backoff's 5 s at least", d)
		}
	}
}
