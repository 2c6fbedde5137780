package cluster

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/gob"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"idlepool/pool"
)

// ArchiveBucket is the JetStream key-value bucket of the replicas that
// are done (settled, their task decided: pool.MemStore's Done): the
// Scheduler loads nothing from them, so they leave every node's memory
// and the snapshots, and Store.Replica reads one from here when a
// request names it (a result sent again, a heartbeat or release of a
// lease whose task was decided).
//
// Keys: a replica whose lease ID is the Scheduler's (32 lowercase hex
// digits, the first 16 the nanosecond it was minted: pool.NewLeaseID)
// and that carries at most ownBytes of result and reason is stored
// with the others of its window, the leases minted within the same
// 2^20 ns (1.05 ms, the ID's first windowDigits digits) that the same
// snapshot archives: key "w.", those digits, "." and the stream sequence
// of the state the snapshot covers (a fragment of the window), value
// CBOR tag fragmentTag over the replicas in lease order, written as the
// state stream's batches are (cbor-v2: records as arrays, strings and
// job IDs in a table). Replicas of one window done at different
// snapshots are in as many fragments; nothing is read to write one. A
// lookup reads the window's fragments by JetStream's direct get of the
// next message on the window's subjects. Before windows (versions up to
// 3bf14e8), and for a replica whose lease ID is not the Scheduler's,
// whose result or reason is larger, whose times cbor-v2 cannot hold, or
// whose fragment would pass maxWindowBytes, the key is "l." and the
// lease ID in unpadded base64url, and the value the gob encoding of its
// pool.ReplicaRecord: those are read too. The key "archived" holds a
// stream sequence S (in decimal): every replica done in the state up to
// S is in the bucket.
const ArchiveBucket = "idlepool_replicas"

const (
	archivedKey = "archived"
	// archiveWindow is how many values (windows, or replicas of a key
	// of their own) are written before their acknowledgements are
	// awaited, and archiveBytes about how many bytes.
	archiveWindow = 1024
	archiveBytes  = 8 << 20
	// windowDigits is how many hex digits of a lease ID (from the
	// start: its stamp's highest bits) the replicas of one window
	// share: 2^20 ns, about a millisecond. At 10,000 tasks a second a
	// window holds some 21 replicas, 6 KB, which a lookup decodes
	// whole; a pool of 500 tasks a second or fewer stores about one
	// replica per fragment, as a key each did.
	windowDigits = 11
	// maxWindowBytes bounds a fragment's value (the server's max payload
	// is 8 MiB): replicas that would pass it go under keys of their own.
	maxWindowBytes = 4 << 20
	// maxFragments bounds the fragments of one window a lookup reads:
	// each is a snapshot that archived some of its replicas, a handful
	// where tasks take about the same time.
	maxFragments = 4096
	// ownBytes is the most bytes of result and reason a replica in a
	// window carries; a replica with more goes under a key of its own,
	// so that a lookup decodes a small window (a result may be inline
	// up to pool.DefaultMaxResultBytes).
	ownBytes = 4 << 10
	// fragmentTag is the CBOR tag (RFC 8949 section 3.4, from the range
	// any application may use) of a window's value.
	fragmentTag = 0x72657032 // "rep2"
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
	stream jetstream.Stream // the bucket's, for lookups by subject
}

// openArchive opens (or creates) the replica archive bucket (a shard's
// Archive).
func openArchive(ctx context.Context, js jetstream.JetStream, bucket string, replicas int) (*archive, error) {
	kv, err := openKV(ctx, js, jetstream.KeyValueConfig{Bucket: bucket,
		Description: "idlepool: replicas done, read on demand", History: 1, Replicas: replicas, Storage: jetstream.FileStorage})
	if err != nil {
		return nil, fmt.Errorf("cluster: replica archive %s: %w", bucket, unavailable(err))
	}
	stream, err := js.Stream(ctx, "KV_"+bucket)
	if notFound(err) {
		// The bucket was found or made a moment ago: the server that
		// answered has not applied its stream yet (a cluster's first
		// start on a loaded machine: the node then stopped serving, and
		// its shards waited for it). A wait, not a failure.
		err = fmt.Errorf("%w: the bucket's stream is not known yet to the server that answered: %w", pool.ErrStoreUnavailable, err)
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: replica archive %s: its stream: %w", bucket, unavailable(err))
	}
	return &archive{js: js, kv: kv, bucket: bucket, stream: stream}, nil
}

// put stores recs (ArchiveBucket), taken from the state at stream
// sequence seq: each window's replicas as a fragment of its own under
// key "w.", the window and seq (windowKey), each other replica under a
// key of its own. Nothing is read first: every write is a new key, or
// the same key again with the same replicas or more (a put done again,
// or another node's at the same sequence: the same state). It returns
// once every value is acknowledged; a batch of values not acknowledged
// within timeout wraps pool.ErrStoreUnavailable.
func (a *archive) put(ctx context.Context, recs []*pool.ReplicaRecord, seq uint64, timeout time.Duration) error {
	windows, own := archiveGroups(recs)
	var vals []archiveValue
	for _, win := range windows {
		data, ok, err := encodeFragment(win)
		if err != nil {
			return fmt.Errorf("cluster: encode archived window %s: %w", windowKey(win[0].Lease, seq), err)
		}
		if !ok || len(data) > maxWindowBytes {
			for i := range win {
				own = append(own, &win[i])
			}
			continue
		}
		vals = append(vals, archiveValue{windowKey(win[0].Lease, seq), data})
	}
	for _, r := range own {
		v, err := replicaValue(r)
		if err != nil {
			return err
		}
		vals = append(vals, v)
	}
	subj := "$KV." + a.bucket + "."
	var acks []jetstream.PubAckFuture
	size := 0
	for i, v := range vals {
		f, err := a.js.PublishAsync(subj+v.key, v.data)
		if err != nil {
			return fmt.Errorf("cluster: archive replicas (%s): %w", v.key, unavailable(err))
		}
		acks, size = append(acks, f), size+len(v.data)
		if len(acks) >= archiveWindow || size >= archiveBytes || i == len(vals)-1 {
			if err := awaitAcks(ctx, acks, timeout, "archive replicas"); err != nil {
				return err
			}
			acks, size = acks[:0], 0
		}
	}
	return nil
}

// archiveValue is one key of ArchiveBucket and its value.
type archiveValue struct {
	key  string
	data []byte
}

// archiveGroups returns recs as put stores them: the replicas of the
// Scheduler's leases (windowLease) with at most ownBytes of result and
// reason, sorted by lease, each lease once, grouped by window; and the
// others, each for a key of its own. recs is not changed.
func archiveGroups(recs []*pool.ReplicaRecord) (windows [][]pool.ReplicaRecord, own []*pool.ReplicaRecord) {
	sorted := make([]*pool.ReplicaRecord, 0, len(recs))
	for _, r := range recs {
		if windowLease(r.Lease) && len(r.Result)+len(r.Reason) <= ownBytes {
			sorted = append(sorted, r)
		} else {
			own = append(own, r)
		}
	}
	slices.SortFunc(sorted, func(a, b *pool.ReplicaRecord) int { return strings.Compare(a.Lease, b.Lease) })
	// Every window is a piece of one slice: one allocation and one copy
	// of each record, not a slice grown by doubling per window.
	all := make([]pool.ReplicaRecord, 0, len(sorted))
	start := 0 // where the window being filled starts in all
	for _, r := range sorted {
		n := len(all)
		if n > start && all[n-1].Lease == r.Lease {
			continue // noted done twice: once is enough
		}
		if n > start && all[start].Lease[:windowDigits] != r.Lease[:windowDigits] {
			windows = append(windows, all[start:n:n])
			start = n
		}
		all = append(all, *r)
	}
	if n := len(all); n > start {
		windows = append(windows, all[start:n:n])
	}
	return windows, own
}

// replicaValue is r under a key of its own, in gob (the form before
// windows).
func replicaValue(r *pool.ReplicaRecord) (archiveValue, error) {
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(r); err != nil {
		return archiveValue{}, fmt.Errorf("cluster: encode replica %s: %w", r.Lease, err)
	}
	return archiveValue{leaseKey(r.Lease), buf.Bytes()}, nil
}

// windowLease reports whether lease is 32 lowercase hex digits, as the
// Scheduler mints them (pool.NewLeaseID; checked by pool.LeaseShard):
// the leases kept in windows.
func windowLease(lease string) bool {
	_, err := pool.LeaseShard(lease, 1)
	return err == nil
}

// windowPrefix is the start of the keys of the fragments of lease's
// window (lease a windowLease): "w.", the window, ".".
func windowPrefix(lease string) string { return "w." + lease[:windowDigits] + "." }

// windowKey is the key of the fragment of lease's window archived from
// the state at stream sequence seq.
func windowKey(lease string, seq uint64) string {
	return windowPrefix(lease) + strconv.FormatUint(seq, 10)
}

// encodeFragment encodes rs, in lease order, as a window's value; ok is
// false when cbor-v2 cannot hold one of their times.
func encodeFragment(rs []pool.ReplicaRecord) (data []byte, ok bool, err error) {
	data, ok, err = marshalWire(&pool.Batch{Replicas: rs}, fragmentTag)
	return data, ok && err == nil, err
}

// decodeFragment decodes a window's value encodeFragment wrote. The error says
// what is wrong: another tag, a record that does not decode, a record of
// another kind than a replica, or replicas out of lease order.
func decodeFragment(data []byte) ([]pool.ReplicaRecord, error) {
	b, err := decodeTagged(data, fragmentTag)
	if err != nil {
		return nil, err
	}
	if len(b.Peers)+len(b.Jobs)+len(b.Outcomes)+len(b.Acks)+len(b.Cancels)+len(b.Trust)+len(b.Entries) > 0 {
		return nil, errors.New("an archived window holds other records than replicas")
	}
	if !slices.IsSortedFunc(b.Replicas, func(a, b pool.ReplicaRecord) int { return strings.Compare(a.Lease, b.Lease) }) {
		return nil, errors.New("an archived window's replicas are not in lease order")
	}
	return b.Replicas, nil
}

// get returns the archived replica lease, or an error wrapping
// pool.ErrUnknownLease when the bucket has none: from its window's
// fragments, read in the order they were stored, each by JetStream's
// direct get of the next message whose subject is one of the window's
// (no consumer, no listing), else from a key of its own. A fragment
// that does not decode is an error that names its key, unless another
// fragment or a key of its own holds the replica.
func (a *archive) get(ctx context.Context, lease string) (pool.ReplicaRecord, error) {
	if len(lease) > maxLeaseID || lease == "" {
		return pool.ReplicaRecord{}, fmt.Errorf("replica of a %d-byte lease ID: %w", len(lease), pool.ErrUnknownLease)
	}
	var badErr error
	if windowLease(lease) {
		r, found, bad, err := a.fromWindow(ctx, lease)
		if err != nil || found {
			return r, err
		}
		badErr = bad
	}
	e, err := a.kv.Get(ctx, leaseKey(lease))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		if badErr != nil {
			return pool.ReplicaRecord{}, badErr
		}
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

// fromWindow returns replica lease (a windowLease) from its window's
// fragments; found is false when none holds it, and bad then says why
// the first fragment that did not decode did not (nil when all did).
func (a *archive) fromWindow(ctx context.Context, lease string) (r pool.ReplicaRecord, found bool, bad, err error) {
	filter := "$KV." + a.bucket + "." + windowPrefix(lease) + "*"
	next := uint64(1)
	for range maxFragments {
		m, err := a.stream.GetMsg(ctx, next, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return r, false, bad, nil
		}
		if err != nil {
			return r, false, nil, fmt.Errorf("cluster: read the archived window of %s: %w", lease, unavailable(err))
		}
		next = m.Sequence + 1
		if len(m.Data) == 0 {
			continue // a delete marker
		}
		rs, err := decodeFragment(m.Data)
		if err != nil {
			if bad == nil {
				bad = fmt.Errorf("cluster: decode archived window %s: %w", strings.TrimPrefix(m.Subject, "$KV."+a.bucket+"."), err)
			}
			continue
		}
		if i, ok := slices.BinarySearchFunc(rs, lease, func(r pool.ReplicaRecord, l string) int { return strings.Compare(r.Lease, l) }); ok {
			return rs[i], true, nil, nil
		}
	}
	return r, false, nil, fmt.Errorf("cluster: the archived window of %s has more than %d fragments", lease, maxFragments)
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
