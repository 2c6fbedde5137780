package cluster

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/sync/errgroup"

	"idlepool/pool"
)

func TestMergeRuns(t *testing.T) {
	for _, c := range []struct {
		runs, offs, want []uint32
		added            bool
	}{
		{nil, []uint32{3}, []uint32{3, 3}, true},
		{nil, []uint32{1, 2, 3, 7, 9, 10}, []uint32{1, 3, 7, 7, 9, 10}, true},
		{[]uint32{1, 3}, []uint32{2, 3}, []uint32{1, 3}, false},
		{[]uint32{1, 3}, []uint32{4}, []uint32{1, 4}, true},
		{[]uint32{1, 3}, []uint32{0}, []uint32{0, 3}, true},
		{[]uint32{1, 3, 5, 6}, []uint32{4}, []uint32{1, 6}, true},
		{[]uint32{1, 3, 8, 9}, []uint32{5, 11, 4095}, []uint32{1, 3, 5, 5, 8, 9, 11, 11, 4095, 4095}, true},
		{wholeEpoch, []uint32{0, 17, 4095}, wholeEpoch, false},
	} {
		got, added := mergeRuns(c.runs, c.offs)
		if !slices.Equal(got, c.want) || added != c.added {
			t.Errorf("mergeRuns(%v, %v) = %v, %v; want %v, %v", c.runs, c.offs, got, added, c.want, c.added)
		}
	}
}

// An index value that is not what encodeIndex writes is refused, the
// error saying what is wrong.
func TestDecodeIndex(t *testing.T) {
	good, err := encodeIndex([]uint32{0, 2, 5, 4095})
	if err != nil {
		t.Fatal(err)
	}
	if runs, err := decodeIndex(good); err != nil || !slices.Equal(runs, []uint32{0, 2, 5, 4095}) {
		t.Fatalf("decode %x: %v, %v", good, runs, err)
	}
	other := must(wireEnc.Marshal(cbor.Tag{Number: rangeTag, Content: []uint32{1, 2}}))
	for _, c := range []struct {
		data []byte
		want string
	}{
		{[]byte("junk"), ""},
		{other, "tag"},
		{arrayIndex(1, 2, 3), "not pairs"},
		{arrayIndex(1, 4096), "offset 1 is not a number below 4096"},
		{arrayIndex(5, 4), "run 0 (5 to 4)"},
		{arrayIndex(1, 3, 4, 6), "run 1 (4 to 6)"},
		{arrayIndex(5, 6, 1, 2), "run 1 (1 to 2)"},
		{must(wireEnc.Marshal(cbor.Tag{Number: indexTag, Content: make([]byte, 513)})), "513 bytes of bits"},
		{must(wireEnc.Marshal(cbor.Tag{Number: indexTag, Content: []any{nil, nil}})), "offset 0 is not a number"},
		{must(wireEnc.Marshal(cbor.Tag{Number: indexTag, Content: []any{1, -2}})), "offset 1 is not a number"},
		{[]byte{0xda, 0x64, 0x65, 0x76, 0x31, 0x9f, 0x01, 0x02, 0xff}, "indefinite"}, // [_ 1, 2]
		{[]byte{0xda, 0x64, 0x65, 0x76, 0x31}, "not an index value"},
	} {
		if _, err := decodeIndex(c.data); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("decode %x: %v, want an error saying %q", c.data, err, c.want)
		}
	}
}

// Runs round-trip, in whichever form is shorter: at most 512 bytes of
// bits and a few.
func TestIndexRoundTrip(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	cases := [][]uint32{nil, {0, 0}, {0, 4095}, {4095, 4095}, {3, 9, 200, 300, 4000, 4001}}
	for range 200 {
		var offs []uint32
		density := rnd.Float64()
		for o := range uint32(rnd.IntN(indexEpoch) + 1) {
			if rnd.Float64() < density {
				offs = append(offs, o)
			}
		}
		runs, _ := mergeRuns(nil, offs)
		cases = append(cases, runs)
	}
	for _, runs := range cases {
		data, err := encodeIndex(runs)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) > indexEpoch/8+8 {
			t.Errorf("%d runs in %d bytes, want at most %d", len(runs)/2, len(data), indexEpoch/8+8)
		}
		got, err := decodeIndex(data)
		if err != nil || !slices.Equal(got, runs) {
			t.Fatalf("round trip of %v: %v, %v", runs, got, err)
		}
	}
	if data := must(encodeIndex([]uint32{0, 4095})); len(data) > 12 {
		t.Errorf("a device always at work in %d bytes, want a few", len(data))
	}
}

// A summary that is not what encodeSummary writes is refused, the error
// saying what is wrong.
func TestDecodeSummary(t *testing.T) {
	good := must(encodeSummary([]uint32{0, 3, 7, 1<<32 - 1}))
	if runs, err := decodeSummary(good); err != nil || !slices.Equal(runs, []uint32{0, 3, 7, 1<<32 - 1}) {
		t.Fatalf("decode %x: %v, %v", good, runs, err)
	}
	// A device at work an hour a day for years: runs by the thousand.
	var many []uint32
	for e := range uint32(10_000) {
		many = append(many, 3*e, 3*e)
	}
	if runs, err := decodeSummary(must(encodeSummary(many))); err != nil || !slices.Equal(runs, many) {
		t.Fatalf("decode 10,000 runs: %d runs, %v", len(runs)/2, err)
	}
	for _, c := range []struct {
		data []byte
		want string
	}{
		{[]byte("junk"), "not a summary"},
		{arrayIndex(1, 2), "tag"},
		{must(wireEnc.Marshal(cbor.Tag{Number: summaryTag, Content: []uint64{1, 1 << 32}})), "offset 1 is not a number below 4294967296"},
		{must(wireEnc.Marshal(cbor.Tag{Number: summaryTag, Content: []uint32{4, 6, 5, 9}})), "run 1 (5 to 9)"},
		{must(wireEnc.Marshal(cbor.Tag{Number: summaryTag, Content: []uint32{4}})), "not pairs"},
		{must(wireEnc.Marshal(cbor.Tag{Number: summaryTag, Content: []byte{1}})), "cannot unmarshal"},
	} {
		if _, err := decodeSummary(c.data); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("decode %x: %v, want an error saying %q", c.data, err, c.want)
		}
	}
}

// arrayIndex encodes offs as an index value in the array form, as they
// are.
func arrayIndex(offs ...uint32) []byte {
	return must(wireEnc.Marshal(cbor.Tag{Number: indexTag, Content: offs}))
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// indexHistory returns whole ranges numbered ks, their entries naming
// devices "device-0" to "device-(devices-1)": device j in range k
// unless (k+j)%3 == 0, and an anchor (no device) in each.
func indexHistory(ks []uint64, devices int) [][]pool.Entry {
	var out [][]pool.Entry
	for _, k := range ks {
		var names []string
		for j := range devices {
			if (int(k)+j)%3 != 0 {
				names = append(names, fmt.Sprintf("device-%d", j))
			}
		}
		r := make([]pool.Entry, LedgerRange)
		for i := range r {
			seq := k*LedgerRange + uint64(i) + 1
			r[i] = pool.Entry{Seq: seq, Kind: pool.KindReceipt, Pool: "test", Peer: names[i%len(names)], Owner: "o",
				Lease: fmt.Sprintf("%032x", seq), Cost: 1, Time: int64(seq), Sig: make([]byte, 64)}
			if i == 100 {
				r[i] = pool.Entry{Seq: seq, Kind: pool.KindAnchor, Pool: "test", Time: int64(seq)}
			}
		}
		out = append(out, r)
	}
	return out
}

// checkQueries fails the test unless a answers each query by the given
// devices ("device-N"), and by one that has no entries, as a scan of
// ranges does, up to upto. (A query by no device reads every range,
// which these histories lack: sameLedger checks those.) Few queries and
// devices: under the race detector each range a query reads decodes
// 1,024 entries.
func checkQueries(t *testing.T, what string, a *ledgerArchive, ranges [][]pool.Entry, upto uint64, devices ...int) {
	t.Helper()
	ctx := context.Background()
	var all []pool.Entry
	for _, r := range ranges {
		all = append(all, r...)
	}
	peers := []string{"nobody"}
	for _, j := range devices {
		peers = append(peers, fmt.Sprintf("device-%d", j))
	}
	for _, peer := range peers {
		for _, after := range []uint64{0, 1500, 4096*LedgerRange + 7} {
			for _, max := range []int{1, 1 << 30} {
				q := pool.EntryQuery{After: after, Max: max, Peer: peer}
				var want []pool.Entry
				for _, e := range all {
					if e.Seq > after && e.Seq <= upto && e.Peer == peer && len(want) < max {
						want = append(want, e)
					}
				}
				got, err := a.entries(ctx, q, upto, time.Minute)
				if err != nil {
					t.Fatalf("%s: entries(%+v): %v", what, q, err)
				}
				if !sameEntries(want, got) {
					t.Fatalf("%s: entries(%+v): %d entries, want %d", what, q, len(got), len(want))
				}
			}
		}
	}
}

// indexValues returns the runs of every "d." value of a, by key.
func indexValues(t *testing.T, a *ledgerArchive) map[string][]uint32 {
	t.Helper()
	return storedRuns(t, a, "d.>", decodeIndex)
}

// summaryValues returns the runs of every "e." value of a, by key.
func summaryValues(t *testing.T, a *ledgerArchive) map[string][]uint32 {
	t.Helper()
	return storedRuns(t, a, "e.>", decodeSummary)
}

// storedRuns returns the runs of every value of a whose key filter
// matches, as decode reads them, by key.
func storedRuns(t *testing.T, a *ledgerArchive, filter string, decode func([]byte) ([]uint32, error)) map[string][]uint32 {
	t.Helper()
	ctx := context.Background()
	kl, err := a.kv.ListKeysFiltered(ctx, filter)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]uint32{}
	for key := range kl.Keys() {
		e, err := a.kv.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		runs, err := decode(e.Value())
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		out[key] = runs
	}
	return out
}

// wantSummaries returns the summaries of epochs ranges make, by key.
func wantSummaries(ranges [][]pool.Entry) map[string][]uint32 {
	epochs := map[string][]uint32{}
	for _, r := range ranges {
		e := uint32((r[0].Seq - 1) / LedgerRange / indexEpoch)
		for _, x := range r {
			if x.Peer == "" {
				continue
			}
			key := summaryKey(x.Peer)
			if l := epochs[key]; len(l) == 0 || l[len(l)-1] != e {
				epochs[key] = append(l, e)
			}
		}
	}
	out := map[string][]uint32{}
	for key, es := range epochs {
		slices.Sort(es)
		out[key], _ = mergeRuns(nil, es)
	}
	return out
}

// wantIndex returns the index values ranges make, by key.
func wantIndex(ranges [][]pool.Entry) map[string][]uint32 {
	offs := map[string][]uint32{}
	for _, r := range ranges {
		k := (r[0].Seq - 1) / LedgerRange
		seen := map[string]bool{}
		for _, e := range r {
			if e.Peer != "" && !seen[e.Peer] {
				seen[e.Peer] = true
				key := indexKey(e.Peer, k/indexEpoch)
				offs[key] = append(offs[key], uint32(k%indexEpoch))
			}
		}
	}
	out := map[string][]uint32{}
	for key, o := range offs {
		slices.Sort(o)
		out[key], _ = mergeRuns(nil, o)
	}
	return out
}

// The index by device holds one value per device and epoch, as runs,
// however many puts archived its ranges, and a query by device reads
// the ranges it names across epochs, from any After, stopping at Max.
func TestLedgerIndexByDevice(t *testing.T) {
	t.Parallel()
	_, s := oneNodeStore(t)
	ctx := context.Background()
	ks := []uint64{0, 1, 2, 3, 4094, 4095, 4096, 4097, 9000}
	ranges := indexHistory(ks, 5)
	if err := s.ledger.put(ctx, ranges[:5], time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.ledger.put(ctx, ranges[5:], time.Minute); err != nil {
		t.Fatal(err)
	}
	want := wantIndex(ranges)
	if diff := cmp.Diff(want, indexValues(t, s.ledger)); diff != "" {
		t.Fatalf("index values (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantSummaries(ranges), summaryValues(t, s.ledger)); diff != "" {
		t.Fatalf("summaries (-want +got):\n%s", diff)
	}
	// A query by device 0 reads the epochs its summary names: not 2,
	// whose one range (9000, a multiple of 3) does not name it.
	if es, err := s.ledger.deviceEpochs(ctx, "device-0", 0, 1000); err != nil || !slices.Equal(es, []uint64{0, 1}) {
		t.Fatalf("device-0's epochs: %v, %v; want 0 and 1", es, err)
	}
	if es, err := s.ledger.deviceEpochs(ctx, "nobody", 0, 1000); err != nil || len(es) != 0 {
		t.Fatalf("epochs of a device without entries: %v, %v; want none", es, err)
	}
	if b := readBound(t, s.ledger, indexedKey); !b.known || b.k != 0 {
		t.Fatalf("the index's first range: %+v, want 0", b)
	}
	if b := readBound(t, s.ledger, indexedToKey); !b.known || b.k != 9001 {
		t.Fatalf("the index reaches to %+v, want range 9001", b)
	}
	upto := 9001 * uint64(LedgerRange)
	checkQueries(t, "two puts", s.ledger, ranges, upto, 0, 4)
	checkQueries(t, "up to range 4096", s.ledger, ranges, 4096*LedgerRange, 1)

	// The same ranges again (a put done again after a failure) change
	// nothing; a writer that has not seen the values (a node newly in
	// charge) merges into them.
	revs := map[string]uint64{}
	for key := range want {
		e, _ := s.ledger.kv.Get(ctx, key)
		revs[key] = e.Revision()
	}
	if err := s.ledger.put(ctx, ranges[2:6], time.Minute); err != nil {
		t.Fatal(err)
	}
	for key, rev := range revs {
		if e, _ := s.ledger.kv.Get(ctx, key); e.Revision() != rev {
			t.Errorf("index %s written again by a put of the same ranges", key)
		}
	}
	fresh := openLedger(t, s)
	more := indexHistory([]uint64{9001, 9002}, 5)
	if err := fresh.put(ctx, more, time.Minute); err != nil {
		t.Fatal(err)
	}
	ranges = append(ranges, more...)
	if diff := cmp.Diff(wantIndex(ranges), indexValues(t, s.ledger)); diff != "" {
		t.Fatalf("index values after a new writer (-want +got):\n%s", diff)
	}
	checkQueries(t, "a new writer", s.ledger, ranges, 9003*LedgerRange, 2)
}

// readBound reads key ("indexed" or "indexed_to") of a.
func readBound(t *testing.T, a *ledgerArchive, key string) bound {
	t.Helper()
	b, err := a.readBound(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// openLedger opens s's ledger archive again, as a node newly in charge
// does: nothing of the index in memory.
func openLedger(t testing.TB, s *Store) *ledgerArchive {
	t.Helper()
	a, err := openLedgerArchive(context.Background(), s.js, s.ledger.bucket, 1)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// legacyPut stores ranges as versions before the index did: each range,
// and a key "p." for each device it names.
func legacyPut(t *testing.T, a *ledgerArchive, ranges [][]pool.Entry) {
	t.Helper()
	ctx := context.Background()
	for _, r := range ranges {
		k := (r[0].Seq - 1) / LedgerRange
		data, err := encodeRange(r)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.kv.Put(ctx, rangeKey(k), data); err != nil {
			t.Fatal(err)
		}
		n := map[string]int{}
		for _, e := range r {
			if e.Peer != "" {
				n[e.Peer]++
			}
		}
		for p, c := range n {
			if _, err := a.kv.Put(ctx, "p."+peerKey(p)+"."+strconv.FormatUint(k, 10), []byte(strconv.Itoa(c))); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// An archive begun by a version before the index: its per-range keys are
// read for the ranges before the index's first, and the index for the
// rest; with the first range not recorded (or not a number) both are
// read for every range, and the answers stay the same.
func TestLedgerIndexAfterPerRangeKeys(t *testing.T) {
	t.Parallel()
	_, s := oneNodeStore(t)
	ctx := context.Background()
	ks := []uint64{0, 1, 2, 3, 4, 4095, 4096, 4097, 4098, 4099}
	ranges := indexHistory(ks, 4)
	legacyPut(t, s.ledger, ranges[:7]) // to range 4096
	upto := 4100 * uint64(LedgerRange)
	checkQueries(t, "per-range keys alone", s.ledger, ranges[:7], 4097*LedgerRange, 0)
	if err := s.ledger.put(ctx, ranges[7:], time.Minute); err != nil {
		t.Fatal(err)
	}
	if b := readBound(t, s.ledger, indexedKey); !b.known || b.k != 4097 {
		t.Fatalf("the index's first range: %+v, want 4097", b)
	}
	if diff := cmp.Diff(wantIndex(ranges[7:]), indexValues(t, s.ledger)); diff != "" {
		t.Fatalf("index values (-want +got):\n%s", diff)
	}
	checkQueries(t, "per-range keys, then the index", s.ledger, ranges, upto, 0, 3)
	// A writer from an earlier mark (a node in charge a moment before)
	// lowers the first range; one from a later mark leaves it, and so
	// does one whose ranges do not reach it (lowered past ranges that
	// only "p." keys index, it would hide them).
	for _, c := range []struct {
		k    uint64
		want uint64
	}{{4098, 4097}, {4096, 4096}, {2, 4096}} {
		w := openLedger(t, s)
		if err := w.put(ctx, indexHistory([]uint64{c.k}, 4), time.Minute); err != nil {
			t.Fatal(err)
		}
		if b := readBound(t, s.ledger, indexedKey); b.k != c.want {
			t.Fatalf("after a put from range %d the index's first range is %d, want %d", c.k, b.k, c.want)
		}
	}
	checkQueries(t, "a put from an earlier mark", s.ledger, ranges, upto, 1)
	// Deleted by hand, or not a number: both kinds of key are read for
	// every range, and a put leaves it so.
	if err := s.ledger.kv.Delete(ctx, indexedKey); err != nil {
		t.Fatal(err)
	}
	checkQueries(t, "the first range deleted", s.ledger, ranges, upto, 2)
	if err := openLedger(t, s).put(ctx, ranges[8:], time.Minute); err != nil {
		t.Fatal(err)
	}
	if b := readBound(t, s.ledger, indexedKey); b.known {
		t.Fatalf("the first range deleted, then a put: %+v", b)
	}
	checkQueries(t, "the first range deleted, then a put", s.ledger, ranges, upto, 3)
	if _, err := s.ledger.kv.Put(ctx, indexedKey, []byte("seven")); err != nil {
		t.Fatal(err)
	}
	if err := openLedger(t, s).put(ctx, ranges[8:], time.Minute); err != nil {
		t.Fatal(err)
	}
	if e, err := s.ledger.kv.Get(ctx, indexedKey); err != nil || string(e.Value()) != "seven" {
		t.Fatalf("the first range not a number, after a put: %v", err)
	}
	checkQueries(t, "the first range not a number, then a put", s.ledger, ranges, upto, 0)
}

// An index value damaged or deleted by hand stands for its whole epoch:
// queries read every range of it and answer the same, and the next put,
// by a writer that knew the value or not, merges into the whole epoch.
func TestLedgerIndexDamaged(t *testing.T) {
	t.Parallel()
	_, s := oneNodeStore(t)
	ctx := context.Background()
	ranges := indexHistory([]uint64{0, 1, 2, 3, 4, 5}, 3)
	if err := s.ledger.put(ctx, ranges[:4], time.Minute); err != nil {
		t.Fatal(err)
	}
	key := indexKey("device-1", 0)
	if _, err := s.ledger.kv.Put(ctx, key, []byte("junk")); err != nil {
		t.Fatal(err)
	}
	checkQueries(t, "a damaged value", s.ledger, ranges[:4], 4*LedgerRange, 1)
	if err := s.ledger.put(ctx, ranges[4:5], time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := indexValues(t, s.ledger)[key]; !slices.Equal(got, wholeEpoch) {
		t.Fatalf("a damaged value after a put: %v, want the whole epoch %v", got, wholeEpoch)
	}
	checkQueries(t, "a damaged value, then a put", s.ledger, ranges[:5], 5*LedgerRange, 1)

	key = indexKey("device-2", 0)
	if err := s.ledger.kv.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	fresh := openLedger(t, s) // knows nothing of it
	checkQueries(t, "a deleted value", s.ledger, ranges[:5], 5*LedgerRange, 2)
	if err := s.ledger.put(ctx, ranges[5:], time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := indexValues(t, s.ledger)[key]; !slices.Equal(got, wholeEpoch) {
		t.Fatalf("a deleted value after a put by its writer: %v, want the whole epoch %v", got, wholeEpoch)
	}
	checkQueries(t, "a deleted value, then a put", s.ledger, ranges, 6*LedgerRange, 2)
	if err := s.ledger.kv.Purge(ctx, key); err != nil {
		t.Fatal(err)
	}
	checkQueries(t, "a purged value", s.ledger, ranges, 6*LedgerRange, 2)
	if err := fresh.put(ctx, ranges[5:], time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := indexValues(t, s.ledger)[key]; !slices.Equal(got, wholeEpoch) {
		t.Fatalf("a purged value after a put by a new writer: %v, want the whole epoch %v", got, wholeEpoch)
	}

	// A summary damaged, or deleted, stands for every epoch, and a writer
	// merges into that.
	more := indexHistory([]uint64{6, 7}, 3)
	all := append(ranges, more...)
	sum := summaryKey("device-1") // range 6 names it
	if _, err := s.ledger.kv.Put(ctx, sum, []byte("junk")); err != nil {
		t.Fatal(err)
	}
	checkQueries(t, "a damaged summary", s.ledger, ranges, 6*LedgerRange, 1)
	// A writer that wrote the summary last rewrites it when it next
	// changes it; one new in charge, at its first put.
	if err := openLedger(t, s).put(ctx, more[:1], time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := summaryValues(t, s.ledger)[sum]; !slices.Equal(got, everyEpoch) {
		t.Fatalf("a damaged summary after a put: %v, want every epoch %v", got, everyEpoch)
	}
	checkQueries(t, "a damaged summary, then a put", s.ledger, all[:7], 7*LedgerRange, 1)
	sum = summaryKey("device-0") // range 7 names it
	if err := s.ledger.kv.Delete(ctx, sum); err != nil {
		t.Fatal(err)
	}
	checkQueries(t, "a deleted summary", s.ledger, all[:7], 7*LedgerRange, 0)
	if err := openLedger(t, s).put(ctx, more[1:], time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := summaryValues(t, s.ledger)[sum]; !slices.Equal(got, everyEpoch) {
		t.Fatalf("a deleted summary after a put: %v, want every epoch %v", got, everyEpoch)
	}
	checkQueries(t, "a deleted summary, then a put", s.ledger, all, 8*LedgerRange, 0)
}

// A node of a version before the index, in charge for a while after one
// of this version, archives ranges with per-range keys alone: queries
// list those meanwhile, and the next put of this version reads them
// back and indexes them, at most maxIndexFill at a time.
func TestLedgerIndexAfterRollback(t *testing.T) {
	t.Parallel()
	_, s := oneNodeStore(t)
	ctx := context.Background()
	ranges := indexHistory([]uint64{0, 1, 2, 3, 4, 5}, 4)
	if err := s.ledger.put(ctx, ranges[:2], time.Minute); err != nil {
		t.Fatal(err)
	}
	legacyPut(t, s.ledger, ranges[2:4]) // the older node
	checkQueries(t, "ranges archived by an older node", s.ledger, ranges[:4], 4*LedgerRange, 0)
	if err := openLedger(t, s).put(ctx, ranges[4:], time.Minute); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantIndex(ranges), indexValues(t, s.ledger)); diff != "" {
		t.Fatalf("index values after the older node's ranges (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantSummaries(ranges), summaryValues(t, s.ledger)); diff != "" {
		t.Fatalf("summaries after the older node's ranges (-want +got):\n%s", diff)
	}
	if b := readBound(t, s.ledger, indexedToKey); b.k != 6 {
		t.Fatalf("the index reaches to %+v, want range 6", b)
	}
	// Deleted by hand: indexed again from the first range.
	if err := s.ledger.kv.Delete(ctx, indexedToKey); err != nil {
		t.Fatal(err)
	}
	checkQueries(t, "how far the index reaches deleted", s.ledger, ranges, 6*LedgerRange, 1)
	more := indexHistory([]uint64{6}, 4)
	if err := s.ledger.put(ctx, more, time.Minute); err != nil {
		t.Fatal(err)
	}
	if b := readBound(t, s.ledger, indexedToKey); b.k != 7 {
		t.Fatalf("the index reaches to %+v after it was deleted and a put, want range 7", b)
	}
	checkQueries(t, "how far the index reaches deleted, then a put", s.ledger, append(ranges, more...), 7*LedgerRange, 3)
}

// Writers at once (nodes in charge for a moment, each archiving from its
// own state) merge into the same values: none loses another's ranges.
func TestLedgerIndexWritersAtOnce(t *testing.T) {
	t.Parallel()
	_, s := oneNodeStore(t)
	writersAtOnce(t, []*ledgerArchive{s.ledger, openLedger(t, s), openLedger(t, s), openLedger(t, s)})
}

// As TestLedgerIndexWritersAtOnce, on three nodes (a replicated bucket,
// whose conflicts the server reports by another code).
func TestLedgerIndexWritersAtOnceThreeNodes(t *testing.T) {
	if os.Getenv("IDLEPOOL_FULL_CLUSTER") == "" {
		t.Skip("ledger index writers at once on three nodes: make check-cluster (IDLEPOOL_FULL_CLUSTER=1)")
	}
	t.Parallel()
	nodes := startNodes(t, testConfigs(t, t.TempDir(), 3))
	var ws []*ledgerArchive
	for i := range 4 {
		ws = append(ws, openStore(t, nodes[i%3], 3).ledger)
	}
	writersAtOnce(t, ws)
}

func writersAtOnce(t *testing.T, ws []*ledgerArchive) {
	t.Helper()
	ctx := context.Background()
	var ks []uint64
	for k := range uint64(48) {
		ks = append(ks, k)
	}
	ranges := indexHistory(ks, 6)
	// Round r: every range before 8r is archived, and writer w archives
	// from w ranges before it (its mark) to w ranges before 8r+8 (its
	// state's end), all at once.
	for round := range 6 {
		var g errgroup.Group
		for w, a := range ws {
			g.Go(func() error {
				if err := a.put(ctx, ranges[max(0, 8*round-w):8*round+8-w], time.Minute); err != nil {
					return fmt.Errorf("writer %d, round %d: %w", w, round, err)
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	want := wantIndex(ranges)
	// A replica of the bucket may be behind the last write for a
	// moment: the values are read again, bounded, never timed.
	var diff string
	patience(t, 2*time.Minute, "every writer's ranges in the index", func() bool {
		diff = cmp.Diff(want, indexValues(t, ws[0])) + cmp.Diff(wantSummaries(ranges), summaryValues(t, ws[0]))
		return diff == ""
	})
	if diff != "" {
		t.Fatalf("index values (-want +got):\n%s", diff)
	}
}

// BenchmarkLedgerQueryByDevice reads a device's first 10 receipts
// beyond memory (as GET /v1/receipts does past the Scheduler's tail)
// from a one-node cluster's ledger archive of 64 ranges naming 2,048
// devices: the index by device, then the ranges it names (about 20,
// each decoded whole). ns/op is per query.
func BenchmarkLedgerQueryByDevice(b *testing.B) {
	_, s := oneNodeStore(b)
	ctx := context.Background()
	const devices, n = 2048, 64 * LedgerRange
	es := make([]pool.Entry, n)
	for i := range es {
		es[i] = pool.Entry{Seq: uint64(i + 1), Kind: pool.KindReceipt, Peer: fmt.Sprintf("device-%04d", (i*7919)%devices),
			Owner: fmt.Sprintf("owner-%04d", (i*7919)%devices), Lease: fmt.Sprintf("%032x", i), Cost: 1, Time: int64(i), Sig: make([]byte, 64)}
	}
	var ranges [][]pool.Entry
	for i := 0; i < n; i += LedgerRange {
		ranges = append(ranges, es[i:i+LedgerRange])
	}
	if err := s.ledger.put(ctx, ranges, time.Minute); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		q := pool.EntryQuery{Peer: fmt.Sprintf("device-%04d", i%devices), Max: 10}
		got, err := s.ledger.entries(ctx, q, n, time.Minute)
		if err != nil || len(got) != 10 {
			b.Fatalf("%+v: %d entries, %v", q, len(got), err)
		}
	}
}
