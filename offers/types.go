package offers

import (
	"time"

	"idlepool/idle"
	"idlepool/job"
)

// Offer is a peer's capacity offer to one pool: what the machine offers and
// what it accepts, signed with the peer's key and valid until Expires. The
// coordinator lists it while it is valid and leases a task to the peer only
// when Match(offer, requirements) holds.
type Offer struct {
	Peer     string        `json:"peer"`  // peer ID (identity.IDOf of the device key)
	Owner    string        `json:"owner"` // owner ID
	Pool     string        `json:"pool"`  // the pool's name
	Capacity idle.Capacity `json:"capacity"`
	// State is what the machine does now: computing, waiting or paused,
	// with the policy's reason.
	State   idle.State `json:"state"`
	Reason  string     `json:"reason,omitempty"`
	Accept  Accept     `json:"accept"`
	Issued  time.Time  `json:"issued"`
	Expires time.Time  `json:"expires"`
	Sig     []byte     `json:"sig,omitempty"` // Ed25519 by the peer key over the canonical encoding without Sig
}

// Accept is what the donor accepts from this pool. CPU (WebAssembly) tasks
// are always accepted; GPU programs only with GPUPrograms set (opt-in per
// pool).
type Accept struct {
	GPUPrograms  bool          `json:"gpu_programs,omitempty"`
	MaxMemoryMiB int64         `json:"max_memory_mib,omitempty"` // per task; 0: what Capacity offers
	MaxTaskTime  time.Duration `json:"max_task_time,omitempty"`  // per task; 0: no ceiling
	PreferOwners []string      `json:"prefer_owners,omitempty"`
	RefuseOwners []string      `json:"refuse_owners,omitempty"`
	RefuseJobs   []job.ID      `json:"refuse_jobs,omitempty"`
	AcceptJobs   []job.ID      `json:"accept_jobs,omitempty"` // explicitly accepted: ranked first
	Weight       float64       `json:"weight,omitempty"`      // share of this machine for this pool among its pools, 0..1
}

// Listing is a job seeking compute, as a pool lists it for donors.
type Listing struct {
	Job          job.ID           `json:"job"`
	Name         string           `json:"name"`
	Description  string           `json:"description,omitempty"`
	Owner        string           `json:"owner"`
	Pool         string           `json:"pool"`
	Requirements job.Requirements `json:"requirements"`
	CostPerTask  float64          `json:"cost_per_task"` // planner cost units of a typical task
	TasksLeft    int64            `json:"tasks_left"`
	TasksDone    int64            `json:"tasks_done"`
	Quorum       int              `json:"quorum"`
	Participants string           `json:"participants"` // open | invite | owner
}
