package cluster

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"idlepool/pool"
)

// The ledger archive's index by device tells a receipt query (Entries
// with a Peer) which ranges name that device, so that it reads those
// and no others. Its values are in LedgerBucket:
//
//   - "d.", the device's peer ID in unpadded base64url, "." and an
//     epoch e (in decimal): which of the ranges e*indexEpoch to
//     (e+1)*indexEpoch-1 name the device, as runs (encodeIndex). A
//     snapshot that archives ranges merges them into the value of each
//     device and epoch they name, by compare-and-set on the key's
//     revision, so it writes one value per device and epoch it touches,
//     where the per-range keys of before wrote one per device and range:
//     some 1,000 values for a range of 1,024 entries in a pool of
//     thousands of devices.
//   - "e." and the device's peer ID as above: the epochs for which the
//     device has "d." values, as runs (encodeSummary), merged by the
//     same snapshots after those values: a query reads the values of
//     those epochs alone, however long the pool's history.
//   - "indexed": the first range number (in decimal) whose devices are
//     in "d." values. Ranges before it were archived by a version that
//     wrote "p.", the peer ID as above, "." and the range number (the
//     value: how many of its entries name the device), one key for each
//     device a range names; a query lists those keys for ranges before
//     it. A pool begun with this version has it at 0 and no "p." keys.
//   - "indexed_to": the range number (in decimal) before which every
//     range from "indexed" on is in "d." values. A node of a version
//     before the index, in charge for a while after one of this version
//     (a rollback), archives ranges with "p." keys alone: the next
//     snapshot of this version reads those ranges back and indexes them
//     (maxIndexFill a snapshot), and meanwhile a query that reaches past
//     "indexed_to" lists the "p." keys too.
//
// An index value that does not decode, or that was deleted by hand,
// stands for every range of its epoch (a query then reads them all and
// keeps the device's entries), a summary so for every epoch, and a
// writer merges into that: the index may name ranges that hold none of
// a device's entries, never miss one.
// The index's keys are read from the stream's leader (lastMsg), not by
// a direct get that a replica behind the last write may answer.

const (
	// indexEpoch is how many consecutive ranges one value of the index
	// covers: 4,096 ranges of 1,024 entries, about half an hour of a
	// pool accepting 1,300 tasks a second. A query by device reads one
	// value for each of the device's epochs (its summary) it spans; a
	// value is at most 512 bytes and a few (encodeIndex). Part of the
	// format: never changes.
	indexEpoch = 4096
	// indexTag and summaryTag are the CBOR tags (RFC 8949 section 3.4,
	// from the range any application may use) of an index value and of
	// a device's summary of epochs.
	indexTag   = 0x64657631 // "dev1"
	summaryTag = 0x65706f31 // "epo1"
	// indexedKey is the key of the first range the "d." values index,
	// indexedToKey of the range before which they index every one.
	indexedKey   = "indexed"
	indexedToKey = "indexed_to"
	// maxIndexFill bounds the ranges archived by another version that
	// one snapshot reads back to index (about 1.3 ms each).
	maxIndexFill = 1024
	// indexReaders is how many index values a writer reads at once
	// after its writes found them changed (a node newly in charge, its
	// memory of them empty).
	indexReaders = 16
	// indexTries bounds how often one put writes a value whose revision
	// another writer changed meanwhile (two nodes in charge for a
	// moment, each merging what it archives).
	indexTries = 16
	// indexBackoff is the unit of the wait before a writer reads again
	// the values another writer changed: up to 2^try units, at most 50.
	indexBackoff = 2 * time.Millisecond
	// maxIndexCache bounds the index values a writer keeps in memory
	// (their revision and runs, so that it merges without reading):
	// past it, it forgets them all and reads each again when a write
	// finds it changed.
	maxIndexCache = 1 << 17
)

func peerKey(peer string) string { return base64.RawURLEncoding.EncodeToString([]byte(peer)) }

func indexKey(peer string, epoch uint64) string {
	return "d." + peerKey(peer) + "." + strconv.FormatUint(epoch, 10)
}

func summaryKey(peer string) string { return "e." + peerKey(peer) }

// summaryEpoch is the epoch a summary is kept under in a writer's memory
// of the values: none, so that it is never forgotten for its epoch.
const summaryEpoch = 1<<64 - 1

// everyEpoch is the runs a summary that does not decode, or was deleted,
// stands for.
var everyEpoch = []uint32{0, 1<<32 - 1}

// encodeSummary encodes a device's epochs as runs (pairs of first and
// last, ascending, apart): CBOR tag summaryTag over an array of them.
func encodeSummary(runs []uint32) ([]byte, error) {
	return wireEnc.Marshal(cbor.Tag{Number: summaryTag, Content: runs})
}

// decodeSummary decodes what encodeSummary wrote, as runs; the error
// says what is wrong (decodeRuns).
func decodeSummary(data []byte) ([]uint32, error) {
	content, err := untag(summaryDec, data, summaryTag, "a summary of epochs")
	if err != nil {
		return nil, err
	}
	return decodeRuns(content, 1<<32)
}

// untag returns the content of data, a CBOR item tagged tag (what names
// such an item, for the error), decoded by dec.
func untag(dec cbor.DecMode, data []byte, tag uint64, what string) (cbor.RawMessage, error) {
	var t cbor.RawTag
	if err := dec.Unmarshal(data, &t); err != nil {
		return nil, fmt.Errorf("not %s: %w", what, err)
	}
	if t.Number != tag {
		return nil, fmt.Errorf("tag %d, want %d (written by a newer idlepool?)", t.Number, tag)
	}
	return t.Content, nil
}

// indexValue is an index value as this archive last wrote or read it:
// its epoch, its revision (0: none) and its runs, and whether it must be
// written even if nothing is added (it did not decode).
type indexValue struct {
	epoch   uint64
	rev     uint64
	runs    []uint32
	damaged bool
}

// encodeIndex encodes runs (pairs of first and last range, as offsets
// in their epoch, ascending, apart) as CBOR tag indexTag over either an
// array of the offsets, or a byte string with bit o%8 (least
// significant first) of byte o/8 set for each offset o in a run, up to
// the last byte with a bit set: the one whose items take fewer bytes
// (the few bytes of their headers aside). A value is so at most 512 bytes
// and a few, however its device's work is spread over the epoch, and
// some bytes for a device always at work.
func encodeIndex(runs []uint32) ([]byte, error) {
	arrayBytes := 0
	for _, o := range runs {
		switch {
		case o < 24:
			arrayBytes++
		case o < 256:
			arrayBytes += 2
		default:
			arrayBytes += 3
		}
	}
	if len(runs) == 0 || int(runs[len(runs)-1]/8+1) >= arrayBytes {
		return wireEnc.Marshal(cbor.Tag{Number: indexTag, Content: runs})
	}
	bits := make([]byte, runs[len(runs)-1]/8+1)
	for i := 0; i < len(runs); i += 2 {
		for o := runs[i]; o <= runs[i+1]; o++ {
			bits[o/8] |= 1 << (o % 8)
		}
	}
	return wireEnc.Marshal(cbor.Tag{Number: indexTag, Content: bits})
}

// indexDec decodes index values: definite lengths only, and at most an
// epoch's offsets; summaryDec a summary's, as many runs as a value may
// hold bytes.
var indexDec, summaryDec = func() (cbor.DecMode, cbor.DecMode) {
	i, err := cbor.DecOptions{IndefLength: cbor.IndefLengthForbidden, MaxArrayElements: indexEpoch}.DecMode()
	if err != nil {
		panic(err)
	}
	s, err := cbor.DecOptions{IndefLength: cbor.IndefLengthForbidden, MaxArrayElements: 8 << 20}.DecMode()
	if err != nil {
		panic(err)
	}
	return i, s
}()

// decodeIndex decodes what encodeIndex wrote, as runs. The error says
// what is wrong: not an index value's tag, an item that is not an
// unsigned integer, an odd count, an offset past the epoch, runs out of
// order or touching, a byte string longer than the epoch's bits.
func decodeIndex(data []byte) ([]uint32, error) {
	content, err := untag(indexDec, data, indexTag, "an index value")
	if err != nil {
		return nil, err
	}
	if len(content) > 0 && content[0]>>5 == 2 { // a byte string
		var bits []byte
		if err := indexDec.Unmarshal(content, &bits); err != nil {
			return nil, err
		}
		if len(bits) > indexEpoch/8 {
			return nil, fmt.Errorf("%d bytes of bits, want at most %d", len(bits), indexEpoch/8)
		}
		var runs []uint32
		for o := range uint32(len(bits) * 8) {
			if bits[o/8]&(1<<(o%8)) == 0 {
				continue
			}
			if n := len(runs); n > 0 && runs[n-1]+1 == o {
				runs[n-1] = o
			} else {
				runs = append(runs, o, o)
			}
		}
		return runs, nil
	}
	return decodeRuns(content, indexEpoch)
}

// decodeRuns decodes runs written as a CBOR array of unsigned integers
// below limit: pairs of first and last, ascending, apart. The error says
// which item or run is wrong.
func decodeRuns(content []byte, limit uint64) ([]uint32, error) {
	var items []cbor.RawMessage
	if err := summaryDec.Unmarshal(content, &items); err != nil {
		return nil, err
	}
	if len(items)%2 != 0 {
		return nil, fmt.Errorf("%d offsets: not pairs", len(items))
	}
	runs := make([]uint32, len(items))
	for i, it := range items {
		var o uint64
		if len(it) == 0 || it[0]>>5 != 0 || indexDec.Unmarshal(it, &o) != nil || o >= limit {
			return nil, fmt.Errorf("offset %d is not a number below %d", i, limit)
		}
		runs[i] = uint32(o)
	}
	for i := 0; i < len(runs); i += 2 {
		if runs[i] > runs[i+1] || (i > 0 && runs[i] <= runs[i-1]+1) {
			return nil, fmt.Errorf("run %d (%d to %d) is not after the one before", i/2, runs[i], runs[i+1])
		}
	}
	return runs, nil
}

// wholeEpoch is the runs an index value that does not decode stands
// for.
var wholeEpoch = []uint32{0, indexEpoch - 1}

// mergeRuns returns the union of runs and offs (ascending offsets), as
// runs, and whether offs added to runs.
func mergeRuns(runs, offs []uint32) ([]uint32, bool) {
	add := make([]uint32, 0, 2)
	for _, o := range offs {
		if n := len(add); n > 0 && add[n-1]+1 >= o {
			add[n-1] = max(add[n-1], o)
			continue
		}
		add = append(add, o, o)
	}
	out := make([]uint32, 0, len(runs)+len(add))
	i, j := 0, 0
	for i < len(runs) || j < len(add) {
		var a, b uint32
		if j == len(add) || (i < len(runs) && runs[i] <= add[j]) {
			a, b = runs[i], runs[i+1]
			i += 2
		} else {
			a, b = add[j], add[j+1]
			j += 2
		}
		if n := len(out); n > 0 && out[n-1]+1 >= a {
			out[n-1] = max(out[n-1], b)
			continue
		}
		out = append(out, a, b)
	}
	return out, !slices.Equal(out, runs)
}

// pendingIndex is what one put adds to one index value: a device's
// value of an epoch (offs: offsets of ranges), or its summary (offs:
// epochs).
type pendingIndex struct {
	key     string
	peer    string
	epoch   uint64 // summaryEpoch for a summary
	offs    []uint32
	summary bool
}

// index merges the devices each of ranges names into their index
// values (ranges as put checked them, in order), with those of the
// ranges before them that another version archived (up to maxIndexFill,
// read back), then the epochs into the devices' summaries, then records
// the index's first range and how far it reaches, and returns once
// every value is acknowledged. A value
// another writer changed meanwhile is read again and merged again, up to
// indexTries times.
func (a *ledgerArchive) index(ctx context.Context, ranges [][]pool.Entry, timeout time.Duration) error {
	if len(ranges) == 0 {
		return nil
	}
	a.indexMu.Lock()
	defer a.indexMu.Unlock()
	k0 := (ranges[0][0].Seq - 1) / LedgerRange
	end := (ranges[len(ranges)-1][0].Seq-1)/LedgerRange + 1
	// The bounds as this writer last recorded them, read again when it
	// has none or when they say ranges before these went unindexed.
	b := a.bounds
	if b == nil || b.toRev == 0 || b.to < k0 {
		first, to, toRev, err := a.indexBounds(ctx, timeout)
		if err != nil {
			return err
		}
		b = &writerBounds{first: first, to: to, toRev: toRev}
	}
	first, to, toRev := b.first, b.to, b.toRev
	type at struct {
		peer  string
		epoch uint64
	}
	byPeer := map[at]*pendingIndex{}
	var todo []*pendingIndex
	low := uint64(1<<64 - 1)
	// add notes the devices range r names, which the index merges.
	add := func(r []pool.Entry) {
		k := (r[0].Seq - 1) / LedgerRange
		epoch, off := k/indexEpoch, uint32(k%indexEpoch)
		low = min(low, epoch)
		for i := range r {
			if r[i].Peer == "" { // an anchor names no device
				continue
			}
			p := byPeer[at{r[i].Peer, epoch}]
			if p == nil {
				p = &pendingIndex{key: indexKey(r[i].Peer, epoch), peer: r[i].Peer, epoch: epoch}
				byPeer[at{r[i].Peer, epoch}] = p
				todo = append(todo, p)
			} else if p.offs[len(p.offs)-1] == off {
				continue
			}
			p.offs = append(p.offs, off)
		}
	}
	from := k0 // the first range indexed here
	if toRev != 0 || first.known {
		if toRev == 0 { // "indexed_to" deleted by hand: from the first again
			to = first.k
		}
		// Ranges archived without the index (by an older version), read
		// back one at a time, each reduced to the devices it names.
		k := to
		for ; k < k0 && k < to+maxIndexFill; k++ {
			gctx, cancel := context.WithTimeout(ctx, timeout)
			r, err := a.getRange(gctx, k)
			cancel()
			if errors.Is(err, errRangeMissing) {
				continue // nothing to index; queries of it say it is lost
			}
			if err != nil {
				return fmt.Errorf("cluster: index what an older version archived: %w", err)
			}
			add(r)
		}
		if k > to {
			from = min(from, to)
			if k < k0 {
				end = k // the rest at the next snapshot
			}
		}
	}
	for _, r := range ranges {
		add(r)
	}
	for _, p := range todo {
		slices.Sort(p.offs) // ranges come in order; this makes sure
	}
	if a.indexes == nil || len(a.indexes) > maxIndexCache {
		a.indexes = map[string]indexValue{}
	}
	// Each device's summary of its epochs, where this writer does not
	// know it to hold those of these ranges already: written after the
	// values, so that a query that finds an epoch there finds its value.
	var sums []*pendingIndex
	byDevice := map[string]*pendingIndex{}
	for _, p := range todo {
		peer := p.peer
		q := byDevice[peer]
		if q == nil {
			q = &pendingIndex{key: summaryKey(peer), epoch: summaryEpoch, summary: true}
			byDevice[peer] = q
			sums = append(sums, q)
		}
		if n := len(q.offs); n == 0 || q.offs[n-1] != uint32(p.epoch) {
			q.offs = append(q.offs, uint32(p.epoch))
		}
	}
	sums = slices.DeleteFunc(sums, func(q *pendingIndex) bool {
		slices.Sort(q.offs)
		v, ok := a.indexes[q.key]
		_, added := mergeRuns(v.runs, q.offs)
		return ok && v.rev != 0 && !added && !v.damaged
	})
	for _, batch := range [][]*pendingIndex{todo, sums} {
		if err := a.writeAll(ctx, batch, timeout); err != nil {
			return err
		}
	}
	for key, v := range a.indexes {
		if v.epoch < low { // an epoch the snapshots archive no more
			delete(a.indexes, key)
		}
	}
	// Recorded once the values are: "indexed" lowered, or "indexed_to"
	// raised, before them would hide ranges from queries meanwhile.
	a.bounds = nil // until both are recorded
	first, err := a.setIndexed(ctx, from, end, first, timeout)
	if err != nil {
		return err
	}
	to, toRev, err = a.setIndexedTo(ctx, end, to, toRev, timeout)
	if err != nil {
		return err
	}
	a.bounds = &writerBounds{first: first, to: to, toRev: toRev}
	return nil
}

// writerBounds are "indexed" and "indexed_to" as a writer last recorded
// or read them (toRev 0: "indexed_to" none or not a number).
type writerBounds struct {
	first     bound
	to, toRev uint64
}

// writeAll merges ps into their values (writeIndex), reading again and
// merging again those another writer changed meanwhile, up to
// indexTries times; indexMu is held.
func (a *ledgerArchive) writeAll(ctx context.Context, todo []*pendingIndex, timeout time.Duration) error {
	for try := 1; len(todo) > 0; try++ {
		if try > indexTries {
			return fmt.Errorf("cluster: index ledger ranges by device: %d values (%s first) changed under this writer %d times: %w",
				len(todo), todo[0].key, indexTries, pool.ErrStoreUnavailable)
		}
		var changed []*pendingIndex
		for w := 0; w < len(todo); w += archiveWindow {
			c, err := a.writeIndex(ctx, todo[w:min(w+archiveWindow, len(todo))], timeout)
			if err != nil {
				return err
			}
			changed = append(changed, c...)
		}
		if len(changed) > 0 {
			if err := backoff(ctx, try); err != nil {
				return fmt.Errorf("cluster: index ledger ranges by device: %w", err)
			}
		}
		if err := a.rereadIndex(ctx, changed, timeout); err != nil {
			return err
		}
		todo = changed
	}
	return nil
}

// backoff waits, after try tries of a compare-and-set that another
// writer's writes foiled, a while growing with try and at random (up to
// 2^try indexBackoff, at most 50), so that the two stop meeting. It
// wraps pool.ErrStoreUnavailable if ctx ends first.
func backoff(ctx context.Context, try int) error {
	wait := time.Duration(rand.Int64N(int64(min(indexBackoff<<try, 50*indexBackoff))))
	select {
	case <-time.After(wait):
		return nil
	case <-ctx.Done():
		return unavailable(ctx.Err())
	}
}

// rereadIndex reads again the values of ps, which writes found changed,
// indexReaders at once.
func (a *ledgerArchive) rereadIndex(ctx context.Context, ps []*pendingIndex, timeout time.Duration) error {
	vs := make([]indexValue, len(ps))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(indexReaders)
	for i, p := range ps {
		g.Go(func() error {
			rctx, cancel := context.WithTimeout(gctx, timeout)
			defer cancel()
			v, err := a.readIndex(rctx, p.key, p.summary)
			v.epoch = p.epoch
			vs[i] = v
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for i, p := range ps {
		a.indexes[p.key] = vs[i]
	}
	return nil
}

// writeIndex merges each of ps into its value as last known, writes
// those that change, and returns those whose revision another writer
// changed meanwhile; indexMu is held.
func (a *ledgerArchive) writeIndex(ctx context.Context, ps []*pendingIndex, timeout time.Duration) ([]*pendingIndex, error) {
	type write struct {
		p   *pendingIndex
		v   indexValue
		ack jetstream.PubAckFuture
	}
	var ws []write
	for _, p := range ps {
		v := a.indexes[p.key]
		runs, added := mergeRuns(v.runs, p.offs)
		if v.rev != 0 && !added && !v.damaged {
			continue // nothing new
		}
		encode := encodeIndex
		if p.summary {
			encode = encodeSummary
		}
		data, err := encode(runs)
		if err != nil {
			return nil, fmt.Errorf("cluster: encode ledger index %s: %w", p.key, err)
		}
		f, err := a.js.PublishAsync("$KV."+a.bucket+"."+p.key, data, jetstream.WithExpectLastSequencePerSubject(v.rev))
		if err != nil {
			return nil, fmt.Errorf("cluster: write ledger index %s: %w", p.key, unavailable(err))
		}
		ws = append(ws, write{p: p, v: indexValue{epoch: p.epoch, runs: runs}, ack: f})
	}
	wait := time.NewTimer(timeout)
	defer wait.Stop()
	var changed []*pendingIndex
	for _, w := range ws {
		select {
		case ack := <-w.ack.Ok():
			w.v.rev = ack.Sequence
			a.indexes[w.p.key] = w.v
		case err := <-w.ack.Err():
			if !isWrongLastSeq(err) {
				return nil, fmt.Errorf("cluster: write ledger index %s: %w", w.p.key, unavailable(err))
			}
			changed = append(changed, w.p)
		case <-wait.C:
			return nil, fmt.Errorf("cluster: write ledger index: %w: no acknowledgement within %s", pool.ErrStoreUnavailable, timeout)
		case <-ctx.Done():
			return nil, fmt.Errorf("cluster: write ledger index: %w", unavailable(ctx.Err()))
		}
	}
	return changed, nil
}

// kvMsg is the last message on a key-value bucket's key, as lastKVMsg
// reads it.
type kvMsg struct {
	seq     uint64
	deleted bool // a deletion or purge
	data    []byte
}

// lastMsg returns the last message on key of the archive's index
// (lastKVMsg).
func (a *ledgerArchive) lastMsg(ctx context.Context, key string) (*kvMsg, error) {
	return lastKVMsg(ctx, a.js, a.bucket, key)
}

// lastKVMsg returns the last message on key of the key-value bucket
// bucket, as the bucket stream's leader answers (STREAM.MSG.GET): a
// direct get (jetstream.KeyValue.Get) may be answered by a replica
// behind the last write; nil when there is none. An error that
// JetStream did not answer matches pool.ErrStoreUnavailable.
func lastKVMsg(ctx context.Context, js jetstream.JetStream, bucket, key string) (*kvMsg, error) {
	req, err := json.Marshal(struct {
		LastBySubject string `json:"last_by_subj"`
	}{"$KV." + bucket + "." + key})
	if err != nil {
		return nil, err
	}
	m, err := js.Conn().RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET.KV_"+bucket, req)
	if err != nil {
		return nil, fmt.Errorf("cluster: read %s of %s: %w", key, bucket, unavailable(err))
	}
	var resp struct {
		Error   *jetstream.APIError `json:"error"`
		Message *struct {
			Seq    uint64 `json:"seq"`
			Header []byte `json:"hdrs"`
			Data   []byte `json:"data"`
		} `json:"message"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return nil, fmt.Errorf("cluster: read %s of %s: the server's answer: %w", key, bucket, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return nil, nil
	case resp.Error != nil:
		return nil, fmt.Errorf("cluster: read %s of %s: %w", key, bucket, unavailable(resp.Error))
	case resp.Message == nil:
		return nil, fmt.Errorf("cluster: read %s of %s: %w: an answer without its message", key, bucket, pool.ErrStoreUnavailable)
	}
	out := &kvMsg{seq: resp.Message.Seq, data: resp.Message.Data}
	if len(resp.Message.Header) > 0 {
		h, err := nats.DecodeHeadersMsg(resp.Message.Header)
		if err != nil {
			return nil, fmt.Errorf("cluster: read %s of %s: its headers: %w", key, bucket, err)
		}
		op := h.Get("KV-Operation")
		out.deleted = op == "DEL" || op == "PURGE"
	}
	return out, nil
}

// readIndex reads the value of key (a summary's, when summary is set)
// for a writer: its revision (0 where it was never written) and its
// runs: wholeEpoch (everyEpoch), to be written again (damaged), where it
// does not decode or was deleted.
func (a *ledgerArchive) readIndex(ctx context.Context, key string, summary bool) (indexValue, error) {
	m, err := a.lastMsg(ctx, key)
	if err != nil || m == nil {
		return indexValue{}, err
	}
	decode, whole := decodeIndex, wholeEpoch
	if summary {
		decode, whole = decodeSummary, everyEpoch
	}
	runs, err := decode(m.data)
	if m.deleted || err != nil {
		return indexValue{rev: m.seq, runs: whole, damaged: true}, nil
	}
	return indexValue{rev: m.seq, runs: runs}, nil
}

// deviceEpochs returns the epochs from, to and with last, for which peer
// has index values, from its summary: every one where the summary does
// not decode or was deleted, none where it has none.
func (a *ledgerArchive) deviceEpochs(ctx context.Context, peer string, from, last uint64) ([]uint64, error) {
	v, err := a.readIndex(ctx, summaryKey(peer), true)
	if err != nil {
		return nil, err
	}
	var out []uint64
	for i := 0; i < len(v.runs); i += 2 {
		for e := max(uint64(v.runs[i]), from); e <= min(uint64(v.runs[i+1]), last); e++ {
			out = append(out, e)
		}
	}
	return out, nil
}

// bound is a range number read from "indexed" or "indexed_to": known is
// false where the key was never written, was deleted, or is not a
// number, and rev is its revision (0: never written).
type bound struct {
	k     uint64
	known bool
	rev   uint64
}

// readBound reads key ("indexed" or "indexed_to").
func (a *ledgerArchive) readBound(ctx context.Context, key string) (bound, error) {
	m, err := a.lastMsg(ctx, key)
	if err != nil || m == nil {
		return bound{}, err
	}
	if m.deleted {
		return bound{rev: m.seq}, nil
	}
	k, err := strconv.ParseUint(string(m.data), 10, 64)
	return bound{k: k, known: err == nil, rev: m.seq}, nil
}

// indexBounds reads "indexed" and "indexed_to" for a writer: to and
// toRev are 0 where the latter was never written or is not a number.
func (a *ledgerArchive) indexBounds(ctx context.Context, timeout time.Duration) (first bound, to, toRev uint64, err error) {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if first, err = a.readBound(rctx, indexedKey); err != nil {
		return
	}
	t, err := a.readBound(rctx, indexedToKey)
	if err != nil || !t.known {
		return first, 0, 0, err
	}
	return first, t.k, t.rev, nil
}

// setIndexed records k as the first range the "d." values index, where
// this writer indexed the ranges from k to end-1, unless one before it
// is recorded or those do not reach the one recorded: the least that
// any writer of this version indexed from without a gap (two nodes in
// charge for a moment may archive from two marks); indexMu is held. A value deleted or not a number (by hand)
// stays as it is: queries then read every kind of key, which is right
// whatever it should have held, where a value recorded again might pass
// ranges the per-range keys name.
// It returns what "indexed" holds then, as far as this writer knows.
func (a *ledgerArchive) setIndexed(ctx context.Context, k, end uint64, was bound, timeout time.Duration) (bound, error) {
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	value := strconv.AppendUint(nil, k, 10)
	for try := range indexTries {
		var (
			rev uint64
			err error
		)
		switch {
		case was.known && (was.k <= k || end < was.k), !was.known && was.rev != 0:
			// Already as low, or these ranges (k to end-1) do not reach
			// it: lowered past ranges without "d." values, it would
			// hide their "p." keys.
			return was, nil
		case was.rev == 0:
			rev, err = a.kv.Create(sctx, indexedKey, value)
		default:
			rev, err = a.kv.Update(sctx, indexedKey, value, was.rev)
		}
		if err == nil {
			return bound{k: k, known: true, rev: rev}, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !isWrongLastSeq(err) {
			return was, fmt.Errorf("cluster: record the ledger index's first range: %w", unavailable(err))
		}
		if err := backoff(sctx, try); err != nil {
			return was, fmt.Errorf("cluster: record the ledger index's first range: %w", err)
		}
		if was, err = a.readBound(sctx, indexedKey); err != nil {
			return was, err
		}
	}
	return was, fmt.Errorf("cluster: record the ledger index's first range: changed under this writer %d times: %w", indexTries, pool.ErrStoreUnavailable)
}

// setIndexedTo records end as the range before which the "d." values
// index every range from the first, unless a later one is recorded
// (to, at revision rev; 0: none or not a number); indexMu is held. It
// returns what "indexed_to" holds then, and its revision, as far as this
// writer knows.
func (a *ledgerArchive) setIndexedTo(ctx context.Context, end, to, rev uint64, timeout time.Duration) (uint64, uint64, error) {
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	value := strconv.AppendUint(nil, end, 10)
	for try := range indexTries {
		if rev != 0 && to >= end {
			return to, rev, nil
		}
		var (
			now uint64
			err error
		)
		if rev == 0 {
			now, err = a.kv.Put(sctx, indexedToKey, value) // none, or not a number
		} else {
			now, err = a.kv.Update(sctx, indexedToKey, value, rev)
		}
		if err == nil {
			return end, now, nil
		}
		if !isWrongLastSeq(err) {
			return to, rev, fmt.Errorf("cluster: record how far the ledger index reaches: %w", unavailable(err))
		}
		if err := backoff(sctx, try); err != nil {
			return to, rev, fmt.Errorf("cluster: record how far the ledger index reaches: %w", err)
		}
		t, err := a.readBound(sctx, indexedToKey)
		if err != nil {
			return to, rev, err
		}
		to, rev = t.k, t.rev
		if !t.known {
			rev = 0
		}
	}
	return to, rev, fmt.Errorf("cluster: record how far the ledger index reaches: changed under this writer %d times: %w", indexTries, pool.ErrStoreUnavailable)
}

// epochRanges returns the ranges of epoch that name peer, from its index
// value (every range of the epoch where the value does not decode or
// was deleted).
func (a *ledgerArchive) epochRanges(ctx context.Context, peer string, epoch uint64) ([]uint64, error) {
	v, err := a.readIndex(ctx, indexKey(peer, epoch), false)
	if err != nil {
		return nil, err
	}
	var ks []uint64
	for i := 0; i < len(v.runs); i += 2 {
		for o := v.runs[i]; o <= v.runs[i+1]; o++ {
			ks = append(ks, epoch*indexEpoch+uint64(o))
		}
	}
	return ks, nil
}

// legacyRanges returns the numbers of the ranges that name peer by the
// per-range keys versions before the index wrote ("p."), in order,
// listed within timeout.
func (a *ledgerArchive) legacyRanges(ctx context.Context, peer string, timeout time.Duration) ([]uint64, error) {
	lctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	prefix := "p." + peerKey(peer) + "."
	kl, err := a.kv.ListKeysFiltered(lctx, prefix+"*")
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: list the ledger ranges of %s: %w", peer, unavailable(err))
	}
	var ks []uint64
	for key := range kl.Keys() {
		k, err := strconv.ParseUint(strings.TrimPrefix(key, prefix), 10, 64)
		if err != nil {
			continue // not a range number: not a key versions before wrote
		}
		ks = append(ks, k)
	}
	// The lister closes its channel at the listing's end or when the
	// context ends: only the first is the whole list.
	if err := lctx.Err(); err != nil {
		return nil, fmt.Errorf("cluster: list the ledger ranges of %s: %w", peer, unavailable(err))
	}
	slices.Sort(ks)
	return slices.Compact(ks), nil
}
