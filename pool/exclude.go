package pool

import (
	"context"
	"fmt"
	"time"
)

// Exclusions decided elsewhere. A pool divided into shards runs one
// Scheduler per shard, each with its own trust records, so a device
// excluded by one would go on computing, and voting, on the others. The
// Scheduler that excludes a device tells SchedulerConfig.OnExclude; the
// pool hands the exclusion to the other shards' Schedulers, which apply
// it with Exclude: there it takes effect as if decided locally, and is
// stored with their trust records.

// Exclusion is a device's and its owner's exclusion from computing in
// the pool, decided by one Scheduler (SchedulerConfig.OnExclude) and
// applied by others (Scheduler.Exclude).
type Exclusion struct {
	Device string    // the device's peer ID (identity.IDOf its key)
	Owner  string    // its owner's ID; every device of the owner is excluded too
	Until  time.Time // when the exclusion ends; kept to the millisecond, as the stores keep times
	Reason string    // why, for people and logs ("3 deviations within 24h0m0s"); may be empty
}

// Exclude applies e, an exclusion decided by another Scheduler of the
// pool: the device and its owner are excluded until e.Until, unless
// already excluded as long or longer (an exclusion is never shortened),
// the votes of the owner's registered devices, and of the device, on
// undecided tasks no longer count (those tasks are decided again by the
// others), the device's held results are computed again without its
// vote, and the device's and owner's trust records are stored like a
// local exclusion's, so that a restart keeps it. Exclude returns once
// that is committed. A device or owner this Scheduler does not know yet
// is recorded all the same: a device that registers later is refused
// work while the exclusion lasts.
//
// It is idempotent: an exclusion that changes nothing (already applied,
// shorter than one in force, or ended by now on the Scheduler's clock)
// writes nothing and returns nil at once. It never calls
// SchedulerConfig.OnExclude. Errors: ErrBadRequest (no device, owner or
// end), ErrStopped, the commit's error, or ctx's while waiting for the
// commit (the exclusion then still applies, and is committed with the
// next batch).
func (s *Scheduler) Exclude(ctx context.Context, e Exclusion) error {
	if e.Device == "" || e.Owner == "" || e.Until.IsZero() {
		return fmt.Errorf("exclude device %q of owner %q: %w: device, owner and end are required", e.Device, e.Owner, ErrBadRequest)
	}
	until := time.UnixMilli(e.Until.UnixMilli())
	s.mu.Lock()
	if s.stopped != nil {
		s.mu.Unlock()
		return fmt.Errorf("exclude device %s: %w", e.Device, s.stopped)
	}
	if !until.After(s.now()) {
		s.mu.Unlock()
		return nil
	}
	changed := false
	if d := s.trust.device(e.Device); until.After(d.excluded) {
		d.excluded = until
		if d.owner == "" {
			d.owner = e.Owner
		}
		s.trustChanged(TrustDevice, e.Device)
		changed = true
	}
	if o := s.trust.owner(e.Owner); until.After(o.excluded) {
		o.excluded = until
		s.trustChanged(TrustOwner, e.Owner)
		changed = true
	}
	if !changed {
		s.mu.Unlock()
		return nil
	}
	// As deviated does: a stall may have become undecidable (bars), the
	// device's held results are suspect, and the excluded devices'
	// votes no longer count.
	s.trust.bars++
	s.catch(e.Device)
	s.voidOwner(e.Owner)
	if p, ok := s.peers[e.Device]; ok && p.Owner != e.Owner {
		s.void(e.Device) // registered here with another owner's endorsement
	}
	w := s.pend
	s.log.Warn("Device and owner excluded by another scheduler of the pool", "peer", e.Device, "owner", e.Owner,
		"until", until.UTC().Format(time.RFC3339), "reason", e.Reason)
	s.mu.Unlock()
	if err := wait(ctx, w); err != nil {
		return fmt.Errorf("exclude device %s: %w", e.Device, err)
	}
	return nil
}
