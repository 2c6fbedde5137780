package pool_test

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/fxamacker/cbor/v2"
	"github.com/google/go-cmp/cmp"

	"idlepool/job"
	"idlepool/pool"
	"idlepool/pool/pooltest"
)

// filledEntry returns an entry with every field set to a value that is
// not its zero value, found by reflection, so that a field added to
// Entry is round-tripped here too (or the test fails). The entry is in a
// batch (Tree set) with a path of three hashes.
func filledEntry(t *testing.T, seed int) pool.Entry {
	t.Helper()
	var e pool.Entry
	v := reflect.ValueOf(&e).Elem()
	for i := range v.NumField() {
		f, name := v.Field(i), v.Type().Field(i).Name
		n := seed*100 + i + 1
		switch f.Kind() {
		case reflect.String:
			f.SetString(fmt.Sprintf("%s-%d-é<&>", name, n))
		case reflect.Uint64:
			f.SetUint(uint64(n) << 40)
		case reflect.Int64:
			f.SetInt(-int64(n) << 40)
		case reflect.Float64:
			f.SetFloat(float64(n) + 0.1)
		case reflect.Array: // a digest
			d := sha256.Sum256(fmt.Append(nil, name, n))
			reflect.Copy(f, reflect.ValueOf(d[:]))
		case reflect.Slice: // Sig
			f.SetBytes(make([]byte, 64))
			for j := range f.Len() {
				f.Index(j).SetUint(uint64(n + j))
			}
		case reflect.Pointer: // Tree
			path := make([]job.Digest, 3)
			for j := range path {
				path[j] = sha256.Sum256(fmt.Append(nil, "path", n, j))
			}
			f.Set(reflect.ValueOf(&pool.TreeProof{Size: 7, Index: uint64(seed % 7), Path: path}))
		default:
			t.Fatalf("Entry.%s: kind %s not filled; teach filledEntry and the compact form about it", name, f.Kind())
		}
	}
	return e
}

// Every field of an entry survives the compact form: each field alone
// (the others zero), all of them together, in a batch and signed alone.
func TestEntriesCBORRoundTripEveryField(t *testing.T) {
	full := filledEntry(t, 1)
	var cases []pool.Entry
	v := reflect.ValueOf(full)
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		var one pool.Entry
		reflect.ValueOf(&one).Elem().Field(i).Set(v.Field(i))
		switch name {
		case "Sig": // a batch needs a Tree, an entry alone a Sig
			one.Tree = &pool.TreeProof{Size: 1}
		case "Tree":
			one.Sig = full.Sig
		default:
			one.Sig = full.Sig
		}
		cases = append(cases, one)
	}
	alone := filledEntry(t, 2)
	alone.Tree = nil
	cases = append(cases, full, alone, filledEntry(t, 3))
	for i, e := range cases {
		b := pool.AppendEntriesCBOR(nil, []pool.Entry{e})
		got, err := pool.DecodeEntriesCBOR(b)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if diff := cmp.Diff([]pool.Entry{e}, got); diff != "" {
			t.Errorf("case %d: round trip (-want +got):\n%s", i, diff)
		}
	}
	// All together: the two entries of one batch, the one alone and
	// another batch.
	b := pool.AppendEntriesCBOR(nil, cases[len(cases)-3:])
	got, err := pool.DecodeEntriesCBOR(b)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(cases[len(cases)-3:], got); diff != "" {
		t.Errorf("together: round trip (-want +got):\n%s", diff)
	}
}

// A real ledger's entries, from batches signed as a Scheduler signs them
// and from entries signed alone, come back equal, with each batch's
// signature sent once, and verify as they did.
func TestEntriesCBORRealLedger(t *testing.T) {
	key := pooltest.Key(t, "coordinator")
	var es []pool.Entry
	prev := job.Digest{}
	for _, n := range []int{1, 5, 17} {
		batch := treeEntries(uint64(len(es)+1), n)
		prev = pool.SignBatch(batch, prev, key.Sign)
		es = append(es, batch...)
	}
	alone := treeEntries(uint64(len(es)+1), 2)
	signAlone(alone, prev, key.Sign)
	es = append(es, alone...)
	b := pool.AppendEntriesCBOR(nil, es)
	got, err := pool.DecodeEntriesCBOR(b)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(es, got); diff != "" {
		t.Fatalf("round trip (-want +got):\n%s", diff)
	}
	if err := pool.VerifyLedger(got, key.Public()); err != nil {
		t.Fatal(err)
	}
	var page struct {
		Batches []map[string]any `cbor:"batches"`
	}
	if err := cbor.Unmarshal(b, &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Batches) != 3 {
		t.Errorf("%d batches sent, want 3", len(page.Batches))
	}
	js := 0
	for _, e := range es {
		j, _ := e.MarshalJSON()
		js += len(j)
	}
	t.Logf("%d entries: %d bytes of CBOR, %d of JSON", len(es), len(b), js)
	if len(b) >= js*2/3 {
		t.Errorf("CBOR %d bytes, not under two thirds of JSON's %d", len(b), js)
	}
}

// entriesMap returns b (a compact page) as nested maps, to be made
// malformed and encoded again.
func entriesMap(t *testing.T, b []byte) map[string]any {
	t.Helper()
	dm, err := cbor.DecOptions{DefaultMapType: reflect.TypeOf(map[string]any(nil))}.DecMode()
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := dm.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// A malformed or inconsistent page is refused with an error naming what
// is wrong, and no entries.
func TestEntriesCBORMalformed(t *testing.T) {
	key := pooltest.Key(t, "coordinator")
	es := treeEntries(1, 4)
	pool.SignBatch(es, job.Digest{}, key.Sign)
	alone := treeEntries(5, 1)
	signAlone(alone, es[3].Hash(), key.Sign)
	valid := pool.AppendEntriesCBOR(nil, append(es, alone...))
	entry := func(m map[string]any, i int) map[string]any { return m["entries"].([]any)[i].(map[string]any) }
	batch := func(m map[string]any, i int) map[string]any { return m["batches"].([]any)[i].(map[string]any) }
	for _, tc := range []struct {
		name   string
		bytes  []byte                 // as given, or
		change func(m map[string]any) // a change to the valid page
		want   string
	}{
		{name: "empty", bytes: []byte{}, want: "EOF"},
		{name: "trailing bytes", bytes: append(append([]byte(nil), valid...), 0x00), want: "extraneous data"},
		{name: "truncated", bytes: valid[:len(valid)-3], want: "unexpected EOF"},
		{name: "an array", bytes: []byte{0x80}, want: "cannot unmarshal array"},
		{name: "unknown key", change: func(m map[string]any) { m["bonus"] = 1 }, want: `unknown key "bonus"`},
		{name: "unknown key in entry", change: func(m map[string]any) { entry(m, 3)["bonus"] = 1 }, want: `entry 3: unknown key "bonus"`},
		{name: "unknown key in batch", change: func(m map[string]any) { batch(m, 0)["root"] = 1 }, want: `batch 0: unknown key "root"`},
		{name: "batch not in answer", change: func(m map[string]any) { entry(m, 2)["batch"] = 1 }, want: "entry 2 (seq 3): batch 1, but the answer has 1"},
		{name: "no batch", change: func(m map[string]any) { delete(m, "batches") }, want: "entry 0 (seq 1): batch 0, but the answer has 0"},
		{name: "short sig in batch", change: func(m map[string]any) { batch(m, 0)["sig"] = []byte{1, 2} }, want: "batch 0: sig of 2 bytes, want 64"},
		{name: "batch of size 0", change: func(m map[string]any) { batch(m, 0)["size"] = 0 }, want: "batch 0: size 0 out of range"},
		{name: "unused batch", change: func(m map[string]any) {
			m["batches"] = append(m["batches"].([]any), batch(m, 0))
		}, want: "batch 1: no entry names it"},
		{name: "short prev", change: func(m map[string]any) { entry(m, 1)["prev"] = make([]byte, 31) }, want: "entry 1 (seq 2): prev of 31 bytes, want 32"},
		{name: "long job", change: func(m map[string]any) { entry(m, 1)["job"] = make([]byte, 33) }, want: "entry 1 (seq 2): job of 33 bytes, want 32"},
		{name: "no digest", change: func(m map[string]any) { delete(entry(m, 3), "digest") }, want: "entry 3 (seq 4): digest of 0 bytes, want 32"},
		{name: "path not whole hashes", change: func(m map[string]any) {
			entry(m, 0)["path"] = append(entry(m, 0)["path"].([]byte), 7)
		}, want: "entry 0 (seq 1): path of 65 bytes is not at most 64 whole hashes"},
		{name: "no index", change: func(m map[string]any) { delete(entry(m, 0), "index") }, want: "entry 0 (seq 1): no index in its batch"},
		{name: "batch and sig", change: func(m map[string]any) { entry(m, 0)["sig"] = make([]byte, 64) }, want: "entry 0 (seq 1): both a batch and a sig"},
		{name: "alone without sig", change: func(m map[string]any) { delete(entry(m, 4), "sig") }, want: "entry 4 (seq 5): neither a batch nor a sig of 64 bytes (0)"},
		{name: "path alone", change: func(m map[string]any) { entry(m, 4)["path"] = make([]byte, 32) }, want: "entry 4 (seq 5): an index or path without a batch"},
		{name: "key in another case", change: func(m map[string]any) {
			e := entry(m, 0)
			e["SEQ"] = e["seq"]
			delete(e, "seq")
		}, want: `entry 0: unknown key "SEQ"`},
		{name: "seq as text", change: func(m map[string]any) { entry(m, 0)["seq"] = "1" }, want: "cannot unmarshal UTF-8 text string into Go struct field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.bytes
			if tc.change != nil {
				m := entriesMap(t, valid)
				tc.change(m)
				var err error
				if b, err = cbor.Marshal(m); err != nil {
					t.Fatal(err)
				}
			}
			got, err := pool.DecodeEntriesCBOR(b)
			if !errors.Is(err, pool.ErrEntriesCBOR) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one matching ErrEntriesCBOR and saying %q", err, tc.want)
			}
			if got != nil {
				t.Errorf("%d entries returned with the error", len(got))
			}
		})
	}
	// A key given twice.
	dup := append([]byte{0xa3}, valid[1:]...)
	dup = append(dup, cbor.RawMessage(mustCBOR(t, "batches"))...)
	dup = append(dup, 0x80)
	if _, err := pool.DecodeEntriesCBOR(dup); !errors.Is(err, pool.ErrEntriesCBOR) || !strings.Contains(err.Error(), "duplicate map key") {
		t.Errorf("a key given twice: error %v", err)
	}
}

func mustCBOR(t *testing.T, v any) []byte {
	t.Helper()
	b, err := cbor.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// An entry whose fields were changed in the compact form decodes, and
// then fails verification as it would in JSON.
func TestEntriesCBORTamperedFailsVerification(t *testing.T) {
	key := pooltest.Key(t, "coordinator")
	es := treeEntries(1, 4)
	pool.SignBatch(es, job.Digest{}, key.Sign)
	m := entriesMap(t, pool.AppendEntriesCBOR(nil, es))
	m["entries"].([]any)[2].(map[string]any)["cost"] = 99.0
	got, err := pool.DecodeEntriesCBOR(mustCBOR(t, m))
	if err != nil {
		t.Fatal(err)
	}
	v := pool.NewEntryVerifier(key.Public())
	for i, e := range got {
		err := v.Verify(e)
		if (err != nil) != (i == 2) {
			t.Errorf("entry %d: Verify: %v", i, err)
		}
	}
}

// FuzzEntriesCBOR feeds arbitrary bytes to the decoder of compact
// receipts answers: it must not panic, and what it accepts must encode
// back to bytes that decode to equal entries.
func FuzzEntriesCBOR(f *testing.F) {
	es := treeEntries(1, 5)
	pool.SignBatch(es, job.Digest{}, func([]byte) []byte { return make([]byte, 64) })
	f.Add(pool.AppendEntriesCBOR(nil, es))
	f.Add(pool.AppendEntriesCBOR(nil, es[:1]))
	f.Add(pool.AppendEntriesCBOR(nil, nil))
	f.Add([]byte{0xa0})
	f.Fuzz(func(t *testing.T, b []byte) {
		es, err := pool.DecodeEntriesCBOR(b)
		if err != nil {
			return
		}
		back, err := pool.DecodeEntriesCBOR(pool.AppendEntriesCBOR(nil, es))
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if !cmp.Equal(es, back, cmp.Comparer(func(a, b float64) bool { return a == b || a != a && b != b })) {
			t.Fatalf("round trip changed the entries:\n%s", cmp.Diff(es, back))
		}
	})
}

// BenchmarkAppendEntriesCBOR writes a device's full receipts page
// (10,000 entries, the coordinator's largest) two ways: every entry
// from one batch, and each from a batch of its own, as a device's
// receipts usually are (its tasks are decided in different commits).
func BenchmarkAppendEntriesCBOR(b *testing.B) {
	key := pooltest.Key(b, "coordinator")
	const n = 10000
	one := treeEntries(1, n)
	pool.SignBatch(one, job.Digest{}, key.Sign)
	own := treeEntries(1, n)
	prev := job.Digest{}
	for i := range own {
		prev = pool.SignBatch(own[i:i+1], prev, key.Sign)
	}
	for _, bc := range []struct {
		name string
		es   []pool.Entry
	}{{"one-batch", one}, {"own-batches", own}} {
		b.Run(bc.name, func(b *testing.B) {
			var out []byte
			for b.Loop() {
				out = pool.AppendEntriesCBOR(out[:0], bc.es)
			}
			b.ReportMetric(float64(len(out))/n, "bytes/entry")
		})
	}
}
