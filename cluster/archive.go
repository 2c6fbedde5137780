package cluster

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/gob"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"idlepool/pool"
)

// ArchiveBucket is the JetStream key-value bucket of the replicas that
// are done (settled, their task decided: pool.MemStore's Done): the
// Scheduler loads nothing from them, so they leave every node's memory
// and the snapshots, and Store.Replica reads one from here when a
// request names it (a result sent again, a heartbeat or release of a
// lease whose task was decided). Keys are "l." and the lease ID in
// unpadded base64url; each value is the gob encoding of a
// pool.ReplicaRecord. The key "archived" holds a stream sequence S (in
// decimal): every replica done in the state up to S is in the bucket.
const ArchiveBucket = "idlepool_replicas"

const (
	archivedKey = "archived"
	// archiveWindow is how many replicas are written before their
	// acknowledgements are awaited.
	archiveWindow = 1024
	// maxLeaseID bounds the lease IDs looked up in the archive: the
	// Scheduler's are 32 characters (pool.NewLeaseID), and a longer one,
	// which a request may name, would make a subject NATS refuses.
	maxLeaseID = 256
)

func leaseKey(lease string) string {
	return "l." + base64.RawURLEncoding.EncodeToString([]byte(lease))
}

// archive is the bucket ArchiveBucket (or a shard's Archive).
type archive struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	bucket string
}

// openArchive opens (or creates) the replica archive bucket (a shard's
// Archive).
func openArchive(ctx context.Context, js jetstream.JetStream, bucket string, replicas int) (*archive, error) {
	kv, err := js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket,
			Description: "idlepool: replicas done, read on demand", History: 1, Replicas: replicas, Storage: jetstream.FileStorage})
		if errors.Is(err, jetstream.ErrBucketExists) || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			kv, err = js.KeyValue(ctx, bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: replica archive %s: %w", bucket, unavailable(err))
	}
	return &archive{js: js, kv: kv, bucket: bucket}, nil
}

// put stores recs, archiveWindow at a time, and returns once every one
// is acknowledged; a window not acknowledged within timeout wraps
// pool.ErrStoreUnavailable. Storing a replica again stores the same record (a
// done replica never changes), so a put that failed half way is simply
// done again.
func (a *archive) put(ctx context.Context, recs []*pool.ReplicaRecord, timeout time.Duration) error {
	subj := "$KV." + a.bucket + "."
	for len(recs) > 0 {
		n := min(len(recs), archiveWindow)
		acks := make([]jetstream.PubAckFuture, 0, n)
		for _, r := range recs[:n] {
			var buf bytes.Buffer
			if err := gob.NewEncoder(&buf).Encode(r); err != nil {
				return fmt.Errorf("cluster: encode replica %s: %w", r.Lease, err)
			}
			f, err := a.js.PublishAsync(subj+leaseKey(r.Lease), buf.Bytes())
			if err != nil {
				return fmt.Errorf("cluster: archive replica %s: %w", r.Lease, unavailable(err))
			}
			acks = append(acks, f)
		}
		wait := time.NewTimer(timeout)
		for _, f := range acks {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				wait.Stop()
				return fmt.Errorf("cluster: archive replicas: %w", unavailable(err))
			case <-wait.C:
				return fmt.Errorf("cluster: archive replicas: %w: no acknowledgement within %s", pool.ErrStoreUnavailable, timeout)
			case <-ctx.Done():
				wait.Stop()
				return fmt.Errorf("cluster: archive replicas: %w", unavailable(ctx.Err()))
			}
		}
		wait.Stop()
		recs = recs[n:]
	}
	return nil
}

// get returns the archived replica lease, or an error wrapping
// pool.ErrUnknownLease when the bucket has none.
func (a *archive) get(ctx context.Context, lease string) (pool.ReplicaRecord, error) {
	if len(lease) > maxLeaseID {
		return pool.ReplicaRecord{}, fmt.Errorf("replica of a %d-byte lease ID: %w", len(lease), pool.ErrUnknownLease)
	}
	e, err := a.kv.Get(ctx, leaseKey(lease))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return pool.ReplicaRecord{}, fmt.Errorf("replica %q: %w", lease, pool.ErrUnknownLease)
	}
	if err != nil {
		return pool.ReplicaRecord{}, fmt.Errorf("cluster: read archived replica %s: %w", lease, unavailable(err))
	}
	var r pool.ReplicaRecord
	if err := gob.NewDecoder(bytes.NewReader(e.Value())).Decode(&r); err != nil {
		return pool.ReplicaRecord{}, fmt.Errorf("cluster: decode archived replica %s: %w", lease, err)
	}
	return r, nil
}

// mark returns the stream sequence up to which every done replica is
// archived (0: none is known to be).
func (a *archive) mark(ctx context.Context) (uint64, error) {
	e, err := a.kv.Get(ctx, archivedKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("cluster: read the archive's mark: %w", unavailable(err))
	}
	seq, err := strconv.ParseUint(string(e.Value()), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("cluster: the archive's mark %q: %w", e.Value(), err)
	}
	return seq, nil
}

// setMark records that every replica done in the state up to seq is
// archived. A writer behind another may set a lower mark: it is as true
// (everything done up to it is archived), only less.
func (a *archive) setMark(ctx context.Context, seq uint64) error {
	if _, err := a.kv.Put(ctx, archivedKey, strconv.AppendUint(nil, seq, 10)); err != nil {
		return fmt.Errorf("cluster: set the archive's mark to %d: %w", seq, unavailable(err))
	}
	return nil
}

// doneMark says that Done() of a Store's MemStore was done after it
// applied the stream up to seq.
type doneMark struct {
	seq  uint64
	done int
}

// noteDone records the MemStore's Done() after applying up to seq, when
// it grew; s.mu is held.
func (s *Store) noteDone(seq uint64) {
	d := s.mem.Done()
	if n := len(s.marks); (n > 0 && s.marks[n-1].done == d) || (n == 0 && d == s.forgot) {
		return
	}
	s.marks = append(s.marks, doneMark{seq, d})
}

// resetMem starts s's state over with mem, which holds the stream up to
// seq; s.mu is held.
func (s *Store) resetMem(mem *pool.MemStore, seq uint64) {
	s.mem, s.marks, s.forgot = mem, nil, 0
	s.applied.Store(seq)
	s.noteDone(seq)
}

// forget drops from memory the done replicas before position done,
// which are archived, and folds the acknowledged outcomes into their
// jobs' summaries (pool.MemStore.ForgetAcked), which a snapshot carries
// in place of them: they need no archive, as nothing reads more of them
// than the summary; s.mu is held. So each node's memory keeps the
// outcomes acknowledged since the last snapshot, as it keeps the done
// replicas.
func (s *Store) forget(done int) {
	s.mem.ForgetAcked()
	if done <= s.forgot {
		return
	}
	s.mem.ForgetDone(done)
	s.forgot = done
	i := 0
	for i < len(s.marks) && s.marks[i].done <= done {
		i++
	}
	s.marks = append(s.marks[:0], s.marks[i:]...)
}

// pruneArchived forgets the done replicas and the ledger entries that
// the archives' marks say are archived; s.mu is held. An archive that
// does not answer leaves them in memory until the next try.
func (s *Store) pruneArchived(ctx context.Context) {
	s.pruneLedger(ctx)
	if s.mem.Done() <= s.forgot {
		return
	}
	mctx, cancel := context.WithTimeout(ctx, s.timeout)
	upto, err := s.arch.mark(mctx)
	cancel()
	if err != nil || upto == 0 {
		return
	}
	done := s.forgot
	for _, m := range s.marks {
		if m.seq > upto {
			break
		}
		done = m.done
	}
	s.forget(done)
}

// pruneLedger forgets the ledger entries up to the ledger archive's
// mark, when memory holds a whole range or more; s.mu is held. An
// archive that does not answer leaves them in memory until the next
// try.
func (s *Store) pruneLedger(ctx context.Context) {
	base, seq := s.mem.LedgerBase()
	whole := seq / LedgerRange * LedgerRange
	if whole <= base {
		return
	}
	mctx, cancel := context.WithTimeout(ctx, s.timeout)
	upto, err := s.ledger.mark(mctx)
	cancel()
	if err != nil || upto <= base {
		return
	}
	_, _ = s.mem.ForgetEntries(min(upto, whole)) // at most the ledger's end: no error
}
