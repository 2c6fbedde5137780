package pool

import (
	"context"
	"time"

	"idlepool/castore"
	"idlepool/job"
)

// Store is the durable state of a coordinator's Scheduler. The Scheduler
// keeps the live state in memory and writes every change through Commit;
// Load rebuilds it after a restart. All scheduling logic stays in package
// pool: a Store only applies and returns records, so a clustered backend
// can replace the SQLite one (package store) without touching it.
//
// Error contract: Commit applies the whole Batch atomically and durably or
// nothing of it; a compare-and-set condition that does not hold (a replica
// whose stored Version is not Prev, a ledger Seq or outcome Seq already
// present, a job's Acked not AckedPrev, a job cancelled already) fails the whole batch with an error
// wrapping ErrConflict. An error wrapping ErrStoreUnavailable says that
// nothing was applied and the same batch may be committed again later (a
// locked database, a full disk): the Scheduler does so, with backoff.
// After any other failed Commit the Scheduler stops (its memory no longer
// matches the store) and must be rebuilt with Load. Commit keeps nothing
// of b once it returns (copies, where it keeps records in memory): the
// Scheduler empties a committed batch's slices and fills them again for
// a later batch.
// Load returns a snapshot of everything committed so far. Entries returns
// committed ledger entries with Seq > q.After in Seq order, at most q.Max,
// only those naming q.Peer when it is set.
//
// Implementations must be safe for concurrent use; the Scheduler calls
// Commit from one goroutine at a time, Entries from many.
type Store interface {
	Load(ctx context.Context) (*Snapshot, error)
	Commit(ctx context.Context, b *Batch) error
	Entries(ctx context.Context, q EntryQuery) ([]Entry, error)
}

// EntryCounter is a Store that counts its committed ledger entries by
// kind (KindReceipt, KindDeviation, KindUnverified) without handing them
// over one by one. NewScheduler asks it once, to start
// Scheduler.LedgerCounts; a Store without it is read page by page
// (Entries) instead. Errors are the store's.
type EntryCounter interface {
	CountEntries(ctx context.Context) (map[string]uint64, error)
}

// EntryQuery selects ledger entries: Seq > After, at most Max (Max > 0),
// and only entries whose Peer is Peer when Peer is not empty.
type EntryQuery struct {
	After uint64
	Max   int
	Peer  string
}

// Snapshot is everything a Scheduler needs to rebuild its state. Slices
// are in the order the records were first committed (jobs by Order,
// replicas by Created then Lease, outcomes by job then Seq).
type Snapshot struct {
	Peers []Peer
	Jobs  []JobRecord
	// Replicas holds every replica ever leased (Result only while its
	// task is undecided), except that a Store that is a ReplicaArchive
	// may leave out replicas that are done: settled and of a decided
	// task (MemStore.LiveImage), agreed and unverified ones among them
	// whatever the store holds of their task, since the Scheduler gives
	// a replica those states only as it decides its task (store.DB.Compact
	// need not look their outcome up), and settled replicas of a
	// cancelled job that did not fail on their machine (the job leases
	// nothing more; machine failures count toward its status). The
	// Scheduler loads nothing from those and asks the archive when a
	// request names one.
	Replicas []ReplicaRecord
	// Outcomes holds every outcome (Result only while unacknowledged:
	// Seq > the job's Acked), except that a Store may leave out a job's
	// acknowledged outcomes Seq 1 to Upto and hand over their
	// OutcomeSummary in Summaries instead (MemStore.ForgetAcked); then
	// the job's outcomes here start at Upto+1. A Store that never
	// summarises returns no Summaries.
	Outcomes []OutcomeRecord
	// Summaries holds at most one OutcomeSummary per job, in the order
	// of Jobs.
	Summaries []OutcomeSummary
	Trust     []TrustRecord // every device's and owner's newest trust record
	// LedgerSeq and LedgerHash are the last ledger entry's Seq and Hash
	// (zero for an empty ledger).
	LedgerSeq  uint64
	LedgerHash job.Digest
}

// Batch is one atomic group of changes: everything the Scheduler changed
// during one group-commit window. A Store applies the parts in the order
// Peers, Jobs, Replicas, Outcomes, Acks, Cancels, Entries.
type Batch struct {
	Peers    []Peer          // insert, or update Name of a peer with the same keys
	Jobs     []JobRecord     // insert; a job ID already present is a conflict
	Replicas []ReplicaRecord // insert when Prev == 0, else compare-and-set on Version == Prev
	Outcomes []OutcomeRecord // insert; (Job, Seq) already present is a conflict
	Acks     []AckRecord     // compare-and-set a job's Acked; drop result bytes of outcomes <= Upto
	Entries  []Entry         // append to the ledger; Seq must follow the last one with no gap
	Cancels  []CancelRecord  // compare-and-set a job's Cancelled from zero to At
	Trust    []TrustRecord   // insert when Prev == 0, else compare-and-set on Version == Prev
	// Leaves is the leaf hash of each of Entries as Sign computed them,
	// or nil: what spares a store hashing each entry again and
	// rebuilding the batch's tree, once SignedWhole checked them against
	// the entries. Sign sets it; it is never stored or sent, and a batch
	// read back from a store has none.
	Leaves []job.Digest `cbor:"-" json:"-"`
}

// Empty reports whether the batch changes nothing.
func (b *Batch) Empty() bool {
	return len(b.Peers)+len(b.Jobs)+len(b.Replicas)+len(b.Outcomes)+len(b.Acks)+len(b.Entries)+len(b.Cancels)+len(b.Trust) == 0
}

// CancelRecord marks a job cancelled by its owner at At (whole
// milliseconds, never zero). A job already cancelled is a conflict.
type CancelRecord struct {
	Job job.ID
	At  time.Time
}

// JobRecord is a job as the pool stores it: its canonical encoding (from
// which job.FromCanonical rebuilds it, given its files by digest) and who
// owns and merges it. Order is the job's position in the pool's queue
// (1, 2, ...): older jobs are leased first.
type JobRecord struct {
	ID        job.ID
	Canonical []byte
	Owner     string // owner ID of the submitter
	Merger    string // peer ID that receives the outcomes
	Order     int64
	Added     time.Time
	Acked     int64     // the merger has outcomes with Seq <= Acked
	Cancelled time.Time // when its owner cancelled it; zero while it is not
	// KnownAnswers is the digest of the job's known-answers file, which
	// the coordinator keeps beside its files and never serves (zero:
	// none; see job.Verify.KnownAnswers).
	KnownAnswers job.Digest
}

// Replica states. A replica starts "leased"; "returned" once its
// submission arrived; "expired" or "released" when its lease ended without
// a submission; "machine-failed" when its peer reported a failure that
// depends on the machine (Submission.Machine), which is not a vote;
// "cancelled" when its task was decided while it was in flight;
// "withdrawn" when its job was cancelled before its task was decided
// (leased or returned; it earns nothing); "agreed", "deviated" or
// "unverified" once its returned task is decided.
const (
	ReplicaLeased        = "leased"
	ReplicaReturned      = "returned"
	ReplicaExpired       = "expired"
	ReplicaReleased      = "released"
	ReplicaMachineFailed = "machine-failed"
	ReplicaCancelled     = "cancelled"
	ReplicaWithdrawn     = "withdrawn"
	ReplicaAgreed        = "agreed"
	ReplicaDeviated      = "deviated"
	ReplicaUnverified    = "unverified"
)

// ReplicaRecord is one replica of one task: the lease and, once returned,
// the submission. Version counts the record's changes (1 for the insert);
// Prev is the Version the store must hold for an update to apply (0 for an
// insert). Result holds the submitted bytes only while the task is
// undecided; nil afterwards. For a "machine-failed" replica, Deadline is
// the time until which its peer is not leased the task again (while other
// devices may take it), and Reason what the peer reported.
type ReplicaRecord struct {
	Lease    string
	Job      job.ID
	Task     int64
	Peer     string
	Owner    string
	State    string
	Created  time.Time
	Deadline time.Time
	Digest   job.Digest
	Failed   bool
	Reason   string
	Result   []byte
	// Ref is the result's chunk manifest when its device kept the bytes
	// (Submission.Ref); like Result, kept only while the task is
	// undecided.
	Ref *castore.Manifest
	// Work is what its device counted (Submission.Work); nil when it
	// sent none.
	Work    *Work
	Version int64
	Prev    int64
}

// OutcomeRecord is one decided task: a Verified with its job. Result,
// Ref and Holders are nil once the merger acknowledged it.
type OutcomeRecord struct {
	Job    job.ID
	Digest job.Digest // the agreed digest; zero for an unverified outcome
	Verified
}

// OutcomeSummary stands for a job's outcomes Seq 1 to Upto, all of them
// acknowledged (Upto <= the job's Acked), which a Store left out of a
// Snapshot: what the Scheduler rebuilds from them (how many, how many
// ok, which tasks are decided) without their records. Accepted counts
// those with Status OutcomeOK, Failed the others (Accepted+Failed ==
// Upto); Decided holds their tasks as sorted, disjoint, non-adjacent
// ranges (one range per run of consecutive tasks, so a job decided in
// order costs a few bytes), covering Upto tasks in all.
type OutcomeSummary struct {
	Job      job.ID
	Upto     int64
	Accepted int64
	Failed   int64
	Decided  []TaskRange
}

// TaskRange is the task indexes From to To-1 (From < To).
type TaskRange struct {
	From, To int64
}

// AckRecord moves a job's acknowledgement mark from Prev to Upto and drops
// the result bytes, references and holders of its outcomes with Seq <=
// Upto.
type AckRecord struct {
	Job  job.ID
	Prev int64
	Upto int64
}

// Kinds of TrustRecord.
const (
	TrustDevice = "device"
	TrustOwner  = "owner"
)

// TrustRecord is one device's or owner's trust record (consecutive agreed
// results per program, deviations, exclusion; an owner's standing), so
// that a restarted coordinator keeps trusting the trusted and excluding
// the excluded. Record is the Scheduler's encoding (JSON), opaque to a
// Store. (Kind, ID) names the record; Version counts its changes and Prev
// is the Version the store must hold for an update (0: insert).
type TrustRecord struct {
	Kind    string // TrustDevice or TrustOwner
	ID      string // the device's or owner's ID
	Record  []byte
	Version int64
	Prev    int64
}
