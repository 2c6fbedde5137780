package agent

import (
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
