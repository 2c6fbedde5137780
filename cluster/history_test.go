package cluster

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"idlepool/job"
	"idlepool/pool"
)

// history writes the state of a pool that decided tasks empty tasks of
// one job, quorum 2, as the scheduler commits it: each batch leases two
// replicas of each of perBatch tasks and settles those of the batch
// before (returned and agreed, with the task's outcome, one receipt per
// replica and the merger's acknowledgement). Records are the sizes real
// ones have (hex lease IDs, 32-byte digests, 64-byte signatures).
type history struct {
	peers    []pool.Peer
	job      pool.JobRecord
	at       time.Time
	next     int64 // the next task to lease
	acked    int64
	ledger   uint64
	head     job.Digest
	inFlight []pool.ReplicaRecord
	// sign, when set, signs each batch's entries as the scheduler does
	// (pool.SignBatch: a Merkle proof in each entry); else each entry
	// has 64 zero bytes for a signature.
	sign func([]byte) []byte
	// ref, when set, is committed every batch too: a MemStore that never
	// archives, to compare with.
	ref *pool.MemStore
}

func newHistory() *history {
	h := &history{at: time.UnixMilli(1_767_000_000_000)}
	for i := range 16 {
		k := sha256.Sum256(fmt.Appendf(nil, "device %d", i))
		o := sha256.Sum256(fmt.Appendf(nil, "owner %d", i%8))
		h.peers = append(h.peers, pool.Peer{ID: fmt.Sprintf("id%x-%d", o[:8], i), Owner: fmt.Sprintf("id%x", o[:8]),
			Key: k[:], OwnerKey: o[:], Endorsement: make([]byte, 64), Joined: h.at})
	}
	h.job = pool.JobRecord{ID: job.ID(sha256.Sum256([]byte("history job"))), Canonical: make([]byte, 1024),
		Owner: "idowner", Merger: "idowner-1", Order: 1, Added: h.at}
	return h
}

// newSignedHistory is newHistory with each batch's entries signed
// together (pool.SignBatch) by a new Ed25519 key, as a node in charge
// signs them; it returns the key that checks them too.
func newSignedHistory(tb testing.TB) (*history, ed25519.PublicKey) {
	tb.Helper()
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		tb.Fatal(err)
	}
	h := newHistory()
	h.sign = func(b []byte) []byte { return ed25519.Sign(priv, b) }
	return h, pub
}

// batch returns the next batch: the first also registers the peers and
// the job.
func (h *history) batch(perBatch int) *pool.Batch {
	b := &pool.Batch{}
	if h.next == 0 {
		b.Peers, b.Jobs = h.peers, []pool.JobRecord{h.job}
	}
	for i, r := range h.inFlight {
		r.State, r.Version, r.Prev = pool.ReplicaAgreed, 2, 1
		r.Digest = sha256.Sum256(nil)
		b.Replicas = append(b.Replicas, r)
		e := pool.Entry{Seq: h.ledger + 1, Prev: h.head, Kind: pool.KindReceipt, Pool: "test", Job: r.Job, Task: r.Task,
			Peer: r.Peer, Owner: r.Owner, Lease: r.Lease, Digest: r.Digest, Cost: 1, Time: h.at.UnixMilli(), Sig: make([]byte, 64)}
		h.ledger, h.head = e.Seq, e.Hash()
		b.Entries = append(b.Entries, e)
		if i%2 == 1 {
			b.Outcomes = append(b.Outcomes, pool.OutcomeRecord{Job: r.Job, Digest: r.Digest,
				Verified: pool.Verified{Seq: r.Task + 1, Task: r.Task, Status: pool.OutcomeOK}})
		}
	}
	if h.sign != nil && len(b.Entries) > 0 {
		prev := b.Entries[0].Prev
		h.head = pool.SignBatch(b.Entries, prev, h.sign)
	}
	if n := int64(len(h.inFlight) / 2); n > 0 {
		b.Acks = []pool.AckRecord{{Job: h.job.ID, Prev: h.acked, Upto: h.acked + n}}
		h.acked += n
	}
	h.inFlight = h.inFlight[:0]
	for range perBatch {
		for k := range 2 {
			// As the Scheduler mints them (pool.NewLeaseID): a stamp in
			// nanoseconds (here 10,000 tasks a second), then random.
			var id [16]byte
			binary.BigEndian.PutUint64(id[:], historyEpoch+uint64(h.next)*100_000)
			id[8] = byte(k)
			p := h.peers[(int(h.next)*2+k)%len(h.peers)]
			h.inFlight = append(h.inFlight, pool.ReplicaRecord{Lease: fmt.Sprintf("%x", id), Job: h.job.ID, Task: h.next,
				Peer: p.ID, Owner: p.Owner, State: pool.ReplicaLeased, Created: h.at, Deadline: h.at.Add(time.Minute), Version: 1})
		}
		h.next++
	}
	b.Replicas = append(b.Replicas, h.inFlight...)
	return b
}

// write commits batches of perBatch tasks until tasks tasks are decided
// (the last batch only settles).
func (h *history) write(tb testing.TB, s *Store, tasks, perBatch int) {
	tb.Helper()
	ctx := context.Background()
	for h.acked < int64(tasks) {
		n := min(perBatch, tasks-int(h.next))
		b := h.batch(n)
		if err := s.Commit(ctx, b); err != nil {
			tb.Fatalf("commit history batch at task %d: %v", h.next, err)
		}
		if h.ref != nil {
			if err := h.ref.Commit(ctx, b); err != nil {
				tb.Fatalf("commit history batch at task %d to the reference: %v", h.next, err)
			}
		}
	}
}
