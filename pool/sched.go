package pool

import (
	"context"
	"crypto/ed25519"
	"errors"
	"log/slog"
	"time"

	"idlepool/identity"
	"idlepool/job"
)

// SchedulerConfig configures a coordinator's Scheduler.
type SchedulerConfig struct {
	Pool        string                  // pool name, written into every ledger entry
	Key         *identity.Key           // the coordinator's key; signs ledger entries
	Store       Store                   // durable state
	Blobs       func(job.Digest) string // local path of a content-addressed file, for job.FromCanonical when reloading jobs
	Now         func() time.Time        // the clock; default time.Now
	MaxReplicas int                     // replicas per task at most; default the job's redundancy + 4
	CommitDelay time.Duration           // group-commit window; default 2ms
	Logger      *slog.Logger            // nil discards
}

// Scheduler is the coordinator's scheduling core.
type Scheduler struct {
	cfg SchedulerConfig
}

var errTODO = errors.New("pool: scheduler not implemented yet")

// NewScheduler loads the state from cfg.Store.
func NewScheduler(ctx context.Context, cfg SchedulerConfig) (*Scheduler, error) {
	return &Scheduler{cfg: cfg}, nil
}

// Serve runs group commit and lease expiry until ctx ends.
func (s *Scheduler) Serve(ctx context.Context) error { <-ctx.Done(); return nil }

// RegisterPeer registers p; idempotent for the same keys.
func (s *Scheduler) RegisterPeer(ctx context.Context, p Peer) error { return errTODO }

// Peer returns a registered peer.
func (s *Scheduler) Peer(id string) (Peer, bool) { return Peer{}, false }

// AddJob adds a job submitted by the peer submitter.
func (s *Scheduler) AddJob(ctx context.Context, j *job.Job, submitter string) (created bool, err error) {
	return false, errTODO
}

// Lease leases up to max tasks to peer.
func (s *Scheduler) Lease(ctx context.Context, peer string, max int) ([]Lease, error) {
	return nil, errTODO
}

// Heartbeat extends a lease and returns its new deadline.
func (s *Scheduler) Heartbeat(ctx context.Context, peer, lease string) (time.Time, error) {
	return time.Time{}, errTODO
}

// Submit records a replica's submission.
func (s *Scheduler) Submit(ctx context.Context, peer, lease string, sub Submission) error {
	return errTODO
}

// Release hands a lease back.
func (s *Scheduler) Release(ctx context.Context, peer, lease string) error { return errTODO }

// Results returns a job's outcomes with Seq > after, for its merger.
func (s *Scheduler) Results(ctx context.Context, peer string, id job.ID, after int64, max int) ([]Verified, error) {
	return nil, errTODO
}

// Ack records that the merger has the outcomes with Seq <= upto.
func (s *Scheduler) Ack(ctx context.Context, peer string, id job.ID, upto int64) error {
	return errTODO
}

// Status returns a job's progress.
func (s *Scheduler) Status(id job.ID) (JobStatus, error) { return JobStatus{}, errTODO }

// Jobs returns every job's progress.
func (s *Scheduler) Jobs() []JobStatus { return nil }

// Ledger returns ledger entries with Seq > after.
func (s *Scheduler) Ledger(after uint64, max int) ([]Entry, error) { return nil, errTODO }

// PeerLedger returns ledger entries naming peer with Seq > after.
func (s *Scheduler) PeerLedger(peer string, after uint64, max int) ([]Entry, error) {
	return nil, errTODO
}

// PublicKey returns the coordinator's public key.
func (s *Scheduler) PublicKey() ed25519.PublicKey { return s.cfg.Key.Public() }
