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
// Keys: a snapshot stores the replicas it archives in parts, "p.", the
// first 8 hex digits of their lease IDs, ".", the part's first lease
// ID, ".", its last, "." and the stream sequence of the state the
// snapshot covers (in decimal), so that two nodes that archive at once
// (a term's overlap) never write over each other's part with another
// one: at one sequence every node holds the same state, and a put done
// again by the same node holds what it held and more. a part holds up to partMax replicas (and about
// partBytes of results and reasons) whose lease IDs share those
// partStretch digits, in lease order. A lease ID's first 16 hex digits
// are the nanosecond it was minted (pool.NewLeaseID), so one part's
// leases were minted within the same 2^32 ns (about 4.3 s), and a lookup
// lists only the parts of that stretch of time. A part's value is CBOR tag partTag
// over the replicas written as the state stream's batches are (cbor-v2:
// records as arrays, strings and job IDs in a table). Before parts
// (versions up to 3bf14e8), and for a replica whose lease ID is not 32
// lowercase hex digits or whose times cbor-v2 cannot hold, the key was
// "l." and the lease ID in unpadded base64url, and the value the gob
// encoding of its pool.ReplicaRecord: those are still read. The key
// "archived" holds a stream sequence S (in decimal): every replica done
// in the state up to S is in the bucket.
const ArchiveBucket = "idlepool_replicas"

const (
	archivedKey = "archived"
	// archiveWindow is how many values (parts, or replicas of a key of
	// their own) are written before their acknowledgements are awaited.
	archiveWindow = 1024
	// partMax is the most replicas one part holds, and partBytes about
	// the most bytes of results and reasons: some 100 to 300 bytes a
	// replica besides those, so a part of empty results is under 300 KB
	// (a lookup decodes a whole part), and any part is well under the
	// server's 8 MiB max payload.
	partMax   = 1024
	partBytes = 1 << 20
	// partStretch is how many hex digits of a lease ID (from the start:
	// its stamp's highest bits) the replicas of one part share: 2^32 ns.
	// A lookup lists the keys of its stretch, which costs the server
	// about the bytes the stretch's parts hold: at 10,000 tasks a second
	// some 86,000 replicas, 25 MB.
	partStretch = 8
	// partTag is the CBOR tag (RFC 8949 section 3.4, from the range
	// any application may use) of a part's value.
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

// put stores recs in parts (ArchiveBucket), each replica whose lease
// ID is not 32 lowercase hex digits or whose times cbor-v2 cannot hold
// under a key of its own, and returns once every value is acknowledged;
// a window of archiveWindow values not acknowledged within timeout wraps
// pool.ErrStoreUnavailable. seq is the stream sequence of the state
// recs were taken from (part of each part's key). Storing replicas again
// stores the same records (a done replica never changes): a put that
// failed half way is simply done again.
func (a *archive) put(ctx context.Context, recs []*pool.ReplicaRecord, seq uint64, timeout time.Duration) error {
	vals, err := archiveValues(recs, seq)
	if err != nil {
		return err
	}
	subj := "$KV." + a.bucket + "."
	for len(vals) > 0 {
		n := min(len(vals), archiveWindow)
		acks := make([]jetstream.PubAckFuture, 0, n)
		for _, v := range vals[:n] {
			f, err := a.js.PublishAsync(subj+v.key, v.data)
			if err != nil {
				return fmt.Errorf("cluster: archive replicas (%s): %w", v.key, unavailable(err))
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
		vals = vals[n:]
	}
	return nil
}

// archiveValue is one key of ArchiveBucket and its value.
type archiveValue struct {
	key  string
	data []byte
}

// archiveValues returns the keys and values put stores for recs: the
// replicas of part leases (partLease) sorted by lease, each lease once,
// cut into parts of at most partMax replicas and about partBytes, each
// within one stretch (the first partStretch hex digits); and a key of
// its own for each other replica and each replica of a part cbor-v2
// cannot hold; seq ends the parts' keys. recs is not changed.
func archiveValues(recs []*pool.ReplicaRecord, seq uint64) ([]archiveValue, error) {
	var out []archiveValue
	sorted := make([]*pool.ReplicaRecord, 0, len(recs))
	for _, r := range recs {
		if partLease(r.Lease) {
			sorted = append(sorted, r)
			continue
		}
		v, err := replicaValue(r)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	slices.SortFunc(sorted, func(a, b *pool.ReplicaRecord) int { return strings.Compare(a.Lease, b.Lease) })
	var part []pool.ReplicaRecord
	size := 0
	flush := func() error {
		if len(part) == 0 {
			return nil
		}
		defer func() { part, size = part[:0], 0 }()
		data, ok, err := encodePart(part)
		if err != nil {
			return fmt.Errorf("cluster: encode archived replicas %s to %s: %w", part[0].Lease, part[len(part)-1].Lease, err)
		}
		if ok {
			out = append(out, archiveValue{partKey(part[0].Lease, part[len(part)-1].Lease, seq), data})
			return nil
		}
		for i := range part {
			v, err := replicaValue(&part[i])
			if err != nil {
				return err
			}
			out = append(out, v)
		}
		return nil
	}
	for _, r := range sorted {
		if n := len(part); n > 0 && part[n-1].Lease == r.Lease {
			continue // noted done twice: once is enough
		}
		rs := replicaSize(r)
		if n := len(part); n > 0 && (n == partMax || size+rs > partBytes || part[0].Lease[:partStretch] != r.Lease[:partStretch]) {
			if err := flush(); err != nil {
				return nil, err
			}
		}
		part = append(part, *r)
		size += rs
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return out, nil
}

// replicaSize is about how many bytes r adds to a part beyond its fixed
// fields: its result, reason and result's chunk list.
func replicaSize(r *pool.ReplicaRecord) int {
	n := len(r.Result) + len(r.Reason)
	if r.Ref != nil {
		n += 48 * len(r.Ref.Chunks)
	}
	return n
}

// replicaValue is r under a key of its own, in gob (the form before
// parts).
func replicaValue(r *pool.ReplicaRecord) (archiveValue, error) {
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(r); err != nil {
		return archiveValue{}, fmt.Errorf("cluster: encode replica %s: %w", r.Lease, err)
	}
	return archiveValue{leaseKey(r.Lease), buf.Bytes()}, nil
}

// partLease reports whether lease is 32 lowercase hex digits, as the
// Scheduler mints them (pool.NewLeaseID): the leases kept in parts.
func partLease(lease string) bool {
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

// partPrefix is the start of the keys of the parts that may hold lease,
// a partLease: "p.", its stretch, ".".
func partPrefix(lease string) string { return "p." + lease[:partStretch] + "." }

// partKey is the key of the part from lease first to lease last, which
// share their stretch, archived from the state at stream sequence seq.
func partKey(first, last string, seq uint64) string {
	return partPrefix(first) + first + "." + last + "." + strconv.FormatUint(seq, 10)
}

// partRange returns the first and last lease of part key k, which
// begins with prefix; ok is false when k is not a part's key.
func partRange(k, prefix string) (first, last string, ok bool) {
	rest, ok := strings.CutPrefix(k, prefix)
	if !ok {
		return "", "", false
	}
	first, rest, ok1 := strings.Cut(rest, ".")
	last, _, ok2 := strings.Cut(rest, ".")
	return first, last, ok1 && ok2
}

// encodePart encodes rs, in lease order, as a part's value; ok is false
// when cbor-v2 cannot hold one of their times.
func encodePart(rs []pool.ReplicaRecord) (data []byte, ok bool, err error) {
	w, ok := toWire(&pool.Batch{Replicas: rs})
	if !ok {
		return nil, false, nil
	}
	data, err = wireEnc.Marshal(cbor.Tag{Number: partTag, Content: w})
	return data, err == nil, err
}

// decodePart decodes a part encodePart wrote. The error says what is
// wrong: another tag, a record that does not decode, a record of
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
		return nil, errors.New("an archived part holds other records than replicas")
	}
	if !slices.IsSortedFunc(b.Replicas, func(a, b pool.ReplicaRecord) int { return strings.Compare(a.Lease, b.Lease) }) {
		return nil, errors.New("an archived part's replicas are not in lease order")
	}
	return b.Replicas, nil
}

// get returns the archived replica lease, or an error wrapping
// pool.ErrUnknownLease when the bucket has none: from the parts of its
// stretch whose keys' range holds it, else from a key of its own.
func (a *archive) get(ctx context.Context, lease string) (pool.ReplicaRecord, error) {
	if len(lease) > maxLeaseID {
		return pool.ReplicaRecord{}, fmt.Errorf("replica of a %d-byte lease ID: %w", len(lease), pool.ErrUnknownLease)
	}
	if partLease(lease) {
		r, ok, err := a.fromParts(ctx, lease)
		if err != nil || ok {
			return r, err
		}
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

// fromParts returns replica lease (a partLease) from the parts of its
// stretch; ok is false when none holds it.
func (a *archive) fromParts(ctx context.Context, lease string) (r pool.ReplicaRecord, ok bool, err error) {
	prefix := partPrefix(lease)
	kl, err := a.kv.ListKeysFiltered(ctx, prefix+">")
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return r, false, nil
	}
	if err != nil {
		return r, false, fmt.Errorf("cluster: list the archived parts of %s: %w", lease, unavailable(err))
	}
	var keys []string
	for k := range kl.Keys() {
		if first, last, ok := partRange(k, prefix); ok && first <= lease && lease <= last {
			keys = append(keys, k)
		}
	}
	if err := ctx.Err(); err != nil { // the list ended early
		return r, false, fmt.Errorf("cluster: list the archived parts of %s: %w", lease, unavailable(err))
	}
	for _, k := range keys {
		e, err := a.kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return r, false, fmt.Errorf("cluster: read archived part %s: %w", k, unavailable(err))
		}
		rs, err := decodePart(e.Value())
		if err != nil {
			return r, false, fmt.Errorf("cluster: decode archived part %s: %w", k, err)
		}
		if i, found := slices.BinarySearchFunc(rs, lease, func(r pool.ReplicaRecord, l string) int { return strings.Compare(r.Lease, l) }); found {
			return rs[i], true, nil
		}
	}
	return r, false, nil
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
