package app

import (
	"sync"
	"time"

	"fyne.io/fyne/v2"
)

// refresher runs a window's periodic reload on the UI goroutine. A view
// embeds it, starts it with autoRefresh when its window opens and stops it
// when the window closes; tests wait for its goroutine with ticking.Wait.
type refresher struct {
	ticking sync.WaitGroup // the auto refresh's goroutine
	done    chan struct{}  // closed by stop: ends the auto refresh
}

// autoRefresh calls refresh on the UI goroutine at every tick until stop,
// then calls stopTicks; the goroutine doing it is tracked by ticking. It
// is called on the UI goroutine, as stop is.
func (r *refresher) autoRefresh(ticks <-chan time.Time, stopTicks, refresh func()) {
	r.done = make(chan struct{})
	done := r.done
	r.ticking.Add(1)
	go func() {
		defer r.ticking.Done()
		defer stopTicks()
		for {
			select {
			case <-ticks:
				fyne.Do(func() {
					select {
					case <-done: // closed meanwhile
					default:
						refresh()
					}
				})
			case <-done:
				return
			}
		}
	}()
}

// stop ends the auto refresh; a second stop does nothing.
func (r *refresher) stop() {
	if r.done != nil {
		close(r.done)
		r.done = nil
	}
}
