package main

import (
	"testing"
	"time"

	"idlepool/pool"
)

// TestRateLeft checks what a progress line says after its count: nothing
// while the rate is unknown (no trailing space), the time left only while
// it is known and tasks remain.
func TestRateLeft(t *testing.T) {
	for _, c := range []struct {
		pr   pool.Progress
		want string
	}{
		{pool.Progress{Done: 1, Total: 10}, ""},
		{pool.Progress{Done: 2, Failed: 1, Total: 10}, " 1 failed"},
		{pool.Progress{Done: 5, Total: 10, Rate: 2.5, Left: 2 * time.Second}, " 2.5 tasks/s, 2s left"},
		{pool.Progress{Done: 5, Failed: 2, Total: 10, Rate: 2.5, Left: 2*time.Second + 400*time.Millisecond}, " 2 failed, 2.5 tasks/s, 2s left"},
		{pool.Progress{Done: 5, Total: 10, Rate: 2.5}, " 2.5 tasks/s"}, // a follower stuck: no estimate
		{pool.Progress{Done: 900, Total: 1000, Rate: 331.4, Left: 300 * time.Millisecond}, " 331.4 tasks/s, under a second left"},
		{pool.Progress{Done: 10, Total: 10, Rate: 3}, " 3.0 tasks/s"},
	} {
		if got := rateLeft(c.pr); got != c.want {
			t.Errorf("rateLeft(%+v) = %q, want %q", c.pr, got, c.want)
		}
	}
}
