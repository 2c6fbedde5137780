package p2p

import (
	"context"
	"math"

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
// the rate over any second stays within the cap plus one frame. The zero
// cap means no cap. Safe for concurrent use.
type UploadLimit struct{ l *rate.Limiter }

// NewUploadLimit returns a cap of bytesPerSecond (0 or less: none).
func NewUploadLimit(bytesPerSecond int64) *UploadLimit {
	u := &UploadLimit{l: rate.NewLimiter(rate.Inf, uploadBurst)}
	u.Set(bytesPerSecond)
	return u
}

// Set changes the cap to bytesPerSecond (0 or less: none) for the frames
// that ask from now on; a frame already waiting keeps the wait it was
// given.
func (u *UploadLimit) Set(bytesPerSecond int64) {
	if bytesPerSecond <= 0 {
		u.l.SetLimit(rate.Inf)
		return
	}
	u.l.SetLimit(rate.Limit(bytesPerSecond))
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
// ends. A nil UploadLimit never waits.
func (u *UploadLimit) wait(ctx context.Context, n int) error {
	if u == nil {
		return nil
	}
	return u.l.WaitN(ctx, n)
}
