package pool

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"idlepool/identity"
	"idlepool/job"
)

// SchedulerConfig configures a coordinator's Scheduler. Pool, Key, Store
// and Blobs are required; the rest have defaults.
type SchedulerConfig struct {
	Pool        string                  // pool name, written into every ledger entry
	Key         *identity.Key           // the coordinator's key; signs ledger entries
	Store       Store                   // durable state
	Blobs       func(job.Digest) string // local path of a content-addressed file (program, inputs) whose digest its store checked when storing it, for job.FromCanonicalStored when reloading jobs
	Now         func() time.Time        // the clock for leases and ledger times; default time.Now
	MaxReplicas int                     // replicas per task at most; default the job's redundancy + 4. Past it a task without a majority ends unverified, and so does a task that failed this many times for a reason of the machine (Submission.Machine)
	CommitDelay time.Duration           // group-commit window; default 2ms
	Logger      *slog.Logger            // nil discards

	// MaxResultBytes bounds one submission's result; default 64 MiB.
	MaxResultBytes int

	// MaxTimeouts is on how many distinct devices a task may time out
	// (run past its policy.time_limit) before the pool gives up on it: the
	// task ends unverified, as failed, with the reason "timed out on 5
	// devices, after 2m each: ..." (a decision of the pool, never a
	// verified result: it earns nobody a receipt). Default
	// DefaultMaxTimeouts. MaxReplicas bounds a task's machine-dependent
	// failures of any kind, on any devices, besides.
	MaxTimeouts int

	// Select, when set, decides which jobs a peer is leased tasks of and
	// in which order (matchmaking): given the unfinished jobs the peer may
	// compute by their policies, of the classes Fits accepts, in
	// fair-share order, it returns the IDs of those
	// to try, best first; a job left out is not leased to the peer, an ID
	// not among jobs is ignored. Lease calls it once per call, without
	// the Scheduler's lock held (state may change meanwhile; Lease checks
	// the chosen jobs again); it must not keep jobs, may run concurrently
	// with itself, and must not call the Scheduler. nil: every job, in
	// fair-share order.
	Select func(p Peer, jobs []JobView) []job.ID

	// Fits, when set, reports whether peer p's offer satisfies class c
	// (its hardware, memory and hours): a lease looks only at jobs of the
	// classes p fits, and hands only those to Select. It must never
	// refuse a class of a job Select would keep. Lease calls it with the
	// Scheduler's lock held, at most once per class; it must not call the
	// Scheduler. nil: every class.
	Fits func(p Peer, c JobClass) bool

	// Present, when set, reports whether the device peer is present at
	// now: connected, and so may ask for work soon (the coordinator: it
	// has a live capacity offer and made a signed request within the
	// last minute). A device held from a task it failed on
	// for a reason of its own takes it again once no present device
	// other than it may (see heldBack). Lease calls it with the
	// Scheduler's lock held; it must not call the Scheduler. nil: every
	// registered device counts as present.
	Present func(peer string, now time.Time) bool

	// Trust holds the rules on trust and sanctions: established owners,
	// exclusion after repeated deviations, the bound on unverified work.
	Trust TrustConfig

	// OnExclude, when set, is told of each exclusion this Scheduler
	// decides (ExcludeAfter deviations of a device within ExcludeFor),
	// so that the pool's other schedulers apply it too (Exclude; a
	// clustered pool divided into shards hands it over a replicated
	// bucket). It is called once the batch that records the exclusion is
	// committed to the Store (never for one whose commit failed), with
	// the Scheduler's lock held: it must return at once (hand the
	// exclusion to a goroutine of its own) and must not call the
	// Scheduler. An exclusion applied with Exclude is never handed to
	// it. nil: exclusions stay this Scheduler's.
	OnExclude func(Exclusion)

	// OnDeviate, when set, is told of each deviation this Scheduler
	// decides (a KindDeviation entry), so that the pool's other
	// schedulers count it too (Deviated; a clustered pool divided into
	// shards hands it over a replicated bucket). Like OnExclude it is
	// called once the batch that records the deviation is committed,
	// with the Scheduler's lock held: it must return at once and must
	// not call the Scheduler. A deviation applied with Deviated is never
	// handed to it. nil: deviations stay this Scheduler's.
	OnDeviate func(Deviation)

	// OnSecret, when set, is told the digest of the known-answers file
	// of each job this Scheduler adds, once the batch that adds the job
	// is committed, so that the pool's other schedulers refuse to serve
	// that file too (AddSecret; a clustered pool divided into shards
	// hands it over a replicated bucket: the files of every shard are
	// uploaded to, and served by, shard 0). Like OnExclude it is called
	// with the Scheduler's lock held and must return at once. nil: a
	// job's known answers are secret on its own Scheduler only.
	OnSecret func(job.Digest)

	// Tail holds the rules for a job's tail: backup replicas, the
	// devices' records and the lease timeouts derived from them
	// (tail.go). The zero value turns them on.
	Tail TailConfig

	// Shard and Shards place the Scheduler in a pool divided into
	// Shards shards (1 to MaxShards) as shard Shard (0 to Shards-1): it
	// writes Shard into the IDs of the leases it grants, so that a
	// router finds a lease's shard from its ID alone (LeaseShard). The
	// zero values are shard 0 of 1, an undivided pool, whose lease IDs
	// are NewLeaseID's.
	Shard, Shards int
}

// Defaults of SchedulerConfig.
const (
	DefaultCommitDelay    = 2 * time.Millisecond
	DefaultExtraReplicas  = 4        // MaxReplicas = redundancy + this
	DefaultMaxTimeouts    = 5        // SchedulerConfig.MaxTimeouts
	DefaultMaxResultBytes = 64 << 20 // bytes
	maxBatchChanges       = 4096     // a batch this full commits without waiting for CommitDelay
	maxLeasesPerCall      = 256
	maxPageSize           = 10000
	maxReasonBytes        = 4096
)

// Scheduler is the coordinator's scheduling core: it registers peers,
// holds jobs, leases tasks to whoever asks, compares the digests replicas
// return, decides each task by a majority of distinct owners, hands the
// outcomes to each job's merger and writes signed receipts to the ledger.
// It never merges or sums results (invariant 9).
//
// All state lives in memory and every change goes through the Store: a
// method that changes state returns only after its change is durably
// committed, and concurrent calls share one commit (group commit, run by
// Serve). A Scheduler whose Serve is not running blocks such methods until
// it runs (or their ctx ends). Reads (Peer, Status, Jobs) see the newest
// state, which may include changes still being committed; Results and
// Ledger return only what is committed.
//
// The rules, from DESIGN.md invariants 3, 4, 6, 11-14:
//
//   - Pull: Lease gives whoever asks the lowest-index task of the first
//     job by fair share (fairOrder: owners by usage over contribution,
//     an owner's jobs oldest first) that still needs a replica the peer
//     may compute (with SchedulerConfig.Select: of the first job Select
//     keeps). Tasks that
//     already have replicas (in flight or returned) come before fresh
//     ones, so a task's replicas run in parallel on distinct peers and
//     results arrive roughly in task order.
//   - Participants "open" and "invite": the job owner's devices are never
//     leased the owner's own tasks; a task's replicas go to distinct owners
//     (a second device of an owner that holds or returned a replica is
//     skipped), and each agreeing replica earns a receipt.
//     Participants "owner": only the owner's devices compute, distinct
//     devices count toward the quorum, and no ledger entries are written
//     (your own device is never counted, invariant 14).
//   - A peer never holds two replicas of one task. A lease that expires or
//     is handed back frees its replica for whoever asks next.
//   - A job's tail (tail.go): once its undecided tasks are no more than
//     the idle devices, idle devices expected to finish sooner are leased
//     backup replicas of the tasks estimated to end last, and devices
//     slow for the job are leased nothing of it while faster ones wait;
//     lease timeouts are shortened for devices whose leases expired.
//   - Redundancy replicas are leased at first. Digest D is accepted when
//     the voters (distinct owners, or devices in "owner" pools) that
//     returned D (and, under the digest rule, counted the same Work)
//     number at least quorum (one more once the voters
//     disagree) and are a strict majority of the voters that returned.
//     Adaptive replication, spot checks, held results, revocation and
//     sanctions are in trust.go (see TrustConfig and job.Verify). Otherwise more replicas are leased, as many as
//     could still make the leading digest win, up to MaxReplicas; when no
//     digest can win within MaxReplicas the task ends unverified.
//   - A majority on a "failed" digest (same failure reason) is a verified
//     failure: outcome "failed", reported to the merger, receipts issued
//     at cost 0 because the work was agreed on but not completed. Only a deterministic failure
//     can be one: a failure that depends on the machine (Submission.Machine:
//     a timeout, a dead worker) is no vote and earns nothing. Its task is
//     leased again, and not to the device that reported it for the job's
//     lease timeout, so that other devices take it first; after
//     MaxReplicas such failures the task ends unverified, and until then
//     JobStatus.Trouble says how often it failed (DESIGN.md invariant 16).
//   - Deciding a task appends, atomically with its outcome, one receipt per
//     agreeing replica (cost from the work they agreed the task took,
//     capped by the planner's declared cost: job.Job.WorkCost), one deviation
//     per disagreeing replica, or one unverified entry per replica of an
//     unverified task. Only the accepted result is kept, until the merger
//     acknowledges it.
//
// A Scheduler is safe for concurrent use.
type Scheduler struct {
	cfg   SchedulerConfig
	log   *slog.Logger
	store Store

	mu        sync.Mutex
	peers     map[string]Peer
	peerBatch map[string]*pending // the batch of each peer's newest registration
	jobs      map[job.ID]*jobState
	queue     []*jobState // by JobRecord.Order
	// open is the jobs a lease looks at (openJobs): those of queue that
	// are not complete, in its order, so that a lease costs what the
	// jobs in play cost, not every job the pool ever ran.
	open      *openJobs
	leases    map[string]*replica   // every replica ever leased, by lease ID
	deadlines deadlineHeap          // live leases, lazily pruned
	ledgerSeq uint64                // Seq of the newest entry, including uncommitted ones
	chainHash job.Digest            // Hash of the newest signed entry; only flush uses it
	workHead  ChainHead             // the newest committed entry not an anchor (AnchorHead)
	anchored  map[int]uint64        // the Seq of each other shard's ledger last anchored (Anchor)
	remote    map[string]*remoteUse // the other shards' owners' fair-share figures (SetShardUsage)
	recent    *recentEntries        // the ledger's tail committed since the load, for PeerLedger
	kinds     map[string]uint64     // committed ledger entries by kind (LedgerCounts)
	commits   CommitCounts          // the group commits so far (CommitCounts)
	nextOrder int64
	pend      *pending
	// spare holds the slices and map of the last batch committed, emptied,
	// for the batch after next (newPendingLike): the store keeps none
	// of a batch (Store's contract).
	spare   pendingSpare
	stopped error // non-nil: every change is refused with it
	serving bool
	fault   error     // the store's Transient failure while a batch waits to be committed again; nil when it commits
	faultAt time.Time // when fault began

	kick chan struct{} // a change is waiting to be committed
	full chan struct{} // the pending batch is full

	committedCh   chan struct{} // closed at the next commit (WaitResults); nil until asked for
	deadlinesKept int           // len(deadlines) after its last compaction (sched_archive.go)

	trust *trustState // devices' and owners' records (trust.go)
	// gained are the trust records that only gained standing since they
	// were last written, written within trustGainedEvery (trust_store.go).
	gained gainedTrust
	watch  []*taskState        // checks leased just now: the next device to ask is barred from them (check.go)
	secret map[job.Digest]bool // known-answers files of the pool's jobs, never served (known.go)

	// tail.go: what each device has shown, and the devices that asked
	// for work and got none (idleCount caches its count at idleAt).
	shown             map[string]*shown
	idle              []string
	idleAt            time.Time
	idleAll, idleFast int
}

// jobState is one job in memory. Tasks below next that are not in active
// are decided; tasks from next on are untouched.
type jobState struct {
	rec           JobRecord
	j             *job.Job
	open          *openJobs // the scheduler's index of open jobs
	inOpen        bool      // js is in open.jobs
	class         JobClass  // ClassOf(j)
	dirty         bool      // in open.dirty: changed since the index last looked at it
	listed        bool      // in its group of open.groups
	inStalls      bool      // in open.stalls
	pol           job.Policy
	maxReplicas   int
	maxTimeouts   int // SchedulerConfig.MaxTimeouts
	tasks         int64
	next          int64
	active        map[int64]*taskState
	want          []int64   // sorted indexes of active tasks that need another replica
	retrying      int64     // active tasks with machine-failed replicas
	stalled       int64     // active tasks that are stalled (stall.go)
	stalledSince  time.Time // since when nothing but stalled tasks is left (stall.go)
	barsSeen      int64     // trustState.bars when its stalls were last judged again (stall.go)
	waitingChecks int       // active tasks whose check waits for its delay (check.go)
	seq           int64     // last outcome Seq assigned
	committed     int64     // last outcome Seq durably committed
	outcomes      []Verified
	accepted      int64
	failed        int64
	leased        int64
	batch         *pending // the batch that inserted the job
	ackBatch      *pending // the batch of the last acknowledgement
	cancelBatch   *pending // the batch that cancelled the job

	// trust.go and fairshare.go
	ver       job.Verify // the manifest's [verify] table
	held      int        // tasks accepted alone whose results are held back
	trust     *trustState
	deviators map[string]bool // owners with a deviation in this job
	caught    map[string]bool // owners caught on a known answer of this job: they compute no more of it (stall.go)
	keptUntil time.Time       // until when its merger fetches results kept by the devices (sched_refs.go)

	pace paceState // its replicas' recent durations, for its median (tail.go)
}

// taskState is an undecided task that has, or had, replicas.
type taskState struct {
	index    int64
	live     []*replica             // leased, not returned
	returned []*replica             // in return order
	machine  []*replica             // machine-failed, in return order; never votes
	wanting  bool                   // listed in jobState.want
	single   bool                   // leased to a trusted device alone (adaptive replication)
	prov     *replica               // the replica that computed it alone, once returned
	provMode int                    // provHeld, provOpen or provCaught while prov is set
	agreed   map[[2]job.Digest]bool // under a tolerance rule: whether two results (digests, lower first) agree
	knownOK  bool                   // a replica returned the job's known answer for it (known.go)
	stalled  bool                   // its voters disagree and no owner the pool has may settle it (stall.go)
	chk      *checkState            // its further replicas are checks (check.go); nil otherwise
	refetch  *refetch               // decided, but every holder of its result was gone: computed again (sched_refs.go)
	// liveBuf and returnedBuf are where live and returned start, in the
	// task's own allocation: a task of the usual two replicas needs no
	// other (jobState.task).
	liveBuf, returnedBuf [2]*replica
}

// replica is one lease and its submission. rec.Version is the version of
// the newest change (committed or pending).
type replica struct {
	rec   ReplicaRecord
	js    *jobState
	ts    *taskState // nil once settled (the task was decided or the lease ended)
	batch *pending   // the batch of the newest change

	counted bool    // counts toward its device's outstanding replicas
	void    bool    // returned, then its device was caught on a known answer: it no longer votes (stall.go)
	order   int64   // when it was leased, among this run's leases (0: before a restart)
	cost    float64 // the receipt's cost, for a provisional replica
	backup  bool    // leased as a backup in its job's tail (tail.go); not kept over a restart
}

// NewScheduler rebuilds the scheduler's state from cfg.Store (see Store
// and Snapshot). Jobs are rebuilt from their canonical encodings with
// job.FromCanonical and cfg.Blobs; a job whose files are missing or do not
// match is an error, because dropping it would drop its tasks. Leases come
// back with their deadlines; those already past expire on the first Lease
// or within a second of Serve starting.
func NewScheduler(ctx context.Context, cfg SchedulerConfig) (*Scheduler, error) {
	if cfg.Key == nil || cfg.Store == nil || cfg.Blobs == nil {
		return nil, fmt.Errorf("new scheduler: %w: Key, Store and Blobs are required", ErrBadRequest)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.CommitDelay <= 0 {
		cfg.CommitDelay = DefaultCommitDelay
	}
	if cfg.MaxResultBytes <= 0 {
		cfg.MaxResultBytes = DefaultMaxResultBytes
	}
	if cfg.Shards == 0 {
		cfg.Shards = 1
	}
	if cfg.Shards < 1 || cfg.Shards > MaxShards || cfg.Shard < 0 || cfg.Shard >= cfg.Shards {
		return nil, fmt.Errorf("new scheduler: %w: shard %d of %d: want 1 to %d shards and a shard from 0 to one less",
			ErrBadRequest, cfg.Shard, cfg.Shards, MaxShards)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Scheduler{
		cfg: cfg, log: log, store: cfg.Store,
		peers: map[string]Peer{}, peerBatch: map[string]*pending{}, jobs: map[job.ID]*jobState{}, leases: map[string]*replica{},
		kick: make(chan struct{}, 1), full: make(chan struct{}, 1),
		trust: newTrustState(cfg.Trust), secret: map[job.Digest]bool{}, shown: map[string]*shown{},
	}
	s.pend = newPending()
	snap, err := cfg.Store.Load(ctx)
	if err != nil {
		return nil, fmt.Errorf("new scheduler: load: %w", err)
	}
	if err := s.restore(ctx, snap); err != nil {
		return nil, fmt.Errorf("new scheduler: %w", err)
	}
	s.recent = newRecentEntries(s.ledgerSeq)
	if s.kinds, err = countEntries(ctx, cfg.Store); err != nil {
		return nil, fmt.Errorf("new scheduler: count the ledger: %w", err)
	}
	log.Info("Scheduler loaded", "pool", cfg.Pool, "peers", len(s.peers), "jobs", len(s.queue),
		"leases", len(s.deadlines), "ledgerSeq", s.ledgerSeq)
	return s, nil
}

// restore rebuilds memory from a snapshot; s.mu need not be held (s is
// not shared yet). Rebuilding a job re-plans it (hashing its files), so a
// pool of many jobs takes a while: an ended ctx stops it between jobs.
func (s *Scheduler) restore(ctx context.Context, snap *Snapshot) error {
	for _, p := range snap.Peers {
		s.peers[p.ID] = p
	}
	if err := s.restoreTrust(snap.Trust); err != nil {
		return err
	}
	decided := map[job.ID]*decidedTasks{}
	touched := map[job.ID]int64{}
	for _, rec := range snap.Jobs {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("rebuild jobs: stopped after %d of %d: %w", len(s.queue), len(snap.Jobs), err)
		}
		j, err := job.FromCanonicalStored(rec.Canonical, s.cfg.Blobs)
		if err != nil {
			return fmt.Errorf("rebuild job %s: %w", rec.ID, err)
		}
		if j.ID != rec.ID {
			return fmt.Errorf("rebuild job %s: %w: its encoding hashes to %s", rec.ID, ErrConflict, j.ID)
		}
		if err := s.loadKnown(rec, j); err != nil {
			return fmt.Errorf("rebuild job %s: %w", rec.ID, err)
		}
		js := s.newJobState(rec, j)
		s.jobs[rec.ID] = js
		s.queue = append(s.queue, js)
		s.open.add(js)
		s.nextOrder = max(s.nextOrder, rec.Order)
		decided[rec.ID] = &decidedTasks{more: map[int64]bool{}}
		touched[rec.ID] = -1
	}
	// A job's summary stands for its first outcomes, acknowledged:
	// before the outcomes that follow it.
	for i := range snap.Summaries {
		sum := &snap.Summaries[i]
		js := s.jobs[sum.Job]
		switch {
		case js == nil:
			return fmt.Errorf("outcome summary of unknown job %s: %w", sum.Job, ErrConflict)
		case decided[sum.Job].sum != nil:
			return fmt.Errorf("job %s: two outcome summaries: %w", sum.Job, ErrConflict)
		case sum.Upto > js.rec.Acked:
			return fmt.Errorf("job %s: outcome summary up to %d, past its acknowledged %d: %w", sum.Job, sum.Upto, js.rec.Acked, ErrConflict)
		}
		if err := sum.Check(); err != nil {
			return err
		}
		js.seq, js.committed = sum.Upto, sum.Upto
		js.accepted += sum.Accepted
		js.failed += sum.Failed
		decided[sum.Job].sum = sum
		if n := len(sum.Decided); n > 0 {
			touched[sum.Job] = max(touched[sum.Job], sum.Decided[n-1].To-1)
		}
	}
	for _, o := range snap.Outcomes {
		js := s.jobs[o.Job]
		if js == nil {
			return fmt.Errorf("outcome %d of unknown job %s: %w", o.Seq, o.Job, ErrConflict)
		}
		if o.Seq != js.seq+1 {
			return fmt.Errorf("job %s: outcome %d follows %d: %w", o.Job, o.Seq, js.seq, ErrConflict)
		}
		if d := decided[o.Job]; d.sum != nil && d.sum.Has(o.Task) {
			return fmt.Errorf("job %s: outcome %d of task %d, which its summary says is decided: %w", o.Job, o.Seq, o.Task, ErrConflict)
		}
		js.seq, js.committed = o.Seq, o.Seq
		decided[o.Job].more[o.Task] = true
		touched[o.Job] = max(touched[o.Job], o.Task)
		if o.Status == OutcomeOK {
			js.accepted++
		} else {
			js.failed++
		}
		if o.Seq > js.rec.Acked {
			js.outcomes = append(js.outcomes, o.Verified)
		}
	}
	for _, rec := range snap.Replicas {
		js := s.jobs[rec.Job]
		if js == nil {
			return fmt.Errorf("replica %s of unknown job %s: %w", rec.Lease, rec.Job, ErrConflict)
		}
		r := &replica{rec: rec, js: js}
		r.rec.Prev = 0
		inPlay := !decided[rec.Job].has(rec.Task) && (rec.State == ReplicaLeased || rec.State == ReplicaReturned)
		if inPlay || s.archive() == nil { // settled ones are read from the store when asked for
			s.leases[rec.Lease] = r
		}
		touched[rec.Job] = max(touched[rec.Job], rec.Task)
		if decided[rec.Job].has(rec.Task) {
			r.rec.Result, r.rec.Ref = nil, nil
			continue
		}
		switch rec.State {
		case ReplicaLeased:
			ts := js.task(rec.Task)
			r.ts = ts
			if r.counted = !js.ownerOnly(); r.counted {
				s.trust.device(rec.Peer).outstanding++
			}
			ts.live = append(ts.live, r)
			s.nowLive(r)
			s.deadlines.push(deadlineItem{rec.Deadline, r})
		case ReplicaReturned:
			ts := js.task(rec.Task)
			r.ts = ts
			if r.counted = !js.ownerOnly(); r.counted {
				s.trust.device(rec.Peer).outstanding++
			}
			ts.returned = append(ts.returned, r)
		case ReplicaProvisional:
			// Its check window is not known after a restart: it votes,
			// and one more agreeing replica decides its task.
			ts := js.task(rec.Task)
			r.ts = ts
			ts.returned = append(ts.returned, r)
			ts.prov, ts.provMode = r, provOpen
		case ReplicaMachineFailed:
			ts := js.task(rec.Task)
			if len(ts.machine) == 0 {
				js.retrying++
			}
			ts.machine = append(ts.machine, r)
		}
	}
	for _, js := range s.queue {
		js.next = touched[js.rec.ID] + 1
		if !js.rec.Cancelled.IsZero() {
			continue // its undecided tasks were withdrawn: nothing wants replicas
		}
		d := decided[js.rec.ID]
		for i := int64(0); i < js.next; i++ {
			if !d.has(i) {
				js.task(i) // a task whose replicas all ended: it wants replicas again
			}
		}
		for _, ts := range js.active {
			js.update(ts)
		}
	}
	s.ledgerSeq, s.chainHash = snap.LedgerSeq, snap.LedgerHash
	s.workHead = ChainHead{Shard: s.cfg.Shard, Seq: snap.LedgerSeq, Hash: snap.LedgerHash}
	return nil
}

// decidedTasks is a job's decided tasks while restore rebuilds it: those
// of its OutcomeSummary (nil: none) and the others.
type decidedTasks struct {
	sum  *OutcomeSummary
	more map[int64]bool
}

func (d *decidedTasks) has(task int64) bool {
	return d.more[task] || (d.sum != nil && d.sum.Has(task))
}

func (s *Scheduler) newJobState(rec JobRecord, j *job.Job) *jobState {
	pol := j.Manifest.Policy
	maxRep := s.cfg.MaxReplicas
	if maxRep <= 0 {
		maxRep = pol.Redundancy + DefaultExtraReplicas
	}
	maxRep = max(maxRep, pol.Redundancy)
	if rec.KnownAnswers != (job.Digest{}) {
		s.secret[rec.KnownAnswers] = true
	}
	maxTimeouts := s.cfg.MaxTimeouts
	if maxTimeouts <= 0 {
		maxTimeouts = DefaultMaxTimeouts
	}
	if s.open == nil {
		s.open = &openJobs{noBackups: s.cfg.Tail.NoBackups}
	}
	return &jobState{rec: rec, j: j, pol: pol, maxReplicas: maxRep, maxTimeouts: maxTimeouts, tasks: j.NumTasks(), active: map[int64]*taskState{}, ver: j.Manifest.Verify, trust: s.trust, open: s.open, class: ClassOf(j)}
}

// task returns active task i, creating it. A complete job that gets a
// task again (a lost result computed again) is open again.
func (js *jobState) task(i int64) *taskState {
	ts := js.active[i]
	if ts == nil {
		ts = &taskState{index: i}
		ts.live, ts.returned = ts.liveBuf[:0], ts.returnedBuf[:0]
		js.active[i] = ts
		js.touch()
		if !js.inOpen && js.open != nil {
			js.open.add(js)
		}
	}
	return ts
}

// openJobs is the index of the jobs a lease looks at (sched_index.go).
// jobs is every job that is not complete, by JobRecord.Order, and those
// completed since the last lease (refresh and list drop them). A job
// enters it when it is added or loaded, and again when a task of it
// becomes active after it was complete. groups holds the jobs that may
// have work for some device, by class and owner, each group by Order, so
// that a lease looks only at the groups the device may compute; stalls
// holds the jobs endStalled may change, by Order. Every change to what
// these depend on touches the job (jobState.touch), and refresh files
// the touched jobs again before a lease reads them.
type openJobs struct {
	jobs      []*jobState
	dirty     []*jobState
	groups    map[groupKey][]*jobState
	stalls    []*jobState
	visited   int64 // jobs leases looked at (Footprint.Visited)
	noBackups bool  // TailConfig.NoBackups
}

// add puts js in its place by Order unless it is there.
func (o *openJobs) add(js *jobState) {
	if js.inOpen {
		return
	}
	js.inOpen = true
	o.jobs = insertByOrder(o.jobs, js)
	js.touch()
}

// list drops the complete jobs and returns the others, by Order.
func (o *openJobs) list() []*jobState {
	o.jobs = slices.DeleteFunc(o.jobs, func(js *jobState) bool {
		if js.complete() {
			js.inOpen = false
			return true
		}
		return false
	})
	return o.jobs
}

// Serve runs group commit and lease expiry until ctx ends. On
// cancellation it commits what is pending, stops accepting changes
// (ErrStopped) and returns nil. While the store is unavailable
// (ErrStoreUnavailable: locked by another process, disk full) it commits
// the same batch again with backoff, the calls in it wait, Lease refuses
// new work and StoreFault says why; once stopping it tries for 10 s more.
// When a commit fails otherwise it stops too, fails
// the waiting calls, and returns that error: the memory no longer matches
// the store, so the owner must build a new Scheduler from the Store. Serve
// may run once per Scheduler.
func (s *Scheduler) Serve(ctx context.Context) error {
	s.mu.Lock()
	if s.serving || s.stopped != nil {
		s.mu.Unlock()
		return fmt.Errorf("serve: %w: Serve runs once per Scheduler", ErrStopped)
	}
	s.serving = true
	s.mu.Unlock()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	wctx := context.WithoutCancel(ctx) // a commit in progress finishes on shutdown
	// A store that is unavailable (locked, full) is tried again until it
	// takes the batch, and for shutdownRetry more once ctx ends; then the
	// waiting calls fail.
	giveUp, stopRetry := context.WithCancel(wctx)
	defer stopRetry()
	stopAfter := context.AfterFunc(ctx, func() { time.AfterFunc(shutdownRetry, stopRetry) })
	defer stopAfter()
	for {
		select {
		case <-ctx.Done():
			s.mu.Lock()
			s.stopped = ErrStopped
			s.mu.Unlock()
			if err := s.flush(wctx, giveUp.Done()); err != nil {
				return err
			}
			s.log.Info("Scheduler stopped", "pool", s.cfg.Pool)
			return nil
		case <-tick.C:
			s.mu.Lock()
			s.expireDue(s.cfg.Now())
			if s.gainedDue(s.now()) {
				s.changed() // the trust records that only gained, written (trust_store.go)
			}
			s.mu.Unlock()
		case <-s.kick:
			s.gather(ctx)
			if err := s.flush(wctx, giveUp.Done()); err != nil {
				return err
			}
		}
	}
}

// gather waits while a batch fills: until CommitDelay has passed since
// its first change, or no change arrived for a tenth of CommitDelay (the
// callers that were coming have come), or the batch is full, or ctx ends.
// Under load a batch collects up to CommitDelay's worth of changes; a lone
// call waits only the short quiet gap.
func (s *Scheduler) gather(ctx context.Context) {
	window := time.NewTimer(s.cfg.CommitDelay)
	defer window.Stop()
	gap := s.cfg.CommitDelay / 10
	quiet := time.NewTimer(gap)
	defer quiet.Stop()
	for {
		select {
		case <-window.C:
			return
		case <-quiet.C:
			return
		case <-s.full:
			return
		case <-ctx.Done():
			return
		case <-s.kick:
			quiet.Reset(gap)
		}
	}
}

// pending is one group-commit batch in the making, then in flight.
type pending struct {
	b     Batch
	rep   map[string]int // lease → index in b.Replicas
	after []func()       // run under s.mu once committed
	done  chan struct{}  // closed once committed or failed
	// settled are replicas settled in this batch, which leave memory
	// once it is committed (sched_archive.go).
	settled []*replica
	err     error
	// trust and trustOrder are the trust records changed in this batch
	// (trust_store.go); flush encodes them.
	trust      map[trustKey]bool
	trustOrder []trustKey
}

// size counts the records in the batch so far.
func (p *pending) size() int {
	return len(p.b.Peers) + len(p.b.Jobs) + len(p.b.Replicas) + len(p.b.Outcomes) + len(p.b.Acks) + len(p.b.Entries) + len(p.b.Cancels) + len(p.b.Trust)
}

func newPending() *pending {
	return &pending{rep: map[string]int{}, done: make(chan struct{})}
}

// pendingSpare is what the last committed batch leaves for a later one:
// its replicas', outcomes' and entries' slices, emptied, and its map of
// leases, cleared. s.mu guards it.
type pendingSpare struct {
	replicas []ReplicaRecord
	outcomes []OutcomeRecord
	entries  []Entry
	rep      map[string]int
}

// keep takes p's slices and map once p is committed (nothing holds them
// then: the store keeps none of a batch, and the Scheduler reads p's
// records no more), emptied so that they hold no result bytes.
func (sp *pendingSpare) keep(p *pending) {
	clear(p.b.Replicas)
	clear(p.b.Outcomes)
	clear(p.b.Entries)
	clear(p.rep)
	sp.replicas, sp.outcomes, sp.entries, sp.rep = p.b.Replicas[:0], p.b.Outcomes[:0], p.b.Entries[:0], p.rep
}

// newPendingLike returns a new pending batch whose replicas, outcomes
// and entries have room for as many as last held, within
// maxBatchChanges: batches follow each other at much the same size, and
// growing each slice by doubling was a tenth of the scheduler's
// allocations (docs/benchmarks.md). It takes the spare slices and map
// where they have that room, rather than allocate new ones (a fifth of
// the bytes a busy scheduler allocated).
func (sp *pendingSpare) newPendingLike(last *pending) *pending {
	n := func(k int) int { return min(k, maxBatchChanges) }
	p := &pending{done: make(chan struct{})}
	p.b.Replicas = spareOr(&sp.replicas, n(len(last.b.Replicas)))
	p.b.Outcomes = spareOr(&sp.outcomes, n(len(last.b.Outcomes)))
	p.b.Entries = spareOr(&sp.entries, n(len(last.b.Entries)))
	if p.rep, sp.rep = sp.rep, nil; p.rep == nil {
		p.rep = make(map[string]int, n(len(last.rep)))
	}
	return p
}

// spareOr returns *spare when it has room for n, taking it (it is nil
// after), else a new empty slice with room for n.
func spareOr[T any](spare *[]T, n int) []T {
	s := *spare
	*spare = nil
	if s != nil && cap(s) >= n {
		return s
	}
	return make([]T, 0, n)
}

// changed notes that s.pend grew; s.mu is held.
func (s *Scheduler) changed() *pending {
	p := s.pend
	select {
	case s.kick <- struct{}{}:
	default:
	}
	if n := len(p.b.Peers) + len(p.b.Jobs) + len(p.b.Replicas) + len(p.b.Outcomes) + len(p.b.Entries); n >= maxBatchChanges {
		select {
		case s.full <- struct{}{}:
		default:
		}
	}
	return p
}

// flush commits the pending batch, if any; while the store is
// unavailable (ErrStoreUnavailable) it commits the same batch again with
// backoff until it succeeds or giveUp is closed. After a failure every
// later change is refused.
func (s *Scheduler) flush(ctx context.Context, giveUp <-chan struct{}) error {
	s.mu.Lock()
	p := s.pend
	s.encodeTrust(p)
	if p.b.Empty() && len(p.after) == 0 {
		s.mu.Unlock()
		return nil
	}
	s.pend = s.spare.newPendingLike(p)
	s.mu.Unlock()
	// Chain and sign the new ledger entries here, in Seq order, outside
	// s.mu, with one signature over the head of the batch's Merkle tree
	// (SignBatch): signing was the costliest step of deciding a task, and
	// flush runs on one goroutine only.
	s.chainHash = p.b.Sign(s.chainHash, s.cfg.Key.Sign)
	began := time.Now()
	err := s.commit(ctx, giveUp, &p.b)
	took := time.Since(began)
	s.mu.Lock()
	if err != nil {
		s.stopped = fmt.Errorf("%w: commit failed: %w", ErrStopped, err)
		p.err = s.stopped
		// The next batch was built on state that will never be committed.
		q := s.pend
		q.err = s.stopped
		s.pend = newPending()
		s.mu.Unlock()
		close(p.done)
		close(q.done)
		s.log.Error("Commit failed; scheduler stopped", "pool", s.cfg.Pool, "err", err)
		return s.stopped
	}
	s.commits.Commits++
	s.commits.Time += took
	s.commits.Replicas += uint64(len(p.b.Replicas))
	s.commits.Outcomes += uint64(len(p.b.Outcomes))
	s.commits.Entries += uint64(len(p.b.Entries))
	s.recent.add(p.b.Entries, s.chainHash)
	s.noteWorkHead(p.b.Entries)
	for _, e := range p.b.Entries {
		s.kinds[e.Kind]++
	}
	for _, f := range p.after {
		f()
	}
	s.forget(p)
	s.signalCommit()
	s.spare.keep(p)
	s.mu.Unlock()
	p.b, p.rep, p.after = Batch{}, nil, nil // the records may hold result bytes
	close(p.done)
	return nil
}

// Backoff of commits while the store is unavailable, and how long it is
// still tried once Serve is stopping.
const (
	commitRetryMin = 50 * time.Millisecond
	commitRetryMax = 5 * time.Second
	shutdownRetry  = 10 * time.Second
)

// commit commits b, again and again while the store answers
// ErrStoreUnavailable (nothing applied), with backoff, until it succeeds,
// fails otherwise, or giveUp is closed. Meanwhile s.fault says why, for
// StoreFault and to refuse new leases.
func (s *Scheduler) commit(ctx context.Context, giveUp <-chan struct{}, b *Batch) error {
	wait := commitRetryMin
	var warned time.Time
	for tries := 1; ; tries++ {
		err := s.store.Commit(ctx, b)
		if err == nil || !errors.Is(err, ErrStoreUnavailable) {
			s.mu.Lock()
			since := s.faultAt
			if s.fault != nil && err == nil {
				s.log.Info("Store available again; batch committed", "pool", s.cfg.Pool, "tries", tries, "after", time.Since(since).Round(time.Millisecond))
			}
			s.fault, s.faultAt = nil, time.Time{}
			s.mu.Unlock()
			return err
		}
		s.mu.Lock()
		if s.fault == nil {
			s.faultAt = time.Now()
		}
		s.fault = err
		s.mu.Unlock()
		if time.Since(warned) >= time.Minute {
			warned = time.Now()
			s.log.Warn("Store unavailable; keeping the batch and trying again, new leases refused meanwhile",
				"pool", s.cfg.Pool, "err", err, "tries", tries)
		}
		t := time.NewTimer(wait)
		select {
		case <-giveUp:
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(2*wait, commitRetryMax)
	}
}

// StoreFault reports why the store does not take commits now (an error
// wrapping ErrStoreUnavailable, e.g. a locked database or a full disk)
// and since when; a nil error when it does. Calls that change state wait
// meanwhile, and Lease refuses.
func (s *Scheduler) StoreFault() (since time.Time, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faultAt, s.fault
}

// wait returns once p is committed (its error) or ctx ends.
func wait(ctx context.Context, p *pending) error {
	if p == nil {
		return nil
	}
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		return fmt.Errorf("wait for commit: %w", ctx.Err())
	}
}

// putReplica records r's new state in the pending batch; s.mu is held.
func (s *Scheduler) putReplica(r *replica) {
	p := s.pend
	rec := r.rec
	if r.rec.State != ReplicaReturned {
		rec.Result = nil
	}
	if i, ok := p.rep[rec.Lease]; ok {
		r.rec.Version++
		rec.Version, rec.Prev = r.rec.Version, p.b.Replicas[i].Prev
		p.b.Replicas[i] = rec
	} else {
		rec.Prev = r.rec.Version
		r.rec.Version++
		rec.Version = r.rec.Version
		p.rep[rec.Lease] = len(p.b.Replicas)
		p.b.Replicas = append(p.b.Replicas, rec)
	}
	r.batch = s.changed()
	s.settle(r)
}

// debug reports whether the logger writes debug records: the hot
// paths' debug records format digests as hex, a string each, so they
// are built only then.
func (s *Scheduler) debug() bool { return s.log.Enabled(context.Background(), slog.LevelDebug) }

// now returns the clock in whole milliseconds, as the stores keep times.
func (s *Scheduler) now() time.Time { return time.UnixMilli(s.cfg.Now().UnixMilli()) }

// RegisterPeer registers p (or, for a peer already registered with the
// same keys, updates its Name) and returns once that is committed. p.ID
// must be identity.IDOf(p.Key), p.Owner identity.IDOf(p.OwnerKey), and
// p.Endorsement the owner key's signature over EndorsementMessage(p.Key);
// otherwise ErrBadRequest. A known ID with other keys is ErrConflict. A
// zero Joined is set to now.
func (s *Scheduler) RegisterPeer(ctx context.Context, p Peer) error {
	if len(p.Key) != ed25519.PublicKeySize || len(p.OwnerKey) != ed25519.PublicKeySize ||
		identity.IDOf(p.Key) != p.ID || identity.IDOf(p.OwnerKey) != p.Owner {
		return fmt.Errorf("register peer %q: %w: the IDs must be those of the keys", p.ID, ErrBadRequest)
	}
	if err := identity.Verify(p.OwnerKey, EndorsementMessage(p.Key), p.Endorsement); err != nil {
		return fmt.Errorf("register peer %s: %w: endorsement: %w", p.ID, ErrBadRequest, err)
	}
	s.mu.Lock()
	if s.stopped != nil {
		s.mu.Unlock()
		return fmt.Errorf("register peer %s: %w", p.ID, s.stopped)
	}
	old, ok := s.peers[p.ID]
	var w *pending
	switch {
	case ok && (!bytes.Equal(old.Key, p.Key) || !bytes.Equal(old.OwnerKey, p.OwnerKey)):
		s.mu.Unlock()
		return fmt.Errorf("register peer %s: %w: registered with other keys", p.ID, ErrConflict)
	case ok && old.Name == p.Name:
		w = s.peerBatch[p.ID] // an earlier registration may still be committing
	default:
		if ok {
			p.Joined, p.Endorsement = old.Joined, old.Endorsement
		} else if p.Joined.IsZero() {
			p.Joined = s.now()
		}
		p.Joined = time.UnixMilli(p.Joined.UnixMilli())
		s.peers[p.ID] = p
		s.pend.b.Peers = append(s.pend.b.Peers, p)
		w = s.changed()
		s.peerBatch[p.ID] = w
		s.log.Info("Peer registered", "peer", p.ID, "owner", p.Owner, "name", p.Name)
	}
	s.mu.Unlock()
	return wait(ctx, w)
}

// Peer returns the registered peer with ID id.
func (s *Scheduler) Peer(id string) (Peer, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.peers[id]
	return p, ok
}

// AddJob adds j to the pool's queue on behalf of the registered peer
// submitter, who becomes the job's merger; the job's owner is that peer's
// owner. It returns created == false (and nil) for a job already in the
// pool, after that job is committed. The coordinator must hold j's program
// and inputs where cfg.Blobs says, to rebuild the job after a restart,
// and its known answers there too when j has some (job.Job.KnownAnswers:
// they are kept with the job and checked against, never shown to peers;
// a job already in the pool keeps the answers it came with).
// Errors: ErrUnknownPeer, ErrBadRequest (a policy the scheduler cannot
// follow), ErrStopped.
func (s *Scheduler) AddJob(ctx context.Context, j *job.Job, submitter string) (created bool, err error) {
	pol := j.Manifest.Policy
	switch {
	case pol.Quorum < 1 || pol.Redundancy < pol.Quorum:
		return false, fmt.Errorf("add job %s: %w: quorum %d, redundancy %d", j.ID, ErrBadRequest, pol.Quorum, pol.Redundancy)
	case pol.LeaseTimeout.Duration <= 0:
		return false, fmt.Errorf("add job %s: %w: lease timeout %s", j.ID, ErrBadRequest, pol.LeaseTimeout.Duration)
	case pol.Participants != "open" && pol.Participants != "invite" && pol.Participants != "owner":
		return false, fmt.Errorf("add job %s: %w: participants %q", j.ID, ErrBadRequest, pol.Participants)
	case j.NumTasks() < 1:
		return false, fmt.Errorf("add job %s: %w: no tasks", j.ID, ErrBadRequest)
	}
	s.mu.Lock()
	if s.stopped != nil {
		s.mu.Unlock()
		return false, fmt.Errorf("add job %s: %w", j.ID, s.stopped)
	}
	peer, ok := s.peers[submitter]
	if !ok {
		s.mu.Unlock()
		return false, fmt.Errorf("add job %s: %w: %s", j.ID, ErrUnknownPeer, submitter)
	}
	if js, ok := s.jobs[j.ID]; ok {
		w := js.batch
		s.mu.Unlock()
		if !js.rec.Cancelled.IsZero() {
			return false, fmt.Errorf("add job %s: %w at %s: a cancelled job is not queued again (a changed manifest is a new job)",
				j.ID, ErrJobCancelled, js.rec.Cancelled.UTC().Format(time.RFC3339))
		}
		return false, wait(ctx, w)
	}
	s.nextOrder++
	rec := JobRecord{ID: j.ID, Canonical: j.Canonical, Owner: peer.Owner, Merger: submitter, Order: s.nextOrder, Added: s.now()}
	if j.HasKnownAnswers() {
		rec.KnownAnswers = j.KnownAnswers.SHA256
		if f := s.cfg.OnSecret; f != nil {
			d := rec.KnownAnswers
			s.pend.after = append(s.pend.after, func() { f(d) })
		}
	}
	js := s.newJobState(rec, j)
	s.jobs[j.ID] = js
	s.queue = append(s.queue, js)
	s.open.add(js)
	s.pend.b.Jobs = append(s.pend.b.Jobs, rec)
	js.batch = s.changed()
	w := js.batch
	s.mu.Unlock()
	s.log.Info("Job added", "job", j.ID.String(), "name", j.Manifest.Name, "tasks", j.NumTasks(),
		"owner", peer.Owner, "merger", submitter, "participants", pol.Participants)
	return true, wait(ctx, w)
}

// Status returns job id's progress (ErrUnknownJob if absent). Counts
// include changes still being committed.
func (s *Scheduler) Status(id job.ID) (JobStatus, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	js, ok := s.jobs[id]
	if !ok {
		return JobStatus{}, fmt.Errorf("status of job %s: %w", id, ErrUnknownJob)
	}
	return s.statusOf(js), nil
}

// Seeking returns the jobs that still have tasks without an outcome and
// are not cancelled, oldest first: the jobs a pool lists as seeking
// compute. The *job.Job
// values are shared and must not be changed.
func (s *Scheduler) Seeking() []JobView {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []JobView
	for _, js := range s.openJobs() {
		if !js.complete() && js.rec.Cancelled.IsZero() {
			out = append(out, JobView{Job: js.j, Status: js.counts()})
		}
	}
	return out
}

// Queued returns how many tasks wait to be leased now, over the open
// jobs that are not cancelled: tasks never leased, and tasks that want
// another replica. It is a figure for choosing among shards where to ask
// for work (a task counted may still not suit a given device: its job's
// policy, its owner, its offer). It costs one pass over the open jobs.
func (s *Scheduler) Queued() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, js := range s.openJobs() {
		if js.rec.Cancelled.IsZero() {
			n += js.tasks - js.next + int64(len(js.want))
		}
	}
	return n
}

// Jobs returns every job's progress, oldest first.
func (s *Scheduler) Jobs() []JobStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]JobStatus, 0, len(s.queue))
	for _, js := range s.queue {
		out = append(out, s.statusOf(js))
	}
	return out
}

// counts is the job's status without the fields that walk its
// undecided tasks (Waiting, Recomputing, TimingOut, TimeoutDevices,
// Trouble and Timeouts are zero): what matchmaking and listings read,
// at every lease, in time independent of the tasks in flight.
func (js *jobState) counts() JobStatus {
	return JobStatus{
		Job: js.rec.ID, Name: js.j.Manifest.Name, Owner: js.rec.Owner, Merger: js.rec.Merger,
		Tasks: js.tasks, Accepted: js.accepted, Failed: js.failed, Leased: js.leased, Acked: js.rec.Acked,
		Complete: js.accepted+js.failed == js.tasks, Cancelled: !js.rec.Cancelled.IsZero(), Quorum: js.pol.Quorum, Redundancy: js.pol.Redundancy,
		Retrying: js.retrying,
	}
}

// status is the job's whole status: counts, and what a walk of its
// undecided tasks finds.
func (js *jobState) status() JobStatus {
	var waiting, recomputing, timingOut int64
	var timeoutDevices map[string]bool
	for _, ts := range js.active {
		switch {
		case ts.refetch != nil:
			recomputing++
		case len(ts.returned) > 0:
			waiting++
		}
		if js.retrying == 0 {
			continue // no task has machine-dependent failures
		}
		counted := false
		for _, r := range ts.machine {
			if reasonCause(r.rec.Reason) != causeTimedOut {
				continue
			}
			if !counted {
				timingOut++
				counted = true
			}
			if timeoutDevices == nil {
				timeoutDevices = map[string]bool{}
			}
			timeoutDevices[r.rec.Peer] = true
		}
	}
	st := js.counts()
	st.Waiting, st.Recomputing, st.Trouble = waiting, recomputing, js.troubles()
	st.TimingOut, st.TimeoutDevices, st.Timeouts = timingOut, len(timeoutDevices), js.timeoutWords(timingOut, len(timeoutDevices))
	return st
}

// timeoutWords says, for people, that n undecided tasks are timing out
// on devs devices, and when such a task ends; "" when n is 0.
func (js *jobState) timeoutWords(n int64, devs int) string {
	if n == 0 {
		return ""
	}
	each := "each ran"
	if n == 1 {
		each = "it ran"
	}
	return fmt.Sprintf("%s timing out: %s past the %s time limit, on %s in all; a task ends failed (unverified) once it timed out on %d devices or failed %d times",
		plural(int(n), "task"), each, limitWords(js.pol.TimeLimit.Duration), plural(devs, "device"), js.maxTimeouts, js.maxReplicas)
}

// troubles is JobStatus.Trouble before the connected devices are
// considered: machine-dependent failures first, then stalled tasks.
func (js *jobState) troubles() string {
	if t := js.trouble(); t != "" {
		return t
	}
	return js.stallText()
}

// trouble describes the undecided task with the most machine-dependent
// failures (the lowest index among equals), or "" when there is none.
// It scans the active tasks only when some have such failures.
func (js *jobState) trouble() string {
	if js.retrying == 0 {
		return ""
	}
	var worst *taskState
	for _, ts := range js.active {
		if n := len(ts.machine); n > 0 && (worst == nil || n > len(worst.machine) || n == len(worst.machine) && ts.index < worst.index) {
			worst = ts
		}
	}
	if worst == nil {
		return ""
	}
	devices := map[string]bool{}
	cause := ""
	for _, r := range worst.machine {
		devices[r.rec.Peer] = true
		c := reasonCause(r.rec.Reason)
		if cause != "" && c != cause || c == "" {
			c = "did not finish"
		}
		cause = c
	}
	times := ""
	if n := len(worst.machine); n != len(devices) {
		times = fmt.Sprintf(" %d times", n)
	}
	orDevices := ""
	if cause == causeTimedOut && js.maxTimeouts < js.maxReplicas {
		orDevices = fmt.Sprintf(" or once it timed out on %d devices", js.maxTimeouts)
	}
	return fmt.Sprintf("task %d %s%s on %s; it ends unverified at %d such failures%s",
		worst.index, cause, times, plural(len(devices), "device"), js.maxReplicas, orDevices)
}

// plural says "1 device", "2 devices".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

func (js *jobState) complete() bool { return js.next == js.tasks && len(js.active) == 0 }

// openJobs returns the jobs that are not complete, in queue order.
// Everything a lease does with a job first asks whether it is complete,
// so leaving complete jobs out changes no choice. s.mu is held.
func (s *Scheduler) openJobs() []*jobState {
	if s.open == nil {
		return nil
	}
	return s.open.list()
}

// CommitCounts counts a Scheduler's group commits since it started:
// each batch of changes (Batch) its store committed, and what the
// batches held. Divided by one another, the counters give a commit's
// mean time and size; set beside the tasks decided, the commits per
// task.
type CommitCounts struct {
	// Commits is the batches committed.
	Commits uint64
	// Time is the time the committed batches took in Store.Commit, the
	// tries that found the store unavailable and their backoff included.
	Time time.Duration
	// Replicas, Outcomes and Entries are the replica records, task
	// outcomes and ledger entries the batches held: a replica changed
	// twice in one batch counts once, one changed in two batches twice.
	Replicas, Outcomes, Entries uint64
}

// CommitCounts returns the group commits so far (CommitCounts): counted
// in memory as batches commit, from zero when the Scheduler starts.
func (s *Scheduler) CommitCounts() CommitCounts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.commits
}

// LedgerCounts returns how many committed ledger entries there are of
// each kind (KindReceipt, KindDeviation, KindUnverified): what Ledger
// would return, counted from the store once by NewScheduler and then as
// batches commit, so that asking costs the same whatever the traffic.
// The map is the caller's.
func (s *Scheduler) LedgerCounts() map[string]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.kinds)
}

// countEntries counts store's committed ledger entries by kind: at once
// where it is an EntryCounter, else page by page.
func countEntries(ctx context.Context, store Store) (map[string]uint64, error) {
	if c, ok := store.(EntryCounter); ok {
		n, err := c.CountEntries(ctx)
		if n == nil {
			n = map[string]uint64{}
		}
		return n, err
	}
	n := map[string]uint64{}
	for after := uint64(0); ; {
		page, err := store.Entries(ctx, EntryQuery{After: after, Max: maxPageSize})
		if err != nil {
			return nil, err
		}
		for _, e := range page {
			n[e.Kind]++
			after = e.Seq
		}
		if len(page) < maxPageSize {
			return n, nil
		}
	}
}

// Ledger returns committed ledger entries with Seq > after, in Seq order,
// at most max (capped at 10,000).
func (s *Scheduler) Ledger(after uint64, max int) ([]Entry, error) {
	return s.entries(EntryQuery{After: after, Max: max})
}

// PeerLedger returns the committed ledger entries naming peer (receipts,
// deviations and unverified marks of its replicas) with Seq > after, in
// Seq order, at most max (capped at 10,000). ErrUnknownPeer if peer is not
// registered.
func (s *Scheduler) PeerLedger(peer string, after uint64, max int) ([]Entry, error) {
	if _, ok := s.Peer(peer); !ok {
		return nil, fmt.Errorf("ledger of peer %s: %w", peer, ErrUnknownPeer)
	}
	if max <= 0 {
		return nil, nil
	}
	if es, ok := s.recent.peer(peer, after, min(max, maxPageSize)); ok {
		return es, nil
	}
	return s.entries(EntryQuery{After: after, Max: max, Peer: peer})
}

func (s *Scheduler) entries(q EntryQuery) ([]Entry, error) {
	if q.Max <= 0 {
		return nil, nil
	}
	q.Max = min(q.Max, maxPageSize)
	es, err := s.store.Entries(context.Background(), q)
	if err != nil {
		return nil, fmt.Errorf("read ledger: %w", err)
	}
	return es, nil
}

// PublicKey returns the coordinator's public key, which checks every
// ledger entry (VerifyEntry, VerifyLedger).
func (s *Scheduler) PublicKey() ed25519.PublicKey { return s.cfg.Key.Public() }

// deadlineHeap orders live leases by deadline. Heartbeats push a new item
// instead of fixing the old one; stale items are skipped when popped.
// It is a binary min-heap, the algorithm of container/heap (the same
// order of pops), typed so that a push boxes no item: container/heap's
// Push takes an any, one allocation a lease.
type deadlineItem struct {
	at time.Time
	r  *replica
}

type deadlineHeap []deadlineItem

// push adds it.
func (h *deadlineHeap) push(it deadlineItem) {
	*h = append(*h, it)
	h.up(len(*h) - 1)
}

// pop removes and returns the item of the earliest deadline; h is not
// empty.
func (h *deadlineHeap) pop() deadlineItem {
	n := len(*h) - 1
	(*h)[0], (*h)[n] = (*h)[n], (*h)[0]
	h.down(0, n)
	it := (*h)[n]
	(*h)[n] = deadlineItem{} // the popped replica is not kept alive by the array
	*h = (*h)[:n]
	return it
}

// init makes h a heap, in any order before.
func (h deadlineHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i, len(h))
	}
}

func (h deadlineHeap) up(j int) {
	for {
		i := (j - 1) / 2 // parent
		if i == j || !h[j].at.Before(h[i].at) {
			break
		}
		h[i], h[j] = h[j], h[i]
		j = i
	}
}

func (h deadlineHeap) down(i, n int) {
	for {
		j1 := 2*i + 1
		if j1 >= n || j1 < 0 { // j1 < 0 after int overflow
			break
		}
		j := j1 // left child
		if j2 := j1 + 1; j2 < n && h[j2].at.Before(h[j1].at) {
			j = j2 // right child
		}
		if !h[j].at.Before(h[i].at) {
			break
		}
		h[i], h[j] = h[j], h[i]
		i = j
	}
}

// expireDue expires every live lease whose deadline is not after now;
// s.mu is held.
func (s *Scheduler) expireDue(now time.Time) {
	for len(s.deadlines) > 0 && !s.deadlines[0].at.After(now) {
		it := s.deadlines.pop()
		r := it.r
		if r.rec.State != ReplicaLeased || !r.rec.Deadline.Equal(it.at) {
			continue // stale: heartbeated, returned or ended since
		}
		s.endLease(r, ReplicaExpired)
		s.log.Info("Lease expired", "lease", r.rec.Lease, "job", r.rec.Job.String(), "task", r.rec.Task, "peer", r.rec.Peer)
	}
}

// endLease ends live replica r without a submission (expired, released);
// its task wants a replica again. s.mu is held.
func (s *Scheduler) endLease(r *replica, state string) {
	ts, js := r.ts, r.js
	ts.live = removeReplica(ts.live, r)
	s.notLive(r)
	r.rec.State, r.ts = state, nil
	s.leaseEnded(r, state)
	s.unclaim(r)
	ts.unsingle()
	s.putReplica(r)
	js.update(ts)
}

func removeReplica(rs []*replica, r *replica) []*replica {
	for i, x := range rs {
		if x == r {
			return append(rs[:i], rs[i+1:]...)
		}
	}
	return rs
}

// update keeps ts's place in js.want in step with what it needs.
func (js *jobState) update(ts *taskState) {
	w := js.wants(ts) > 0
	if w == ts.wanting {
		return
	}
	ts.wanting = w
	i := sort.Search(len(js.want), func(k int) bool { return js.want[k] >= ts.index })
	if w {
		js.want = append(js.want, 0)
		copy(js.want[i+1:], js.want[i:])
		js.want[i] = ts.index
	} else if i < len(js.want) && js.want[i] == ts.index {
		js.want = append(js.want[:i], js.want[i+1:]...)
	}
	js.touch()
}
