package cluster

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/fxamacker/cbor/v2"

	"idlepool/castore"
	"idlepool/job"
	"idlepool/pool"
)

// The state stream's batches in format cbor-v2 (batchFormat): the same
// pool.Batch as cbor-v1, a third of its size or less. A group commit of
// a busy pool wrote about 3.2 KB per decided task in cbor-v1, and every
// node that keeps a replica of the stream stores and votes on each byte
// (docs/benchmarks.md, "The state stream's batches, smaller"). What
// made it large, and what cbor-v2 does instead:
//
//   - Field names as map keys: replicas, outcomes and ledger entries are
//     CBOR arrays (wireReplica, wireOutcome, wireEntry), their fields in
//     a fixed order.
//   - The same IDs over and over (a job's ID, a device's and its owner's
//     in every replica and receipt, a lease in its replica and in its
//     receipt): every string of those records is written once, in the
//     batch's table of strings, and the records name it by its index;
//     job IDs likewise.
//   - A batch's signature and every entry's inclusion proof and Prev
//     (pool.SignBatch signs a batch as one Merkle tree): a batch's
//     entries are a block, as the SQLite store keeps them (one signature,
//     the first entry's Prev), and the proofs and the chain are rebuilt
//     from the entries' hashes when it is read (pool.TreeProofs). Entries
//     that are not such a batch are written whole, as in cbor-v1.
//   - Times as RFC 3339 text: Unix nanoseconds (wireTime).
//
// The rarer records (peers, jobs, acknowledgements, cancels, trust) are
// written as in cbor-v1. A batch cbor-v2 cannot represent exactly (a
// time outside the years 1678 to 2262) is written in cbor-v1, which
// every node of this version reads too.

// wireBatch is a batch in cbor-v2.
type wireBatch struct {
	_        struct{} `cbor:",toarray"`
	Strings  []string // every string the records below name by index
	Jobs     []job.ID // every job ID they name by index
	Peers    []pool.Peer
	JobRecs  []pool.JobRecord
	Replicas []wireReplica
	Outcomes []wireOutcome
	Acks     []pool.AckRecord
	Ledger   []wireLedger // the entries in Seq order, in blocks and alone
	Cancels  []pool.CancelRecord
	Trust    []pool.TrustRecord
}

// wireReplica is a pool.ReplicaRecord: Job an index of wireBatch.Jobs;
// Lease, Peer, Owner, State and Reason indexes of wireBatch.Strings;
// Digest empty when zero; times as wireTime.
type wireReplica struct {
	_        struct{} `cbor:",toarray"`
	Lease    uint32
	Job      uint32
	Task     int64
	Peer     uint32
	Owner    uint32
	State    uint32
	Created  int64
	Deadline int64
	Digest   []byte
	Failed   bool
	Reason   uint32
	Result   []byte
	Ref      *castore.Manifest
	Work     *pool.Work
	Version  int64
	Prev     int64
}

// wireOutcome is a pool.OutcomeRecord: Job an index of wireBatch.Jobs;
// Status, Reason and each holder indexes of wireBatch.Strings; Digest
// empty when zero.
type wireOutcome struct {
	_       struct{} `cbor:",toarray"`
	Job     uint32
	Digest  []byte
	Seq     int64
	Task    int64
	Status  uint32
	Result  []byte
	Reason  uint32
	Ref     *castore.Manifest
	Holders []uint32
	Work    uint64
}

// wireLedger is one block of ledger entries signed together, or one
// entry written whole (any other: signed alone, or not a whole batch).
type wireLedger struct {
	Block *wireBlock  `cbor:"1,keyasint,omitempty"`
	Entry *pool.Entry `cbor:"2,keyasint,omitempty"`
}

// wireBlock is a whole batch of entries as pool.SignBatch signs it:
// First is the first entry's Seq and Prev its Prev; each later entry's
// Seq follows and its Prev is the hash of the one before; Sig signs
// the head of the tree of their leaf hashes, whose inclusion proofs
// are rebuilt when read.
type wireBlock struct {
	_       struct{} `cbor:",toarray"`
	First   uint64
	Prev    []byte
	Sig     []byte
	Entries []wireEntry
}

// wireEntry is a pool.Entry of a block, without what the block implies:
// Kind, Pool, Peer, Owner, Lease and Reason indexes of wireBatch.Strings,
// Job an index of wireBatch.Jobs, Digest empty when zero.
type wireEntry struct {
	_      struct{} `cbor:",toarray"`
	Kind   uint32
	Pool   uint32
	Job    uint32
	Task   int64
	Peer   uint32
	Owner  uint32
	Lease  uint32
	Digest []byte
	Cost   float64
	Work   uint64
	Time   int64
	Reason uint32
}

// wireZeroTime is the zero time.Time as a wireTime.
const wireZeroTime = math.MinInt64

// wireTime returns t as Unix nanoseconds (wireZeroTime for the zero
// time); ok is false when that does not give t back (outside the years
// 1678 to 2262).
func wireTime(t time.Time) (n int64, ok bool) {
	if t.IsZero() {
		return wireZeroTime, true
	}
	n = t.UnixNano()
	return n, n != wireZeroTime && time.Unix(0, n).Equal(t)
}

func fromWireTime(n int64) time.Time {
	if n == wireZeroTime {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// wireDigest returns *d as a wireBatch holds a digest: empty when zero,
// else d's own bytes (no copy: the wireBatch is encoded while the
// record it came from is still there).
func wireDigest(d *job.Digest) []byte {
	if *d == (job.Digest{}) {
		return nil
	}
	return d[:]
}

// table numbers the distinct values it is given, in the order first
// given: a wireBatch's table of strings or of job IDs.
type table[K comparable] struct {
	index  map[K]uint32
	values []K
}

func (t *table[K]) of(v K) uint32 {
	i, found := t.index[v]
	if !found {
		if t.index == nil {
			t.index = map[K]uint32{}
		}
		i = uint32(len(t.values))
		t.index[v] = i
		t.values = append(t.values, v)
	}
	return i
}

// reset empties t, keeping its map's and slice's room.
func (t *table[K]) reset() {
	clear(t.index)
	clear(t.values)
	t.values = t.values[:0]
}

// wireWriter builds a wireBatch and its tables. A writer is used again
// (marshalWire): its tables, records and blocks keep their room from
// one batch to the next.
type wireWriter struct {
	w       wireBatch
	strings table[string]
	jobs    table[job.ID]
	ok      bool // every time so far is representable
	// The room of w's slices and blocks, kept for the next batch.
	replicas []wireReplica
	outcomes []wireOutcome
	ledgers  []wireLedger
	blocks   []wireBlock
	entries  []wireEntry
}

func (ww *wireWriter) str(s string) uint32  { return ww.strings.of(s) }
func (ww *wireWriter) job(id job.ID) uint32 { return ww.jobs.of(id) }

func (ww *wireWriter) time(t time.Time) int64 {
	n, ok := wireTime(t)
	ww.ok = ww.ok && ok
	return n
}

// wireWriters holds writers for marshalWire to use again: a busy node
// encodes a batch every millisecond or two, and a new writer's tables
// and records for each were a tenth of the bytes its process allocated.
var wireWriters = sync.Pool{New: func() any { return new(wireWriter) }}

// maxPooled is the most room a writer may have made, in strings,
// records, ledger entries or blocks, to be used again: one that encoded
// a large batch (a restart's replay, a snapshot's window of thousands of
// replicas) is left to the collector, so that every small batch after it
// does not pay to empty its tables. A ledger range (LedgerRange entries,
// as many strings or a few more) fits.
const maxPooled = 2048

// marshalWire encodes b in cbor-v2's form, wrapped in the CBOR tag tag
// when tag is not 0; ok is false (and data nil) when that form cannot
// hold b exactly (toWire).
func marshalWire(b *pool.Batch, tag uint64) (data []byte, ok bool, err error) {
	ww := wireWriters.Get().(*wireWriter)
	w, ok := ww.write(b)
	if ok {
		if tag == 0 {
			data, err = wireEnc.Marshal(w)
		} else {
			data, err = wireEnc.Marshal(cbor.Tag{Number: tag, Content: w})
		}
	}
	ww.reset()
	if !ww.large() {
		wireWriters.Put(ww)
	}
	return data, ok, err
}

// large reports whether ww, reset, keeps more room than maxPooled.
func (ww *wireWriter) large() bool {
	return max(cap(ww.strings.values), cap(ww.jobs.values), cap(ww.replicas), cap(ww.outcomes), cap(ww.ledgers),
		cap(ww.blocks), cap(ww.entries)) > maxPooled
}

// toWire returns b in cbor-v2's form; ok is false when that form cannot
// hold b exactly (then b is written in cbor-v1). The wireBatch shares
// b's bytes.
func toWire(b *pool.Batch) (w *wireBatch, ok bool) { return new(wireWriter).write(b) }

// reset makes ww as new, keeping its room and dropping what it pointed
// to (the batch's bytes).
func (ww *wireWriter) reset() {
	ww.strings.reset()
	ww.jobs.reset()
	ww.replicas, ww.outcomes = keepRoom(ww.w.Replicas, ww.replicas), keepRoom(ww.w.Outcomes, ww.outcomes)
	ww.ledgers = keepRoom(ww.w.Ledger, ww.ledgers)
	clear(ww.blocks)
	clear(ww.entries)
	ww.blocks, ww.entries = ww.blocks[:0], ww.entries[:0]
	ww.w = wireBatch{}
}

// keepRoom returns used emptied (its elements zeroed) when it is not
// nil, else kept: the slice whose room the next batch starts from.
func keepRoom[T any](used, kept []T) []T {
	if used == nil {
		return kept
	}
	clear(used)
	return used[:0]
}

// write fills ww.w with b (ww as new) and returns it; ok as toWire's.
func (ww *wireWriter) write(b *pool.Batch) (w *wireBatch, ok bool) {
	ww.ok = true
	// A new writer's string table is sized for its first batch up
	// front: each replica's lease is a string of its own (each entry
	// names it again), so the table grew through every size to the
	// batch's, and its rehashing was 1.3% of a busy node's CPU. A
	// writer used again keeps the room its earlier batches made.
	n := len(b.Replicas) + len(b.Entries) + 2*len(b.Outcomes) + 16
	if ww.strings.index == nil {
		ww.strings = table[string]{index: make(map[string]uint32, n), values: make([]string, 0, n)}
	}
	ww.w.Peers, ww.w.JobRecs, ww.w.Acks, ww.w.Cancels, ww.w.Trust = b.Peers, b.Jobs, b.Acks, b.Cancels, b.Trust
	if len(b.Replicas) > 0 {
		ww.w.Replicas = slices.Grow(ww.replicas[:0], len(b.Replicas))[:len(b.Replicas)]
	}
	for i := range b.Replicas {
		r := &b.Replicas[i]
		ww.w.Replicas[i] = wireReplica{Lease: ww.str(r.Lease), Job: ww.job(r.Job), Task: r.Task, Peer: ww.str(r.Peer),
			Owner: ww.str(r.Owner), State: ww.str(r.State), Created: ww.time(r.Created), Deadline: ww.time(r.Deadline),
			Digest: wireDigest(&r.Digest), Failed: r.Failed, Reason: ww.str(r.Reason), Result: r.Result, Ref: r.Ref,
			Work: r.Work, Version: r.Version, Prev: r.Prev}
	}
	if len(b.Outcomes) > 0 {
		ww.w.Outcomes = slices.Grow(ww.outcomes[:0], len(b.Outcomes))[:len(b.Outcomes)]
	}
	for i := range b.Outcomes {
		o := &b.Outcomes[i]
		var holders []uint32
		if o.Holders != nil {
			holders = make([]uint32, len(o.Holders))
			for k, h := range o.Holders {
				holders[k] = ww.str(h)
			}
		}
		ww.w.Outcomes[i] = wireOutcome{Job: ww.job(o.Job), Digest: wireDigest(&o.Digest), Seq: o.Seq, Task: o.Task,
			Status: ww.str(o.Status), Result: o.Result, Reason: ww.str(o.Reason), Ref: o.Ref, Holders: holders, Work: o.Work}
	}
	if b.SignedWhole() { // the Scheduler's batch: one block, its hashes known
		ww.block(b.Entries)
	} else {
		ww.ledger(b.Entries)
	}
	ww.w.Strings, ww.w.Jobs = ww.strings.values, ww.jobs.values
	if len(ww.w.Jobs) == 0 {
		ww.w.Jobs = nil // as a new writer's: the same bytes
	}
	return &ww.w, ww.ok
}

// ledger writes entries: each run that is a whole signed batch, chained
// and in sequence, as a block; any other entry whole.
func (ww *wireWriter) ledger(entries []pool.Entry) {
	if len(entries) == 0 {
		return
	}
	hashes := make([]job.Digest, len(entries))
	for i := range entries {
		hashes[i] = entries[i].Hash()
	}
	for i := 0; i < len(entries); {
		if n := pool.WholeBatch(entries[i:], hashes[i:]); n > 0 && chained(entries[i:i+n], hashes[i:i+n]) {
			ww.block(entries[i : i+n])
			i += n
			continue
		}
		ww.appendLedger(wireLedger{Entry: &entries[i]})
		i++
	}
}

// block writes entries, a whole signed batch chained in sequence, as
// one block.
func (ww *wireWriter) block(entries []pool.Entry) {
	first := &entries[0]
	if len(ww.blocks) == cap(ww.blocks) { // a block's address is kept: a new array, the old one left to those
		ww.blocks = make([]wireBlock, 0, max(4, 2*cap(ww.blocks)))
	}
	ww.blocks = append(ww.blocks, wireBlock{First: first.Seq, Prev: first.Prev[:], Sig: first.Sig})
	blk := &ww.blocks[len(ww.blocks)-1]
	at := len(ww.entries)
	ww.entries = slices.Grow(ww.entries, len(entries))[:at+len(entries)]
	blk.Entries = ww.entries[at : at+len(entries) : at+len(entries)]
	for k := range entries {
		e := &entries[k]
		blk.Entries[k] = wireEntry{Kind: ww.str(e.Kind), Pool: ww.str(e.Pool), Job: ww.job(e.Job), Task: e.Task,
			Peer: ww.str(e.Peer), Owner: ww.str(e.Owner), Lease: ww.str(e.Lease), Digest: wireDigest(&e.Digest),
			Cost: e.Cost, Work: e.Work, Time: e.Time, Reason: ww.str(e.Reason)}
	}
	ww.appendLedger(wireLedger{Block: blk})
}

// appendLedger appends l to ww.w.Ledger, starting from the room kept.
func (ww *wireWriter) appendLedger(l wireLedger) {
	if ww.w.Ledger == nil {
		ww.w.Ledger = ww.ledgers[:0]
	}
	ww.w.Ledger = append(ww.w.Ledger, l)
}

// chained reports whether entries follow one another: each Seq one more
// than the one before, each Prev the hash of the one before.
func chained(entries []pool.Entry, hashes []job.Digest) bool {
	for k := 1; k < len(entries); k++ {
		if entries[k].Seq != entries[0].Seq+uint64(k) || entries[k].Prev != hashes[k-1] {
			return false
		}
	}
	return true
}

// wireReader resolves a wireBatch's indexes; the first index out of
// range sticks in err.
type wireReader struct {
	w   *wireBatch
	err error
}

func (wr *wireReader) fail(format string, args ...any) {
	if wr.err == nil {
		wr.err = fmt.Errorf(format, args...)
	}
}

func (wr *wireReader) str(what string, i uint32) string {
	if int(i) >= len(wr.w.Strings) {
		wr.fail("%s names string %d of %d", what, i, len(wr.w.Strings))
		return ""
	}
	return wr.w.Strings[i]
}

func (wr *wireReader) job(what string, i uint32) job.ID {
	if int(i) >= len(wr.w.Jobs) {
		wr.fail("%s names job %d of %d", what, i, len(wr.w.Jobs))
		return job.ID{}
	}
	return wr.w.Jobs[i]
}

func (wr *wireReader) digest(what string, b []byte) job.Digest {
	var d job.Digest
	switch len(b) {
	case 0:
	case len(d):
		copy(d[:], b)
	default:
		wr.fail("%s has a digest of %d bytes", what, len(b))
	}
	return d
}

// fromWire returns the pool.Batch w stands for. Errors name the record
// whose index or digest is out of place.
func fromWire(w *wireBatch) (*pool.Batch, error) {
	wr := &wireReader{w: w}
	b := &pool.Batch{Peers: w.Peers, Jobs: w.JobRecs, Acks: w.Acks, Cancels: w.Cancels, Trust: w.Trust}
	if len(w.Replicas) > 0 {
		b.Replicas = make([]pool.ReplicaRecord, len(w.Replicas))
	}
	for i := range w.Replicas {
		r := &w.Replicas[i]
		what := fmt.Sprintf("replica %d", i)
		b.Replicas[i] = pool.ReplicaRecord{Lease: wr.str(what, r.Lease), Job: wr.job(what, r.Job), Task: r.Task,
			Peer: wr.str(what, r.Peer), Owner: wr.str(what, r.Owner), State: wr.str(what, r.State),
			Created: fromWireTime(r.Created), Deadline: fromWireTime(r.Deadline), Digest: wr.digest(what, r.Digest),
			Failed: r.Failed, Reason: wr.str(what, r.Reason), Result: r.Result, Ref: r.Ref, Work: r.Work,
			Version: r.Version, Prev: r.Prev}
	}
	if len(w.Outcomes) > 0 {
		b.Outcomes = make([]pool.OutcomeRecord, len(w.Outcomes))
	}
	for i := range w.Outcomes {
		o := &w.Outcomes[i]
		what := fmt.Sprintf("outcome %d", i)
		var holders []string
		if o.Holders != nil {
			holders = make([]string, len(o.Holders))
			for k, h := range o.Holders {
				holders[k] = wr.str(what, h)
			}
		}
		b.Outcomes[i] = pool.OutcomeRecord{Job: wr.job(what, o.Job), Digest: wr.digest(what, o.Digest),
			Verified: pool.Verified{Seq: o.Seq, Task: o.Task, Status: wr.str(what, o.Status), Result: o.Result,
				Reason: wr.str(what, o.Reason), Ref: o.Ref, Holders: holders, Work: o.Work}}
	}
	for i, l := range w.Ledger {
		switch {
		case l.Block != nil && l.Entry == nil:
			es, err := wr.block(l.Block)
			if err != nil {
				return nil, fmt.Errorf("ledger part %d: %w", i, err)
			}
			b.Entries = append(b.Entries, es...)
		case l.Entry != nil && l.Block == nil:
			b.Entries = append(b.Entries, *l.Entry)
		default:
			return nil, fmt.Errorf("ledger part %d is neither one block nor one entry", i)
		}
	}
	if wr.err != nil {
		return nil, wr.err
	}
	return b, nil
}

// block returns a block's entries, rebuilding each one's Seq, Prev,
// signature and inclusion proof as pool.SignBatch gave them.
func (wr *wireReader) block(blk *wireBlock) ([]pool.Entry, error) {
	if len(blk.Entries) == 0 || len(blk.Sig) == 0 {
		return nil, fmt.Errorf("block at entry %d has no entries or no signature", blk.First)
	}
	out := make([]pool.Entry, len(blk.Entries))
	prev := wr.digest(fmt.Sprintf("block at entry %d", blk.First), blk.Prev)
	for k := range blk.Entries {
		x := &blk.Entries[k]
		seq := blk.First + uint64(k)
		what := fmt.Sprintf("ledger entry %d", seq)
		out[k] = pool.Entry{Seq: seq, Kind: wr.str(what, x.Kind), Pool: wr.str(what, x.Pool),
			Job: wr.job(what, x.Job), Task: x.Task, Peer: wr.str(what, x.Peer), Owner: wr.str(what, x.Owner),
			Lease: wr.str(what, x.Lease), Digest: wr.digest(what, x.Digest), Cost: x.Cost, Work: x.Work,
			Time: x.Time, Reason: wr.str(what, x.Reason)}
	}
	// Chained and given their proofs as SignBatch did, with the
	// signature it made.
	pool.SignBatch(out, prev, func([]byte) []byte { return blk.Sig })
	return out, nil
}

// decodeTagged decodes a wireBatch written under CBOR tag want (RFC 8949
// section 3.4): a ledger range's value (rangeTag) or an archived window's
// (fragmentTag). The error says what is wrong: data that is not a tag,
// another tag (a newer version's), or a batch that does not decode.
func decodeTagged(data []byte, want uint64) (*pool.Batch, error) {
	var t cbor.RawTag
	if err := batchDec.Unmarshal(data, &t); err != nil {
		return nil, err
	}
	if t.Number != want {
		return nil, fmt.Errorf("tag %d, want %d (written by a newer idlepool?)", t.Number, want)
	}
	var w wireBatch
	if err := batchDec.Unmarshal(t.Content, &w); err != nil {
		return nil, err
	}
	return fromWire(&w)
}
