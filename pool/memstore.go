package pool

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"

	"idlepool/job"
)

// MemStore is an in-memory Store for tests and benchmarks. It behaves like
// the SQLite store of package store: a Commit applies all of a batch or
// nothing (every compare-and-set is checked before anything changes),
// records are copied in and out so nothing aliases the caller's memory,
// and a new Scheduler on the same MemStore sees everything committed, as
// after a restart. It is not durable across processes.
//
// FailNext makes the next Commit fail, for tests of failure handling.
// MemStore is safe for concurrent use.
type MemStore struct {
	mu       sync.Mutex
	peers    map[string]Peer
	peerSeq  []string
	jobs     map[job.ID]*JobRecord
	jobSeq   []job.ID
	replicas map[string]*ReplicaRecord
	repSeq   []string
	outcomes map[job.ID][]OutcomeRecord
	// outcomeSeqs indexes outcomes by (job, Seq); outcomeTasks gives
	// the Seq of the outcome of (job, Task). outcomes[j] and these hold
	// a job's outcomes after those folded into sums[j] (ForgetAcked,
	// memstore_outcomes.go); toSum names the jobs acknowledged since
	// the last ForgetAcked.
	outcomeSeqs  map[key]bool
	outcomeTasks map[key]int64
	sums         map[job.ID]*OutcomeSummary
	toSum        map[job.ID]bool
	// ledger holds the entries after ledgerBase (Seq ledgerBase+1 on),
	// byPeer each peer's Seqs among them; those up to ledgerBase were
	// forgotten (memstore_ledger.go). kinds counts every entry ever
	// committed by kind, forgotten ones included.
	ledger     entryLog
	ledgerBase uint64
	byPeer     map[string][]uint64
	kinds      map[string]uint64
	head       job.Digest
	trust      map[trustKey]TrustRecord
	trustSeq   []trustKey
	failNext   error
	commits    int
	// settledOpen holds the settled replicas of tasks without an
	// outcome, by task; unacked those of tasks whose outcome the merger
	// has not acknowledged, by outcome (job, Seq); done the replicas
	// that are done and not forgotten, in the order they became done,
	// after doneBase forgotten ones (memstore_done.go).
	settledOpen map[key][]string
	unacked     map[key][]string
	done        []string
	doneBase    int
	// known is what check found of the batch it checked last, for
	// apply: known[i] says b.Replicas[i]'s lease was stored before or
	// is earlier in the batch, repeated that a lease is in it twice
	// (never in the Scheduler's batches, which hold a lease's last
	// change only).
	known    []bool
	repeated bool
	// stored[i] is the record m held for b.Replicas[i]'s lease when
	// check ran (nil for a new lease, or one earlier in the batch): apply
	// changes it in place while the replica is in play, and shares its
	// copies of the result and work where the new record's are equal
	// (m never changes those bytes, nor a settled record, in place).
	stored []*ReplicaRecord
	// nextHead is the hash of the last entry of that batch, the
	// ledger's head once apply applies it: check has it (from the
	// batch's leaves, or hashing each entry), so apply does not hash
	// it again.
	nextHead job.Digest
	// applied holds the records apply stored, for noteDone. They spare a
	// lookup each in m.replicas, a map of every replica not yet
	// forgotten, whose lookups missed the processor's caches: 7% of a
	// busy JetStream node's CPU went to them.
	applied []*ReplicaRecord
}

var _ Store = (*MemStore)(nil)

type trustKey struct{ kind, id string }

type key struct {
	job job.ID
	n   int64
}

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore {
	return &MemStore{
		peers: map[string]Peer{}, jobs: map[job.ID]*JobRecord{}, replicas: map[string]*ReplicaRecord{},
		outcomes: map[job.ID][]OutcomeRecord{}, byPeer: map[string][]uint64{}, kinds: map[string]uint64{},
		outcomeSeqs: map[key]bool{}, outcomeTasks: map[key]int64{}, trust: map[trustKey]TrustRecord{},
	}
}

// FailNext makes the next Commit return err (wrapped) and change nothing.
func (m *MemStore) FailNext(err error) {
	m.mu.Lock()
	m.failNext = err
	m.mu.Unlock()
}

// Commits returns how many batches were committed.
func (m *MemStore) Commits() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.commits
}

func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return bytes.Clone(b)
}

// cloneReplica returns r with its result, reference and work copied.
func cloneReplica(r ReplicaRecord) ReplicaRecord {
	ownReplica(&r)
	return r
}

// ownReplica gives r copies of its result, reference and work of its
// own, as cloneReplica does, in place.
func ownReplica(r *ReplicaRecord) { ownReplicaLike(r, nil) }

// ownReplicaLike is ownReplica where old, when not nil, is a record the
// store keeps, whose result and work bytes it never changes (apply may
// change old itself, by replacing its fields, while the replica is in
// play): r takes old's result and work where they are equal to its own
// rather than new copies (a replica's result and work are the same in
// its returned and its settled record).
func ownReplicaLike(r, old *ReplicaRecord) {
	if old != nil && r.Result != nil && old.Result != nil && bytes.Equal(r.Result, old.Result) {
		r.Result = old.Result
	} else {
		r.Result = cloneBytes(r.Result)
	}
	if old != nil && r.Work != nil && old.Work != nil && *r.Work == *old.Work {
		r.Work = old.Work
	} else {
		r.Work = cloneWork(r.Work)
	}
	r.Ref = cloneManifest(r.Ref)
}

// cloneOutcome returns o with its result, reference and holders copied.
func cloneOutcome(o OutcomeRecord) OutcomeRecord {
	ownOutcome(&o)
	return o
}

// ownOutcome gives o copies of its result, reference and holders of its
// own, as cloneOutcome does, in place.
func ownOutcome(o *OutcomeRecord) {
	o.Result, o.Ref, o.Holders = cloneBytes(o.Result), cloneManifest(o.Ref), slices.Clone(o.Holders)
}

func clonePeer(p Peer) Peer {
	p.Key, p.OwnerKey, p.Endorsement = cloneBytes(p.Key), cloneBytes(p.OwnerKey), cloneBytes(p.Endorsement)
	return p
}

// Commit applies b atomically (see Store).
func (m *MemStore) Commit(ctx context.Context, b *Batch) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.failNext; err != nil {
		m.failNext = nil
		return fmt.Errorf("commit: %w", err)
	}
	if err := m.check(b); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	m.apply(b)
	return nil
}

// CommitThen is Commit with a durable step between the check and the
// change: it checks every compare-and-set of b (an error wrapping
// ErrConflict when one does not hold, as Commit), then calls durable, and
// applies b only when durable returns nil; durable's error is returned
// as it is and nothing changes. The lock is held throughout, so durable
// sees the state b was checked against. A clustered Store keeps its
// materialized state in a MemStore and writes b to its replicated log in
// durable.
func (m *MemStore) CommitThen(ctx context.Context, b *Batch, durable func() error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(b); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	if err := durable(); err != nil {
		return err
	}
	m.apply(b)
	return nil
}

// apply changes the state by b, which check accepted; m.mu is held.
func (m *MemStore) apply(b *Batch) {
	for _, p := range b.Peers {
		if _, ok := m.peers[p.ID]; !ok {
			m.peerSeq = append(m.peerSeq, p.ID)
			m.peers[p.ID] = clonePeer(p)
		} else {
			old := m.peers[p.ID]
			old.Name = p.Name
			m.peers[p.ID] = old
		}
	}
	for _, j := range b.Jobs {
		j.Canonical = cloneBytes(j.Canonical)
		m.jobs[j.ID] = &j
		m.jobSeq = append(m.jobSeq, j.ID)
	}
	for i := range b.Replicas {
		// A replica in play changes in place: no one outside m holds
		// its record (DoneRecords hands out settled ones only, every
		// other reader copies under m.mu), so the map's entry stays as
		// it is. A new or settled one gets a record of its own, on the
		// heap where the map keeps it. Results and work, which images
		// may share, are replaced, never changed.
		old, r := m.stored[i], m.stored[i]
		if r == nil || settledState(r.State) {
			r = new(ReplicaRecord)
		}
		rec := b.Replicas[i]
		ownReplicaLike(&rec, old)
		rec.Prev = 0
		*r = rec
		if r != old {
			if !m.known[i] {
				m.repSeq = append(m.repSeq, r.Lease)
			}
			m.replicas[r.Lease] = r
		}
		m.applied = append(m.applied, r)
	}
	for i := range b.Outcomes {
		id := b.Outcomes[i].Job
		os := append(m.outcomes[id], b.Outcomes[i]) // copied once, into the job's slice
		o := &os[len(os)-1]
		ownOutcome(o)
		m.outcomes[id] = os
		m.outcomeSeqs[key{o.Job, o.Seq}], m.outcomeTasks[key{o.Job, o.Task}] = true, o.Seq
	}
	for _, a := range b.Acks {
		m.jobs[a.Job].Acked = a.Upto
		base := m.outcomeBase(a.Job)
		os := m.outcomes[a.Job] // in Seq order from base+1: outcome Seq s is at s-base-1
		for i := max(a.Prev, base); i < a.Upto && i-base < int64(len(os)); i++ {
			os[i-base].Result, os[i-base].Ref, os[i-base].Holders = nil, nil, nil
		}
		if m.toSum == nil {
			m.toSum = map[job.ID]bool{}
		}
		m.toSum[a.Job] = true
	}
	for _, c := range b.Cancels {
		m.jobs[c.Job].Cancelled = c.At
	}
	for _, t := range b.Trust {
		k := trustKey{t.Kind, t.ID}
		if _, ok := m.trust[k]; !ok {
			m.trustSeq = append(m.trustSeq, k)
		}
		t.Record, t.Prev = cloneBytes(t.Record), 0
		m.trust[k] = t
	}
	var sig, sigCopy []byte // a signed batch's entries share its signature: one copy
	for _, e := range b.Entries {
		if sigCopy == nil || !bytes.Equal(e.Sig, sig) {
			sig, sigCopy = e.Sig, cloneBytes(e.Sig)
		}
		e.Sig = sigCopy
		m.byPeer[e.Peer] = append(m.byPeer[e.Peer], e.Seq)
		m.ledger.push(e)
		m.kinds[e.Kind]++
	}
	if len(b.Entries) > 0 {
		m.head = m.nextHead // check chained the entries and kept the last one's hash
	}
	m.noteDone(b)
	m.commits++
}

// check verifies every compare-and-set of b against the current state and
// the batch's own earlier records, changing nothing; m.mu is held.
func (m *MemStore) check(b *Batch) error {
	peers := map[string]Peer{}
	for _, p := range b.Peers {
		old, ok := peers[p.ID]
		if !ok {
			old, ok = m.peers[p.ID]
		}
		if ok && (!bytes.Equal(old.Key, p.Key) || !bytes.Equal(old.OwnerKey, p.OwnerKey)) {
			return fmt.Errorf("%w: peer %s is registered with other keys", ErrConflict, p.ID)
		}
		peers[p.ID] = p
	}
	jobs := map[job.ID]int64{}
	orders := map[int64]bool{}
	if len(b.Jobs) > 0 { // a batch without jobs need not walk every job
		for _, j := range m.jobs {
			orders[j.Order] = true
		}
	}
	for _, j := range b.Jobs {
		if _, ok := m.jobs[j.ID]; ok || orders[j.Order] {
			return fmt.Errorf("%w: job %s or order %d exists", ErrConflict, j.ID, j.Order)
		}
		if _, ok := jobs[j.ID]; ok {
			return fmt.Errorf("%w: job %s twice in a batch", ErrConflict, j.ID)
		}
		orders[j.Order] = true
		jobs[j.ID] = j.Acked
	}
	versions := make(map[string]int64, len(b.Replicas))
	clear(m.stored)
	m.known, m.stored, m.repeated = m.known[:0], m.stored[:0], false
	for i := range b.Replicas {
		r := &b.Replicas[i]
		v, ok := versions[r.Lease]
		known := ok
		var stored *ReplicaRecord
		if ok {
			m.repeated = true
		} else if old, in := m.replicas[r.Lease]; in {
			v, known, stored = old.Version, true, old
		}
		m.known, m.stored = append(m.known, known), append(m.stored, stored)
		if r.Prev != v {
			return fmt.Errorf("%w: replica %s is at version %d, not %d", ErrConflict, r.Lease, v, r.Prev)
		}
		if _, ok := m.jobs[r.Job]; !ok {
			if _, ok := jobs[r.Job]; !ok {
				return fmt.Errorf("%w: replica %s of unknown job %s", ErrConflict, r.Lease, r.Job)
			}
		}
		versions[r.Lease] = r.Version
	}
	seqs, tasks := make(map[key]bool, len(b.Outcomes)), make(map[key]bool, len(b.Outcomes))
	for i := range b.Outcomes {
		o := &b.Outcomes[i]
		if _, ok := m.jobs[o.Job]; !ok {
			if _, ok := jobs[o.Job]; !ok {
				return fmt.Errorf("%w: outcome of unknown job %s", ErrConflict, o.Job)
			}
		}
		k, kt := key{o.Job, o.Seq}, key{o.Job, o.Task}
		if seqs[k] || tasks[kt] || m.outcomeSeqs[k] || o.Seq <= m.outcomeBase(o.Job) || m.decidedSeq(o.Job, o.Task) != 0 {
			return fmt.Errorf("%w: job %s already has outcome %d or an outcome for task %d", ErrConflict, o.Job, o.Seq, o.Task)
		}
		seqs[key{o.Job, o.Seq}], tasks[key{o.Job, o.Task}] = true, true
	}
	acked := map[job.ID]int64{}
	for _, a := range b.Acks {
		cur, ok := acked[a.Job]
		if !ok {
			j := m.jobs[a.Job]
			if j == nil {
				return fmt.Errorf("%w: ack of unknown job %s", ErrConflict, a.Job)
			}
			cur = j.Acked
		}
		if cur != a.Prev {
			return fmt.Errorf("%w: job %s is acknowledged up to %d, not %d", ErrConflict, a.Job, cur, a.Prev)
		}
		acked[a.Job] = a.Upto
	}
	cancelled := map[job.ID]bool{}
	for _, c := range b.Cancels {
		j := m.jobs[c.Job]
		if j == nil {
			if _, ok := jobs[c.Job]; !ok {
				return fmt.Errorf("%w: cancel of unknown job %s", ErrConflict, c.Job)
			}
		}
		if cancelled[c.Job] || (j != nil && !j.Cancelled.IsZero()) || c.At.IsZero() {
			return fmt.Errorf("%w: job %s is cancelled already (or the cancel has no time)", ErrConflict, c.Job)
		}
		cancelled[c.Job] = true
	}
	trust := map[trustKey]int64{}
	for _, t := range b.Trust {
		k := trustKey{t.Kind, t.ID}
		v, ok := trust[k]
		if !ok {
			v = m.trust[k].Version
		}
		if t.Prev != v {
			return fmt.Errorf("%w: trust record %s %s is at version %d, not %d", ErrConflict, t.Kind, t.ID, v, t.Prev)
		}
		trust[k] = t.Version
	}
	last, prev := m.ledgerSeq(), m.head
	hashes, _ := b.Hashes()
	for i, e := range b.Entries {
		if e.Seq != last+1 || e.Prev != prev {
			return fmt.Errorf("%w: ledger entry %d does not follow entry %d", ErrConflict, e.Seq, last)
		}
		last, prev = e.Seq, hashes[i]
	}
	m.nextHead = prev
	return nil
}

// Load returns a copy of everything committed (see Store).
func (m *MemStore) Load(ctx context.Context) (*Snapshot, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := &Snapshot{LedgerSeq: m.ledgerSeq(), LedgerHash: m.head}
	for _, id := range m.peerSeq {
		s.Peers = append(s.Peers, clonePeer(m.peers[id]))
	}
	jobs := make([]JobRecord, 0, len(m.jobSeq))
	for _, id := range m.jobSeq {
		j := *m.jobs[id]
		j.Canonical = cloneBytes(j.Canonical)
		jobs = append(jobs, j)
	}
	sort.SliceStable(jobs, func(i, k int) bool { return jobs[i].Order < jobs[k].Order })
	s.Jobs = jobs
	for _, l := range m.repSeq {
		s.Replicas = append(s.Replicas, cloneReplica(*m.replicas[l]))
	}
	for _, k := range m.trustSeq {
		t := m.trust[k]
		t.Record = cloneBytes(t.Record)
		s.Trust = append(s.Trust, t)
	}
	s.Summaries = m.summaries(jobs)
	for _, j := range jobs {
		for _, o := range m.outcomes[j.ID] {
			s.Outcomes = append(s.Outcomes, cloneOutcome(o))
		}
	}
	return s, nil
}

// CountEntries counts the committed ledger entries by kind
// (EntryCounter), forgotten ones (ForgetEntries) included: a count kept
// as entries commit, so it costs the same whatever the ledger's length.
func (m *MemStore) CountEntries(context.Context) (map[string]uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.kinds), nil
}

// Entries returns committed ledger entries (see Store). A MemStore that
// forgot the entries up to LedgerBase (ForgetEntries) answers only a
// query with q.After >= LedgerBase; another gets an error wrapping
// ErrEntriesArchived (whoever archived them answers it).
func (m *MemStore) Entries(ctx context.Context, q EntryQuery) ([]Entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if q.Max <= 0 {
		return nil, nil
	}
	if q.After < m.ledgerBase {
		return nil, fmt.Errorf("ledger entries after %d: %w up to %d", q.After, ErrEntriesArchived, m.ledgerBase)
	}
	var out []Entry
	add := func(e Entry) bool {
		e.Sig = cloneBytes(e.Sig)
		out = append(out, e)
		return len(out) < q.Max
	}
	if q.Peer == "" {
		for i := int(q.After - m.ledgerBase); i < m.ledger.len(); i++ {
			if !add(*m.ledger.at(i)) {
				break
			}
		}
		return out, nil
	}
	seqs := m.byPeer[q.Peer]
	start, _ := slices.BinarySearch(seqs, q.After+1)
	for _, seq := range seqs[start:] {
		if !add(*m.ledger.at(int(seq - m.ledgerBase - 1))) {
			break
		}
	}
	return out, nil
}
