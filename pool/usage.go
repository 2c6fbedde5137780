package pool

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// OwnerUse is one owner's fair-share figures on one shard of a divided
// pool at a moment: Usage, the planner cost of the replicas leased for
// the owner's jobs, and Contributed, the cost of the receipts the owner's
// devices earned, both in cost units decayed with UsageHalfLife.
type OwnerUse struct {
	Usage, Contributed float64
}

// ShardUsage is what one shard's Scheduler tells the others of its
// owners' fair-share figures (Scheduler.Usage), so that fair share is
// pool-wide in a divided pool: an owner's use and contribution summed
// over the shards. At is when the figures were taken; each decays from
// then on with UsageHalfLife.
type ShardUsage struct {
	Shard  int
	At     time.Time
	Owners map[string]OwnerUse
}

// MaxUsageOwners bounds the owners a ShardUsage carries: those with the
// largest usage plus contribution, when a shard knows more (their share
// of the pool is then what each shard sees of them on its own).
const MaxUsageOwners = 8192

// usageFloor is the smallest figure a ShardUsage carries: an owner whose
// usage and contribution have both decayed below it is left out.
const usageFloor = 1e-6

// Usage returns the Scheduler's owners' fair-share figures now, for the
// other shards of its pool (SetShardUsage): every owner whose usage or
// contribution is at least a millionth of a cost unit, at most
// MaxUsageOwners of them (the largest).
func (s *Scheduler) Usage() ShardUsage {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	out := ShardUsage{Shard: s.cfg.Shard, At: now, Owners: map[string]OwnerUse{}}
	type one struct {
		id string
		u  OwnerUse
	}
	var all []one
	for id, o := range s.trust.owners {
		u := OwnerUse{Usage: o.usage.value(now), Contributed: o.contributed.value(now)}
		if u.Usage >= usageFloor || u.Contributed >= usageFloor {
			all = append(all, one{id, u})
		}
	}
	if len(all) > MaxUsageOwners {
		slices.SortFunc(all, func(a, b one) int {
			return cmp.Or(cmp.Compare(b.u.Usage+b.u.Contributed, a.u.Usage+a.u.Contributed), cmp.Compare(a.id, b.id))
		})
		all = all[:MaxUsageOwners]
	}
	for _, o := range all {
		out.Owners[o.id] = o.u
	}
	return out
}

// remoteUse is an owner's fair-share figures on the other shards,
// summed, each decaying from when its shard took it.
type remoteUse struct {
	usage, contributed decayed
}

// SetShardUsage replaces what the Scheduler knows of the other shards'
// owners (each one's Usage, passed on): from then on fair share ranks an
// owner by its usage and contribution on every shard, its own shard's as
// they change and the others' as given, decaying. A usage of the
// Scheduler's own shard is skipped (its own figures are live). Errors:
// ErrBadRequest in a pool not divided into shards, for a shard out of
// range, or for a figure that is negative or not finite (nothing
// changed).
func (s *Scheduler) SetShardUsage(others []ShardUsage) error {
	if s.cfg.Shards <= 1 {
		return fmt.Errorf("shard usage: %w: the pool is not divided into shards", ErrBadRequest)
	}
	remote := map[string]*remoteUse{}
	for _, su := range others {
		if su.Shard < 0 || su.Shard >= s.cfg.Shards {
			return fmt.Errorf("shard usage: %w: shard %d of a pool of %d shards", ErrBadRequest, su.Shard, s.cfg.Shards)
		}
		if su.Shard == s.cfg.Shard {
			continue
		}
		for id, u := range su.Owners {
			if !(u.Usage >= 0 && u.Contributed >= 0) || u.Usage > maxUse || u.Contributed > maxUse {
				return fmt.Errorf("shard usage: %w: shard %d gives owner %s usage %v and contribution %v", ErrBadRequest, su.Shard, id, u.Usage, u.Contributed)
			}
			r := remote[id]
			if r == nil {
				r = &remoteUse{}
				remote[id] = r
			}
			r.usage.merge(decayed{v: u.Usage, at: su.At})
			r.contributed.merge(decayed{v: u.Contributed, at: su.At})
		}
	}
	s.mu.Lock()
	s.remote = remote
	s.mu.Unlock()
	return nil
}

// maxUse bounds a figure SetShardUsage takes: far above what any pool
// uses in a half-life, below where sums lose their meaning.
const maxUse = 1e300

// latest returns the later of a and b, b when a is zero.
func latest(a, b time.Time) time.Time {
	if a.IsZero() || b.After(a) {
		return b
	}
	return a
}

// ownerFigures returns owner id's usage and contribution at now over
// the pool: this shard's and, in a divided pool, the other shards' as
// last given (SetShardUsage). s.mu is held.
func (s *Scheduler) ownerFigures(id string, now time.Time) (usage, contributed float64) {
	if o := s.trust.owners[id]; o != nil {
		usage, contributed = o.usage.value(now), o.contributed.value(now)
	}
	if r := s.remote[id]; r != nil {
		usage += r.usage.value(now)
		contributed += r.contributed.value(now)
	}
	return usage, contributed
}

// OwnerUse returns owner id's fair-share figures now as the Scheduler
// ranks it: its use and contribution on the Scheduler's shard and, in a
// divided pool, on the other shards as last given (SetShardUsage).
func (s *Scheduler) OwnerUse(id string) OwnerUse {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	u, c := s.ownerFigures(id, now)
	return OwnerUse{Usage: u, Contributed: c}
}
