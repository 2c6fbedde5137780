package cluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/gob"
	"encoding/hex"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"idlepool/job"
	"idlepool/pool"
)

// fill sets every exported field reachable from v (a settable value) to
// a value that is not its zero, different from field to field: slices
// get two elements, pointers a filled value, times a date with
// nanoseconds in a zone east of UTC. n numbers the values.
func fill(v reflect.Value, n *int) {
	*n++
	switch v.Kind() {
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(*n))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(*n))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(*n) + 0.25)
	case reflect.String:
		v.SetString("s" + strconv.Itoa(*n))
	case reflect.Array:
		for i := range v.Len() {
			fill(v.Index(i), n)
		}
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := range 2 {
			fill(s.Index(i), n)
		}
		v.Set(s)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(p.Elem(), n)
		v.Set(p)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k, n)
		fill(e, n)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Unix(1_767_000_000+int64(*n), int64(*n)*1001).In(time.FixedZone("", 5*3600+30*60))))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), n)
			}
		}
	}
}

// A batch in the state stream's formats decodes to what it was and to
// exactly what the format before them (gob) gave, every field of every
// record set, so no field is lost or changed in the move.
func TestBatchFormatKeepsEveryField(t *testing.T) {
	var b pool.Batch
	n := 0
	fill(reflect.ValueOf(&b).Elem(), &n)
	b.Leaves = nil // Batch.Sign's, never stored
	for _, e := range b.Entries {
		if e.Tree == nil || len(e.Tree.Path) == 0 || e.Sig == nil {
			t.Fatalf("the filled batch has an entry without a tree proof or signature: %+v", e)
		}
	}
	var old bytes.Buffer
	if err := gob.NewEncoder(&old).Encode(&b); err != nil {
		t.Fatal(err)
	}
	fromGob, err := decodeBatch(batchFormatGob, old.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	v1, err := batchEnc.Marshal(&b)
	if err != nil {
		t.Fatal(err)
	}
	format, v2, err := encodeBatch(&b)
	if err != nil || format != batchFormat {
		t.Fatalf("encoded in %q: %v", format, err)
	}
	for _, c := range []struct {
		format string
		data   []byte
	}{{batchFormatV1, v1}, {batchFormat, v2}} {
		got, err := decodeBatch(c.format, c.data)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(&b, got); d != "" {
			t.Fatalf("the batch changed in %s (-written +read):\n%s", c.format, d)
		}
		if d := cmp.Diff(fromGob, got); d != "" {
			t.Fatalf("%s and %s read differently (-gob +new):\n%s", batchFormatGob, c.format, d)
		}
		// Cut short: errors that name the format.
		if _, err := decodeBatch(c.format, c.data[:len(c.data)/2]); err == nil || !strings.Contains(err.Error(), c.format) {
			t.Fatalf("a batch cut in half: %v", err)
		}
	}
}

// Batches as a busy pool's node in charge writes them (each batch's
// entries signed together by pool.SignBatch) are written in cbor-v2 with
// the entries as one block, read back exactly, proofs and chain
// rebuilt, and take under a third of cbor-v1's bytes. A signed batch
// whose proofs are not the ones SignBatch gives, or whose entries do
// not chain, is written entry by entry, and reads back exactly too.
func TestBatchFormatSignedBlocks(t *testing.T) {
	h, _ := newSignedHistory(t)
	h.batch(50)
	b := h.batch(50)
	if len(b.Entries) != 100 {
		t.Fatalf("the history gave %d entries, want 100", len(b.Entries))
	}
	roundTrip := func(what string, b *pool.Batch, blocks int) []byte {
		t.Helper()
		format, data, err := encodeBatch(b)
		if err != nil || format != batchFormat {
			t.Fatalf("%s: encoded in %q: %v", what, format, err)
		}
		var w wireBatch
		if err := batchDec.Unmarshal(data, &w); err != nil {
			t.Fatal(err)
		}
		if got := blocksOf(&w); got != blocks {
			t.Fatalf("%s: %d blocks, want %d", what, got, blocks)
		}
		back, err := decodeBatch(format, data)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if d := cmp.Diff(b, back, cmpopts.IgnoreFields(pool.Batch{}, "Leaves")); d != "" { // Batch.Sign's, never stored
			t.Fatalf("%s: the batch changed (-written +read):\n%s", what, d)
		}
		return data
	}
	data := roundTrip("signed", b, 1)
	v1, err := batchEnc.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if 3*len(data) > len(v1) {
		t.Fatalf("cbor-v2 took %d bytes, cbor-v1 %d: more than a third", len(data), len(v1))
	}
	t.Logf("100 replicas, 100 signed receipts, 50 outcomes: cbor-v1 %d bytes, cbor-v2 %d", len(v1), len(data))

	// As the Scheduler hands it, signed by Batch.Sign with the leaf
	// hashes it keeps: SignedWhole, and the same bytes, written without
	// hashing the entries again. A Prev changed after Sign is not
	// trusted: the entries are hashed, and written as they are.
	hinted := cloneBatch(t, b)
	hinted.Sign(hinted.Entries[0].Prev, h.sign) // Ed25519 signs the same bytes alike
	if !hinted.SignedWhole() {
		t.Fatal("a batch signed by Batch.Sign is not SignedWhole")
	}
	if _, hdata, err := encodeBatch(hinted); err != nil || !bytes.Equal(hdata, data) {
		t.Fatalf("signed by Batch.Sign, the batch encodes to other bytes (%d, not %d): %v", len(hdata), len(data), err)
	}
	unchainedHint := cloneBatch(t, hinted)
	unchainedHint.Sign(unchainedHint.Entries[0].Prev, h.sign)
	unchainedHint.Entries[3].Prev[0] ^= 1
	roundTrip("signed by Batch.Sign, then a Prev changed", unchainedHint, 0)

	bent := cloneBatch(t, b)
	bent.Entries[7].Tree.Path[0][0] ^= 1
	roundTrip("a proof not rebuilt so", bent, 0)
	unchained := cloneBatch(t, b)
	unchained.Entries[3].Prev[0] ^= 1
	roundTrip("a Prev that does not chain", unchained, 0)
	twice := cloneBatch(t, b)
	twice.Entries = append(twice.Entries, h.batch(50).Entries...)
	roundTrip("two signed batches", twice, 2)
}

// A writer used again (marshalWire keeps them) writes each batch as a
// new one does, whatever it wrote before: large batches and small ones,
// with and without entries and records, entries of several signed
// batches (a block each, more blocks than a writer first makes room
// for), a range of entries and a window of replicas under their tags;
// nothing of one batch is left in the next, and reset zeroes all the
// room it keeps.
func TestBatchFormatWriterUsedAgain(t *testing.T) {
	h, _ := newSignedHistory(t)
	var filled pool.Batch
	n := 0
	fill(reflect.ValueOf(&filled).Elem(), &n)
	filled.Leaves = nil
	first := h.batch(3)
	big := h.batch(400)
	unchained := cloneBatch(t, h.batch(20))
	unchained.Entries[3].Prev[0] ^= 1
	recs := h.batch(7)
	recs.Entries = nil
	blocks := &pool.Batch{}
	for range 6 {
		blocks.Entries = append(blocks.Entries, h.batch(3).Entries...)
	}
	batches := []*pool.Batch{first, big, h.batch(1), &filled, {}, h.batch(50), unchained, recs, blocks, h.batch(2)}
	ww := new(wireWriter)
	for round := range 2 {
		for i, b := range batches {
			for _, tag := range []uint64{0, rangeTag} {
				fresh, ok := toWire(b)
				if !ok {
					t.Fatalf("batch %d does not fit cbor-v2", i)
				}
				var content any = fresh
				if tag != 0 {
					content = cbor.Tag{Number: tag, Content: fresh}
				}
				want, err := wireEnc.Marshal(content)
				if err != nil {
					t.Fatal(err)
				}
				used, ok := ww.write(b)
				if !ok {
					t.Fatalf("round %d, batch %d: a writer used again says cbor-v2 cannot hold it", round, i)
				}
				if tag == 0 {
					if got, err := wireEnc.Marshal(used); err != nil || !bytes.Equal(got, want) {
						t.Fatalf("round %d, batch %d: a writer used again wrote %d bytes unlike a new one's %d: %v", round, i, len(got), len(want), err)
					}
				}
				ww.reset()
				if leftover := keptRoomUsed(ww); leftover != "" {
					t.Fatalf("round %d, batch %d: reset left %s", round, i, leftover)
				}
				if data, ok, err := marshalWire(b, tag); err != nil || !ok || !bytes.Equal(data, want) {
					t.Fatalf("round %d, batch %d, tag %#x: marshalWire wrote other bytes (ok %v): %v", round, i, tag, ok, err)
				}
			}
		}
	}
	if got := blocksOf(func() *wireBatch { w, _ := toWire(blocks); return w }()); got != 6 {
		t.Fatalf("the batch of six signed batches' entries wrote %d blocks, want 6", got)
	}
}

// keptRoomUsed names what ww, just reset, still holds of its last batch
// in the room it keeps for the next ("" when all of it is zero).
func keptRoomUsed(ww *wireWriter) string {
	switch {
	case ww.w.Replicas != nil || ww.w.Outcomes != nil || ww.w.Ledger != nil || ww.w.Strings != nil || ww.w.Jobs != nil:
		return "the batch's records"
	case len(ww.strings.values) != 0 || len(ww.strings.index) != 0 || len(ww.jobs.values) != 0 || len(ww.jobs.index) != 0:
		return "its tables"
	case slices.ContainsFunc(ww.strings.values[:cap(ww.strings.values)], func(s string) bool { return s != "" }):
		return "strings in the table's room"
	case slices.ContainsFunc(ww.replicas[:cap(ww.replicas)], func(r wireReplica) bool { return r.Result != nil || r.Digest != nil || r.Lease != 0 }):
		return "replicas in their room"
	case slices.ContainsFunc(ww.outcomes[:cap(ww.outcomes)], func(o wireOutcome) bool { return o.Result != nil || o.Holders != nil || o.Seq != 0 }):
		return "outcomes in their room"
	case slices.ContainsFunc(ww.ledgers[:cap(ww.ledgers)], func(l wireLedger) bool { return l.Block != nil || l.Entry != nil }):
		return "ledger records in their room"
	case slices.ContainsFunc(ww.blocks[:cap(ww.blocks)], func(b wireBlock) bool { return b.Entries != nil || b.Sig != nil }):
		return "blocks in their room"
	case slices.ContainsFunc(ww.entries[:cap(ww.entries)], func(e wireEntry) bool { return e.Digest != nil || e.Time != 0 || e.Kind != 0 }):
		return "entries in their room"
	}
	return ""
}

// blocksOf counts the ledger blocks of w: the signed batches written as
// one.
func blocksOf(w *wireBatch) int {
	n := 0
	for _, l := range w.Ledger {
		if l.Block != nil {
			n++
		}
	}
	return n
}

// cloneBatch returns a deep copy of b.
func cloneBatch(t *testing.T, b *pool.Batch) *pool.Batch {
	t.Helper()
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(b); err != nil {
		t.Fatal(err)
	}
	var c pool.Batch
	if err := gob.NewDecoder(&buf).Decode(&c); err != nil {
		t.Fatal(err)
	}
	return &c
}

// Times: the zero time and times with nanoseconds read back in cbor-v2;
// a time it cannot hold (after 2262) sends the batch to cbor-v1, which
// holds it.
func TestBatchFormatTimes(t *testing.T) {
	at := time.Date(2026, 12, 6, 10, 30, 0, 123456789, time.FixedZone("", -7*3600))
	r := pool.ReplicaRecord{Lease: "l", Task: 1, Peer: "p", State: pool.ReplicaLeased, Created: at, Version: 1}
	for _, c := range []struct {
		deadline time.Time
		format   string
	}{
		{time.Time{}, batchFormat},
		{at.Add(time.Nanosecond), batchFormat},
		{time.Unix(0, math.MinInt64+1), batchFormat},
		{time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC), batchFormatV1},
		{time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC), batchFormatV1},
		{time.Unix(0, math.MinInt64), batchFormatV1}, // the zero time's mark in cbor-v2
	} {
		r.Deadline = c.deadline
		b := &pool.Batch{Replicas: []pool.ReplicaRecord{r}}
		format, data, err := encodeBatch(b)
		if err != nil || format != c.format {
			t.Fatalf("deadline %v: encoded in %q, want %q: %v", c.deadline, format, c.format, err)
		}
		got, err := decodeBatch(format, data)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(b, got); d != "" {
			t.Fatalf("deadline %v: the batch changed in %s (-written +read):\n%s", c.deadline, format, d)
		}
		if got.Replicas[0].Deadline.IsZero() != c.deadline.IsZero() {
			t.Fatalf("deadline %v read as %v", c.deadline, got.Replicas[0].Deadline)
		}
	}
}

// A cbor-v2 batch whose records name strings, jobs or digests it does
// not hold is refused with the record named, not applied with blanks.
func TestBatchFormatRefusesBadIndexes(t *testing.T) {
	blk := func(e wireEntry, prev []byte) []wireLedger {
		return []wireLedger{{Block: &wireBlock{First: 1, Prev: prev, Sig: []byte{1}, Entries: []wireEntry{e}}}}
	}
	for _, c := range []struct {
		w    wireBatch
		want string
	}{
		{wireBatch{Strings: []string{"a", "b"}, Jobs: make([]job.ID, 1), Replicas: []wireReplica{{Peer: 5}}}, "replica 0 names string 5 of 2"},
		{wireBatch{Strings: []string{"a"}, Replicas: []wireReplica{{}}}, "replica 0 names job 0 of 0"},
		{wireBatch{Strings: []string{"a"}, Jobs: make([]job.ID, 1), Outcomes: []wireOutcome{{Holders: []uint32{0, 9}}}}, "outcome 0 names string 9 of 1"},
		{wireBatch{Strings: []string{"a"}, Jobs: make([]job.ID, 1), Outcomes: []wireOutcome{{Digest: []byte{1, 2}}}}, "outcome 0 has a digest of 2 bytes"},
		{wireBatch{Strings: []string{"a"}, Jobs: make([]job.ID, 1), Ledger: blk(wireEntry{Lease: 3}, nil)}, "ledger entry 1 names string 3 of 1"},
		{wireBatch{Strings: []string{"a"}, Jobs: make([]job.ID, 1), Ledger: blk(wireEntry{}, []byte{7})}, "block at entry 1 has a digest of 1 bytes"},
		{wireBatch{Ledger: []wireLedger{{}}}, "ledger part 0 is neither one block nor one entry"},
		{wireBatch{Ledger: []wireLedger{{Block: &wireBlock{First: 4}}}}, "block at entry 4 has no entries or no signature"},
	} {
		data, err := wireEnc.Marshal(&c.w)
		if err != nil {
			t.Fatal(err)
		}
		_, err = decodeBatch(batchFormat, data)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), batchFormat) {
			t.Fatalf("got %v, want an error naming %s and %q", err, batchFormat, c.want)
		}
	}
}

// publishBatch appends b to the state stream after sequence after as a
// node of an older version did, in format with the data encode gives.
func publishBatch(t *testing.T, js jetstream.JetStream, after uint64, format string, data []byte) uint64 {
	t.Helper()
	sum := sha256.Sum256(data)
	msg := nats.NewMsg(stateSubj)
	msg.Data = data
	msg.Header.Set(hdrFmt, format)
	msg.Header.Set(hdrBatch, hex.EncodeToString(sum[:16]))
	msg.Header.Set(hdrPart, "1/1")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ack, err := js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequence(after))
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

// A stream that an older version began (batches in gob) and this one
// went on with loads whole on a node that starts from nothing: a
// cluster upgraded node by node keeps its history. A message in a
// format this version does not know is refused with its sequence and
// format named.
func TestStoreReadsTheFormatBefore(t *testing.T) {
	t.Parallel()
	node := startNodes(t, testConfigs(t, t.TempDir(), 1))[0]
	ctx := context.Background()
	w := openStore(t, node, 1) // makes the stream
	h := newHistory()
	var seq uint64
	for range 4 {
		var buf bytes.Buffer
		if err := gob.NewEncoder(&buf).Encode(h.batch(8)); err != nil {
			t.Fatal(err)
		}
		seq = publishBatch(t, node.JetStream(), seq, batchFormatGob, buf.Bytes())
	}
	if _, err := w.Load(ctx); err != nil {
		t.Fatalf("load the older version's batches: %v", err)
	}
	for range 4 {
		if err := w.Commit(ctx, h.batch(8)); err != nil {
			t.Fatal(err)
		}
	}
	cold := openStore(t, node, 1)
	if _, err := cold.Load(ctx); err != nil {
		t.Fatalf("load a stream of both formats: %v", err)
	}
	sameState(t, "both formats", w, cold)
	snap, _ := cold.mem.Load(ctx)
	// Each batch after the first settles the 8 tasks of the one before:
	// an outcome and two receipts each.
	if len(snap.Outcomes) != 7*8 || snap.LedgerSeq != 7*8*2 {
		t.Fatalf("loaded %d outcomes and %d ledger entries, want %d and %d", len(snap.Outcomes), snap.LedgerSeq, 7*8, 7*8*2)
	}

	w.Release()
	publishBatch(t, node.JetStream(), w.LastSeq(), "zstd-v9", []byte("?"))
	_, err := openStore(t, node, 1).Load(ctx)
	if err == nil || !strings.Contains(err.Error(), `format "zstd-v9"`) || !strings.Contains(err.Error(), "state message 9 ") {
		t.Fatalf("a message in an unknown format: %v", err)
	}
}

// BenchmarkBatchFormat measures what the node in charge pays to encode a
// batch and each other node to decode it, in the format this version
// writes and in the two before, for the batches of a pool deciding 4
// and 50 tasks per group commit (history, each batch's entries signed
// together as the Scheduler signs them). The figures per task are
// ns/op and the encoding's bytes divided by the batch's tasks:
//
//	go test -run '^$' -bench BatchFormat ./cluster/
func BenchmarkBatchFormat(b *testing.B) {
	for _, per := range []int{4, 50} {
		h, _ := newSignedHistory(b)
		h.batch(per) // the peers and the job
		var batches []*pool.Batch
		for range 16 {
			batches = append(batches, h.batch(per))
		}
		for _, format := range []string{batchFormatGob, batchFormatV1, batchFormat} {
			b.Run(strconv.Itoa(per)+"-tasks/"+format, func(b *testing.B) {
				b.ReportAllocs()
				size := 0
				for i := range b.N {
					var data []byte
					switch format {
					case batchFormatGob:
						var buf bytes.Buffer
						if err := gob.NewEncoder(&buf).Encode(batches[i%len(batches)]); err != nil {
							b.Fatal(err)
						}
						data = buf.Bytes()
					case batchFormatV1:
						var err error
						if data, err = batchEnc.Marshal(batches[i%len(batches)]); err != nil {
							b.Fatal(err)
						}
					default:
						var (
							got string
							err error
						)
						if got, data, err = encodeBatch(batches[i%len(batches)]); err != nil || got != format {
							b.Fatalf("encoded in %q: %v", got, err)
						}
					}
					size += len(data)
					if _, err := decodeBatch(format, data); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*per), "µs/task")
				b.ReportMetric(float64(size)/float64(b.N*per), "bytes/task")
			})
		}
	}
}

// A ledger range is archived in cbor-v2's form (tagged), in under a
// third of cbor-v1's bytes, each signed batch wholly inside it as one
// block, and reads back exactly whether it starts and ends at a signed
// batch's edges or inside one; a range an older version wrote (cbor-v1)
// still reads, and a value under another tag is refused. A Prev that is
// not its predecessor's hash, in a batch or at a batch's start, sends
// the batch it names (only that one) to be written entry by entry, and
// the range still reads back exactly: the encoder hashes every entry
// rather than take each hash from the next entry's Prev, which would
// write the batch at a changed first Prev as a block that reads back
// otherwise.
func TestLedgerRangeFormat(t *testing.T) {
	h, _ := newSignedHistory(t)
	h.batch(37)
	var es []pool.Entry
	for len(es) < 2*LedgerRange {
		es = append(es, h.batch(37).Entries...) // 74 entries signed together
	}
	roundTrip := func(what string, r []pool.Entry, blocks int) []byte {
		t.Helper()
		data, err := encodeRange(r)
		if err != nil {
			t.Fatal(err)
		}
		var tag cbor.RawTag
		var w wireBatch
		if err := batchDec.Unmarshal(data, &tag); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if err := batchDec.Unmarshal(tag.Content, &w); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := blocksOf(&w); got != blocks {
			t.Errorf("%s: %d blocks, want %d", what, got, blocks)
		}
		back, err := decodeRange(data)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if d := cmp.Diff(r, back); d != "" {
			t.Fatalf("%s changed (-written +read):\n%s", what, d)
		}
		return data
	}
	// 74 entries a batch: 13 batches wholly inside a range from a
	// batch's first entry, 12 inside one that starts 5 entries into one.
	for _, c := range []struct{ start, blocks int }{{0, 13}, {5, 12}, {74, 13}} {
		start := c.start
		r := es[start : start+LedgerRange]
		data := roundTrip(fmt.Sprintf("range from entry %d", r[0].Seq), r, c.blocks)
		old, err := batchEnc.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if 3*len(data) > len(old) {
			t.Errorf("range from entry %d: %d bytes, cbor-v1 %d: more than a third", r[0].Seq, len(data), len(old))
		}
		t.Logf("range from entry %d: %d bytes, cbor-v1 %d", r[0].Seq, len(data), len(old))
		if got, err := decodeRange(old); err != nil || !cmp.Equal(r, got) {
			t.Fatalf("range from entry %d in cbor-v1 reads as %d entries: %v", r[0].Seq, len(got), err)
		}
	}
	for _, c := range []struct {
		what  string
		entry int // in the range from entry 1, whose batches start at 0, 74, ...
	}{
		{"a Prev inside a batch that is not its predecessor's hash", 74 + 3},
		{"a batch's first Prev that is not the batch before's last hash", 2 * 74},
		{"a batch's last Prev that is not its predecessor's hash", 13*74 - 1},
	} {
		r := slices.Clone(es[:LedgerRange])
		r[c.entry].Prev[0] ^= 1
		// Each names one batch: the one it is in, or the one before.
		roundTrip(c.what, r, 12)
	}
	other, err := wireEnc.Marshal(cbor.Tag{Number: 7, Content: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decodeRange(other); err == nil || !strings.Contains(err.Error(), "tag 7") {
		t.Fatalf("a range under tag 7: %v", err)
	}
}
