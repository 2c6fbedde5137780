package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"idlepool/pool"
)

// LedgerBucket is the JetStream key-value bucket of the ledger's older
// entries: an entry never changes once committed and the Scheduler
// loads none of them (it needs the ledger's head, which stays in
// memory), so whole ranges of them leave every node's memory and the
// snapshots, and Store.Entries reads them from here (ledger verify,
// receipt queries beyond the Scheduler's tail in memory).
//
// Keys: "r." and a range number k in decimal holds the entries with Seq
// k*LedgerRange+1 to (k+1)*LedgerRange (encodeRange: as the state
// stream's batches in cbor-v2, or, written by an older version, the
// CBOR of the []pool.Entry as in cbor-v1); "d." (a device's peer ID in
// unpadded base64url, "." and an epoch of indexEpoch ranges) says which
// ranges of the epoch name the device, and "indexed" and "indexed_to"
// which ranges those keys index (ledgerindex.go): the index by device a receipt
// query reads instead of every range ("p." keys, one per device and
// range, from versions before, are read for the ranges before it). The
// key "archived" holds a ledger Seq L (in decimal, a multiple of
// LedgerRange): every range up to L is stored with its index.
const LedgerBucket = "idlepool_ledger"

// LedgerRange is how many consecutive ledger entries one value of
// LedgerBucket holds: 1,024 entries of about 350 to 700 bytes each (a
// Merkle proof adds to it), well under the server's 8 MiB max payload.
//
// It is the size of the blocks in which a pool.MemStore holds its
// ledger (pool.EntryBlock), so that a snapshot hands the archive whole
// ranges without copying them; both are part of the archive's format
// and never change.
const LedgerRange = pool.EntryBlock

const (
	// ledgerWindow is how many ranges are written before their
	// acknowledgements are awaited.
	ledgerWindow = 16
	// maxPeerKey bounds the peer IDs the index is asked about: longer
	// ones (never registered: peer IDs are short) would make a subject
	// NATS refuses.
	maxPeerKey = 256
)

func rangeKey(k uint64) string { return "r." + strconv.FormatUint(k, 10) }

// ledgerArchive is the bucket LedgerBucket (or a shard's Ledger).
type ledgerArchive struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	bucket string

	indexMu sync.Mutex            // held by a put's index writes
	indexes map[string]indexValue // the index values last written or read, by key
	bounds  *writerBounds         // "indexed" and "indexed_to" as last recorded; nil: read them
}

// openLedgerArchive opens (or creates) the ledger archive bucket (a
// shard's Ledger).
func openLedgerArchive(ctx context.Context, js jetstream.JetStream, bucket string, replicas int) (*ledgerArchive, error) {
	kv, err := openKV(ctx, js, jetstream.KeyValueConfig{Bucket: bucket,
		Description: "idlepool: the ledger's older entries, in ranges, read on demand", History: 1,
		Replicas: replicas, Storage: jetstream.FileStorage, MaxValueSize: 8 << 20})
	if err != nil {
		return nil, fmt.Errorf("cluster: ledger archive %s: %w", bucket, unavailable(err))
	}
	return &ledgerArchive{js: js, kv: kv, bucket: bucket}, nil
}

// put stores ranges, each LedgerRange consecutive entries starting a
// range (as pool.MemStore.LedgerBlocks hands them over between two
// multiples of LedgerRange), then merges the devices they name into
// the index by device (ledgerindex.go), and returns once every value is
// acknowledged; a window not acknowledged within timeout wraps
// pool.ErrStoreUnavailable. Storing a range again stores the same values
// (entries never change) and merges nothing new into the index, so a
// put that failed half way is simply done again.
func (a *ledgerArchive) put(ctx context.Context, ranges [][]pool.Entry, timeout time.Duration) error {
	for _, r := range ranges {
		if len(r) != LedgerRange || (r[0].Seq-1)%LedgerRange != 0 {
			return fmt.Errorf("cluster: archive ledger entries %d to %d: not a whole range of %d", r[0].Seq, r[0].Seq+uint64(len(r))-1, LedgerRange)
		}
	}
	subj := "$KV." + a.bucket + "."
	all := ranges
	for len(ranges) > 0 {
		var acks []jetstream.PubAckFuture
		publish := func(key string, data []byte) error {
			f, err := a.js.PublishAsync(subj+key, data)
			if err != nil {
				return fmt.Errorf("cluster: archive ledger entries: %w", unavailable(err))
			}
			acks = append(acks, f)
			return nil
		}
		for range ledgerWindow {
			if len(ranges) == 0 {
				break
			}
			r := ranges[0]
			ranges = ranges[1:]
			k := (r[0].Seq - 1) / LedgerRange
			data, err := encodeRange(r)
			if err != nil {
				return fmt.Errorf("cluster: encode ledger range %d: %w", k, err)
			}
			if err := publish(rangeKey(k), data); err != nil {
				return err
			}
		}
		if err := awaitAcks(ctx, acks, timeout, "archive ledger entries"); err != nil {
			return err
		}
	}
	return a.index(ctx, all, timeout)
}

// awaitAcks waits for every ack within timeout.
func awaitAcks(ctx context.Context, acks []jetstream.PubAckFuture, timeout time.Duration, what string) error {
	wait := time.NewTimer(timeout)
	defer wait.Stop()
	for _, f := range acks {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("cluster: %s: %w", what, unavailable(err))
		case <-wait.C:
			return fmt.Errorf("cluster: %s: %w: no acknowledgement within %s", what, pool.ErrStoreUnavailable, timeout)
		case <-ctx.Done():
			return fmt.Errorf("cluster: %s: %w", what, unavailable(ctx.Err()))
		}
	}
	return nil
}

// errRangeMissing is what getRange's error wraps where the range is not
// in the bucket.
var errRangeMissing = errors.New("the archive lost it")

// getRange returns range k. A range the mark says is stored and that is
// not there is an error (the archive lost it: errRangeMissing).
func (a *ledgerArchive) getRange(ctx context.Context, k uint64) ([]pool.Entry, error) {
	e, err := a.kv.Get(ctx, rangeKey(k))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("cluster: ledger range %d (entries %d to %d) is not in %s: %w", k, k*LedgerRange+1, (k+1)*LedgerRange, a.bucket, errRangeMissing)
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: read ledger range %d: %w", k, unavailable(err))
	}
	es, err := decodeRange(e.Value())
	if err != nil {
		return nil, fmt.Errorf("cluster: decode ledger range %d: %w", k, err)
	}
	if len(es) != LedgerRange || es[0].Seq != k*LedgerRange+1 {
		from := uint64(0)
		if len(es) > 0 {
			from = es[0].Seq
		}
		return nil, fmt.Errorf("cluster: ledger range %d holds %d entries from %d, want %d from %d", k, len(es), from, LedgerRange, k*LedgerRange+1)
	}
	return es, nil
}

// entries returns the archived entries with Seq after q.After and up to
// upto (a multiple of LedgerRange the mark covers), at most q.Max, only
// those naming q.Peer when it is set, in Seq order. A query by device
// reads the ranges its index names: the per-range keys of versions
// before the index for ranges before its first, then the index's value
// for each epoch the device's summary names in turn, stopping at q.Max;
// where the index does not
// reach upto (or its bounds are not recorded), the ranges both kinds of
// key name, gathered first.
func (a *ledgerArchive) entries(ctx context.Context, q pool.EntryQuery, upto uint64, timeout time.Duration) ([]pool.Entry, error) {
	lo, hi := q.After/LedgerRange, upto/LedgerRange // ranges lo to hi-1
	if lo >= hi {
		return nil, nil
	}
	var out []pool.Entry
	next := lo // the first range not read yet
	// read adds the entries of ranges ks (ascending) that q asks for,
	// each range once, and says whether q.Max is reached.
	read := func(ks []uint64) (bool, error) {
		for _, k := range ks {
			if k < next || k >= hi {
				continue
			}
			next = k + 1
			gctx, cancel := context.WithTimeout(ctx, timeout)
			es, err := a.getRange(gctx, k)
			cancel()
			if err != nil {
				return false, err
			}
			for _, e := range es {
				if e.Seq > q.After && e.Seq <= upto && (q.Peer == "" || e.Peer == q.Peer) {
					out = append(out, e)
					if len(out) == q.Max {
						return true, nil
					}
				}
			}
		}
		return false, nil
	}
	if q.Peer == "" {
		ks := make([]uint64, 0, hi-lo)
		for k := lo; k < hi; k++ {
			ks = append(ks, k)
		}
		_, err := read(ks)
		return out, err
	}
	if len(q.Peer) > maxPeerKey {
		return nil, nil
	}
	first, to, toRev, err := a.indexBounds(ctx, timeout)
	if err != nil {
		return nil, err
	}
	// fast: the index covers every range from its first to hi, and the
	// per-range keys of versions before it those before its first.
	fast := first.known && toRev != 0 && to >= hi
	var ks []uint64
	if !fast || first.k > lo {
		if ks, err = a.legacyRanges(ctx, q.Peer, timeout); err != nil {
			return nil, err
		}
	}
	from := lo
	if fast {
		ks = slices.DeleteFunc(ks, func(k uint64) bool { return k >= first.k })
		if done, err := read(ks); done || err != nil {
			return out, err
		}
		ks, from = nil, max(lo, first.k)
	}
	gctx, cancel := context.WithTimeout(ctx, timeout)
	epochs, err := a.deviceEpochs(gctx, q.Peer, from/indexEpoch, (hi-1)/indexEpoch)
	cancel()
	if err != nil {
		return nil, err
	}
	for _, epoch := range epochs {
		gctx, cancel := context.WithTimeout(ctx, timeout)
		eks, err := a.epochRanges(gctx, q.Peer, epoch)
		cancel()
		if err != nil {
			return nil, err
		}
		if !fast {
			ks = append(ks, eks...)
		} else if done, err := read(eks); done || err != nil {
			return out, err
		}
	}
	if !fast {
		// Ranges of either kind of key, in any order: gathered first.
		slices.Sort(ks)
		_, err = read(slices.Compact(ks))
	}
	return out, err
}

// mark returns the ledger Seq up to which every range is archived (0:
// none is known to be).
func (a *ledgerArchive) mark(ctx context.Context) (uint64, error) {
	e, err := a.kv.Get(ctx, archivedKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("cluster: read the ledger archive's mark: %w", unavailable(err))
	}
	seq, err := strconv.ParseUint(string(e.Value()), 10, 64)
	if err != nil || seq%LedgerRange != 0 {
		return 0, fmt.Errorf("cluster: the ledger archive's mark %q is not a multiple of %d", e.Value(), LedgerRange)
	}
	return seq, nil
}

// setMark records that every range up to ledger Seq seq is archived.
func (a *ledgerArchive) setMark(ctx context.Context, seq uint64) error {
	if _, err := a.kv.Put(ctx, archivedKey, strconv.AppendUint(nil, seq, 10)); err != nil {
		return fmt.Errorf("cluster: set the ledger archive's mark to %d: %w", seq, unavailable(err))
	}
	return nil
}

// rangeTag is the CBOR tag (RFC 8949 section 3.4, from the range any
// application may use) of a ledger range written as a wireBatch that
// holds only its entries; a range without it is the []pool.Entry that
// versions before wrote (cbor-v1).
const rangeTag = 0x6c656432 // "led2"

// encodeRange encodes a range of entries as cbor-v2 does a batch's
// (signed batches as blocks, strings and job IDs in tables), tagged
// rangeTag: about a quarter of the bytes of cbor-v1.
func encodeRange(r []pool.Entry) ([]byte, error) {
	data, ok, err := marshalWire(&pool.Batch{Entries: r}, rangeTag)
	if !ok { // entries hold no time.Time: cannot happen
		return batchEnc.Marshal(r)
	}
	return data, err
}

// decodeRange decodes a range encodeRange wrote, or one in cbor-v1.
func decodeRange(data []byte) ([]pool.Entry, error) {
	if len(data) == 0 || data[0]>>5 != 6 { // not a tag: cbor-v1
		var es []pool.Entry
		if err := batchDec.Unmarshal(data, &es); err != nil {
			return nil, err
		}
		return es, nil
	}
	b, err := decodeTagged(data, rangeTag)
	if err != nil {
		return nil, err
	}
	if len(b.Peers)+len(b.Jobs)+len(b.Replicas)+len(b.Outcomes)+len(b.Acks)+len(b.Cancels)+len(b.Trust) > 0 {
		return nil, errors.New("a ledger range holds other records than entries")
	}
	return b.Entries, nil
}
