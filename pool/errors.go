package pool

import "errors"

// Sentinel errors of package pool; compare with errors.Is.
var (
	// ErrJournal marks a journal file that cannot be used as it is.
	ErrJournal = errors.New("pool: bad journal")
	// ErrInputChanged means an input file no longer matches the digest the
	// job was planned with.
	ErrInputChanged = errors.New("pool: input changed since the job was planned")
	// ErrAllFailed means every task of a job failed.
	ErrAllFailed = errors.New("pool: every task failed")
)

// Sentinel errors of the coordinator's Scheduler. The HTTP layer maps them
// to status codes with errors.Is; every returned error wraps one of them
// (or a Store error) with context.
var (
	// ErrUnknownPeer: no peer with that ID is registered (404).
	ErrUnknownPeer = errors.New("pool: unknown peer")
	// ErrUnknownJob: no job with that ID is in the pool (404).
	ErrUnknownJob = errors.New("pool: unknown job")
	// ErrUnknownLease: no lease with that ID exists (404).
	ErrUnknownLease = errors.New("pool: unknown lease")
	// ErrNotYourLease: a peer acted on a lease held by another peer (403).
	ErrNotYourLease = errors.New("pool: lease belongs to another peer")
	// ErrLeaseExpired: the lease passed its deadline, or was handed back,
	// and the task may already be leased to someone else (410).
	ErrLeaseExpired = errors.New("pool: lease expired")
	// ErrTaskDecided: the lease's task was decided (accepted, failed or
	// unverified) before this replica came back; it earns nothing (409).
	ErrTaskDecided = errors.New("pool: task already decided")
	// ErrJobCancelled: the job was cancelled by its owner; its leases
	// ended and it leases nothing more (410).
	ErrJobCancelled = errors.New("pool: job cancelled by its owner")
	// ErrNotOwner: only a device of the job's owner may cancel it (403).
	ErrNotOwner = errors.New("pool: not the job's owner")
	// ErrNotMerger: only the job's merger may read or acknowledge its
	// results (403).
	ErrNotMerger = errors.New("pool: not the job's merger")
	// ErrNotAllowed: the job's participation policy does not let this peer
	// take part (403).
	ErrNotAllowed = errors.New("pool: not allowed by the job's policy")
	// ErrBadSubmission: a submission whose digest does not match its
	// bytes, or that is too large (400).
	ErrBadSubmission = errors.New("pool: bad submission")
	// ErrSendInline: a result submitted by reference for a job whose
	// merger does not fetch results kept by the devices now
	// (MergerFetchesKept): send its bytes (409).
	ErrSendInline = errors.New("pool: the job's merger does not fetch results kept by the devices now: send the result's bytes")
	// ErrBadRequest: an argument out of range (400).
	ErrBadRequest = errors.New("pool: bad request")
	// ErrConflict: the request contradicts the pool's state, for example a
	// peer ID registered with other keys, a second, different submission
	// for one lease, or a store row changed by someone else (409).
	ErrConflict = errors.New("pool: conflict")
	// ErrStopped: the scheduler is not serving (Serve returned or a commit
	// failed); restart it from its Store (503).
	ErrStopped = errors.New("pool: scheduler stopped")
	// ErrStoreUnavailable is matched by a Store's Commit error when
	// nothing of the batch was applied and the same batch may be
	// committed later: the database locked by another process, the disk
	// full. The Scheduler then keeps the batch and commits it again with
	// backoff (its callers wait), and refuses new leases meanwhile with
	// an error wrapping it (503).
	ErrStoreUnavailable = errors.New("pool: store unavailable")
	// ErrLedger marks a ledger or entry that does not verify.
	ErrLedger = errors.New("pool: ledger does not verify")
	// ErrEntriesArchived: a MemStore asked for ledger entries it forgot
	// (MemStore.ForgetEntries); the Store that archived them answers.
	ErrEntriesArchived = errors.New("pool: ledger entries moved to the archive")
)

// ErrExcluded: the device, or its owner, is excluded from computing in the
// pool for a while after repeated deviations (403); see ExcludedError.
var ErrExcluded = errors.New("pool: excluded after repeated deviations")
