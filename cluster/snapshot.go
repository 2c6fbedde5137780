package cluster

import (
	"bufio"
	"bytes"
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"idlepool/pool"
)

// SnapshotBucket is the JetStream object store that holds snapshots of
// the pool's state: objects named "state-" and the stream sequence they
// cover, twenty digits, each the gob encoding of a pool.MemImage. An
// image of format memimage-gob-v4 holds a summary of each job's
// acknowledged outcomes in place of them (pool.OutcomeSummary), leaves
// out the replicas that are done (pool.MemStore.LiveImage), which are
// in ArchiveBucket, and the ledger entries up to its LedgerBase, which
// are in LedgerBucket, and counts the ledger's entries by kind; one of
// memimage-gob-v3 (written before) holds every outcome, one of
// memimage-gob-v2 every ledger entry too, one of memimage-gob-v1 every
// replica too.
const SnapshotBucket = "idlepool_snapshots"

const (
	snapPrefix = "state-"
	// snapFormat is written in each object's headers; a reader takes it,
	// snapFormatV3, snapFormatV2 or snapFormatV1 and refuses another. An
	// older idlepool refuses v4 (it would not see the outcomes
	// summarised), one older still v3 (the ledger entries left out), and
	// one older still v2 (the done replicas).
	snapFormat   = "memimage-gob-v4"
	snapFormatV3 = "memimage-gob-v3"
	snapFormatV2 = "memimage-gob-v2"
	snapFormatV1 = "memimage-gob-v1"
	hdrSeq       = "Idlepool-Seq"
)

// snapName is the object name of the snapshot that covers the stream up
// to seq.
func snapName(seq uint64) string { return fmt.Sprintf("%s%020d", snapPrefix, seq) }

// parseSnapName returns the sequence a snapshot's name says, or false.
func parseSnapName(name string) (uint64, bool) {
	rest, ok := strings.CutPrefix(name, snapPrefix)
	if !ok || len(rest) != 20 {
		return 0, false
	}
	seq, err := strconv.ParseUint(rest, 10, 64)
	return seq, err == nil && seq > 0
}

// snapshots is the object store of the state's snapshots. Any number of
// writers is safe: each snapshot is named by the sequence it covers and
// is a function of the stream up to it, a reader takes the newest that
// is complete (the object store lists an object once all of it is
// stored), and the stream is trimmed only behind a snapshot already
// stored.
type snapshots struct {
	obs jetstream.ObjectStore
}

// openSnapshots opens (or creates) the object store bucket (a shard's
// Snapshots).
func openSnapshots(ctx context.Context, js jetstream.JetStream, bucket string, replicas int) (*snapshots, error) {
	obs, err := openObjectStore(ctx, js, jetstream.ObjectStoreConfig{Bucket: bucket,
		Description: "idlepool: snapshots of the pool's state", Replicas: replicas, Storage: jetstream.FileStorage})
	if err != nil {
		return nil, fmt.Errorf("cluster: snapshot store %s: %w", bucket, unavailable(err))
	}
	return &snapshots{obs: obs}, nil
}

// listTimeout bounds the listing of an object store (a few names): see
// listObjects.
const listTimeout = 5 * time.Second

// listObjects lists obs within listTimeout of ctx. The client's List
// returns when its watcher has seen the listing's end, or when its
// context ends: a watcher whose consumer was cut off mid-way (a
// partition healing) never sees the end, and a listing on a context
// without deadline waited forever. A node following the pool's state
// lists snapshots under the Store's lock, so the node that took the
// lease then waited forever for that lock before its coordinator
// started: no node was in charge, and the lease was renewed all along.
// A listing past the bound wraps pool.ErrStoreUnavailable (the caller
// tries again).
func listObjects(ctx context.Context, obs jetstream.ObjectStore) ([]*jetstream.ObjectInfo, error) {
	lctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	return obs.List(lctx)
}

// list returns the sequences of the stored snapshots, newest first.
func (s *snapshots) list(ctx context.Context) ([]uint64, error) {
	infos, err := listObjects(ctx, s.obs)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: list snapshots: %w", unavailable(err))
	}
	var out []uint64
	for _, in := range infos {
		if seq, ok := parseSnapName(in.Name); ok && !in.Deleted {
			out = append(out, seq)
		}
	}
	// Newest first.
	for i := 1; i < len(out); i++ {
		for k := i; k > 0 && out[k] > out[k-1]; k-- {
			out[k], out[k-1] = out[k-1], out[k]
		}
	}
	return out, nil
}

// newest returns the newest snapshot's image and the stream sequence it
// covers; seq is 0 when there is none. A snapshot deleted while it is
// read (a newer one replaced it) sends it to the next newest list.
func (s *snapshots) newest(ctx context.Context) (*pool.MemImage, uint64, error) {
	for range 4 {
		seqs, err := s.list(ctx)
		if err != nil || len(seqs) == 0 {
			return nil, 0, err
		}
		img, err := s.read(ctx, seqs[0])
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			continue
		}
		if err != nil {
			return nil, 0, err
		}
		return img, seqs[0], nil
	}
	return nil, 0, fmt.Errorf("cluster: read the newest snapshot: %w: snapshots kept being replaced", pool.ErrStoreUnavailable)
}

func (s *snapshots) read(ctx context.Context, seq uint64) (*pool.MemImage, error) {
	r, err := s.obs.Get(ctx, snapName(seq))
	if err != nil {
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			return nil, err
		}
		return nil, fmt.Errorf("cluster: read snapshot %d: %w", seq, unavailable(err))
	}
	defer r.Close()
	info, err := r.Info()
	if err != nil {
		return nil, fmt.Errorf("cluster: read snapshot %d: %w", seq, unavailable(err))
	}
	if f := info.Headers.Get(hdrFmt); f != snapFormat && f != snapFormatV3 && f != snapFormatV2 && f != snapFormatV1 {
		return nil, fmt.Errorf("cluster: snapshot %d has format %q, want %q (written by a newer idlepool?)", seq, f, snapFormat)
	}
	// Read it all before decoding: a reader that decoded as it read
	// consumed the chunks so slowly on a busy machine that the object
	// store's consumer timed out. The object store checks its digest of
	// the bytes at the end of the read.
	data := make([]byte, 0, info.Size)
	buf := bytes.NewBuffer(data)
	if _, err := buf.ReadFrom(r); err != nil {
		return nil, fmt.Errorf("cluster: read snapshot %d: %w", seq, unavailable(err))
	}
	var img pool.MemImage
	if err := gob.NewDecoder(buf).Decode(&img); err != nil {
		return nil, fmt.Errorf("cluster: decode snapshot %d: %w", seq, err)
	}
	return &img, nil
}

// write stores img as the snapshot covering the stream up to seq.
func (s *snapshots) write(ctx context.Context, seq uint64, img *pool.MemImage) error {
	return s.writeFormat(ctx, seq, img, snapFormat)
}

// writeFormat is write with the format header format (tests write v1).
func (s *snapshots) writeFormat(ctx context.Context, seq uint64, img *pool.MemImage, format string) error {
	pr, pw := io.Pipe()
	go func() {
		bw := bufio.NewWriterSize(pw, 1<<20)
		err := gob.NewEncoder(bw).Encode(img)
		if err == nil {
			err = bw.Flush()
		}
		pw.CloseWithError(err)
	}()
	meta := jetstream.ObjectMeta{Name: snapName(seq), Description: "idlepool state up to stream sequence " + strconv.FormatUint(seq, 10),
		Headers: map[string][]string{hdrFmt: {format}, hdrSeq: {strconv.FormatUint(seq, 10)}}}
	_, err := s.obs.Put(ctx, meta, pr)
	pr.CloseWithError(err) // ends the encoder if Put stopped early
	if err != nil {
		return fmt.Errorf("cluster: store snapshot %d: %w", seq, unavailable(err))
	}
	return nil
}

// dropBefore deletes the snapshots older than seq.
func (s *snapshots) dropBefore(ctx context.Context, seq uint64) error {
	seqs, err := s.list(ctx)
	if err != nil {
		return err
	}
	for _, old := range seqs {
		if old < seq {
			if err := s.obs.Delete(ctx, snapName(old)); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
				return fmt.Errorf("cluster: delete snapshot %d: %w", old, unavailable(err))
			}
		}
	}
	return nil
}

// SnapshotStats says what one snapshot took.
type SnapshotStats struct {
	Seq     uint64        // the stream sequence it covers
	Trimmed uint64        // the stream's messages before this sequence were removed
	Copy    time.Duration // the copy of the state, under the Store's lock
	Write   time.Duration // encoding and storing it, replicated
	// Archived counts the done replicas stored in ArchiveBucket (and
	// left out of the snapshot and of memory) by this snapshot, Entries
	// the ledger entries stored in LedgerBucket (likewise); Archive is
	// what storing them took.
	Archived int
	Entries  int
	Archive  time.Duration
}

// WriteSnapshot stores the ledger's entries in whole ranges of
// LedgerRange (those up to the last whole range) in LedgerBucket and the
// replicas that are done (settled, their task decided, its outcome
// acknowledged) in ArchiveBucket, then a snapshot of the rest of the
// state this Store has applied (the batches up to its last applied
// sequence) in the object store idlepool_snapshots (its shard's,
// Shard.Snapshots), and drops the
// archived entries and replicas from memory (other nodes drop theirs
// when they next follow the stream: each archive's mark says up to
// where it holds everything). So a snapshot, and every node's memory,
// hold the work in play and the ledger's newest entries rather than
// every replica ever leased and every receipt ever signed. It then
// trims the state stream up to the previous snapshot (so the stream
// keeps the batches since it: a node that follows a little behind goes
// on from its own state instead of loading the whole snapshot) and
// deletes older snapshots. A node that starts from
// nothing loads the newest snapshot and replays only the batches after
// it (Load). The state is copied under the Store's lock, which holds
// commits for the copy's time (no encoding: SnapshotStats.Copy says how
// long); it is encoded and stored after. It returns stats with Seq 0
// when nothing was applied since the last snapshot this Store wrote or
// loaded. Errors: pool.ErrStoreUnavailable when JetStream did not answer
// (the snapshot can be written again later; the stream is trimmed only
// behind a stored snapshot).
func (s *Store) WriteSnapshot(ctx context.Context) (SnapshotStats, error) {
	mctx, cancel := context.WithTimeout(ctx, s.timeout)
	marked, err := s.ledger.mark(mctx)
	cancel()
	if err != nil {
		return SnapshotStats{}, err
	}
	start := time.Now()
	s.mu.Lock()
	seq, prev := s.applied.Load(), s.snapSeq
	if seq <= prev || seq == 0 {
		s.mu.Unlock()
		return SnapshotStats{}, nil
	}
	mem := s.mem
	// The ledger's whole ranges leave; those the mark covers are there
	// already.
	base, ledgerSeq := mem.LedgerBase()
	upto := ledgerSeq / LedgerRange * LedgerRange
	entries := mem.LedgerBlocks(max(base, marked), upto)
	mem.ForgetAcked()
	img, done := mem.LiveImage(upto)
	recs := mem.DoneRecords(s.forgot, done)
	s.mu.Unlock()
	st := SnapshotStats{Seq: seq, Copy: time.Since(start), Archived: len(recs)}
	for _, p := range entries {
		st.Entries += len(p)
	}
	start = time.Now()
	// The archives first, their marks next, the snapshot that leaves
	// them out last: a node that loads the snapshot finds them there.
	if err := s.ledger.put(ctx, entries, 2*s.timeout); err != nil {
		return SnapshotStats{}, err
	}
	entries = nil
	if upto > marked {
		mctx, cancel := context.WithTimeout(ctx, s.timeout)
		err := s.ledger.setMark(mctx, upto)
		cancel()
		if err != nil {
			return SnapshotStats{}, err
		}
	}
	if err := s.arch.put(ctx, recs, seq, 2*s.timeout); err != nil {
		return SnapshotStats{}, err
	}
	mctx, cancel = context.WithTimeout(ctx, s.timeout)
	err = s.arch.setMark(mctx, seq)
	cancel()
	if err != nil {
		return SnapshotStats{}, err
	}
	st.Archive = time.Since(start)
	recs = nil
	start = time.Now()
	if err := s.snaps.write(ctx, seq, img); err != nil {
		return SnapshotStats{}, err
	}
	st.Write = time.Since(start)
	s.mu.Lock()
	s.snapSeq = max(s.snapSeq, seq)
	if s.mem == mem {
		s.forget(done)
		_, _ = mem.ForgetEntries(upto) // at most the ledger's end: no error
	}
	s.mu.Unlock()
	if prev > 0 {
		stream, err := s.js.Stream(ctx, s.stream)
		if err == nil {
			// Keeps every message from prev+1 on.
			err = stream.Purge(ctx, jetstream.WithPurgeSequence(prev+1))
		}
		if err != nil {
			return st, fmt.Errorf("cluster: trim stream %s before %d: %w", s.stream, prev+1, unavailable(err))
		}
		st.Trimmed = prev + 1
	}
	if err := s.snaps.dropBefore(ctx, seq); err != nil {
		return st, err
	}
	return st, nil
}

// SinceSnapshot returns how many stream messages this Store has applied
// since the last snapshot it wrote or loaded.
func (s *Store) SinceSnapshot() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.applied.Load() < s.snapSeq {
		return 0
	}
	return s.applied.Load() - s.snapSeq
}

// Snapshots writes a snapshot (WriteSnapshot) whenever every messages
// were applied since the last one, checking each interval, until ctx
// ends; errors go to onErr (nil: ignored) and are tried again at the
// next check. The node in charge runs it: it is the one whose state is
// current.
func (s *Store) Snapshots(ctx context.Context, every uint64, interval time.Duration, onErr func(error), onSnap func(SnapshotStats)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if s.SinceSnapshot() < every {
			continue
		}
		st, err := s.WriteSnapshot(ctx)
		if err != nil && onErr != nil && ctx.Err() == nil {
			onErr(err)
		}
		if err == nil && st.Seq > 0 && onSnap != nil {
			onSnap(st)
		}
	}
}
