package cluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/gob"
	"encoding/hex"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

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

// A batch in the state stream's format decodes to what it was and to
// exactly what the format before it (gob) gave, every field of every
// record set, so no field is lost or changed in the move.
func TestBatchFormatKeepsEveryField(t *testing.T) {
	var b pool.Batch
	n := 0
	fill(reflect.ValueOf(&b).Elem(), &n)
	for _, e := range b.Entries {
		if e.Tree == nil || len(e.Tree.Path) == 0 || e.Sig == nil {
			t.Fatalf("the filled batch has an entry without a tree proof or signature: %+v", e)
		}
	}
	data, err := encodeBatch(&b)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeBatch(batchFormat, data)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(&b, got); d != "" {
		t.Fatalf("the batch changed in %s (-written +read):\n%s", batchFormat, d)
	}
	var old bytes.Buffer
	if err := gob.NewEncoder(&old).Encode(&b); err != nil {
		t.Fatal(err)
	}
	fromGob, err := decodeBatch(batchFormatGob, old.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(fromGob, got); d != "" {
		t.Fatalf("%s and %s read differently (-gob +new):\n%s", batchFormatGob, batchFormat, d)
	}
	// Not a gob stream, and cut short: errors that name the format.
	if _, err := decodeBatch(batchFormat, data[:len(data)/2]); err == nil || !strings.Contains(err.Error(), batchFormat) {
		t.Fatalf("a batch cut in half: %v", err)
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
// writes and in the one before, for the batches of a pool deciding 4
// and 50 tasks per group commit (history). The figure per task is
// ns/op divided by the batch's tasks.
func BenchmarkBatchFormat(b *testing.B) {
	for _, per := range []int{4, 50} {
		h := newHistory()
		h.batch(per) // the peers and the job
		var batches []*pool.Batch
		for range 16 {
			batches = append(batches, h.batch(per))
		}
		for _, format := range []string{batchFormatGob, batchFormat} {
			b.Run(strconv.Itoa(per)+"-tasks/"+format, func(b *testing.B) {
				b.ReportAllocs()
				for i := range b.N {
					var data []byte
					if format == batchFormatGob {
						var buf bytes.Buffer
						if err := gob.NewEncoder(&buf).Encode(batches[i%len(batches)]); err != nil {
							b.Fatal(err)
						}
						data = buf.Bytes()
					} else {
						var err error
						if data, err = encodeBatch(batches[i%len(batches)]); err != nil {
							b.Fatal(err)
						}
					}
					if _, err := decodeBatch(format, data); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*per), "µs/task")
			})
		}
	}
}
