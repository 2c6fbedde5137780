package pool

// A MemStore keeps every record it was given, so its memory grows with
// the tasks a pool decided. A clustered Store that keeps its state in a
// MemStore moves what is done out of it: a replica is done once it is
// settled (its state never changes again: the Scheduler's premise, see
// ReplicaArchive), its task has an outcome and the job's merger has
// acknowledged that outcome (its result is merged). The Scheduler loads
// nothing from such a replica (it reads one from the store's
// ReplicaArchive when a request names it), so a Store may keep it
// elsewhere. MemStore counts its done replicas in the order they became
// done (Done), hands them over (DoneRecords), leaves them out of an
// image (LiveImage) and forgets them (ForgetDone); the Store that calls
// these answers Replica for a forgotten one from where it put it.

// SettledStates returns the replica states that never change again:
// those the Scheduler settles a replica in (ReplicaArchive). A state not
// named here (leased, returned, provisional, one added later) is in
// play. A replica in one of them whose task is decided is done: the
// Scheduler loads nothing from it (Snapshot.Replicas). The slice is new
// at each call.
func SettledStates() []string {
	return []string{ReplicaExpired, ReplicaReleased, ReplicaMachineFailed, ReplicaCancelled, ReplicaWithdrawn,
		ReplicaAgreed, ReplicaDeviated, ReplicaUnverified}
}

// settledState reports whether st is one of SettledStates.
func settledState(st string) bool {
	switch st {
	case ReplicaExpired, ReplicaReleased, ReplicaMachineFailed, ReplicaCancelled, ReplicaWithdrawn,
		ReplicaAgreed, ReplicaDeviated, ReplicaUnverified:
		return true
	}
	return false
}

// noteDone notes the replicas, outcomes and acknowledgements of b, just
// applied, that made replicas done; m.mu is held.
func (m *MemStore) noteDone(b *Batch) {
	for i, r := range b.Replicas {
		// A lease in the batch twice is noted once, by its last record
		// (the one the map holds).
		if !m.repeated || m.replicas[r.Lease] == m.applied[i] {
			m.noteRecord(r.Lease, m.applied[i])
		}
	}
	clear(m.applied)
	m.applied = m.applied[:0]
	for _, o := range b.Outcomes {
		k := key{o.Job, o.Task}
		for _, l := range m.settledOpen[k] {
			m.noteReplica(l)
		}
		delete(m.settledOpen, k)
	}
	for _, a := range b.Acks {
		for s := a.Prev + 1; s <= a.Upto; s++ {
			k := key{a.Job, s}
			for _, l := range m.unacked[k] {
				m.noteReplica(l)
			}
			delete(m.unacked, k)
		}
	}
}

// noteReplica notes replica lease as done when it is settled, its task
// decided and the outcome acknowledged, or else as waiting for its
// task's outcome or for the acknowledgement when it is settled; m.mu is
// held. A replica noted done twice is harmless: forgetting it twice
// drops it once.
func (m *MemStore) noteReplica(lease string) { m.noteRecord(lease, m.replicas[lease]) }

// noteRecord is noteReplica given r, the replica's record in m.replicas.
func (m *MemStore) noteRecord(lease string, r *ReplicaRecord) {
	if r == nil || !settledState(r.State) {
		return
	}
	seq := m.decidedSeq(r.Job, r.Task) // -1: acknowledged and summarised
	switch {
	case seq == 0:
		if m.settledOpen == nil {
			m.settledOpen = map[key][]string{}
		}
		k := key{r.Job, r.Task}
		m.settledOpen[k] = append(m.settledOpen[k], lease)
	case seq > m.jobs[r.Job].Acked:
		if m.unacked == nil {
			m.unacked = map[key][]string{}
		}
		k := key{r.Job, seq}
		m.unacked[k] = append(m.unacked[k], lease)
	default:
		m.done = append(m.done, lease)
	}
}

// Done returns how many replicas became done in m so far, forgotten ones
// included: positions 0 to Done()-1 in the order they became done. It
// only grows.
func (m *MemStore) Done() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.doneBase + len(m.done)
}

// DoneRecords returns the done replicas at positions from to upto-1 that
// m still holds, settled (those before ForgetDone's mark are gone), with
// Prev zero. The records are m's own, not copies (a store that archives
// the whole history at once would copy hundreds of MB under its lock): m
// changes only a record in play in place, never a settled one (an
// update of that replaces it), so they stay as they are; read them,
// never change them.
func (m *MemStore) DoneRecords(from, upto int) []*ReplicaRecord {
	m.mu.Lock()
	defer m.mu.Unlock()
	from, upto = max(from, m.doneBase)-m.doneBase, min(upto-m.doneBase, len(m.done))
	var out []*ReplicaRecord
	for i := from; i < upto; i++ {
		if r := m.replicas[m.done[i]]; r != nil && settledState(r.State) {
			out = append(out, r)
		}
	}
	return out
}

// ForgetDone drops the done replicas at positions before upto from m:
// Load, Image and Replica no longer return them, and a Commit that
// changes one is a conflict (as for a replica never inserted; the
// Scheduler never changes a settled replica). It returns how many it
// dropped. Forgetting what is forgotten does nothing.
func (m *MemStore) ForgetDone(upto int) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := min(upto-m.doneBase, len(m.done))
	if n <= 0 {
		return 0
	}
	gone := make(map[string]bool, n)
	for _, l := range m.done[:n] {
		if r := m.replicas[l]; r != nil && settledState(r.State) {
			gone[l] = true
			delete(m.replicas, l)
		}
	}
	if len(gone) > 0 {
		// A new slice, so that the memory of the old one goes.
		kept := make([]string, 0, len(m.repSeq)-len(gone))
		for _, l := range m.repSeq {
			if !gone[l] {
				kept = append(kept, l)
			}
		}
		m.repSeq = kept
	}
	m.done = append([]string(nil), m.done[n:]...)
	m.doneBase += n
	return len(gone)
}

// LiveImage is Image without the replicas that are done (every done
// replica m holds now, whether or not forgotten since) and without the
// ledger entries up to ledgerUpto (0: none but those forgotten; the
// image's LedgerBase says up to where it leaves them out); done is
// Done() at the time of the copy: the replicas left out are those at
// positions before it. A Store that writes it as a snapshot must keep
// those replicas where its Replica finds them, and those entries where
// its Entries finds them, before a node can load the snapshot.
func (m *MemStore) LiveImage(ledgerUpto uint64) (img *MemImage, done int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	skip := make(map[string]bool, len(m.done))
	for _, l := range m.done {
		if r := m.replicas[l]; r != nil && settledState(r.State) {
			skip[l] = true
		}
	}
	img = m.imageLocked(skip, ledgerUpto)
	return img, m.doneBase + len(m.done)
}
