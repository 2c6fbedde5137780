package pool

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"idlepool/castore"
	"idlepool/job"
)

// Results kept by the devices (RATIONALE.md, "Results stay with the
// devices"): a replica may submit its result's chunk manifest instead of
// the bytes (Submission.Ref). Agreement compares digests as for any
// result; an accepted outcome names the agreeing replicas that kept the
// bytes as its holders (Verified.Holders), from which the merger fetches
// them. When none can give them (ResultLost), the task is computed again
// by one device at a time until a replica returns the accepted digest:
// never abandoned, never folded unverified, and its outcome keeps its
// Seq. That state stays in memory: after a restart the merger reports the
// result lost again.

// MaxHeldQuery bounds the results one KeepResults call asks about.
const MaxHeldQuery = 1024

// KeptWindow is how long after its merger last said it fetches results
// kept by the devices (MergerFetchesKept) a job takes results by
// reference. A merger that follows its job says so at every request for
// its results; one that left stops being sent references after
// KeptWindow, so that the results computed meanwhile wait at the
// coordinator rather than on devices that may leave too.
const KeptWindow = 5 * time.Minute

// MergerFetchesKept records whether the merger of job id fetches results
// kept by the devices over the data plane now (on: for KeptWindow from
// now; off: from now on the job takes results inline only, ErrSendInline
// for a reference). The state is in memory: after a restart a job takes
// references once its merger says so again. Errors: ErrUnknownJob,
// ErrNotMerger, ErrStopped.
func (s *Scheduler) MergerFetchesKept(peer string, id job.ID, on bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	js, err := s.mergersJob(peer, id)
	switch {
	case err != nil:
		return fmt.Errorf("kept results of job %s: %w", id, err)
	case on:
		js.keptUntil = s.now().Add(KeptWindow)
	default:
		js.keptUntil = time.Time{}
	}
	return nil
}

// refetch is the state of a decided task whose result is computed again.
type refetch struct {
	seq  int64      // its outcome's Seq
	must job.Digest // the accepted digest the new replica must return
}

// HeldResult names a result a device keeps for a job's merger: its job,
// task and digest (the accepted digest, SHA-256 of the bytes).
type HeldResult struct {
	Job    job.ID     `json:"job"`
	Task   int64      `json:"task"`
	Digest job.Digest `json:"digest"`
}

// cloneManifest returns a deep copy of m (nil for nil).
func cloneManifest(m *castore.Manifest) *castore.Manifest {
	if m == nil {
		return nil
	}
	c := *m
	c.Chunks = slices.Clone(m.Chunks)
	return &c
}

// checkRef checks a submission by reference: a manifest of the result's
// bytes that is well formed, whose SHA256 is the submission's digest,
// and whose size is over InlineResultBytes and within the pool's result
// limit; no inline bytes, no failure.
func (s *Scheduler) checkRef(sub Submission) error {
	m := sub.Ref
	switch {
	case sub.Failed || len(sub.Result) > 0:
		return errors.New("a reference goes alone: no result bytes and no failure with it")
	case m.SHA256 != castore.Digest(sub.Digest):
		return fmt.Errorf("the reference describes %x, not the digest %s", m.SHA256[:8], sub.Digest)
	case m.Size <= InlineResultBytes:
		return fmt.Errorf("a result of %d bytes goes inline: references are for results over %d bytes", m.Size, InlineResultBytes)
	case m.Size > int64(s.cfg.MaxResultBytes):
		return fmt.Errorf("result of %d bytes, the limit is %d", m.Size, s.cfg.MaxResultBytes)
	}
	if err := m.Validate(); err != nil {
		return fmt.Errorf("the reference: %w", err)
	}
	return nil
}

// held returns what an accepted outcome carries of lead's result, which
// its device kept: the bytes, if an agreeing replica sent them inline
// (a device that does not share); else the reference most of the
// agreeing replicas sent and their peers as its holders. Agreement
// compares digests only, and the coordinator cannot check that a
// manifest's chunks make the digest: an honest replica's manifest is
// fixed by the bytes, so one that differs is not named.
func held(ts *taskState, lead *replica, agreeing map[*replica]bool) ([]byte, *castore.Manifest, []string) {
	var refs []*replica
	for _, r := range ts.returned {
		if !agreeing[r] || r.rec.Digest != lead.rec.Digest {
			continue
		}
		if r.rec.Ref == nil {
			return r.rec.Result, nil, nil
		}
		refs = append(refs, r)
	}
	best, most := lead.rec.Ref, 0
	for _, r := range refs {
		n := 0
		for _, x := range refs {
			if sameManifest(x.rec.Ref, r.rec.Ref) {
				n++
			}
		}
		if n > most {
			best, most = r.rec.Ref, n
		}
	}
	var holders []string
	for _, r := range refs {
		if sameManifest(r.rec.Ref, best) && !slices.Contains(holders, r.rec.Peer) {
			holders = append(holders, r.rec.Peer)
		}
	}
	return nil, best, holders
}

// sameManifest reports whether a and b describe the same chunks.
func sameManifest(a, b *castore.Manifest) bool {
	return a.SHA256 == b.SHA256 && a.Size == b.Size && a.ChunkSize == b.ChunkSize && slices.Equal(a.Chunks, b.Chunks)
}

// ResultLost is the merger's report that no holder of outcome seq of job
// id could give its result (every one failed, served wrong bytes or is
// gone). The task is leased again, to one device at a time, until a
// replica returns the accepted digest; that replica becomes a holder
// (Results names it from then on) and earns its receipt, and a replica
// that returns anything else is a deviation. Reporting an outcome that is
// already being computed again is nil. Errors: ErrUnknownJob,
// ErrNotMerger, ErrBadRequest (the outcome is not delivered, was
// acknowledged, or carries its bytes), ErrJobCancelled, ErrStopped.
func (s *Scheduler) ResultLost(ctx context.Context, peer string, id job.ID, seq int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	js, err := s.mergersJob(peer, id)
	switch {
	case err != nil:
	case seq <= js.rec.Acked || seq > js.committed:
		err = fmt.Errorf("%w: outcome %d is not one awaiting acknowledgement (acknowledged up to %d, delivered up to %d)",
			ErrBadRequest, seq, js.rec.Acked, js.committed)
	case !js.rec.Cancelled.IsZero():
		err = fmt.Errorf("%w: its result cannot be computed again", ErrJobCancelled)
	}
	if err != nil {
		return fmt.Errorf("result %d of job %s lost: %w", seq, id, err)
	}
	v := &js.outcomes[seq-js.rec.Acked-1]
	if v.Status != OutcomeOK || v.Ref == nil {
		return fmt.Errorf("result %d of job %s lost: %w: the outcome carries its result (status %s)", seq, id, ErrBadRequest, v.Status)
	}
	if ts := js.active[v.Task]; ts != nil {
		return nil // computed again already
	}
	ts := js.task(v.Task)
	ts.refetch = &refetch{seq: seq, must: job.Digest(v.Ref.SHA256)}
	js.update(ts)
	s.log.Warn("No holder could give an accepted result: its task is leased again", "job", id.String(),
		"task", v.Task, "seq", seq, "holders", len(v.Holders), "digest", ts.refetch.must.String())
	return nil
}

// refetched settles replica r, just returned, of ts, a task whose lost
// result is computed again: the accepted digest makes r a holder of the
// outcome and ends the task; anything else is a deviation, and the task
// is leased again. s.mu is held.
func (s *Scheduler) refetched(js *jobState, ts *taskState, r *replica) {
	rf := ts.refetch
	at := s.now()
	s.unclaim(r)
	ts.returned = removeReplica(ts.returned, r)
	e := Entry{Pool: s.cfg.Pool, Job: js.rec.ID, Task: ts.index, Peer: r.rec.Peer, Owner: r.rec.Owner,
		Lease: r.rec.Lease, Digest: r.rec.Digest, Time: at.UnixMilli()}
	ok := r.rec.Digest == rf.must && !r.rec.Failed
	if ok {
		i := rf.seq - js.rec.Acked - 1
		v := js.outcomes[i]
		switch {
		case r.rec.Ref == nil:
			v.Result, v.Ref, v.Holders = r.rec.Result, nil, nil
		case !sameManifest(r.rec.Ref, v.Ref):
			// The same digest in other chunks: the manifest the
			// merger could not fetch may be the wrong one.
			v.Ref, v.Holders = r.rec.Ref, []string{r.rec.Peer}
		default:
			v.Holders = append(slices.Clone(v.Holders), r.rec.Peer) // Results hands out the old slice
		}
		js.outcomes[i] = v
		// It credits the work the accepted replicas agreed on, not
		// what this device alone counted.
		r.rec.State, e.Kind = ReplicaAgreed, KindReceipt
		e.Cost, e.Work = js.j.WorkCostOf(ts.index, v.Work), v.Work
		s.endRefetch(js, ts)
		s.log.Info("A lost result was computed again", "job", js.rec.ID.String(), "task", ts.index,
			"seq", rf.seq, "peer", r.rec.Peer)
	} else {
		r.rec.State, e.Kind = ReplicaDeviated, KindDeviation
		e.Reason = fmt.Sprintf("computed again after every holder of its result was gone, and returned %s; the accepted result is %s",
			r.rec.Digest, rf.must)
		s.log.Warn("Replica deviated", "lease", r.rec.Lease, "job", js.rec.ID.String(), "task", ts.index,
			"peer", r.rec.Peer, "digest", r.rec.Digest.String(), "accepted", rf.must.String())
		js.update(ts)
	}
	r.rec.Result, r.rec.Ref, r.ts = nil, nil, nil
	s.putReplica(r)
	if js.ownerOnly() {
		return
	}
	s.appendEntry(e)
	if ok {
		s.trust.owner(r.rec.Owner).contributed.add(e.Cost, at)
		s.agreedChecked(js, r, false)
	} else {
		s.deviated(r, at)
	}
}

// endRefetch removes ts, whose lost result came back or is no longer
// wanted, from the job's active tasks; its live replicas are cancelled.
// s.mu is held.
func (s *Scheduler) endRefetch(js *jobState, ts *taskState) {
	for _, r := range ts.live {
		r.rec.State, r.ts = ReplicaCancelled, nil
		s.notLive(r)
		s.unclaim(r)
		s.putReplica(r)
	}
	ts.live = nil
	if len(ts.machine) > 0 {
		js.retrying--
	}
	delete(js.active, ts.index)
	js.touch()
	if ts.wanting {
		i := sort.Search(len(js.want), func(k int) bool { return js.want[k] >= ts.index })
		js.want = append(js.want[:i], js.want[i+1:]...)
		ts.wanting = false
	}
}

// dropRefetches ends the recomputations of results the merger
// acknowledged (it folded them, or gave up on them). s.mu is held.
func (s *Scheduler) dropRefetches(js *jobState) {
	for _, ts := range js.active {
		if ts.refetch != nil && ts.refetch.seq <= js.rec.Acked {
			s.endRefetch(js, ts)
		}
	}
}

// KeepResults answers a device that keeps results for mergers which of
// them it must keep (true) and which it may delete (false): a result is
// kept while its task is undecided, while its accepted outcome awaits
// the merger's acknowledgement with that digest, and while its task is
// computed again for that digest; a job that is cancelled or unknown
// keeps nothing. Errors: ErrUnknownPeer, ErrBadRequest (more than
// MaxHeldQuery results), ErrStopped.
func (s *Scheduler) KeepResults(peer string, results []HeldResult) ([]bool, error) {
	if len(results) > MaxHeldQuery {
		return nil, fmt.Errorf("kept results: %w: %d results, at most %d per request", ErrBadRequest, len(results), MaxHeldQuery)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped != nil {
		return nil, fmt.Errorf("kept results: %w", s.stopped)
	}
	if _, ok := s.peers[peer]; !ok {
		return nil, fmt.Errorf("kept results: %w", ErrUnknownPeer)
	}
	awaiting := map[job.ID]map[int64]job.Digest{} // unacknowledged outcomes by reference, per job asked about
	out := make([]bool, len(results))
	for i, h := range results {
		js := s.jobs[h.Job]
		if js == nil || !js.rec.Cancelled.IsZero() {
			continue
		}
		if ts := js.active[h.Task]; ts != nil {
			out[i] = ts.refetch == nil || ts.refetch.must == h.Digest
			continue
		}
		byTask, ok := awaiting[h.Job]
		if !ok {
			byTask = map[int64]job.Digest{}
			for _, v := range js.outcomes {
				if v.Ref != nil {
					byTask[v.Task] = job.Digest(v.Ref.SHA256)
				}
			}
			awaiting[h.Job] = byTask
		}
		d, ok := byTask[h.Task]
		out[i] = ok && d == h.Digest
	}
	return out, nil
}
