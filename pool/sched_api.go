package pool

import (
	"crypto/ed25519"
	"time"

	"idlepool/castore"
	"idlepool/job"
	"idlepool/worker"
)

// EndorsementMessage is what an owner key signs to vouch that a device key
// belongs to it: the ASCII string "idlepool/endorse/v1", a zero byte, then
// the device's 32-byte public key.
func EndorsementMessage(device ed25519.PublicKey) []byte {
	return append([]byte("idlepool/endorse/v1\x00"), device...)
}

// Peer is a device registered with a pool: its key, and the owner key that
// endorsed it. ID and Owner are identity.IDOf of the two keys.
type Peer struct {
	ID          string            `json:"peer"`
	Owner       string            `json:"owner"`
	Key         ed25519.PublicKey `json:"key"`
	OwnerKey    ed25519.PublicKey `json:"owner_key"`
	Endorsement []byte            `json:"endorsement"` // owner key's signature over EndorsementMessage(Key)
	Name        string            `json:"name,omitempty"`
	Joined      time.Time         `json:"joined"`
}

// Lease is a time-bounded assignment of one task of one job to one peer.
// A lease not heartbeated before Deadline expires and the task is leased
// again: a slow, vanished or crashed peer is that one case.
type Lease struct {
	ID       string    `json:"lease"` // 32 lowercase hex digits, random
	Job      job.ID    `json:"job"`
	Task     int64     `json:"task"`
	Peer     string    `json:"peer"`
	Deadline time.Time `json:"deadline"`
}

// Submission is what a peer returns for a lease: the program's result, or
// the reason it failed. Digest is SHA-256 of Result when !Failed, and of
// "failed" + a zero byte + Reason when Failed (ReplicaDigest computes it);
// the pool recomputes and refuses a digest that does not match.
//
// Machine marks a failure that depends on the machine that ran the task
// (TaskOutcome.MachineDependent: a timeout, a dead worker, a setup error);
// Failed must be set with it. Such a failure is no replica's answer: it
// never counts toward a quorum and never earns a receipt, and the task is
// leased again (DESIGN.md invariant 16). A failure whose Reason names such
// a cause (MachineReason) is taken as one even without Machine.
//
// Ref, instead of Result, says that the device keeps the result's bytes
// and serves them to the job's merger over the data plane: the result's
// chunk manifest, whose SHA256 is Digest and whose Size is more than
// InlineResultBytes (and at most the pool's result limit). Only a job
// compared by digest (no tolerance rule) takes a Ref, since agreeing
// within a tolerance needs the bytes.
//
// Work is what the device counted of the work the task took (every
// outcome but a machine-dependent failure carries it). Under the digest
// rule replicas agree only when their Work is the same too, and the
// receipt's cost comes from the agreed count (see Work).
type Submission struct {
	Digest  job.Digest        `json:"digest"`
	Result  []byte            `json:"result,omitempty"`
	Failed  bool              `json:"failed,omitempty"`
	Reason  string            `json:"reason,omitempty"`
	Machine bool              `json:"machine,omitempty"`
	Ref     *castore.Manifest `json:"ref,omitempty"`
	Work    *Work             `json:"work,omitempty"`
}

// Work is what a replica's device counted of the work its task took:
// Count WebAssembly instructions executed (and GPU threads launched), by
// the worker's metering rule Rule (worker.MeterRule), the same on every
// honest device for the same task whatever its speed.
//
// It is part of what replicas agree on: under the digest rule two
// replicas agree when their digests and their Work are the same. Under a
// tolerance rule, and for a job that can use a GPU (a device with a GPU
// counts its launches' threads, one without the instructions of the CPU
// path), Work is not compared and the smallest count of the agreeing
// replicas is credited: a device can lower it, never raise it. An accepted task's receipts credit
// job.Job.WorkCost of the agreed count: count / job.InstructionsPerCostUnit,
// capped by the job's declared cost. A replica without Work (an agent
// older than metering) or counted by a rule this pool does not know
// agrees only with its like and earns no cost.
type Work struct {
	Rule  int    `json:"rule"`
	Count uint64 `json:"count"`
}

// MaxWorkCount is the largest Work.Count a submission may carry (stores
// keep it as a signed 64-bit integer); at 10^10 instructions a second it
// is 29 years of work.
const MaxWorkCount = 1<<63 - 1

// sameWork reports whether a and b are the same count by the same rule,
// or both absent.
func sameWork(a, b *Work) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

// metered reports whether w is a count by the rule this pool prices.
func metered(w *Work) bool { return w != nil && w.Rule == worker.MeterRule }

func cloneWork(w *Work) *Work {
	if w == nil {
		return nil
	}
	c := *w
	return &c
}

// InlineResultBytes is the largest result a device sends inline (1 KiB);
// a larger one it may keep and submit by reference (Submission.Ref).
// Most sweep results are a few hundred bytes, for which fetching from a
// device would cost more than carrying them; see RATIONALE.md ("Results
// stay with the devices").
const InlineResultBytes = 1 << 10

// ReplicaDigest returns the digest a Submission must carry.
func ReplicaDigest(result []byte, failed bool, reason string) job.Digest {
	if failed {
		return job.Digest(sha256Sum(append([]byte("failed\x00"), reason...)))
	}
	return job.Digest(sha256Sum(result))
}

// Outcome statuses of a finished task.
const (
	OutcomeOK         = "ok"         // a majority of distinct owners returned the same result
	OutcomeFailed     = "failed"     // a majority agreed the program fails on this task
	OutcomeUnverified = "unverified" // no majority within the replica limit; never folded
)

// Verified is one task's final outcome, handed to the job's merger in
// acceptance order. Seq counts from 1 per job.
//
// An ok outcome whose result the devices kept has Ref (the result's chunk
// manifest; SHA256 is the accepted digest) and no Result, and Holders:
// the peer IDs of the replicas that returned it, from which the merger
// fetches it (ResultLost when none can give it). Ref and Holders, like
// Result, are dropped once the merger acknowledged the outcome.
//
// Work, for an ok outcome, is the count (by worker.MeterRule) the
// receipts credited: the agreed Work of its replicas; 0 when they
// counted none.
type Verified struct {
	Seq     int64             `json:"seq"`
	Task    int64             `json:"task"`
	Status  string            `json:"status"`
	Result  []byte            `json:"result,omitempty"`
	Reason  string            `json:"reason,omitempty"`
	Ref     *castore.Manifest `json:"ref,omitempty"`
	Holders []string          `json:"holders,omitempty"`
	Work    uint64            `json:"work,omitempty"`
}

// JobStatus is a job's progress in a pool.
type JobStatus struct {
	Job        job.ID `json:"job"`
	Name       string `json:"name"`
	Owner      string `json:"owner"`
	Merger     string `json:"merger"`
	Tasks      int64  `json:"tasks"`
	Accepted   int64  `json:"accepted"`   // outcome ok
	Failed     int64  `json:"failed"`     // outcome failed or unverified
	Leased     int64  `json:"leased"`     // live leases
	Waiting    int64  `json:"waiting"`    // tasks without an outcome whose returned results wait for a quorum
	Cancelled  bool   `json:"cancelled"`  // its owner cancelled it: it leases nothing more
	Acked      int64  `json:"acked"`      // outcomes the merger has taken (Seq)
	Complete   bool   `json:"complete"`   // every task has an outcome (false for a cancelled job that did not finish)
	Quorum     int    `json:"quorum"`     // agreeing replicas a task needs
	Redundancy int    `json:"redundancy"` // replicas leased at first
	// Retrying counts the undecided tasks that failed on some device for
	// a reason of that device (a timeout, a dead worker) and are leased
	// again, to other devices first (to the same ones, after a wait that
	// doubles, when no other present device may take them,
	// SchedulerConfig.Present).
	Retrying int64 `json:"retrying,omitempty"`
	// Recomputing counts the accepted results that no holder could give
	// the merger (ResultLost) and that a device computes again.
	Recomputing int64 `json:"recomputing,omitempty"`
	// Trouble names the undecided task that failed that way most often,
	// for people: "task 17 timed out on 5 devices (after 6 it ends
	// unverified)"; when Retrying is 0, why the job cannot reach its
	// quorum with the devices connected, if it cannot ("needs devices of
	// 2 owners to agree on each task; 1 other owner's devices are
	// connected"); else "".
	Trouble string `json:"trouble,omitempty"`
	// TimingOut counts the undecided tasks that ran past the job's time
	// limit (policy.time_limit) on some device, and TimeoutDevices the
	// distinct devices they did so on. Timeouts says so for people ("2
	// tasks timing out: each ran past the 2m time limit, on 3 devices in
	// all; a task ends failed (unverified) once it timed out on 5 devices
	// or failed 6 times"); "" when none is.
	TimingOut      int64  `json:"timingOut,omitempty"`
	TimeoutDevices int    `json:"timeoutDevices,omitempty"`
	Timeouts       string `json:"timeouts,omitempty"`
	// Transfer says how the devices that fetched the job's files got
	// their bytes, as they reported it; nil when none reported (the
	// coordinator fills it, the Scheduler does not).
	Transfer *JobTransfer `json:"transfer,omitempty"`
}

// Transfer counts the bytes of a job's files (program and inputs) one
// device fetched, by the path they took: Direct from other devices over
// direct connections (host or reflexive ICE candidates), Relayed from
// other devices through a TURN relay, and Coordinator from the
// coordinator itself. Bytes are chunk payloads, without protocol
// overhead.
type Transfer struct {
	Direct      int64 `json:"direct"`
	Relayed     int64 `json:"relayed"`
	Coordinator int64 `json:"coordinator"`
}

// Add returns t plus u, field by field.
func (t Transfer) Add(u Transfer) Transfer {
	return Transfer{Direct: t.Direct + u.Direct, Relayed: t.Relayed + u.Relayed, Coordinator: t.Coordinator + u.Coordinator}
}

// Zero reports whether t counts no bytes.
func (t Transfer) Zero() bool { return t == Transfer{} }

// JobTransfer sums the Transfers the devices of one job reported. Each
// device that fetched bytes counts once in Devices and in one of Direct
// (every byte from peers came over direct connections), Relayed (some
// came through a relay) and CoordinatorOnly (nothing came from peers).
// Bytes is the sum of their Transfers.
type JobTransfer struct {
	Devices         int      `json:"devices"`
	Direct          int      `json:"direct"`
	Relayed         int      `json:"relayed"`
	CoordinatorOnly int      `json:"coordinatorOnly"`
	Bytes           Transfer `json:"bytes"`
}

// Note counts one device's Transfer in j.
func (j *JobTransfer) Note(t Transfer) {
	if t.Zero() {
		return
	}
	j.Devices++
	switch {
	case t.Relayed > 0:
		j.Relayed++
	case t.Direct > 0:
		j.Direct++
	default:
		j.CoordinatorOnly++
	}
	j.Bytes = j.Bytes.Add(t)
}

// JobView is a job with its progress, as SchedulerConfig.Select and
// Scheduler.Seeking see it. Job is shared: read it, never change it.
// Status holds the job's counts and policy; the fields that walk every
// undecided task (Waiting, Recomputing, TimingOut, TimeoutDevices,
// Trouble and Timeouts) are zero, since Select runs at every lease:
// Scheduler.Status has them.
type JobView struct {
	Job    *job.Job
	Status JobStatus
}
