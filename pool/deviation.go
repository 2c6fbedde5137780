package pool

import (
	"context"
	"fmt"
	"time"
)

// Deviations decided elsewhere. A pool divided into shards runs one
// Scheduler per shard, each with its own trust records, so a device
// caught deviating on one shard would stay trusted on the others (its
// streaks whole, its results computed alone still held as good, its
// owner's standing intact), and could lie ExcludeAfter-1 times on every
// shard without ever being excluded. The Scheduler that decides a
// deviation tells SchedulerConfig.OnDeviate; the pool hands it to the
// other shards' Schedulers, which count it with Deviated as if decided
// locally.

// Deviation is a device's deviation from the result its task's replicas
// agreed on, decided by one Scheduler (SchedulerConfig.OnDeviate) and
// counted by others (Scheduler.Deviated).
type Deviation struct {
	Device string    // the device's peer ID (identity.IDOf its key)
	Owner  string    // its owner's ID
	At     time.Time // when it was decided; kept to the millisecond, as the stores keep times
}

// Deviated counts dv, a deviation decided by another Scheduler of the
// pool, as this Scheduler counts its own: the device's streaks end (it
// computes nothing alone until it earns them again), its held results
// are computed again, its owner loses its standing (unless named in
// TrustConfig.TrustedOwners), and it counts towards ExcludeAfter
// deviations within ExcludeFor, whose last one excludes the device and
// its owner here (told to SchedulerConfig.OnExclude, as any exclusion
// this Scheduler decides). The records are stored like a local
// deviation's. Deviated returns once that is committed.
//
// It is idempotent: a deviation of a time (to the millisecond) this
// Scheduler already counts for the device, its own among them, or one
// older than ExcludeFor on the Scheduler's clock, changes nothing and
// returns nil at once. It never calls SchedulerConfig.OnDeviate. Two
// deviations of one device decided in the same millisecond on two
// shards count once. Errors: ErrBadRequest (no device, owner or time),
// ErrStopped, the commit's error, or ctx's while waiting for the
// commit (the deviation then still counts, and is committed with the
// next batch).
func (s *Scheduler) Deviated(ctx context.Context, dv Deviation) error {
	if dv.Device == "" || dv.Owner == "" || dv.At.IsZero() {
		return fmt.Errorf("deviation of device %q of owner %q: %w: device, owner and time are required", dv.Device, dv.Owner, ErrBadRequest)
	}
	at := time.UnixMilli(dv.At.UnixMilli())
	s.mu.Lock()
	if s.stopped != nil {
		s.mu.Unlock()
		return fmt.Errorf("deviation of device %s: %w", dv.Device, s.stopped)
	}
	if !at.After(s.now().Add(-s.trust.cfg.ExcludeFor)) {
		s.mu.Unlock()
		return nil
	}
	d := s.trust.device(dv.Device)
	for _, t := range d.deviations {
		if t.UnixMilli() == at.UnixMilli() {
			s.mu.Unlock()
			return nil
		}
	}
	if !d.excluded.Before(at.Add(s.trust.cfg.ExcludeFor)) {
		// Excluded already for as long as this deviation could make it:
		// the deviations that led there were counted, and cleared.
		s.mu.Unlock()
		return nil
	}
	s.trust.bars++
	s.sanction(dv.Device, dv.Owner, at)
	w := s.pend
	s.log.Warn("Device deviated on another scheduler of the pool", "peer", dv.Device, "owner", dv.Owner,
		"at", at.UTC().Format(time.RFC3339Nano), "deviations", len(d.deviations))
	s.mu.Unlock()
	if err := wait(ctx, w); err != nil {
		return fmt.Errorf("deviation of device %s: %w", dv.Device, err)
	}
	return nil
}

// DeviationCount returns how many deviations of device peer the
// Scheduler counts towards its exclusion now: those within ExcludeFor on
// its clock since the device's last exclusion, its own and those handed
// over with Deviated.
func (s *Scheduler) DeviationCount(peer string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.trust.devices[peer]
	if !ok {
		return 0
	}
	cut := s.now().Add(-s.trust.cfg.ExcludeFor)
	n := 0
	for _, t := range d.deviations {
		if t.After(cut) {
			n++
		}
	}
	return n
}
