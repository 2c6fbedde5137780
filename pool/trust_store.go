package pool

import (
	"encoding/json"
	"fmt"
	"time"

	"idlepool/job"
)

// Trust records survive a restart: every change of a device's or owner's
// record (trust.go) marks it in the pending batch, and flush writes the
// record as it is then (TrustRecord, compare-and-set on its version).
// Restore reads them back, so a trusted device stays trusted and an
// excluded one stays excluded. What is derived from replicas (a device's
// outstanding and held replicas) is rebuilt from them instead, and fair
// share's decayed usage starts afresh.

// deviceRecord is deviceTrust as stored.
type deviceRecord struct {
	Streaks    map[string]int `json:"streaks,omitempty"`    // program SHA-256 (hex) → consecutive agreed, checked results
	Agreed     int            `json:"agreed,omitempty"`     // agreed results since the last deviation
	Deviations []int64        `json:"deviations,omitempty"` // unix milliseconds, within ExcludeFor
	Excluded   int64          `json:"excluded,omitempty"`   // unix milliseconds; excluded until
	Owner      string         `json:"owner,omitempty"`
	Splits     int            `json:"splits,omitempty"` // stalls lost since its last right known answer (stall.go)
}

// ownerRecord is ownerTrust's standing as stored.
type ownerRecord struct {
	Endorsed    int   `json:"endorsed,omitempty"`
	Established bool  `json:"established,omitempty"`
	Excluded    int64 `json:"excluded,omitempty"` // unix milliseconds
}

// A record that lost standing (a deviation, an exclusion, a split lost),
// and any owner's, is written in the batch of its change: a sanction
// survives any restart. A device's record that only gained standing (an
// agreed, checked result: its count and streak) is written within
// trustGainedEvery instead, with whatever batch commits then, and at the
// latest when Serve stops: its row, ordered by device, was a page of its
// own in nearly every commit, one per device that agreed, and a pool of
// many devices spreads them over many pages (docs/benchmarks.md, "A pool
// of many devices"). A crash may lose the gains of the last
// trustGainedEvery; the device is then checked as if it had earned a
// little less, never more.

// trustGainedEvery is how long a record that only gained standing may
// wait in memory before it is written.
const trustGainedEvery = 10 * time.Second

// gainedTrust are the records that only gained standing since they were
// last written, in the order they first did, with when the first did.
type gainedTrust struct {
	keys  map[trustKey]bool
	order []trustKey
	since time.Time
}

// trustChanged marks the record kind/id as changed in the pending batch;
// flush writes it. For a change that lost standing, or any change where
// a restart must not lose it. s.mu is held.
func (s *Scheduler) trustChanged(kind, id string) {
	p := s.pend
	if p.trust == nil {
		p.trust = map[trustKey]bool{}
	}
	if !p.trust[trustKey{kind, id}] {
		p.trust[trustKey{kind, id}] = true
		p.trustOrder = append(p.trustOrder, trustKey{kind, id})
	}
	s.changed()
}

// trustGained marks the record kind/id as having only gained standing:
// a flush writes it once trustGainedEvery has passed since the first
// such mark still unwritten (Serve's tick asks for that flush), or when
// Serve stops. s.mu is held.
func (s *Scheduler) trustGained(kind, id string) {
	g := &s.gained
	k := trustKey{kind, id}
	if g.keys[k] {
		return
	}
	if g.keys == nil {
		g.keys = map[trustKey]bool{}
	}
	if len(g.keys) == 0 {
		g.since, g.order = s.now(), g.order[:0]
	}
	g.keys[k] = true
	g.order = append(g.order, k)
}

// gainedDue reports whether the records that only gained standing are
// due to be written at now. s.mu is held.
func (s *Scheduler) gainedDue(now time.Time) bool {
	return len(s.gained.keys) > 0 && now.Sub(s.gained.since) >= trustGainedEvery
}

// encodeTrust writes the records marked in p into its batch, each at its
// next version, and with them the records that only gained standing when
// they are due or Serve is stopping. s.mu is held.
func (s *Scheduler) encodeTrust(p *pending) {
	if g := &s.gained; len(g.keys) > 0 && (s.stopped != nil || s.gainedDue(s.now())) {
		if p.trust == nil {
			p.trust = map[trustKey]bool{}
		}
		for _, k := range g.order {
			if g.keys[k] && !p.trust[k] {
				p.trust[k] = true
				p.trustOrder = append(p.trustOrder, k)
			}
		}
		clear(g.keys)
		g.order = g.order[:0]
	} else {
		// Written with this batch's: the order keeps a stale key, which
		// the next write of the gains skips.
		for _, k := range p.trustOrder {
			delete(g.keys, k)
		}
	}
	for _, k := range p.trustOrder {
		var (
			b       []byte
			version *int64
		)
		switch k.kind {
		case TrustDevice:
			d := s.trust.device(k.id)
			rec := deviceRecord{Agreed: d.agreed, Owner: d.owner, Splits: d.splits}
			if len(d.streak) > 0 {
				rec.Streaks = map[string]int{}
				for prog, n := range d.streak {
					rec.Streaks[prog.String()] = n
				}
			}
			for _, t := range d.deviations {
				rec.Deviations = append(rec.Deviations, t.UnixMilli())
			}
			if !d.excluded.IsZero() {
				rec.Excluded = d.excluded.UnixMilli()
			}
			b, _ = json.Marshal(rec) // plain types: never fails
			version = &d.version
		case TrustOwner:
			o := s.trust.owner(k.id)
			rec := ownerRecord{Endorsed: o.endorsed, Established: o.established}
			if !o.excluded.IsZero() {
				rec.Excluded = o.excluded.UnixMilli()
			}
			b, _ = json.Marshal(rec)
			version = &o.version
		}
		prev := *version
		*version++
		p.b.Trust = append(p.b.Trust, TrustRecord{Kind: k.kind, ID: k.id, Record: b, Version: *version, Prev: prev})
	}
	p.trust, p.trustOrder = nil, nil
}

// restoreTrust rebuilds devices' and owners' records from the store;
// owners the operator names as trusted stay established.
func (s *Scheduler) restoreTrust(recs []TrustRecord) error {
	for _, r := range recs {
		switch r.Kind {
		case TrustDevice:
			var rec deviceRecord
			if err := json.Unmarshal(r.Record, &rec); err != nil {
				return fmt.Errorf("trust record of device %s: %w: %v", r.ID, ErrConflict, err)
			}
			d := s.trust.device(r.ID)
			for prog, n := range rec.Streaks {
				dg, err := job.ParseDigest(prog)
				if err != nil {
					return fmt.Errorf("trust record of device %s: %w: %v", r.ID, ErrConflict, err)
				}
				d.streak[dg] = n
			}
			d.agreed, d.owner, d.splits, d.version = rec.Agreed, rec.Owner, rec.Splits, r.Version
			for _, t := range rec.Deviations {
				d.deviations = append(d.deviations, time.UnixMilli(t))
			}
			if rec.Excluded != 0 {
				d.excluded = time.UnixMilli(rec.Excluded)
			}
		case TrustOwner:
			var rec ownerRecord
			if err := json.Unmarshal(r.Record, &rec); err != nil {
				return fmt.Errorf("trust record of owner %s: %w: %v", r.ID, ErrConflict, err)
			}
			o := s.trust.owner(r.ID)
			o.endorsed, o.version = rec.Endorsed, r.Version
			o.established = o.established || rec.Established
			if rec.Excluded != 0 {
				o.excluded = time.UnixMilli(rec.Excluded)
			}
		default:
			return fmt.Errorf("trust record %s of kind %q: %w", r.ID, r.Kind, ErrConflict)
		}
	}
	return nil
}
