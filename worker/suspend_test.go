package worker

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestPauseTimer: time spent paused does not count; reset while paused
// starts counting only on resume.
func TestPauseTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		pt := newPauseTimer(time.Second, false)
		defer pt.stop()
		time.Sleep(400 * time.Millisecond)
		pt.setPaused(true)
		pt.setPaused(true) // idempotent
		if pt.C() != nil {
			t.Fatal("a paused timer has a channel")
		}
		time.Sleep(time.Hour)
		pt.setPaused(false)
		pt.setPaused(false)
		<-pt.C()
		if got, want := time.Since(start), time.Hour+time.Second; got != want {
			t.Errorf("fired after %s, want %s", got, want)
		}

		pt.setPaused(true)
		pt.reset(2 * time.Second)
		time.Sleep(time.Minute)
		pt.setPaused(false)
		mark := time.Now()
		<-pt.C()
		if got := time.Since(mark); got != 2*time.Second {
			t.Errorf("reset while paused: fired %s after resume, want 2s", got)
		}

		// Paused exactly when it would fire: fires at once on resume.
		pt.reset(time.Second)
		time.Sleep(time.Second)
		pt.setPaused(true)
		pt.setPaused(false)
		mark = time.Now()
		<-pt.C()
		if got := time.Since(mark); got != 0 {
			t.Errorf("fired %s after resume, want at once", got)
		}

		// Starting paused.
		pt2 := newPauseTimer(time.Second, true)
		defer pt2.stop()
		time.Sleep(time.Hour)
		pt2.setPaused(false)
		mark = time.Now()
		<-pt2.C()
		if got := time.Since(mark); got != time.Second {
			t.Errorf("started paused: fired %s after resume, want 1s", got)
		}
	})
}
