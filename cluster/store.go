package cluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/gob"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"idlepool/pool"
)

// Names of the pool's state in JetStream.
const (
	// StateStream is the stream that holds the pool's state as a log of
	// committed batches, one message (or several parts) per batch.
	StateStream = "IDLEPOOL_STATE"
	stateSubj   = "idlepool.state"

	// Headers of a state message.
	hdrBatch = "Idlepool-Batch" // hex SHA-256 naming the batch
	hdrPart  = "Idlepool-Part"  // "i/n", 1-based
	hdrFmt   = "Idlepool-Format"

	// batchFormat is the encoding of the batches this version writes:
	// CBOR (RFC 8949) of a wireBatch (batchwire.go), a pool.Batch with
	// its records as arrays, their strings and job IDs in tables, a
	// signed batch's entries as a block. batchFormatV1, CBOR of a
	// pool.Batch with field names as keys and times as RFC 3339 text, is
	// written for a batch cbor-v2 cannot hold exactly, and read.
	// batchFormatGob, the encoding before it (one gob stream per message,
	// type descriptions included), is still read: a stream written by an
	// older node applies.
	batchFormat    = "cbor-v2"
	batchFormatV1  = "cbor-v1"
	batchFormatGob = "gob-v1"

	// maxPart is the largest state message body; a larger batch is split
	// into parts (the server's max_payload is set above it, see Node).
	maxPart = 4 << 20
)

// ErrFenced means another node committed to the pool's state since this
// Store loaded it: the node is no longer (or never was) the one in charge,
// and its Scheduler must stop. It wraps pool.ErrConflict.
var ErrFenced = fmt.Errorf("cluster: another node wrote the pool's state (this node is not in charge): %w", pool.ErrConflict)

// Store is a pool.Store whose durable state is the JetStream stream
// IDLEPOOL_STATE (or its shard's, StoreConfig.Shard), replicated to Replicas nodes by JetStream's RAFT: every
// Commit appends the whole Batch (CBOR-encoded, split into parts of at most
// 4 MiB that are applied together) with an expected last sequence, so a
// Store whose view is stale — a node that lost the leadership, on either
// side of a partition — can never append (ErrFenced), and with a message
// ID derived from the batch and its position, so a Commit retried after a
// timeout is deduplicated by JetStream instead of applied twice. Load
// replays the stream into a pool.MemStore, which then answers Load and
// Entries and checks every compare-and-set before anything is appended.
// Replicas that are done (settled, their task decided and its outcome
// acknowledged) leave that memory once a snapshot archived them
// (WriteSnapshot, ArchiveBucket): Load leaves them out (the Scheduler
// loads nothing from them) and Replica reads them back on demand; so do
// the ledger's older entries (LedgerBucket), which Entries reads back.
//
// A Commit that gets no answer in time (no quorum: this node is in a
// minority or the cluster is electing) wraps pool.ErrStoreUnavailable;
// the Scheduler retries the same batch, which deduplicates. Store is safe
// for concurrent use.
type Store struct {
	js      jetstream.JetStream
	timeout time.Duration
	shard   Shard
	stream  string // shard.Stream()
	subj    string // shard.Subject()

	snaps  *snapshots
	arch   *archive
	ledger *ledgerArchive

	mu  sync.Mutex // held by Commit, Load and catching up
	mem *pool.MemStore
	// marks say how many replicas were done in mem after which stream
	// sequence (oldest first, those not forgotten); forgot is the
	// position before which mem's done replicas were forgotten
	// (archive.go).
	marks  []doneMark
	forgot int
	// applied is the last part of the last batch applied to mem. It is
	// written under mu and read without it too (Applied), which a commit
	// or a long catch-up holds.
	applied atomic.Uint64
	lastSeq uint64 // the stream's last sequence, as Commit expects it
	inUse   bool   // a Scheduler loaded this Store (Load until Release)
	// resting stops Follow's catch-ups (SetFollowing(false)).
	resting atomic.Bool
	// loading counts the Loads and Releases waiting for mu; Follow
	// starts no catch-up while it is above zero, and they cancel the one
	// under way (followStop, guarded by followMu): a node taking charge
	// loads at once, without waiting for a catch-up stalled on a stream
	// whose leader died (lockBeforeFollow).
	loading    atomic.Int32
	followMu   sync.Mutex
	followStop context.CancelFunc
	snapSeq    uint64 // the newest snapshot this Store wrote or loaded
	// loads counts the snapshots this Store loaded, for tests.
	loads int
}

var _ pool.Store = (*Store)(nil)

// StoreConfig configures OpenStore.
type StoreConfig struct {
	// Replicas is the stream's replication factor: 3 in a cluster of 3 or
	// more nodes, 1 for one node. Default 1.
	Replicas int
	// Timeout bounds one append; past it Commit wraps
	// pool.ErrStoreUnavailable. Default 5 s.
	Timeout time.Duration
	// Shard is the shard whose state the Store holds: its stream,
	// snapshots and archives (Shard's methods name them). The zero
	// Shard is shard 0 of 1, the names a pool had before it was
	// divided (StateStream, SnapshotBucket, ArchiveBucket,
	// LedgerBucket).
	Shard Shard
}

// OpenStore creates the state stream of cfg.Shard (IDLEPOOL_STATE for
// shard 0) if it does not exist (file storage, cfg.Replicas replicas,
// 2-minute duplicate window), the object store of its snapshots
// (SnapshotBucket for shard 0) and the buckets of its archives, and
// returns a Store over them. Two shards' Stores share nothing: each
// reads and writes only its own shard's stream, snapshots and archives.
// A cfg.Shard out of range is an error wrapping ErrShard. Call Load
// before Commit: Load fixes the sequence the first Commit expects.
func OpenStore(ctx context.Context, js jetstream.JetStream, cfg StoreConfig) (*Store, error) {
	if err := cfg.Shard.Validate(); err != nil {
		return nil, fmt.Errorf("cluster: open store: %w", err)
	}
	if cfg.Replicas <= 0 {
		cfg.Replicas = 1
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	sh := cfg.Shard
	snaps, err := openSnapshots(ctx, js, sh.Snapshots(), cfg.Replicas)
	if err != nil {
		return nil, err
	}
	arch, err := openArchive(ctx, js, sh.Archive(), cfg.Replicas)
	if err != nil {
		return nil, err
	}
	ledger, err := openLedgerArchive(ctx, js, sh.Ledger(), cfg.Replicas)
	if err != nil {
		return nil, err
	}
	newStore := func() *Store {
		return &Store{js: js, shard: sh, stream: sh.Stream(), subj: sh.Subject(), snaps: snaps, arch: arch, ledger: ledger,
			timeout: cfg.Timeout, mem: pool.NewMemStore()}
	}
	_, err = js.Stream(ctx, sh.Stream())
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		if err != nil {
			return nil, fmt.Errorf("cluster: open stream %s: %w", sh.Stream(), unavailable(err))
		}
		return newStore(), nil
	}
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{
		Name:        sh.Stream(),
		Description: "idlepool: the pool's committed state, one batch per message",
		Subjects:    []string{sh.Subject()},
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardNew,
		MaxMsgSize:  maxPart + 64<<10,
		Duplicates:  2 * time.Minute,
	})
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		err = nil // another node made it meanwhile
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: create stream %s: %w", sh.Stream(), unavailable(err))
	}
	return newStore(), nil
}

// Shard returns the shard whose state the Store holds.
func (s *Store) Shard() Shard { return s.shard }

// LastSeq returns the stream sequence of the last message this Store has
// loaded or appended.
func (s *Store) LastSeq() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastSeq
}

// Applied returns the stream sequence of the last batch applied to the
// Store's memory: by its own commits, by Load, or by Follow. 0 means it
// has applied nothing (a node that has neither led nor followed).
// It does not wait for a commit or a catch-up under way.
func (s *Store) Applied() uint64 { return s.applied.Load() }

// Load brings the Store's memory up to the stream's end and returns its
// snapshot; from then on the Store is in use by one Scheduler (Follow
// stops applying) until Release. A Store that has followed the stream
// (Follow) only applies what it has not seen, so a node that takes over
// is ready in the time its last few batches take; a cold one loads the
// newest snapshot (WriteSnapshot) and replays the batches after it. A batch whose parts are incomplete (a node died between
// appending them) is skipped: no answer was given for it. A batch that
// does not apply is corruption: the error names its sequence. What does
// not answer (an election under way) is retried for three timeouts.
func (s *Store) Load(ctx context.Context) (*pool.Snapshot, error) {
	s.lockBeforeFollow()
	defer s.mu.Unlock()
	deadline := time.Now().Add(3 * s.timeout)
	for {
		err := s.catchUp(ctx)
		if err == nil {
			break
		}
		if !errors.Is(err, pool.ErrStoreUnavailable) {
			// Start over from nothing once: what was applied may be
			// what no longer fits (never expected, but cheap to rule out).
			s.resetMem(pool.NewMemStore(), 0)
			s.lastSeq = 0
			if err2 := s.catchUp(ctx); err2 != nil {
				return nil, err
			}
			break
		}
		if time.Now().After(deadline) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("cluster: load: %w (last: %w)", ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	s.inUse = true
	return s.mem.Load(ctx)
}

// Release ends the use Load began: the Scheduler on this Store stopped
// (its node is no longer in charge). Follow applies others' batches
// again; a resting Store (SetFollowing) empties its memory instead.
func (s *Store) Release() {
	s.lockBeforeFollow()
	s.inUse = false
	s.dropIfResting()
	s.mu.Unlock()
}

// lockBeforeFollow takes s.mu for Load or Release, which a node taking
// charge calls: it cancels Follow's catch-up under way, and Follow
// starts none while it waits.
func (s *Store) lockBeforeFollow() {
	s.followMu.Lock()
	s.loading.Add(1)
	if s.followStop != nil {
		s.followStop()
	}
	s.followMu.Unlock()
	s.mu.Lock()
	s.loading.Add(-1)
}

// SetFollowing says whether Follow catches up (true, the default) or
// rests (false): a node of a divided pool stands by warm for the
// shards of which it is the successor (cluster.Successor) and lets the
// others rest, so that it applies a share of the pool's batches, not
// all of them, and a cold standby rests always. A resting Store holds
// none of the state in memory while no Scheduler uses it: Follow drops
// what it applied (at its next interval) and so does Release, and the
// next Load loads the newest snapshot and the batches after it, as a
// node that starts from nothing does. A catch-up under way ends as it
// would.
func (s *Store) SetFollowing(on bool) { s.resting.Store(!on) }

// dropIfResting empties the memory of a resting Store that no Scheduler
// uses; s.mu is held.
func (s *Store) dropIfResting() {
	if s.resting.Load() && !s.inUse && s.applied.Load() > 0 {
		s.resetMem(pool.NewMemStore(), 0)
		s.lastSeq, s.snapSeq = 0, 0
	}
}

// Follow applies the batches other nodes append, every interval, until
// ctx ends, so that this node's memory is warm when it takes over. It
// applies nothing while a Scheduler uses the Store (between Load and
// Release): that Scheduler's view must change only by its own commits.
// A catch-up holds the Store's lock, which Load waits for: a request to
// a stream whose leader had just died took its whole timeout (5 s) under
// it, and the node taking over the pool waited as long before it even
// started to load. So Load (and Release) cancels the catch-up under
// way, and none starts while one waits; what a catch-up applied stays
// applied (batches apply whole). None starts while the Store rests
// (SetFollowing). Each catch-up is also bounded, twice
// interval at first, twice as long after one that ran out of its time
// (at most maxFollowTry; back to the first bound once one ends). Errors
// are logged by the caller through onErr (nil: ignored) and retried.
func (s *Store) Follow(ctx context.Context, interval time.Duration, onErr func(error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	first := 2 * interval
	try := first
	for {
		var (
			err          error
			cut, stopped bool
		)
		switch {
		case s.loading.Load() != 0:
		case s.resting.Load():
			if s.applied.Load() > 0 && s.mu.TryLock() {
				s.dropIfResting()
				s.mu.Unlock()
			}
		default:
			cut, stopped, err = s.followOnce(ctx, try)
		}
		switch {
		case cut:
			try = min(2*try, max(maxFollowTry, first))
		case err == nil:
			try = first
		}
		if err != nil && !stopped && onErr != nil && ctx.Err() == nil {
			onErr(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// followOnce is one catch-up of Follow, bounded by try: cut says
// whether it ran out of try, stopped whether a Load or Release cancelled
// it, err is its error. Nothing is done while a Scheduler uses the Store,
// or once a Load or Release waits.
func (s *Store) followOnce(ctx context.Context, try time.Duration) (cut, stopped bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inUse {
		return false, false, nil
	}
	fctx, cancel := context.WithTimeout(ctx, try)
	defer cancel()
	// A Load or Release that came after Follow's check either finds this
	// catch-up to cancel or is found here (both under followMu).
	s.followMu.Lock()
	waiting := s.loading.Load() > 0
	if !waiting {
		s.followStop = cancel
	}
	s.followMu.Unlock()
	if waiting {
		return false, false, nil
	}
	err = s.catchUp(fctx)
	s.followMu.Lock()
	s.followStop = nil
	s.followMu.Unlock()
	return err != nil && errors.Is(fctx.Err(), context.DeadlineExceeded), err != nil && errors.Is(fctx.Err(), context.Canceled), err
}

// catchUpIdle is how long the server keeps a catch-up's consumer that
// nobody reads (one whose node died, or whose delete was lost).
const catchUpIdle = time.Minute

// maxFollowTry bounds Follow's longest catch-up: a warm node that
// starts from nothing loads the newest snapshot in one (a pool of 10^6
// decided tasks: under half a second).
const maxFollowTry = 16 * time.Second

// catchUp applies the stream's complete batches after s.applied.Load() to
// s.mem and sets s.lastSeq to the stream's end; s.mu is held. A Store
// that has applied nothing, or whose next batch was trimmed from the
// stream, first loads the newest snapshot. On error s.mem and s.applied.Load()
// are still consistent (every batch applies whole).
func (s *Store) catchUp(ctx context.Context) error {
	st, err := s.js.Stream(ctx, s.stream)
	if err != nil {
		return fmt.Errorf("cluster: open stream %s: %w", s.stream, unavailable(err))
	}
	info, err := st.Info(ctx)
	if err != nil {
		return fmt.Errorf("cluster: stream %s info: %w", s.stream, unavailable(err))
	}
	end := info.State.LastSeq
	if trimmed := s.applied.Load()+1 < info.State.FirstSeq; trimmed || (s.applied.Load() == 0 && end > 0) {
		img, seq, err := s.snaps.newest(ctx)
		if err != nil {
			return err
		}
		if seq > s.applied.Load() {
			mem, err := pool.NewMemStoreFrom(ctx, img)
			if err != nil {
				return fmt.Errorf("cluster: snapshot %d does not load (the state is corrupt): %w", seq, err)
			}
			s.resetMem(mem, seq)
			s.snapSeq = seq
			s.loads++
		}
		if s.applied.Load()+1 < info.State.FirstSeq {
			return fmt.Errorf("cluster: stream %s starts at %d, but the newest snapshot covers only up to %d (the state is corrupt)", s.stream, info.State.FirstSeq, s.applied.Load())
		}
	}
	if s.applied.Load() >= end || info.State.Msgs == 0 {
		s.lastSeq = max(s.lastSeq, end)
		s.pruneArchived(ctx)
		return nil
	}
	// A consumer of this catch-up's own, made within ctx: an ordered
	// consumer made its server-side consumer at its first fetch, within
	// 10 s of its own whatever ctx said, and retried that forever by
	// default (which held a node's shutdown for minutes once its stream
	// had no majority) or, with one try, held the Store's lock for 10 s
	// when the stream's leader had just died, and with it the node taking
	// charge. In memory, one replica, no acks, as an ordered consumer's;
	// deleted when the catch-up ends, or by the server once idle.
	cons, err := st.CreateConsumer(ctx, jetstream.ConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: s.applied.Load() + 1,
		AckPolicy: jetstream.AckNonePolicy, InactiveThreshold: catchUpIdle, Replicas: 1, MemoryStorage: true})
	if err != nil {
		return fmt.Errorf("cluster: read stream %s: %w", s.stream, unavailable(err))
	}
	defer func() {
		name := cons.CachedInfo().Name
		go func() { // not under the Store's lock: the server drops it once idle anyway
			dctx, cancel := context.WithTimeout(context.Background(), s.timeout)
			defer cancel()
			_ = st.DeleteConsumer(dctx, name)
		}()
	}()
	var (
		parts [][]byte
		name  string
		n     int
		seq   uint64
	)
	seq = s.applied.Load()
	// Each fetch has a context of its own, ended when the fetch's
	// messages are applied or an error returns early, so that the
	// client's fetch goroutine ends with it (with FetchMaxWait it
	// outlived an early return by the wait).
	fetch := func() error {
		fctx, cancel := context.WithTimeout(ctx, s.timeout)
		defer cancel()
		// Exactly the messages up to end, which exist: a fetch of more
		// would wait for its context to expire before it returned. At
		// most 128 (a few MiB of batches): a fetch of 512 large batches
		// did not arrive within the timeout on a busy machine.
		batch, err := cons.Fetch(int(min(128, end-seq)), jetstream.FetchContext(fctx))
		if err != nil {
			return fmt.Errorf("cluster: read stream %s: %w", s.stream, unavailable(err))
		}
		got := 0
		for m := range batch.Messages() {
			got++
			md, err := m.Metadata()
			if err != nil {
				return fmt.Errorf("cluster: state message: %w", err)
			}
			if md.Sequence.Stream != seq+1 {
				// The stream was trimmed behind a newer snapshot while
				// this node read it: the next catch-up loads that.
				return fmt.Errorf("cluster: read stream %s: %w: message %d follows %d (trimmed meanwhile)", s.stream, pool.ErrStoreUnavailable, md.Sequence.Stream, seq)
			}
			seq = md.Sequence.Stream
			if seq > end {
				continue // appended since we looked; the next catch-up applies it
			}
			h := m.Headers()
			format := h.Get(hdrFmt)
			if format != batchFormat && format != batchFormatV1 && format != batchFormatGob {
				return fmt.Errorf("cluster: state message %d has format %q, want %q, %q or %q (written by a newer idlepool?)", seq, format, batchFormat, batchFormatV1, batchFormatGob)
			}
			i, total, err := parsePart(h.Get(hdrPart))
			if err != nil {
				return fmt.Errorf("cluster: state message %d: %w", seq, err)
			}
			if i == 1 {
				parts, name, n = nil, h.Get(hdrBatch), total
			} else if h.Get(hdrBatch) != name || i != len(parts)+1 || total != n {
				// The rest of an incomplete batch was never written;
				// this part belongs to nothing that can be applied.
				parts, name, n = nil, "", 0
				continue
			}
			parts = append(parts, m.Data())
			if len(parts) < n {
				continue
			}
			b, err := decodeBatch(format, bytes.Join(parts, nil))
			parts, name, n = nil, "", 0
			if err != nil {
				return fmt.Errorf("cluster: state message %d: %w", seq, err)
			}
			if err := s.mem.Commit(ctx, b); err != nil {
				return fmt.Errorf("cluster: state message %d does not apply (the state is corrupt): %w", seq, err)
			}
			s.applied.Store(seq)
			s.noteDone(seq)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return fmt.Errorf("cluster: read stream %s: %w", s.stream, unavailable(err))
		}
		if got == 0 {
			return fmt.Errorf("cluster: read stream %s: %w: no messages after %d of %d", s.stream, pool.ErrStoreUnavailable, seq, end)
		}
		return nil
	}
	for seq < end {
		if err := fetch(); err != nil {
			return err
		}
	}
	// Parts of an unfinished batch at the end stay unapplied; appends
	// follow the stream's end all the same.
	s.lastSeq = end
	s.pruneArchived(ctx)
	return nil
}

// Commit appends b to the stream and applies it (see Store and
// pool.Store). Errors: pool.ErrConflict (a compare-and-set that does not
// hold), ErrFenced (another writer appended), pool.ErrStoreUnavailable
// (no answer in time, or the same append still being decided: nothing
// known to be applied; committing the same batch again is safe).
func (s *Store) Commit(ctx context.Context, b *pool.Batch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.mem.CommitThen(ctx, b, func() error {
		format, data, err := encodeBatch(b)
		if err != nil {
			return fmt.Errorf("cluster: encode batch: %w", err)
		}
		last, err := s.append(ctx, format, data)
		if err != nil {
			return err
		}
		s.lastSeq = last
		s.applied.Store(last)
		return nil
	})
	if err == nil {
		s.noteDone(s.applied.Load())
	}
	return err
}

// append writes data, a batch in format, after s.lastSeq and returns
// the sequence of its last part.
func (s *Store) append(ctx context.Context, format string, data []byte) (uint64, error) {
	sum := sha256.Sum256(data)
	name := hex.EncodeToString(sum[:16])
	n := max(1, (len(data)+maxPart-1)/maxPart)
	seq := s.lastSeq
	for i := range n {
		part := data[i*maxPart : min(len(data), (i+1)*maxPart)]
		msg := nats.NewMsg(s.subj)
		msg.Data = part
		msg.Header.Set(hdrFmt, format)
		msg.Header.Set(hdrBatch, name)
		msg.Header.Set(hdrPart, strconv.Itoa(i+1)+"/"+strconv.Itoa(n))
		// The ID names this part at this position: a retry of the same
		// append after a timeout is a duplicate, never a second copy.
		var pos [8]byte
		binary.BigEndian.PutUint64(pos[:], seq)
		id := sha256.Sum256(append(append(pos[:], sum[:]...), byte(i)))
		pctx, cancel := context.WithTimeout(ctx, s.timeout)
		ack, err := s.js.PublishMsg(pctx, msg, jetstream.WithExpectLastSequence(seq),
			jetstream.WithMsgID(hex.EncodeToString(id[:16])), jetstream.WithRetryAttempts(0))
		cancel()
		if err != nil {
			if isWrongLastSeq(err) {
				return 0, fmt.Errorf("append after sequence %d: %w", seq, ErrFenced)
			}
			return 0, fmt.Errorf("cluster: append batch part %d/%d after sequence %d: %w", i+1, n, seq, unavailable(err))
		}
		seq = ack.Sequence
	}
	return seq, nil
}

// Entries returns committed ledger entries (see pool.Store): the newer
// from the loaded state, the older, which a snapshot moved out of memory
// (WriteSnapshot, LedgerBucket), from the archive, a range of
// LedgerRange entries per read (a query that names a peer reads only
// the ranges that name it). So it answers exactly as if every entry
// were in memory. Errors: pool.ErrStoreUnavailable (wrapped) when the
// archive does not answer within the Store's timeout; no partial answer
// is returned.
func (s *Store) Entries(ctx context.Context, q pool.EntryQuery) ([]pool.Entry, error) {
	if q.Max <= 0 {
		return nil, nil
	}
	var out []pool.Entry
	for {
		s.mu.Lock()
		mem := s.mem
		s.mu.Unlock()
		sub := pool.EntryQuery{After: q.After, Max: q.Max - len(out), Peer: q.Peer}
		es, err := mem.Entries(ctx, sub)
		if !errors.Is(err, pool.ErrEntriesArchived) {
			if err != nil {
				return nil, err
			}
			return append(out, es...), nil
		}
		// What memory forgot is in the archive, up to the base at
		// least; the rest is read from memory on the next turn (which
		// may have forgotten more meanwhile: the archive answers that
		// too).
		base, _ := mem.LedgerBase()
		es, err = s.ledger.entries(ctx, sub, base, s.timeout)
		if err != nil {
			return nil, fmt.Errorf("read ledger entries after %d: %w", q.After, err)
		}
		out = append(out, es...)
		if len(out) >= q.Max {
			return out, nil
		}
		q.After = base
	}
}

// CountEntries counts the committed ledger entries by kind
// (pool.EntryCounter), archived ones included, from the counts the
// replicated state in memory keeps.
func (s *Store) CountEntries(ctx context.Context) (map[string]uint64, error) {
	s.mu.Lock()
	mem := s.mem
	s.mu.Unlock()
	return mem.CountEntries(ctx)
}

func isWrongLastSeq(err error) bool {
	var ae *jetstream.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || ae.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
	}
	return false
}

// jsClusterNoPeers is JetStream's error code for "no suitable peers for
// placement" (nats-server's JSClusterNoPeersErrF): a stream or bucket of
// R replicas cannot be placed because fewer than R servers are known to
// be up. Just after a cluster forms, or while a node restarts, the meta
// leader has not heard from every peer yet; it passes once they report.
const jsClusterNoPeers = 10005

// jsDuplicateInProcess is JetStream's error code for "duplicate message
// id is in process" (nats-server's JSStreamDuplicateMessageConflict): a
// publish whose message ID is that of one still being decided by the
// stream's Raft group. An append retried after its first try timed out
// gets it while that first try is in flight: the answer is not known yet,
// and a later retry finds the first try stored (a duplicate's ack, its
// sequence) or not stored (then it is stored). The stream forgets an
// in-flight ID at its next leader change; one proposed and then refused
// with no change of leader is held for the stream's duplicate window (2
// minutes), and retries get this error until then. A retry after that
// window, of a first try that was stored, is refused as an append after
// the wrong sequence (ErrFenced), as before.
const jsDuplicateInProcess = 10158

// ErrTooFewNodes means JetStream cannot place a stream or bucket yet:
// fewer nodes than its replicas are up as the cluster knows them ("no
// suitable peers for placement"). Errors that wrap it also wrap
// pool.ErrStoreUnavailable: it passes once enough nodes are up and
// routed (a bucket that exists already is not placed again).
var ErrTooFewNodes = errors.New("cluster: too few nodes up to place the replicas")

// unavailable wraps err with pool.ErrStoreUnavailable when it means no
// answer came (timeout, no responders, a closed connection, a 503 or 408
// from JetStream's API, new or old), that the same publish is still
// being decided (jsDuplicateInProcess), or that too few nodes are up yet
// to place a stream (jsClusterNoPeers; then it wraps ErrTooFewNodes too).
func unavailable(err error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, jetstream.ErrJetStreamNotEnabled) {
		return fmt.Errorf("%w: %w", pool.ErrStoreUnavailable, err)
	}
	// The object store (Blobs, snapshots) lists through the older
	// JetStream API, whose errors are of its own type: "JetStream system
	// temporarily unavailable" (no leader, a partition) comes back so.
	var (
		ae  *jetstream.APIError
		lae *nats.APIError
	)
	switch {
	case errors.As(err, &ae) && ae.ErrorCode == jsClusterNoPeers, errors.As(err, &lae) && lae.ErrorCode == jsClusterNoPeers:
		return fmt.Errorf("%w: %w: %w", pool.ErrStoreUnavailable, ErrTooFewNodes, err)
	case errors.As(err, &ae) && (ae.Code == 503 || ae.Code == 408 || ae.ErrorCode == jsDuplicateInProcess),
		errors.As(err, &lae) && (lae.Code == 503 || lae.Code == 408 || lae.ErrorCode == jsDuplicateInProcess):
		return fmt.Errorf("%w: %w", pool.ErrStoreUnavailable, err)
	}
	return err
}

func parsePart(s string) (i, n int, err error) {
	a, b, ok := bytes.Cut([]byte(s), []byte("/"))
	if ok {
		i, err = strconv.Atoi(string(a))
		if err == nil {
			n, err = strconv.Atoi(string(b))
		}
	}
	if !ok || err != nil || i < 1 || n < 1 || i > n {
		return 0, 0, fmt.Errorf("bad part header %q", s)
	}
	return i, n, nil
}

// The batches' CBOR modes. A batch may hold more items than the
// decoder's default bounds (a cancelled job's leases, a snapshot's worth
// of trust records): the stream's own limits bound a message instead.
// batchEnc writes cbor-v1 (and the ledger's archived ranges); wireEnc
// writes cbor-v2, floats in their shortest exact form.
var (
	batchEnc = func() cbor.EncMode {
		m, err := cbor.EncOptions{Time: cbor.TimeRFC3339Nano}.EncMode()
		if err != nil {
			panic(err)
		}
		return m
	}()
	wireEnc = func() cbor.EncMode {
		m, err := cbor.EncOptions{Time: cbor.TimeRFC3339Nano, ShortestFloat: cbor.ShortestFloat16}.EncMode()
		if err != nil {
			panic(err)
		}
		return m
	}()
	batchDec = func() cbor.DecMode {
		m, err := cbor.DecOptions{MaxArrayElements: math.MaxInt32, MaxMapPairs: math.MaxInt32}.DecMode()
		if err != nil {
			panic(err)
		}
		return m
	}()
)

// encodeBatch encodes b in batchFormat, or in batchFormatV1 when
// batchFormat cannot hold it exactly (toWire), and returns which.
func encodeBatch(b *pool.Batch) (format string, data []byte, err error) {
	if data, ok, err := marshalWire(b, 0); ok {
		return batchFormat, data, err
	}
	data, err = batchEnc.Marshal(b)
	return batchFormatV1, data, err
}

// decodeBatch decodes a batch written in format (batchFormat,
// batchFormatV1 or batchFormatGob).
func decodeBatch(format string, data []byte) (*pool.Batch, error) {
	var (
		b   *pool.Batch
		err error
	)
	switch format {
	case batchFormatGob:
		b = new(pool.Batch)
		err = gob.NewDecoder(bytes.NewReader(data)).Decode(b)
	case batchFormatV1:
		b = new(pool.Batch)
		err = batchDec.Unmarshal(data, b)
	case batchFormat:
		var w wireBatch
		if err = batchDec.Unmarshal(data, &w); err == nil {
			b, err = fromWire(&w)
		}
	default:
		err = errors.New("unknown format")
	}
	if err != nil {
		return nil, fmt.Errorf("decode batch (%s): %w", format, err)
	}
	return b, nil
}

var _ pool.ReplicaArchive = (*Store)(nil)

// Replica returns the committed replica with lease ID lease (see
// pool.ReplicaArchive): the Scheduler keeps settled replicas out of its
// memory and asks here. One still in the loaded state comes from
// memory; one that is done and was archived (ArchiveBucket) is read
// from JetStream, within the Store's timeout. Errors: one wrapping
// pool.ErrUnknownLease when neither has it, pool.ErrStoreUnavailable
// when the archive does not answer.
func (s *Store) Replica(ctx context.Context, lease string) (pool.ReplicaRecord, error) {
	s.mu.Lock()
	mem := s.mem
	s.mu.Unlock()
	r, err := mem.Replica(ctx, lease)
	if !errors.Is(err, pool.ErrUnknownLease) {
		return r, err
	}
	actx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	return s.arch.get(actx, lease)
}
