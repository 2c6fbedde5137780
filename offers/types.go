package offers

import (
	"time"

	"idlepool/identity"
	"idlepool/idle"
	"idlepool/job"
)

// Offer is a peer's capacity offer to one pool: what the machine offers and
// what it accepts, signed with the peer's key and valid until Expires. The
// coordinator lists it while it is valid and leases a task of a job to the
// peer only when Match(offer, listing, now) holds. In ClassAd terms
// (Raman, Livny and Solomon, HPDC 1998) it is the machine ad: Capacity are
// its attributes, Accept its Requirements and Rank.
//
// JSON: the field tags below; Capacity as idle.Capacity writes it; times
// RFC 3339; Sig standard base64; job IDs in Accept as 64 hex digits.
type Offer struct {
	Peer     string        `json:"peer"`  // peer ID (identity.IDOf of the device key)
	Owner    string        `json:"owner"` // owner ID
	Pool     string        `json:"pool"`  // the pool's name
	Capacity idle.Capacity `json:"capacity"`
	// State is what the machine does now: computing, waiting or paused.
	State idle.State `json:"state"`
	// Hold is why it does not compute, in a coarse word (idle.Hold:
	// "owner", "hours", "battery", "limit"; "" while computing), never the
	// policy's reason in words: which program runs or when its owner was
	// last active is theirs (DESIGN.md invariant 19). On the wire it is
	// "reason", the field where agents before holds put those words, so
	// that an offer signed by either verifies on either; Redacted turns
	// such words into the hold they stand for.
	Hold    idle.Hold `json:"reason,omitempty"`
	Accept  Accept    `json:"accept"`
	Issued  time.Time `json:"issued"`
	Expires time.Time `json:"expires"`
	Sig     []byte    `json:"sig,omitempty"` // Ed25519 by the peer key over Canonical()
	// OwnerProfile is the owner's display name and link, signed by the
	// owner key (not by the peer, and not part of Canonical): the pool
	// adds it to the offers it lists (GET /v1/offers) when the owner gave
	// one; a peer does not send it. Check it with Profile.Verify.
	OwnerProfile *identity.Profile `json:"owner_profile,omitempty"`
	// Silent is set by the pool in the offers it lists (GET /v1/offers),
	// not by the peer and not part of Canonical: the device has made no
	// signed request for over a minute (a closed browser tab, a machine
	// switched off), so its offer, not yet expired, may no longer hold.
	Silent bool `json:"silent,omitempty"`
}

// Accept is what the donor accepts from this pool. CPU (WebAssembly) tasks
// are always accepted; GPU programs only with GPUPrograms set (opt-in per
// pool). Owners are owner IDs; a job in AcceptJobs is accepted even when
// its owner is in RefuseOwners (the narrower choice wins).
type Accept struct {
	GPUPrograms  bool          `json:"gpu_programs,omitempty"`
	MaxMemoryMiB int64         `json:"max_memory_mib,omitempty"` // per task; 0: what Capacity offers
	MaxTaskTime  time.Duration `json:"max_task_time,omitempty"`  // per task, nanoseconds in JSON; 0: no ceiling
	PreferOwners []string      `json:"prefer_owners,omitempty"`  // ranked before others (RankJobs)
	RefuseOwners []string      `json:"refuse_owners,omitempty"`
	RefuseJobs   []job.ID      `json:"refuse_jobs,omitempty"`
	AcceptJobs   []job.ID      `json:"accept_jobs,omitempty"` // explicitly accepted: ranked first
	// Weight is this pool's share of the machine among the pools it
	// offers to, 0..1 (the donor's weights normalised to sum to 1).
	// Capacity is not scaled by it: the agent divides its slots.
	Weight float64 `json:"weight,omitempty"`
}

// Listing is a job seeking compute, as a pool lists it for donors
// (GET /v1/listings). In ClassAd terms it is the job ad: Requirements are
// its requirements, Requirements.Prefer its rank.
//
// JSON: the field tags below; Job as 64 hex digits; TimeLimit in
// nanoseconds.
type Listing struct {
	Job          job.ID           `json:"job"`
	Name         string           `json:"name"`
	Description  string           `json:"description,omitempty"`
	Owner        string           `json:"owner"` // owner ID
	Pool         string           `json:"pool"`  // the pool's name
	Requirements job.Requirements `json:"requirements"`
	// MemoryMiB is the machine memory one task needs: Requirements'
	// memory_mib, else the policy's (see TaskMemoryMiB).
	MemoryMiB int64 `json:"memory_mib"`
	// TimeLimit is the policy's time limit of one task.
	TimeLimit    time.Duration `json:"time_limit,omitempty"`
	CostPerTask  float64       `json:"cost_per_task"` // planner cost units of a typical task
	TasksLeft    int64         `json:"tasks_left"`
	TasksDone    int64         `json:"tasks_done"`
	Quorum       int           `json:"quorum"`
	Participants string        `json:"participants"` // open | invite | owner

	// Link is the manifest's link: an https URL about the job, or "".
	Link string `json:"link,omitempty"`
	// OwnerProfile is the owner's display name and link, signed by the
	// owner key, when the owner gave one; shown beside Owner, never
	// instead of it (OwnerText). Check it with Profile.Verify.
	OwnerProfile *identity.Profile `json:"owner_profile,omitempty"`
}

// TaskMemoryMiB is the machine memory one task of a job needs, for
// Listing.MemoryMiB: the requirements' memory_mib when set, else the
// policy's memory_mib (job.DefaultMemoryMiB when that is unset too).
func TaskMemoryMiB(r job.Requirements, p job.Policy) int64 {
	switch {
	case r.MemoryMiB > 0:
		return r.MemoryMiB
	case p.MemoryMiB > 0:
		return int64(p.MemoryMiB)
	}
	return job.DefaultMemoryMiB
}
