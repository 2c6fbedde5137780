package pool

import (
	"context"
	"fmt"

	"idlepool/job"
)

// Known-answer spot checks ([verify] known_answers, job.Job.KnownAnswer):
// the submitter knows the result digest of some tasks. Those tasks are
// leased like any other (the lease, the task's JSON and the job's
// encoding are the same: the answers are not part of the job), so a
// device cannot tell them apart; only the coordinator holds the answers
// (JobRecord.KnownAnswers names their file), and it never serves that
// file (SecretBlob). A returned replica of such a task that does not agree
// with the known answer by the job's rule (the same digest, or under a
// tolerance rule a result within the tolerances of the known result)
// deviated, whatever other replicas say: it is marked in the
// ledger, takes no part in the vote, every result its device holds back
// (computed alone, adaptive replication) becomes suspect and is computed
// again by others (catch), and the deviation counts toward exclusion. A
// replica with the known digest passes a check: a task its device computed
// alone is decided at once, and the device's record grows as after any
// check (release of its held results leased before, its streak).

// loadKnown loads the known answers rec names from the coordinator's
// copy of their file (cfg.Blobs), once.
func (s *Scheduler) loadKnown(rec JobRecord, j *job.Job) error {
	if rec.KnownAnswers == (job.Digest{}) || j.HasKnownAnswers() {
		return nil
	}
	if err := j.LoadKnownAnswers(s.cfg.Blobs(rec.KnownAnswers), rec.KnownAnswers); err != nil {
		return fmt.Errorf("known answers of job %s: %w", j.ID, err)
	}
	return nil
}

// SecretBlob reports whether the file with digest d is the known-answers
// file of a job in the pool: it must never be served to peers, or they
// could tell which tasks are checks.
func (s *Scheduler) SecretBlob(d job.Digest) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.secret[d]
}

// AddSecret makes the file with digest d secret here too (SecretBlob): it
// is the known-answers file of a job another Scheduler of the pool holds
// (SchedulerConfig.OnSecret). It is kept in memory only: the pool hands
// it over again when this Scheduler starts. Adding it again changes
// nothing. It returns nil, or ErrStopped.
func (s *Scheduler) AddSecret(_ context.Context, d job.Digest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped != nil {
		return fmt.Errorf("secret %s: %w", d, s.stopped)
	}
	s.secret[d] = true
	return nil
}

// Secrets returns the digests of the known-answers files of the jobs this
// Scheduler holds, in no order: what it hands the pool's other
// schedulers (OnSecret), again after a restart in case a hand-over was
// lost.
func (s *Scheduler) Secrets() []job.Digest {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []job.Digest
	for _, js := range s.jobs {
		if d := js.rec.KnownAnswers; d != (job.Digest{}) {
			out = append(out, d)
		}
	}
	return out
}

// checkKnown compares r, just returned for ts, with ts's known answer, if
// any, by the job's own rule (job.Job.CheckKnown: equal digests, or under
// a tolerance rule a result within the tolerances of the known one). A
// wrong result is a deviation decided at once: r leaves the vote and its
// task wants a replica again; checkKnown returns true. A right one marks
// ts as checked against its answer. s.mu is held.
func (s *Scheduler) checkKnown(js *jobState, ts *taskState, r *replica) (wrong bool) {
	switch js.j.CheckKnown(ts.index, r.rec.Digest, r.rec.Result) {
	case job.KnownNone:
		return false
	case job.KnownRight:
		ts.knownOK = true
		if d := s.trust.device(r.rec.Peer); d.splits > 0 {
			d.splits = 0 // a suspect passed a check (stall.go)
			s.trustChanged(TrustDevice, r.rec.Peer)
		}
		return false
	}
	now := s.now()
	ts.returned = removeReplica(ts.returned, r)
	s.unclaim(r)
	r.rec.State, r.rec.Result, r.ts = ReplicaDeviated, nil, nil
	s.putReplica(r)
	if !js.ownerOnly() {
		other := "it is other bytes"
		if js.ver.Rule != "" {
			other = "this result is not within the job's tolerances of it"
		}
		s.appendEntry(Entry{Kind: KindDeviation, Pool: s.cfg.Pool, Job: js.rec.ID, Task: ts.index, Peer: r.rec.Peer,
			Owner: r.rec.Owner, Lease: r.rec.Lease, Digest: r.rec.Digest, Time: now.UnixMilli(),
			Reason: fmt.Sprintf("returned %s; the job's owner knows this task's result, and %s", r.rec.Digest, other)})
	}
	s.log.Warn("Replica deviated from a known answer", "lease", r.rec.Lease, "job", js.rec.ID.String(), "task", ts.index,
		"peer", r.rec.Peer, "owner", r.rec.Owner, "digest", r.rec.Digest.String())
	s.deviated(r, now)
	ts.unsingle()
	js.update(ts)
	// Proven to return wrong bytes: its owner computes nothing more of
	// the job, and its votes on undecided tasks are void (stall.go).
	if js.caught == nil {
		js.caught = map[string]bool{}
	}
	js.caught[r.rec.Owner] = true
	s.voidOwner(r.rec.Owner)
	return true
}
