package agent

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"idlepool/coord/api"
)

// backoff yields bounded, jittered exponential delays for retrying a
// coordinator that is away: the n-th consecutive failure waits a random
// duration in [d/2, d], d = min(Base·2^n, Max) ("equal jitter"), so a
// pool's agents do not all come back in the same millisecond. Not safe
// for concurrent use; each retry loop owns one.
type backoff struct {
	Base, Max time.Duration
	n         int
}

// next returns the delay before the next try and counts a failure.
func (b *backoff) next() time.Duration {
	d := b.Max
	if b.n < 30 {
		if e := b.Base << b.n; e > 0 && e < b.Max {
			d = e
		}
	}
	b.n++
	half := d / 2
	return half + rand.N(half+1)
}

// TakeOverPoll is the longest a device waits before it asks again after
// a cluster's node answered 503 "no_leader" (InTakeOver): the node in
// charge of a shard is changing, which ends in seconds, so a doubling
// wait (up to 10 s) only added to it: a follow waited 10 to 12 s out
// take-overs of 6 to 9 s.
const TakeOverPoll = time.Second

// InTakeOver reports whether err is a cluster node's 503 "no_leader"
// answer: the node answered, but no node is in charge of what the request
// concerns right now (an election, a take-over or a hand-over).
func InTakeOver(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Code == api.CodeNoLeader
}

// after returns the delay before the next try after err, and counts a
// failure: next, at most TakeOverPoll when err is InTakeOver.
func (b *backoff) after(err error) time.Duration {
	d := b.next()
	if InTakeOver(err) {
		d = min(d, TakeOverPoll)
	}
	return d
}

// reset forgets the failures after a success.
func (b *backoff) reset() { b.n = 0 }

// failures returns how many failures in a row were counted.
func (b *backoff) failures() int { return b.n }

// sleep waits d or until ctx ends, whichever is first, and returns
// ctx.Err() in the second case.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
