package job

import (
	"bytes"
	"encoding/json"
	"io"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fuzzOrderedSpecs has the ordered rules, for FuzzMergerAdd.
func fuzzOrderedSpecs() []MergeSpec {
	return []MergeSpec{
		{Name: "rows", Rule: "collect"},
		{Name: "cols", Rule: "collect", Fields: []string{"loss", "params.lr"}},
		{Name: "text", Rule: "concat", Field: "T"},
	}
}

// FuzzMergerAdd feeds arbitrary bytes to Add: it must never panic, a
// rejected result must leave the state as it was, and an accepted one must
// survive a MarshalBinary round trip.
func FuzzMergerAdd(f *testing.F) {
	f.Add(int64(1), []byte(goodAllRuleResult))
	f.Add(int64(2), []byte(`{"inside":[1,2.5,-3e-320],"energy":[],"T":"x","lat":-1,"loss":-0,"params":null,"grad":[0,0,1e308],"cols":{"a":[1,2],"":3}}`))
	f.Fuzz(func(t *testing.T, index int64, result []byte) {
		m := mergerFor(t, allRuleSpecs()...)
		if err := m.Add(0, []byte(goodAllRuleResult)); err != nil {
			t.Fatal(err)
		}
		before, beforeBin := resultText(t, m), mustMarshalState(t, m)
		if err := m.Add(index, result); err != nil {
			if diff := cmp.Diff(before, resultText(t, m)); diff != "" {
				t.Fatalf("rejected result (%v) changed Result:\n%s", err, diff)
			}
			if !bytes.Equal(beforeBin, mustMarshalState(t, m)) {
				t.Fatalf("rejected result (%v) changed the state", err)
			}
		} else {
			back := mergerFor(t, allRuleSpecs()...)
			if err := back.UnmarshalBinary(mustMarshalState(t, m)); err != nil {
				t.Fatalf("UnmarshalBinary of an accepted state: %v", err)
			}
			if diff := cmp.Diff(resultText(t, m), resultText(t, back)); diff != "" {
				t.Fatalf("round trip changed Result:\n%s", diff)
			}
			_ = m.Scalars()
		}

		o, err := NewMerger(fuzzOrderedSpecs(), func(string) (io.Writer, error) { return io.Discard, nil })
		if err != nil {
			t.Fatal(err)
		}
		_ = o.Add(index, result)
		o.Skip(0)
		_ = o.Add(index+1, result)
		_ = o.Close(3)
		_ = resultText(t, o)
	})
}

// FuzzMergerUnmarshal feeds arbitrary bytes to UnmarshalBinary, the decoder
// of states from other peers: it must never panic, and a state it accepts
// must encode, decode again to the same bytes, merge and report. The fuzzed
// bytes follow a valid header (magic and spec digest), so that they reach
// the accumulators' decoders.
func FuzzMergerUnmarshal(f *testing.F) {
	m := mergerFor(f, allRuleSpecs()...)
	header := mustMarshalState(f, m)[:len(mergeStateMagic)+32]
	f.Add(mustMarshalState(f, m)[len(header):])
	addResults(f, m, goodAllRuleResult, `{"inside":1e300,"energy":[1,-2e-310],"T":"b","lat":0,"loss":3,"params":[],"grad":[1,2,3],"cols":{"z":1}}`)
	f.Add(mustMarshalState(f, m)[len(header):])
	f.Fuzz(func(t *testing.T, body []byte) {
		m := mergerFor(t, allRuleSpecs()...)
		if err := m.UnmarshalBinary(append(bytes.Clone(header), body...)); err != nil {
			return
		}
		enc := mustMarshalState(t, m)
		again := mergerFor(t, allRuleSpecs()...)
		if err := again.UnmarshalBinary(enc); err != nil {
			t.Fatalf("re-decoding: %v", err)
		}
		if !bytes.Equal(enc, mustMarshalState(t, again)) {
			t.Fatal("encoding is not stable")
		}
		if _, err := json.Marshal(m.Result()); err != nil {
			t.Fatalf("Result of a decoded state: %v", err)
		}
		_ = m.Scalars()
		other := mergerFor(t, allRuleSpecs()...)
		addResults(t, other, goodAllRuleResult)
		_ = other.Merge(m)
		_ = m.Merge(other)
		_ = m.Merge(m)
		_ = resultText(t, m)
	})
}
