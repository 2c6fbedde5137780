package p2p

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// uploadBurst is the most bytes an UploadLimit lets through at once: one
// frame of the largest size Config.FrameBytes allows, so that every frame
// fits.
const uploadBurst = 65536

// UploadLimit caps the chunk bytes per second the Nodes given it send to
// peers, all of them together (a device's Nodes, one per pool, share the
// owner's cap). It is a token bucket (golang.org/x/time/rate) of
// uploadBurst bytes: a frame waits until the bucket holds its size, so
// the bytes sent over any span of time stay within the cap times the
// span plus one frame. The zero cap means no cap. Safe for concurrent
// use.
type UploadLimit struct {
	l     *rate.Limiter
	clock uploadClock  // the wall clock, or a test's
	sent  atomic.Int64 // bytes let through since NewUploadLimit
}

// uploadClock is the time an UploadLimit reads and waits on.
type uploadClock interface {
	Now() time.Time
	// WaitUntil returns at t, or with ctx's error when ctx ends first.
	WaitUntil(ctx context.Context, t time.Time) error
}

// wallClock is the real time.
type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

func (wallClock) WaitUntil(ctx context.Context, t time.Time) error {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// NewUploadLimit returns a cap of bytesPerSecond (0 or less: none).
func NewUploadLimit(bytesPerSecond int64) *UploadLimit {
	return newUploadLimit(bytesPerSecond, wallClock{})
}

// newUploadLimit is NewUploadLimit on clock.
func newUploadLimit(bytesPerSecond int64, clock uploadClock) *UploadLimit {
	u := &UploadLimit{l: rate.NewLimiter(rate.Inf, uploadBurst), clock: clock}
	u.Set(bytesPerSecond)
	return u
}

// Set changes the cap to bytesPerSecond (0 or less: none) for the frames
// that ask from now on; a frame already waiting keeps the wait it was
// given.
func (u *UploadLimit) Set(bytesPerSecond int64) {
	now := u.clock.Now()
	if bytesPerSecond <= 0 {
		u.l.SetLimitAt(now, rate.Inf)
		return
	}
	u.l.SetLimitAt(now, rate.Limit(bytesPerSecond))
}

// BytesPerSecond returns the cap, 0 for none.
func (u *UploadLimit) BytesPerSecond() int64 {
	l := u.l.Limit()
	if l == rate.Inf || l > math.MaxInt64 {
		return 0
	}
	return int64(l)
}

// wait blocks until n bytes (at most uploadBurst) may be sent, or ctx
// ends; the bytes then count as sent. A nil UploadLimit never waits.
func (u *UploadLimit) wait(ctx context.Context, n int) error {
	if u == nil {
		return nil
	}
	now := u.clock.Now()
	r := u.l.ReserveN(now, n)
	if !r.OK() {
		return fmt.Errorf("%d bytes at once, more than the upload cap's burst of %d", n, uploadBurst)
	}
	if d := r.DelayFrom(now); d > 0 {
		if err := u.clock.WaitUntil(ctx, now.Add(d)); err != nil {
			r.CancelAt(u.clock.Now())
			return err
		}
	}
	u.sent.Add(int64(n))
	return nil
}
