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

	"github.com/fxamacker/cbor/v2"
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
// is stored with the others of its window, the leases minted within
// the same 2^20 ns (1.05 ms, the ID's first windowDigits digits): key
// "w." and those digits, value CBOR tag partTag over the window's
// replicas in lease order, written as the state stream's batches are
// (cbor-v2: records as arrays, strings and job IDs in a table). A lookup
// reads that one key. Replicas of one window done at different
// snapshots are merged into it, by compare-and-set on its revision, so
// that two nodes archiving at once (a term's overlap) lose neither's.
// Before windows (versions up to 3bf14e8), and for a replica whose lease
// ID is not the Scheduler's, whose times cbor-v2 cannot hold, or whose
// window's value would pass maxWindowBytes, the key is "l." and the
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
	// replica per window, as a key each did.
	windowDigits = 11
	// maxWindowBytes bounds a window's value (the server's max payload
	// is 8 MiB): replicas that would pass it go under keys of their own.
	maxWindowBytes = 4 << 20
	// mergeTries bounds the compare-and-set rounds of one window's
	// merge (each lost to another writer's merge of the same window).
	mergeTries = 8
	// partTag is the CBOR tag (RFC 8949 section 3.4, from the range
	// any application may use) of a window's value.
	partTag = 0x72657032 // "rep2"
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

// put stores recs (ArchiveBucket): each window's replicas under its
// key, created when the bucket has no such key and merged into the
// stored value when it has; each replica that goes under a key of its
// own, so. It returns once every value is acknowledged; a batch of
// values not acknowledged within timeout wraps pool.ErrStoreUnavailable.
// Storing replicas again stores the same records (a done replica never
// changes): a put that failed half way is simply done again.
func (a *archive) put(ctx context.Context, recs []*pool.ReplicaRecord, timeout time.Duration) error {
	windows, own := archiveGroups(recs)
	var merge [][]pool.ReplicaRecord // windows whose key exists
	subj := "$KV." + a.bucket + "."
	type pending struct {
		f   jetstream.PubAckFuture
		win []pool.ReplicaRecord // nil for a replica of its own key
	}
	var inFlight []pending
	size := 0
	wait := func() error {
		t := time.NewTimer(timeout)
		defer t.Stop()
		for _, p := range inFlight {
			select {
			case <-p.f.Ok():
			case err := <-p.f.Err():
				if p.win != nil && wrongLastSeq(err) {
					merge = append(merge, p.win)
					continue
				}
				return fmt.Errorf("cluster: archive replicas: %w", unavailable(err))
			case <-t.C:
				return fmt.Errorf("cluster: archive replicas: %w: no acknowledgement within %s", pool.ErrStoreUnavailable, timeout)
			case <-ctx.Done():
				return fmt.Errorf("cluster: archive replicas: %w", unavailable(ctx.Err()))
			}
		}
		inFlight, size = inFlight[:0], 0
		return nil
	}
	publish := func(key string, data []byte, win []pool.ReplicaRecord, opts ...jetstream.PublishOpt) error {
		f, err := a.js.PublishAsync(subj+key, data, opts...)
		if err != nil {
			return fmt.Errorf("cluster: archive replicas (%s): %w", key, unavailable(err))
		}
		inFlight, size = append(inFlight, pending{f, win}), size+len(data)
		if len(inFlight) >= archiveWindow || size >= archiveBytes {
			return wait()
		}
		return nil
	}
	for _, win := range windows {
		data, ok, err := encodePart(win)
		if err != nil {
			return fmt.Errorf("cluster: encode archived window %s: %w", windowKey(win[0].Lease), err)
		}
		if !ok || len(data) > maxWindowBytes {
			for i := range win {
				own = append(own, &win[i])
			}
			continue
		}
		// Created only where the key is new; else merged below.
		if err := publish(windowKey(win[0].Lease), data, win, jetstream.WithExpectLastSequencePerSubject(0)); err != nil {
			return err
		}
	}
	for _, r := range own {
		v, err := replicaValue(r)
		if err != nil {
			return err
		}
		if err := publish(v.key, v.data, nil); err != nil {
			return err
		}
	}
	if err := wait(); err != nil {
		return err
	}
	for _, win := range merge {
		if err := a.merge(ctx, win, timeout); err != nil {
			return err
		}
	}
	return nil
}

// merge stores win, replicas of one window in lease order, into the
// window's stored value by compare-and-set, trying again when another
// writer changed it meanwhile; replicas that would take the value past
// maxWindowBytes, or a stored value that does not decode (it is left as
// it is), send win's replicas to keys of their own instead.
func (a *archive) merge(ctx context.Context, win []pool.ReplicaRecord, timeout time.Duration) error {
	key := windowKey(win[0].Lease)
	for range mergeTries {
		mctx, cancel := context.WithTimeout(ctx, timeout)
		e, err := a.kv.Get(mctx, key)
		cancel()
		var rev uint64
		var stored []pool.ReplicaRecord
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return fmt.Errorf("cluster: archive replicas: read window %s: %w", key, unavailable(err))
		default:
			rev = e.Revision()
			if stored, err = decodePart(e.Value()); err != nil {
				return a.putOwn(ctx, win, timeout)
			}
		}
		data, ok, err := encodePart(mergeWindow(stored, win))
		if err != nil {
			return fmt.Errorf("cluster: encode archived window %s: %w", key, err)
		}
		if !ok || len(data) > maxWindowBytes {
			return a.putOwn(ctx, win, timeout)
		}
		mctx, cancel = context.WithTimeout(ctx, timeout)
		_, err = a.kv.Update(mctx, key, data, rev)
		cancel()
		if err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("cluster: archive replicas: write window %s: %w", key, unavailable(err))
		}
	}
	return fmt.Errorf("cluster: archive replicas: window %s: %w: changed by another writer at each of %d tries", key, pool.ErrStoreUnavailable, mergeTries)
}

// putOwn stores each replica of win under a key of its own.
func (a *archive) putOwn(ctx context.Context, win []pool.ReplicaRecord, timeout time.Duration) error {
	for i := range win {
		v, err := replicaValue(&win[i])
		if err != nil {
			return err
		}
		mctx, cancel := context.WithTimeout(ctx, timeout)
		_, err = a.kv.Put(mctx, v.key, v.data)
		cancel()
		if err != nil {
			return fmt.Errorf("cluster: archive replica %s: %w", win[i].Lease, unavailable(err))
		}
	}
	return nil
}

// mergeWindow returns the replicas of stored and add, both in lease
// order, in lease order, each lease once (add's where both have it: a
// done replica never changes, so they are the same).
func mergeWindow(stored, add []pool.ReplicaRecord) []pool.ReplicaRecord {
	out := make([]pool.ReplicaRecord, 0, len(stored)+len(add))
	i, j := 0, 0
	for i < len(stored) || j < len(add) {
		switch {
		case j == len(add) || i < len(stored) && stored[i].Lease < add[j].Lease:
			out = append(out, stored[i])
			i++
		case i == len(stored) || add[j].Lease < stored[i].Lease:
			out = append(out, add[j])
			j++
		default:
			out = append(out, add[j])
			i, j = i+1, j+1
		}
	}
	return out
}

// wrongLastSeq reports whether err is JetStream's answer to a publish
// whose expected last sequence for its subject did not hold (the key
// exists): code 10071, or 10164 from a replicated stream.
func wrongLastSeq(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// archiveValue is one key of ArchiveBucket and its value.
type archiveValue struct {
	key  string
	data []byte
}

// archiveGroups returns recs as put stores them: the replicas of the
// Scheduler's leases (windowLease) sorted by lease, each lease once,
// grouped by window, and the others, each for a key of its own. recs is
// not changed.
func archiveGroups(recs []*pool.ReplicaRecord) (windows [][]pool.ReplicaRecord, own []*pool.ReplicaRecord) {
	sorted := make([]*pool.ReplicaRecord, 0, len(recs))
	for _, r := range recs {
		if windowLease(r.Lease) {
			sorted = append(sorted, r)
		} else {
			own = append(own, r)
		}
	}
	slices.SortFunc(sorted, func(a, b *pool.ReplicaRecord) int { return strings.Compare(a.Lease, b.Lease) })
	var win []pool.ReplicaRecord
	for _, r := range sorted {
		if n := len(win); n > 0 && win[n-1].Lease == r.Lease {
			continue // noted done twice: once is enough
		}
		if n := len(win); n > 0 && win[0].Lease[:windowDigits] != r.Lease[:windowDigits] {
			windows = append(windows, win)
			win = nil
		}
		win = append(win, *r)
	}
	if len(win) > 0 {
		windows = append(windows, win)
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
// Scheduler mints them (pool.NewLeaseID): the leases kept in windows.
func windowLease(lease string) bool {
	if len(lease) != 32 {
		return false
	}
	for i := range len(lease) {
		if c := lease[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// windowKey is the key of the window of lease, a windowLease.
func windowKey(lease string) string { return "w." + lease[:windowDigits] }

// encodePart encodes rs, in lease order, as a window's value; ok is
// false when cbor-v2 cannot hold one of their times.
func encodePart(rs []pool.ReplicaRecord) (data []byte, ok bool, err error) {
	w, ok := toWire(&pool.Batch{Replicas: rs})
	if !ok {
		return nil, false, nil
	}
	data, err = wireEnc.Marshal(cbor.Tag{Number: partTag, Content: w})
	return data, err == nil, err
}

// decodePart decodes a window's value encodePart wrote. The error says
// what is wrong: another tag, a record that does not decode, a record of
// another kind than a replica, or replicas out of lease order.
func decodePart(data []byte) ([]pool.ReplicaRecord, error) {
	var t cbor.RawTag
	if err := batchDec.Unmarshal(data, &t); err != nil {
		return nil, err
	}
	if t.Number != partTag {
		return nil, fmt.Errorf("tag %d, want %d (written by a newer idlepool?)", t.Number, uint64(partTag))
	}
	var w wireBatch
	if err := batchDec.Unmarshal(t.Content, &w); err != nil {
		return nil, err
	}
	b, err := fromWire(&w)
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
// pool.ErrUnknownLease when the bucket has none: from its window, else
// from a key of its own. A window that does not decode is an error that
// names its key, unless the replica is under a key of its own.
func (a *archive) get(ctx context.Context, lease string) (pool.ReplicaRecord, error) {
	if len(lease) > maxLeaseID {
		return pool.ReplicaRecord{}, fmt.Errorf("replica of a %d-byte lease ID: %w", len(lease), pool.ErrUnknownLease)
	}
	var winErr error
	if windowLease(lease) {
		key := windowKey(lease)
		e, err := a.kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return pool.ReplicaRecord{}, fmt.Errorf("cluster: read archived window %s: %w", key, unavailable(err))
		default:
			rs, err := decodePart(e.Value())
			if err != nil {
				winErr = fmt.Errorf("cluster: decode archived window %s: %w", key, err)
				break
			}
			if i, found := slices.BinarySearchFunc(rs, lease, func(r pool.ReplicaRecord, l string) int { return strings.Compare(r.Lease, l) }); found {
				return rs[i], nil
			}
		}
	}
	e, err := a.kv.Get(ctx, leaseKey(lease))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		if winErr != nil {
			return pool.ReplicaRecord{}, winErr
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
