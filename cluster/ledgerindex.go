package cluster

import (
	"context"
	"encoding/base64"
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
//   - "indexed": the first range number (in decimal) whose devices are
//     in "d." values. Ranges before it were archived by a version that
//     wrote "p.", the peer ID as above, "." and the range number (the
//     value: how many of its entries name the device), one key for each
//     device a range names; a query lists those keys for ranges before
//     it. A pool begun with this version has it at 0 and no "p." keys.
//
// An index value that does not decode stands for every range of its
// epoch (a query then reads them all and keeps the device's entries):
// the index may name ranges that hold none of a device's entries, never
// miss one.

const (
	// indexEpoch is how many consecutive ranges one value of the index
	// covers: 4,096 ranges of 1,024 entries, about half an hour of a
	// pool accepting 1,300 tasks a second. A query by device reads one
	// value for each epoch it spans; a value is at most 512 bytes and a
	// few (encodeIndex). Part of the format: never changes.
	indexEpoch = 4096
	// indexTag is the CBOR tag (RFC 8949 section 3.4, from the range
	// any application may use) of an index value.
	indexTag = 0x64657631 // "dev1"
	// indexedKey is the key of the first range the "d." values index.
	indexedKey = "indexed"
	// indexTries bounds how often one put writes a value whose revision
	// another writer changed meanwhile (two nodes in charge for a
	// moment, each merging what it archives).
	indexTries = 8
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
// in their epoch, ascending, apart) as CBOR tag indexTag over whichever
// is shorter: an array of the offsets, or a byte string with bit o%8
// (least significant first) of byte o/8 set for each offset o in a run,
// up to the last byte with a bit set. A value is so at most 512 bytes
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

// decodeIndex decodes what encodeIndex wrote, as runs. The error says
// what is wrong: another tag, an odd count, an offset past the epoch,
// runs out of order or touching, a byte string longer than the epoch's
// bits.
func decodeIndex(data []byte) ([]uint32, error) {
	var t cbor.RawTag
	if err := batchDec.Unmarshal(data, &t); err != nil {
		return nil, err
	}
	if t.Number != indexTag {
		return nil, fmt.Errorf("tag %d, want %d (written by a newer idlepool?)", t.Number, indexTag)
	}
	if len(t.Content) > 0 && t.Content[0]>>5 == 2 { // a byte string
		var bits []byte
		if err := batchDec.Unmarshal(t.Content, &bits); err != nil {
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
	var runs []uint32
	if err := batchDec.Unmarshal(t.Content, &runs); err != nil {
		return nil, err
	}
	if len(runs)%2 != 0 {
		return nil, fmt.Errorf("%d offsets: not pairs", len(runs))
	}
	for i := 0; i < len(runs); i += 2 {
		if runs[i] > runs[i+1] || runs[i+1] >= indexEpoch || (i > 0 && runs[i] <= runs[i-1]+1) {
			return nil, fmt.Errorf("run %d (%d to %d) is not after the one before, within %d ranges", i/2, runs[i], runs[i+1], indexEpoch)
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

// pendingIndex is what one put adds to one index value.
type pendingIndex struct {
	key   string
	epoch uint64
	offs  []uint32 // ascending
}

// index merges the devices each of ranges names into their index
// values (ranges as put checked them), and returns once every value is
// acknowledged. A value another writer changed meanwhile is read again
// and merged again, up to indexTries times.
func (a *ledgerArchive) index(ctx context.Context, ranges [][]pool.Entry, timeout time.Duration) error {
	if len(ranges) == 0 {
		return nil
	}
	a.indexMu.Lock()
	defer a.indexMu.Unlock()
	if err := a.setIndexed(ctx, (ranges[0][0].Seq-1)/LedgerRange, timeout); err != nil {
		return err
	}
	type at struct {
		peer  string
		epoch uint64
	}
	byPeer := map[at]*pendingIndex{}
	var todo []*pendingIndex
	low := uint64(1<<64 - 1)
	for _, r := range ranges {
		k := (r[0].Seq - 1) / LedgerRange
		epoch, off := k/indexEpoch, uint32(k%indexEpoch)
		low = min(low, epoch)
		for i := range r {
			if r[i].Peer == "" { // an anchor names no device
				continue
			}
			p := byPeer[at{r[i].Peer, epoch}]
			if p == nil {
				p = &pendingIndex{key: indexKey(r[i].Peer, epoch), epoch: epoch}
				byPeer[at{r[i].Peer, epoch}] = p
				todo = append(todo, p)
			} else if p.offs[len(p.offs)-1] == off {
				continue
			}
			p.offs = append(p.offs, off)
		}
	}
	for _, p := range todo {
		slices.Sort(p.offs) // ranges come in order; this makes sure
	}
	if a.indexes == nil || len(a.indexes) > maxIndexCache {
		a.indexes = map[string]indexValue{}
	}
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
		for _, p := range changed {
			gctx, cancel := context.WithTimeout(ctx, timeout)
			v, err := a.readIndex(gctx, p.key)
			cancel()
			if err != nil {
				return err
			}
			v.epoch = p.epoch
			a.indexes[p.key] = v
		}
		todo = changed
	}
	for key, v := range a.indexes {
		if v.epoch < low { // an epoch the snapshots archive no more
			delete(a.indexes, key)
		}
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
		data, err := encodeIndex(runs)
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

// readIndex reads the value of key for a writer: its revision (a
// deletion's, where it was deleted; 0 where it never was written) and
// its runs (wholeEpoch where it does not decode).
func (a *ledgerArchive) readIndex(ctx context.Context, key string) (indexValue, error) {
	m, err := a.stream.GetLastMsgForSubject(ctx, "$KV."+a.bucket+"."+key)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return indexValue{}, nil
	}
	if err != nil {
		return indexValue{}, fmt.Errorf("cluster: read ledger index %s: %w", key, unavailable(err))
	}
	if op := m.Header.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
		return indexValue{rev: m.Sequence}, nil
	}
	runs, err := decodeIndex(m.Data)
	if err != nil {
		return indexValue{rev: m.Sequence, runs: wholeEpoch, damaged: true}, nil
	}
	return indexValue{rev: m.Sequence, runs: runs}, nil
}

// setIndexed records k as the first range the "d." values index,
// unless one before it is recorded: the least that any writer of this
// version indexed from (two nodes in charge for a moment may archive
// from two marks); indexMu is held. A value deleted or not a number
// (by hand) stays as it is: queries then read every kind of key, which
// is right whatever it should have held, where a value recorded again
// might pass ranges the per-range keys do not name.
func (a *ledgerArchive) setIndexed(ctx context.Context, k uint64, timeout time.Duration) error {
	if a.indexedSet {
		return nil
	}
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	value := strconv.AppendUint(nil, k, 10)
	for range indexTries {
		m, err := a.stream.GetLastMsgForSubject(sctx, "$KV."+a.bucket+"."+indexedKey)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			_, err = a.kv.Create(sctx, indexedKey, value)
		case err != nil:
		case m.Header.Get("KV-Operation") != "":
			a.indexedSet = true // deleted or purged
			return nil
		default:
			if was, perr := strconv.ParseUint(string(m.Data), 10, 64); perr != nil || was <= k {
				a.indexedSet = true
				return nil
			}
			_, err = a.kv.Update(sctx, indexedKey, value, m.Sequence)
		}
		if err == nil {
			a.indexedSet = true
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !isWrongLastSeq(err) {
			return fmt.Errorf("cluster: record the ledger index's first range: %w", unavailable(err))
		}
	}
	return fmt.Errorf("cluster: record the ledger index's first range: changed under this writer %d times: %w", indexTries, pool.ErrStoreUnavailable)
}

// indexed returns the first range the "d." values index, and false when
// none is recorded (a pool archived by versions before them alone) or
// the value was deleted or is not a number.
func (a *ledgerArchive) indexed(ctx context.Context) (uint64, bool, error) {
	e, err := a.kv.Get(ctx, indexedKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("cluster: read the ledger index's first range: %w", unavailable(err))
	}
	k, err := strconv.ParseUint(string(e.Value()), 10, 64)
	return k, err == nil, nil
}

// epochRanges returns the ranges of epoch that name peer, from its index
// value (every range of the epoch where the value does not decode).
func (a *ledgerArchive) epochRanges(ctx context.Context, peer string, epoch uint64) ([]uint64, error) {
	key := indexKey(peer, epoch)
	e, err := a.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: read ledger index %s: %w", key, unavailable(err))
	}
	runs, err := decodeIndex(e.Value())
	if err != nil {
		runs = wholeEpoch
	}
	var ks []uint64
	for i := 0; i < len(runs); i += 2 {
		for o := runs[i]; o <= runs[i+1]; o++ {
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
