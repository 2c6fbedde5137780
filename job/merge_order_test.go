package job

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// randomMergeResult makes a result for allRuleSpecs with adversarial numbers:
// exact integers beyond int64, floats over the whole range, subnormals,
// numeric and string groups, tied keys, ragged "*" members.
func randomMergeResult(rng *rand.Rand, i int) []byte {
	pick := func(xs ...any) any { return xs[rng.IntN(len(xs))] }
	obj := map[string]any{
		"T":      pick(1, 2.5, json.Number("2.50"), "x", 10, true),
		"loss":   pick(0.1, 0.2, json.Number("0.10"), 1e-300, -3, 7),
		"params": map[string]any{"i": i, "s": "<&>"},
	}
	switch rng.IntN(5) {
	case 0:
		obj["inside"] = rng.IntN(1000)
	case 1:
		obj["inside"] = json.Number("-123456789012345678901234567890")
	case 2:
		obj["inside"] = randWideFloat(rng) / 1e10
	case 3:
		obj["inside"] = []any{rng.IntN(10), rng.NormFloat64(), json.Number("1e-320")}
	default:
		obj["inside"] = []any{}
	}
	energy := []any{}
	for range rng.IntN(4) {
		energy = append(energy, pick(rng.NormFloat64()*3, randWideFloat(rng)/1e160, math.SmallestNonzeroFloat64, math.Copysign(0, -1), 0.0, 4.999999))
	}
	obj["energy"] = energy
	lat := math.Pow(10, rng.Float64()*600-300)
	obj["lat"] = pick(lat, -lat, 0.0, rng.ExpFloat64())
	grad := make([]any, 3)
	for j := range grad {
		grad[j] = pick(rng.NormFloat64(), randWideFloat(rng)/1e10, 0.1)
	}
	obj["grad"] = grad
	cols := map[string]any{}
	for _, c := range []string{"a", "b", "10", "9"} {
		if rng.IntN(2) == 0 {
			cols[c] = pick(rng.NormFloat64(), []any{1, 2.5}, randWideFloat(rng)/1e160)
		}
	}
	obj["cols"] = cols
	b, err := json.Marshal(obj)
	if err != nil {
		panic(err)
	}
	return b
}

// TestMergeOrderIndependence checks invariants 6 to 8 of DESIGN.md: any
// permutation of the results, split over any number of Mergers, round
// tripped through MarshalBinary, merged in any tree, gives byte-identical
// Result JSON and state.
func TestMergeOrderIndependence(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	const n = 150
	results := make([][]byte, n)
	for i := range results {
		results[i] = randomMergeResult(rng, i)
	}
	ref := mergerFor(t, allRuleSpecs()...)
	for i, r := range results {
		if err := ref.Add(int64(i), r); err != nil {
			t.Fatalf("Add(%d, %s): %v", i, r, err)
		}
	}
	wantJSON, wantBin, wantScalars := resultText(t, ref), mustMarshalState(t, ref), ref.Scalars()

	roundTrip := func(m *Merger) *Merger {
		fresh := mergerFor(t, allRuleSpecs()...)
		if err := fresh.UnmarshalBinary(mustMarshalState(t, m)); err != nil {
			t.Fatalf("UnmarshalBinary: %v", err)
		}
		return fresh
	}
	for trial := range 40 {
		parts := make([]*Merger, 1+rng.IntN(7))
		for i := range parts {
			parts[i] = mergerFor(t, allRuleSpecs()...)
		}
		for _, i := range rng.Perm(n) {
			if err := parts[rng.IntN(len(parts))].Add(int64(i), results[i]); err != nil {
				t.Fatal(err)
			}
		}
		for i := range parts {
			if rng.IntN(2) == 0 {
				parts[i] = roundTrip(parts[i])
			}
		}
		for len(parts) > 1 {
			i, j := rng.IntN(len(parts)), rng.IntN(len(parts)-1)
			if j >= i {
				j++
			}
			other := parts[j]
			if rng.IntN(2) == 0 {
				other = roundTrip(other)
			}
			if err := parts[i].Merge(other); err != nil {
				t.Fatal(err)
			}
			parts = append(parts[:j], parts[j+1:]...)
		}
		got := parts[0]
		if diff := cmp.Diff(wantJSON, resultText(t, got)); diff != "" {
			t.Fatalf("trial %d: Result differs (-in order +shuffled):\n%s", trial, diff)
		}
		if !bytes.Equal(wantBin, mustMarshalState(t, got)) {
			t.Fatalf("trial %d: MarshalBinary differs", trial)
		}
		if diff := cmp.Diff(wantScalars, got.Scalars()); diff != "" {
			t.Fatalf("trial %d: Scalars differ (-in order +shuffled):\n%s", trial, diff)
		}
	}
}

// TestMergeStatsExact checks stats against exact rational arithmetic.
func TestMergeStatsExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for trial := range 30 {
		xs := make([]float64, 2+rng.IntN(300))
		for i := range xs {
			xs[i] = 1e6 + rng.NormFloat64()*[]float64{1e-6, 1, 1e12}[trial%3]
		}
		m := mergerFor(t, MergeSpec{Name: "e", Rule: "stats", Field: "e"})
		for i, x := range xs {
			if err := m.Add(int64(i), fmt.Appendf(nil, `{"e":%v}`, x)); err != nil {
				t.Fatal(err)
			}
		}
		s := m.Scalars()
		mean, variance, sample := ratMoments(xs)
		for name, want := range map[string]float64{"e.mean": mean, "e.variance": variance, "e.sample_variance": sample} {
			if got := s[name]; !sameFloatBits(got, want) {
				t.Errorf("trial %d: %s = %v, want %v", trial, name, got, want)
			}
		}
	}
}

func TestMergeCollectOrder(t *testing.T) {
	var out bytes.Buffer
	m, err := NewMerger([]MergeSpec{
		{Name: "rows", Rule: "collect", Fields: []string{"x", "p.q"}},
		{Name: "sum", Rule: "sum", Field: "x"},
	}, func(name string) (io.Writer, error) {
		if name != "rows" {
			t.Errorf("sink opened for %q", name)
		}
		return &out, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	row := func(i int) string {
		return fmt.Sprintf(`{"task":%d,"p.q":"<%d>","x":%d.50}`+"\n", i, i, i)
	}
	result := func(i int) []byte {
		return fmt.Appendf(nil, `{"p":{"q":"<%d>","r":0},"x":%d.50}`, i, i)
	}
	steps := []struct {
		op   string // add, skip
		task int64
		want string // sink contents after the step
	}{
		{"add", 2, ""},
		{"add", 1, ""},
		{"add", 0, row(0) + row(1) + row(2)},
		{"add", 5, row(0) + row(1) + row(2)},
		{"skip", 3, row(0) + row(1) + row(2)},
		{"skip", 4, row(0) + row(1) + row(2) + row(5)},
		{"skip", 4, row(0) + row(1) + row(2) + row(5)},
		{"add", 7, row(0) + row(1) + row(2) + row(5)},
	}
	for _, st := range steps {
		switch st.op {
		case "add":
			if err := m.Add(st.task, result(int(st.task))); err != nil {
				t.Fatalf("Add(%d): %v", st.task, err)
			}
		case "skip":
			m.Skip(st.task)
		}
		if diff := cmp.Diff(st.want, out.String()); diff != "" {
			t.Fatalf("after %s %d (-want +got):\n%s", st.op, st.task, diff)
		}
	}
	if err := m.Add(1, result(1)); !errors.Is(err, ErrDuplicateTask) {
		t.Errorf("Add of a written task: %v", err)
	}
	if err := m.Add(7, result(7)); !errors.Is(err, ErrDuplicateTask) {
		t.Errorf("Add of a held task: %v", err)
	}
	if err := m.Add(4, result(4)); !errors.Is(err, ErrDuplicateTask) {
		t.Errorf("Add of a skipped task: %v", err)
	}
	if diff := cmp.Diff(`{"rows":{"rows":5,"skipped":2},"sum":{"count":5,"sum":17.5}}`, resultText(t, m)); diff != "" {
		t.Errorf("Result (-want +got):\n%s", diff)
	}
	err = m.Close(10)
	if !errors.Is(err, ErrMissingTasks) || err.Error() != `merge "rows": 3 of 10 tasks have no result and no skip, the first is task 6: job: task results missing` {
		t.Errorf("Close: %v", err)
	}
	if diff := cmp.Diff(row(0)+row(1)+row(2)+row(5)+row(7), out.String()); diff != "" {
		t.Errorf("after Close (-want +got):\n%s", diff)
	}
	if err := m.Add(8, result(8)); !errors.Is(err, ErrMergerClosed) {
		t.Errorf("Add after Close: %v", err)
	}
	if err := m.Close(10); !errors.Is(err, ErrMergerClosed) {
		t.Errorf("second Close: %v", err)
	}
}

func TestMergeCollectAnyArrivalOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	const n = 80
	for trial := range 30 {
		skip := make([]bool, n)
		var want strings.Builder
		for i := range n {
			skip[i] = rng.IntN(5) == 0
			if !skip[i] {
				fmt.Fprintf(&want, `{"task":%d,"a":[1,{"b":2.0,"c":"&"}],"i":%d}`+"\n", i, i)
			}
		}
		var out bytes.Buffer
		m, err := NewMerger([]MergeSpec{{Name: "rows", Rule: "collect"}}, func(string) (io.Writer, error) { return &out, nil })
		if err != nil {
			t.Fatal(err)
		}
		sink := m.sinks[0].sink
		for _, i := range rng.Perm(n) {
			if skip[i] {
				m.Skip(int64(i))
			} else if err := m.Add(int64(i), fmt.Appendf(nil, `{"i":%d, "a":[1,{"c":"&","b":2.0}]}`, i)); err != nil {
				t.Fatal(err)
			}
			// Rows leave as soon as no gap holds them back, and only rows
			// past the gap are held.
			if !strings.HasPrefix(want.String(), out.String()) {
				t.Fatalf("trial %d: out of order output:\n%s", trial, out.String())
			}
			for held := range sink.held {
				if held <= sink.next {
					t.Fatalf("trial %d: task %d held behind next %d", trial, held, sink.next)
				}
			}
		}
		if err := m.Close(n); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want.String(), out.String()); diff != "" {
			t.Fatalf("trial %d: output (-want +got):\n%s", trial, diff)
		}
	}
}

func TestMergeConcat(t *testing.T) {
	var out bytes.Buffer
	m, err := NewMerger([]MergeSpec{{Name: "text", Rule: "concat", Field: "t"}}, func(string) (io.Writer, error) { return &out, nil })
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		task   int64
		result string
	}{
		{3, `{"t":{"z":1,"a":[1e2]}}`},
		{1, `{"t":"two\n"}`},
		{0, `{"t":"one "}`},
		{2, `{"t":""}`},
	} {
		if err := m.Add(tc.task, []byte(tc.result)); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Close(4); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff("one two\n"+`{"a":[1e2],"z":1}`+"\n", out.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
}

// failingSink fails every write after the first ok.
type failingSink struct{ ok int }

func (w *failingSink) Write(p []byte) (int, error) {
	if w.ok == 0 {
		return 0, errors.New("disk full")
	}
	w.ok--
	return len(p), nil
}

func TestMergeSinkWriteErrorSticks(t *testing.T) {
	m, err := NewMerger([]MergeSpec{{Name: "rows", Rule: "collect"}, {Name: "n", Rule: "sum", Field: "n"}},
		func(string) (io.Writer, error) { return &failingSink{ok: 1}, nil })
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Add(0, []byte(`{"n":1}`)); err != nil {
		t.Fatal(err)
	}
	err = m.Add(1, []byte(`{"n":2}`))
	if !errors.Is(err, ErrSinkWrite) || err.Error() != `merge "rows": job: write to merge sink failed: disk full` {
		t.Fatalf("Add: %v", err)
	}
	if err2 := m.Add(2, []byte(`{"n":3}`)); !errors.Is(err2, ErrSinkWrite) {
		t.Errorf("next Add: %v", err2)
	}
	if err2 := m.Close(3); !errors.Is(err2, ErrSinkWrite) {
		t.Errorf("Close: %v", err2)
	}
	// The result whose row failed was folded; the one after was not.
	if diff := cmp.Diff(`{"rows":{"rows":2,"skipped":0},"n":{"count":2,"sum":3}}`, resultText(t, m)); diff != "" {
		t.Errorf("Result (-want +got):\n%s", diff)
	}
}

func TestMergeCloseReportsTasksBeyondTotal(t *testing.T) {
	var out bytes.Buffer
	m, err := NewMerger([]MergeSpec{{Name: "rows", Rule: "collect", Field: "x"}}, func(string) (io.Writer, error) { return &out, nil })
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int64{0, 1, 5} {
		if err := m.Add(i, []byte(`{"x":1,"y":2}`)); err != nil {
			t.Fatal(err)
		}
	}
	err = m.Close(2)
	if !errors.Is(err, ErrTaskIndex) || errors.Is(err, ErrMissingTasks) {
		t.Errorf("Close: %v", err)
	}
	if diff := cmp.Diff("{\"task\":0,\"x\":1}\n{\"task\":1,\"x\":1}\n", out.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
	if err := m.Add(-1, []byte(`{}`)); !errors.Is(err, ErrMergerClosed) {
		t.Errorf("Add after Close: %v", err)
	}
}

func TestMergeAddRejectsNegativeIndex(t *testing.T) {
	m := mergerFor(t, MergeSpec{Rule: "sum", Field: "x"})
	if err := m.Add(-1, []byte(`{"x":1}`)); !errors.Is(err, ErrTaskIndex) {
		t.Errorf("Add(-1): %v", err)
	}
}

// TestMergeCollectTaskClash checks that a result with its own "task"
// member costs only the whole-result collect its row: the other entries,
// including another collect, fold it, and the task is no failure.
func TestMergeCollectTaskClash(t *testing.T) {
	outs := map[string]*bytes.Buffer{}
	m, err := NewMerger([]MergeSpec{
		{Name: "all", Rule: "collect"},
		{Name: "n", Rule: "sum", Field: "n"},
		{Name: "picked", Rule: "collect", Fields: []string{"n"}},
	}, func(name string) (io.Writer, error) { outs[name] = &bytes.Buffer{}; return outs[name], nil })
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range []string{`{"n":1}`, `{"n":2,"task":"mine"}`, `{"n":3}`} {
		if err := m.Add(int64(i), []byte(r)); err != nil {
			t.Fatalf("Add(%d): %v", i, err)
		}
	}
	// A duplicate is still refused as one.
	if err := m.Add(1, []byte(`{"n":2,"task":"mine"}`)); !errors.Is(err, ErrDuplicateTask) {
		t.Errorf("Add of task 1 again: %v", err)
	}
	if err := m.Close(3); err != nil {
		t.Fatal(err)
	}
	want := `{"all":{"rows":2,"skipped":0,"refused":1},"n":{"count":3,"sum":6},"picked":{"rows":3,"skipped":0}}`
	if diff := cmp.Diff(want, resultText(t, m)); diff != "" {
		t.Errorf("Result (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff("{\"task\":0,\"n\":1}\n{\"task\":2,\"n\":3}\n", outs["all"].String()); diff != "" {
		t.Errorf("collect of the whole result (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff("{\"task\":0,\"n\":1}\n{\"task\":1,\"n\":2}\n{\"task\":2,\"n\":3}\n", outs["picked"].String()); diff != "" {
		t.Errorf("collect of fields (-want +got):\n%s", diff)
	}
	got := m.EntryFailures()
	if len(got) != 1 || got[0].Entry != "all" || got[0].Task != 1 ||
		!strings.Contains(got[0].Problem, `merge "all": field task: the result has its own "task"`) ||
		!strings.Contains(got[0].Problem, "fields = [...]") {
		t.Errorf("EntryFailures = %+v", got)
	}
	if sc := m.Scalars(); sc["all.refused"] != 1 || sc["all.rows"] != 2 {
		t.Errorf("Scalars: all.refused = %v, all.rows = %v", sc["all.refused"], sc["all.rows"])
	}
}

// ratMoments computes mean and variances exactly in big.Rat, rounded once.
func ratMoments(xs []float64) (mean, variance, sample float64) {
	n := big.NewRat(int64(len(xs)), 1)
	s, q := new(big.Rat), new(big.Rat)
	for _, x := range xs {
		r := new(big.Rat).SetFloat64(x)
		s.Add(s, r)
		q.Add(q, new(big.Rat).Mul(r, r))
	}
	mean, _ = new(big.Rat).Quo(s, n).Float64()
	d := new(big.Rat).Mul(n, q)
	d.Sub(d, new(big.Rat).Mul(s, s))
	variance, _ = new(big.Rat).Quo(d, new(big.Rat).Mul(n, n)).Float64()
	nm1 := new(big.Rat).Sub(n, big.NewRat(1, 1))
	sample, _ = new(big.Rat).Quo(d, new(big.Rat).Mul(n, nm1)).Float64()
	return mean, variance, sample
}
