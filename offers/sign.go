package offers

import (
	"crypto/ed25519"
	"fmt"
	"math"
	"time"

	"github.com/fxamacker/cbor/v2"

	"idlepool/identity"
	"idlepool/idle"
	"idlepool/job"
)

// offerDomain is written into every offer's canonical encoding so that a
// signature over an offer can never be mistaken for one over anything else
// (a ledger entry, a request).
const offerDomain = "idlepool/offer/v1"

// DefaultTTL is how long an offer is valid after it is issued when the
// builder is not told otherwise (Spec.TTL). An agent refreshes its offer
// well before that (every DefaultTTL/3 is a good pace), so a peer that
// vanishes without a word (kill -9, a cut cable) drops out of the listing
// within DefaultTTL.
const DefaultTTL = 90 * time.Second

var offerEncMode = func() cbor.EncMode {
	em, err := cbor.CoreDetEncOptions().EncMode()
	if err != nil {
		panic(err)
	}
	return em
}()

// Canonical returns the bytes a peer signs: the deterministic CBOR
// encoding (RFC 8949 section 4.2.1, core deterministic: shortest forms,
// definite lengths, map keys sorted bytewise) of a map with the keys
// "type" ("idlepool/offer/v1"), "peer", "owner", "pool", "capacity",
// "state", "reason" (the Hold), "accept", "issued" and "expires" (unix
// nanoseconds).
// "capacity" is a map of "os", "arch", "cpu_model", "logical_cpus",
// "cores", "memory_total_mib", "memory_mib", "gpus" (a list of maps
// "uuid", "name", "compute_capability", "memory_total_mib",
// "memory_mib"), "schedule" (a list of maps "days" (bit d set for
// time.Weekday d), "start", "end" (minutes after midnight)), "time_zone"
// and, only when it is not 0, "cpu_time_share" (a float in its shortest
// exact form). "accept" is a map of "gpu_programs", "max_memory_mib",
// "max_task_time" (nanoseconds), "prefer_owners", "refuse_owners",
// "refuse_jobs", "accept_jobs" (lists of 32-byte strings; a nil list and an
// empty one encode alike) and "weight" (a float in its shortest exact
// form). Sig is never part of it. The JSON form of an offer carries the
// same values, so an offer decoded from JSON encodes to the same bytes.
func (o Offer) Canonical() []byte {
	c := o.Capacity
	gpus := make([]any, 0, len(c.GPUs))
	for _, g := range c.GPUs {
		gpus = append(gpus, map[string]any{
			"uuid":               g.UUID,
			"name":               g.Name,
			"compute_capability": g.ComputeCapability,
			"memory_total_mib":   g.MemoryTotalMiB,
			"memory_mib":         g.MemoryMiB,
		})
	}
	schedule := make([]any, 0, len(c.Schedule))
	for _, w := range c.Schedule {
		schedule = append(schedule, map[string]any{"days": uint8(w.Days), "start": int(w.Start), "end": int(w.End)})
	}
	capacity := map[string]any{
		"os":               c.OS,
		"arch":             c.Arch,
		"cpu_model":        c.CPUModel,
		"logical_cpus":     c.LogicalCPUs,
		"cores":            c.Cores,
		"memory_total_mib": c.MemoryTotalMiB,
		"memory_mib":       c.MemoryMiB,
		"gpus":             gpus,
		"schedule":         schedule,
		"time_zone":        c.TimeZone,
	}
	if c.CPUTimeShare != 0 {
		// Only when set, so that an offer without it encodes as before
		// the field existed.
		capacity["cpu_time_share"] = c.CPUTimeShare
	}
	a := o.Accept
	m := map[string]any{
		"type":     offerDomain,
		"peer":     o.Peer,
		"owner":    o.Owner,
		"pool":     o.Pool,
		"capacity": capacity,
		"state":    string(o.State),
		"reason":   string(o.Hold),
		"accept": map[string]any{
			"gpu_programs":   a.GPUPrograms,
			"max_memory_mib": a.MaxMemoryMiB,
			"max_task_time":  int64(a.MaxTaskTime),
			"prefer_owners":  nonNil(a.PreferOwners),
			"refuse_owners":  nonNil(a.RefuseOwners),
			"refuse_jobs":    ids(a.RefuseJobs),
			"accept_jobs":    ids(a.AcceptJobs),
			"weight":         a.Weight,
		},
		"issued":  o.Issued.UnixNano(),
		"expires": o.Expires.UnixNano(),
	}
	b, err := offerEncMode.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("offers: encode offer: %v", err)) // plain values only
	}
	return b
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func ids(s []job.ID) [][]byte {
	out := make([][]byte, len(s))
	for i := range s {
		out[i] = s[i][:]
	}
	return out
}

// Sign sets o.Peer to k's ID and o.Sig to k's Ed25519 signature over
// o.Canonical(). Sign the offer last: any later change voids the
// signature.
func (o *Offer) Sign(k *identity.Key) {
	o.Peer = k.ID()
	o.Sig = k.Sign(o.Canonical())
}

// Validate checks the offer's shape, not its signature or its age: a
// peer, an owner and a pool are named; amounts are not negative; the
// weight is a number in 0..1; the schedule's windows are well formed;
// Expires is after Issued. Errors wrap
// ErrInvalid and say which field is wrong.
func (o Offer) Validate() error {
	c, a := o.Capacity, o.Accept
	switch {
	case o.Peer == "" || o.Owner == "" || o.Pool == "":
		return fmt.Errorf("%w: peer, owner and pool must be set", ErrInvalid)
	case c.Cores < 0 || c.LogicalCPUs < 0 || c.MemoryMiB < 0 || c.MemoryTotalMiB < 0:
		return fmt.Errorf("%w: negative cores or memory", ErrInvalid)
	case a.MaxMemoryMiB < 0 || a.MaxTaskTime < 0:
		return fmt.Errorf("%w: negative accept.max_memory_mib or accept.max_task_time", ErrInvalid)
	case math.IsNaN(a.Weight) || a.Weight < 0 || a.Weight > 1:
		return fmt.Errorf("%w: accept.weight %v is not in 0..1", ErrInvalid, a.Weight)
	case math.IsNaN(c.CPUTimeShare) || c.CPUTimeShare < 0 || c.CPUTimeShare > 1:
		return fmt.Errorf("%w: capacity.cpu_time_share %v is not in 0..1", ErrInvalid, c.CPUTimeShare)
	case !o.Expires.After(o.Issued):
		return fmt.Errorf("%w: expires %s is not after issued %s", ErrInvalid, o.Expires.Format(time.RFC3339), o.Issued.Format(time.RFC3339))
	}
	for i, w := range c.Schedule {
		if w.Days&^idle.EveryDay != 0 {
			return fmt.Errorf("%w: capacity.schedule[%d]: unknown days", ErrInvalid, i)
		}
	}
	if _, err := idle.ParseSchedule(c.Schedule.String()); err != nil {
		return fmt.Errorf("%w: capacity.schedule: %v", ErrInvalid, err)
	}
	for i, g := range c.GPUs {
		if g.MemoryMiB < 0 || g.MemoryTotalMiB < 0 {
			return fmt.Errorf("%w: capacity.gpus[%d]: negative memory", ErrInvalid, i)
		}
	}
	return nil
}

// Verify checks a received offer: its shape (Validate), that pub is the
// key of o.Peer (ErrWrongPeer), the signature (ErrBadSignature) and that
// it has not expired at now (ErrExpired: now is not before Expires). The
// caller looks pub up by o.Peer among the pool's registered peers. All
// errors wrap one of the package's sentinels.
func (o Offer) Verify(pub ed25519.PublicKey, now time.Time) error {
	if err := o.Validate(); err != nil {
		return err
	}
	if len(pub) != ed25519.PublicKeySize || identity.IDOf(pub) != o.Peer {
		return fmt.Errorf("%w: offer names peer %s", ErrWrongPeer, o.Peer)
	}
	if identity.Verify(pub, o.Canonical(), o.Sig) != nil {
		return fmt.Errorf("%w: offer of peer %s", ErrBadSignature, o.Peer)
	}
	if !now.Before(o.Expires) {
		return fmt.Errorf("%w: offer of peer %s expired %s ago", ErrExpired, o.Peer, idle.DurationText(now.Sub(o.Expires)))
	}
	return nil
}
