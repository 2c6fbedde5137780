package job

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func specFloat(f float64) *float64 { return &f }

// mergerFor returns a Merger for specs whose ordered entries write to
// io.Discard.
func mergerFor(t testing.TB, specs ...MergeSpec) *Merger {
	t.Helper()
	m, err := NewMerger(specs, func(string) (io.Writer, error) { return io.Discard, nil })
	if err != nil {
		t.Fatalf("NewMerger: %v", err)
	}
	return m
}

// resultText is json.Marshal(m.Result()).
func resultText(t testing.TB, m *Merger) string {
	t.Helper()
	b, err := json.Marshal(m.Result())
	if err != nil {
		t.Fatalf("marshal result: %v", err)
	}
	return string(b)
}

func addResults(t testing.TB, m *Merger, results ...string) {
	t.Helper()
	for i, r := range results {
		if err := m.Add(int64(i), []byte(r)); err != nil {
			t.Fatalf("Add(%d, %s): %v", i, r, err)
		}
	}
}

func TestMergeRules(t *testing.T) {
	for _, tc := range []struct {
		name    string
		spec    MergeSpec
		results []string
		want    string
	}{
		{
			name:    "sum of integers",
			spec:    MergeSpec{Rule: "sum", Field: "inside"},
			results: []string{`{"inside":3}`, `{"inside":4}`, `{"inside":[1,2]}`, `{"inside":[]}`},
			want:    `{"inside":{"count":4,"sum":10}}`,
		},
		{
			name: "sum of integers beyond int64",
			spec: MergeSpec{Rule: "sum", Field: "n"},
			results: []string{`{"n":9223372036854775807}`, `{"n":9223372036854775807}`,
				`{"n":-100000000000000000000000}`, `{"n":-1}`},
			want: `{"n":{"count":4,"sum":-99981553255926290448387}}`,
		},
		{
			name:    "sum of integers and floats is a float",
			spec:    MergeSpec{Name: "s", Rule: "sum", Field: "x"},
			results: []string{`{"x":1}`, `{"x":0.5}`, `{"x":2e0}`},
			want:    `{"s":{"count":3,"sum":3.5}}`,
		},
		{
			name:    "sum of floats is exact",
			spec:    MergeSpec{Rule: "sum", Field: "x"},
			results: []string{`{"x":1e308}`, `{"x":1.0}`, `{"x":-1e308}`},
			want:    `{"x":{"count":3,"sum":1}}`,
		},
		{
			name:    "sum of a huge integer and a float rounds once",
			spec:    MergeSpec{Rule: "sum", Field: "x"},
			results: []string{`{"x":9007199254740993}`, `{"x":0.0}`},
			want:    `{"x":{"count":2,"sum":9007199254740992}}`,
		},
		{
			name:    "sum beyond the float64 range",
			spec:    MergeSpec{Rule: "sum", Field: "x"},
			results: []string{`{"x":1.7e308}`, `{"x":1.7e308}`},
			want:    `{"x":{"count":2,"sum":"+Inf"}}`,
		},
		{
			name:    "empty sum",
			spec:    MergeSpec{Rule: "sum", Field: "x"},
			results: nil,
			want:    `{"x":{"count":0,"sum":0}}`,
		},
		{
			name:    "stats",
			spec:    MergeSpec{Rule: "stats", Field: "e"},
			results: []string{`{"e":1}`, `{"e":[2,3]}`, `{"e":4.0}`},
			want: `{"e":{"count":4,"sum":10,"mean":2.5,"variance":1.25,"sample_variance":1.6666666666666667,` +
				`"stddev":1.118033988749895,"sample_stddev":1.2909944487358056,"min":1,"max":4}}`,
		},
		{
			name: "stats without cancellation",
			spec: MergeSpec{Rule: "stats", Field: "e"},
			// Textbook E[x²]−E[x]² in float64 gives 0 or worse here.
			results: []string{`{"e":1e9}`, `{"e":1000000001}`, `{"e":1000000002}`},
			want: `{"e":{"count":3,"sum":3000000003,"mean":1000000001,"variance":0.6666666666666666,"sample_variance":1,` +
				`"stddev":0.816496580927726,"sample_stddev":1,"min":1000000000,"max":1000000002}}`,
		},
		{
			name:    "stats of one value",
			spec:    MergeSpec{Rule: "stats", Field: "e"},
			results: []string{`{"e":-0.5}`},
			want: `{"e":{"count":1,"sum":-0.5,"mean":-0.5,"variance":0,"sample_variance":null,` +
				`"stddev":0,"sample_stddev":null,"min":-0.5,"max":-0.5}}`,
		},
		{
			name:    "empty stats",
			spec:    MergeSpec{Rule: "stats", Field: "e"},
			results: nil,
			want: `{"e":{"count":0,"sum":0,"mean":null,"variance":null,"sample_variance":null,` +
				`"stddev":null,"sample_stddev":null,"min":null,"max":null}}`,
		},
		{
			name:    "histogram",
			spec:    MergeSpec{Name: "h", Rule: "histogram", Field: "x", Min: specFloat(0), Max: specFloat(10), Bins: 5},
			results: []string{`{"x":-1}`, `{"x":[0,1.99]}`, `{"x":2}`, `{"x":9.999}`, `{"x":[10,11]}`},
			want:    `{"h":{"count":7,"min":0,"max":10,"counts":[2,1,0,0,1],"underflow":1,"overflow":2}}`,
		},
		{
			name: "topk ascending with ties to the lower task",
			spec: MergeSpec{Name: "best", Rule: "topk", Key: "loss", Order: "asc", K: 2, Field: "p"},
			results: []string{`{"loss":0.3,"p":{"lr":3}}`, `{"loss":0.1,"p":{"lr":1}}`,
				`{"loss":0.1,"p":{"z":[1, 2],"lr":2}}`, `{"loss":0.5,"p":{"lr":5}}`},
			want: `{"best":[{"task":1,"key":0.1,"value":{"lr":1}},{"task":2,"key":0.1,"value":{"lr":2,"z":[1,2]}}]}`,
		},
		{
			name:    "topk descending by default",
			spec:    MergeSpec{Name: "top", Rule: "topk", Key: "s", K: 2},
			results: []string{`{"s":1}`, `{"s":3}`, `{"s":2}`},
			want:    `{"top":[{"task":1,"key":3,"value":{"s":3}},{"task":2,"key":2,"value":{"s":2}}]}`,
		},
		{
			name:    "argmax keeps the whole result",
			spec:    MergeSpec{Name: "best", Rule: "argmax", Key: "score"},
			results: []string{`{"score":1,"b":"<&>"}`, `{"score":7,"a":[1.50, 2e3]}`, `{"score":7}`},
			want:    `{"best":{"task":1,"key":7,"value":{"a":[1.50,2e3],"score":7}}}`,
		},
		{
			name:    "argmin",
			spec:    MergeSpec{Name: "best", Rule: "argmin", Key: "score", Field: "x"},
			results: []string{`{"score":1,"x":"a"}`, `{"score":-7,"x":"b"}`},
			want:    `{"best":{"task":1,"key":-7,"value":"b"}}`,
		},
		{
			name:    "argmin of nothing",
			spec:    MergeSpec{Name: "best", Rule: "argmin", Key: "score"},
			results: nil,
			want:    `{"best":null}`,
		},
		{
			name:    "vector-mean",
			spec:    MergeSpec{Name: "w", Rule: "vector-mean", Field: "grad"},
			results: []string{`{"grad":[1,2,3]}`, `{"grad":[3,4,5.5]}`},
			want:    `{"w":{"count":2,"mean":[2,3,4.25]}}`,
		},
		{
			name:    "vector-mean rounds once",
			spec:    MergeSpec{Name: "w", Rule: "vector-mean", Field: "grad"},
			results: []string{`{"grad":[0.1,0.7]}`, `{"grad":[0.1,0.7]}`, `{"grad":[0.1,0.7]}`},
			want:    `{"w":{"count":3,"mean":[0.1,0.7]}}`,
		},
		{
			name:    "vector-sum",
			spec:    MergeSpec{Name: "g", Rule: "vector-sum", Field: "grad"},
			results: []string{`{"grad":[1,-2,3]}`, `{"grad":[4,5,-6]}`},
			want:    `{"g":{"count":2,"sum":[5,3,-3]}}`,
		},
		{
			name: "vector-sum beyond 64 bits",
			spec: MergeSpec{Name: "g", Rule: "vector-sum", Field: "grad"},
			results: []string{`{"grad":[9223372036854775807,-9223372036854775808]}`,
				`{"grad":[9223372036854775807,-9223372036854775808]}`, `{"grad":[2,-1]}`},
			want: `{"g":{"count":3,"sum":[18446744073709551616,-18446744073709551617]}}`,
		},
		{
			name: "group_by sorts numeric groups numerically",
			spec: MergeSpec{Name: "e", Rule: "sum", Field: "e", GroupBy: GroupKeys{"T"}},
			results: []string{`{"T":10,"e":1}`, `{"T":2.5,"e":2}`, `{"T":2.50,"e":3}`,
				`{"T":-1e0,"e":4}`, `{"T":100,"e":5}`},
			want: `{"e":{"-1":{"count":1,"sum":4},"2.5":{"count":2,"sum":5},"10":{"count":1,"sum":1},"100":{"count":1,"sum":5}}}`,
		},
		{
			name:    "group_by sorts other groups by bytes",
			spec:    MergeSpec{Name: "e", Rule: "sum", Field: "e", GroupBy: GroupKeys{"g"}},
			results: []string{`{"g":"b","e":1}`, `{"g":10,"e":2}`, `{"g":true,"e":3}`, `{"g":"B","e":4}`},
			want:    `{"e":{"10":{"count":1,"sum":2},"B":{"count":1,"sum":4},"b":{"count":1,"sum":1},"true":{"count":1,"sum":3}}}`,
		},
		{
			name:    "star field",
			spec:    MergeSpec{Name: "cols", Rule: "sum", Field: "c.*"},
			results: []string{`{"c":{"b":1,"a":2}}`, `{"c":{"a":3}}`, `{"c":{}}`},
			want:    `{"cols":{"a":{"count":2,"sum":5},"b":{"count":1,"sum":1}}}`,
		},
		{
			name:    "star field inside a path",
			spec:    MergeSpec{Name: "cols", Rule: "sum", Field: "c.*.n"},
			results: []string{`{"c":{"x":{"n":1},"y":{"n":2}}}`, `{"c":{"x":{"n":3}}}`},
			want:    `{"cols":{"x":{"count":2,"sum":4},"y":{"count":1,"sum":2}}}`,
		},
		{
			name:    "group_by and star",
			spec:    MergeSpec{Name: "cols", Rule: "sum", Field: "c.*", GroupBy: GroupKeys{"g"}},
			results: []string{`{"g":2,"c":{"b":1,"a":2}}`, `{"g":1,"c":{"a":3}}`},
			want:    `{"cols":{"1":{"a":{"count":1,"sum":3}},"2":{"a":{"count":1,"sum":2},"b":{"count":1,"sum":1}}}}`,
		},
		{
			name: "group_by two paths nests by the first, then the second",
			spec: MergeSpec{Name: "e", Rule: "sum", Field: "e", GroupBy: GroupKeys{"alpha", "beta"}},
			results: []string{`{"alpha":0.2,"beta":10,"e":1}`, `{"alpha":0.1,"beta":2,"e":2}`, `{"alpha":0.10,"beta":10,"e":3}`,
				`{"alpha":0.2,"beta":2,"e":4}`, `{"alpha":0.1,"beta":2.0,"e":5}`},
			want: `{"e":{"0.1":{"2":{"count":2,"sum":7},"10":{"count":1,"sum":3}},"0.2":{"2":{"count":1,"sum":4},"10":{"count":1,"sum":1}}}}`,
		},
		{
			name: "group_by orders each path on its own",
			spec: MergeSpec{Name: "e", Rule: "sum", Field: "e", GroupBy: GroupKeys{"model", "lr", "ok"}},
			results: []string{`{"model":"cnn","lr":1e-2,"ok":true,"e":1}`, `{"model":"mlp","lr":0.001,"ok":false,"e":2}`,
				`{"model":"cnn","lr":0.001,"ok":true,"e":3}`, `{"model":"CNN","lr":100,"ok":true,"e":4}`, `{"model":"cnn","lr":0.01,"ok":false,"e":5}`},
			// model by bytes (CNN < cnn < mlp), lr numerically, ok by bytes.
			want: `{"e":{"CNN":{"100":{"true":{"count":1,"sum":4}}},` +
				`"cnn":{"0.001":{"true":{"count":1,"sum":3}},"0.01":{"false":{"count":1,"sum":5},"true":{"count":1,"sum":1}}},` +
				`"mlp":{"0.001":{"false":{"count":1,"sum":2}}}}}`,
		},
		{
			name:    "group_by values that look like a joined key stay apart",
			spec:    MergeSpec{Name: "e", Rule: "sum", Field: "e", GroupBy: GroupKeys{"a", "b"}},
			results: []string{`{"a":"x\u0001y","b":"z","e":1}`, `{"a":"x","b":"y\u0001z","e":2}`, `{"a":"","b":"","e":4}`},
			want:    `{"e":{"":{"":{"count":1,"sum":4}},"x":{"y\u0001z":{"count":1,"sum":2}},"x\u0001y":{"z":{"count":1,"sum":1}}}}`,
		},
		{
			name:    "group_by two paths and star",
			spec:    MergeSpec{Name: "cols", Rule: "sum", Field: "c.*", GroupBy: GroupKeys{"g", "h"}},
			results: []string{`{"g":2,"h":"x","c":{"b":1,"a":2}}`, `{"g":1,"h":"y","c":{"a":3}}`},
			want:    `{"cols":{"1":{"y":{"a":{"count":1,"sum":3}}},"2":{"x":{"a":{"count":1,"sum":2},"b":{"count":1,"sum":1}}}}}`,
		},
		{
			name:    "group_by of one path in a list",
			spec:    MergeSpec{Name: "e", Rule: "sum", Field: "e", GroupBy: GroupKeys{"T"}},
			results: []string{`{"T":2,"e":1}`, `{"T":1,"e":2}`},
			want:    `{"e":{"1":{"count":1,"sum":2},"2":{"count":1,"sum":1}}}`,
		},
		{
			name:    "collect counts rows",
			spec:    MergeSpec{Name: "rows", Rule: "collect"},
			results: []string{`{"x":1}`, `{"x":2}`},
			want:    `{"rows":{"rows":2,"skipped":0}}`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := mergerFor(t, tc.spec)
			addResults(t, m, tc.results...)
			if diff := cmp.Diff(tc.want, resultText(t, m)); diff != "" {
				t.Errorf("Result (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMergeQuantilesAccuracy(t *testing.T) {
	m := mergerFor(t, MergeSpec{Name: "lat", Rule: "quantiles", Field: "ms", Quantiles: []float64{0, 0.25, 0.5, 0.999, 1}})
	for i := range 1000 {
		if err := m.Add(int64(i), []byte(`{"ms":`+strconv.Itoa(1000-i)+`}`)); err != nil {
			t.Fatal(err)
		}
	}
	res := m.Result()
	lat, _ := res.Get("lat")
	obj := lat.(ResultObject)
	want := map[string]float64{"p0": 1, "p25": 250.75, "p50": 500.5, "p99_9": 999.001, "p100": 1000}
	for name, exact := range want {
		v, ok := obj.Get(name)
		if !ok {
			t.Fatalf("no %s in %v", name, obj)
		}
		if got := v.(float64); math.Abs(got-exact) > 0.01*exact+1 {
			t.Errorf("%s = %v, want %v within 1%%", name, got, exact)
		}
	}
	for _, name := range []string{"count", "min", "max"} {
		got, _ := obj.Get(name)
		want := map[string]any{"count": int64(1000), "min": 1.0, "max": 1000.0}[name]
		if got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}

func TestMergeQuantileNames(t *testing.T) {
	for q, want := range map[float64]string{
		0: "p0", 0.5: "p50", 0.9: "p90", 0.99: "p99", 0.999: "p99_9", 1: "p100", 0.0001: "p0_01", 0.05: "p5", 0.125: "p12_5",
	} {
		if got := quantileName(q); got != want {
			t.Errorf("quantileName(%v) = %q, want %q", q, got, want)
		}
	}
}

func TestMergeScalars(t *testing.T) {
	m := mergerFor(t,
		MergeSpec{Name: "inside", Rule: "sum", Field: "inside"},
		MergeSpec{Name: "energy", Rule: "stats", Field: "e", GroupBy: GroupKeys{"T"}},
		MergeSpec{Name: "h", Rule: "histogram", Field: "e", Min: specFloat(0), Max: specFloat(4), Bins: 2},
		MergeSpec{Name: "lat", Rule: "quantiles", Field: "e", Quantiles: []float64{0.5}},
		MergeSpec{Name: "top", Rule: "topk", Key: "e", K: 2, Field: "e"},
		MergeSpec{Name: "best", Rule: "argmin", Key: "e", Field: "T"},
		MergeSpec{Name: "w", Rule: "vector-mean", Field: "v"},
		MergeSpec{Name: "cols", Rule: "sum", Field: "c.*"},
		MergeSpec{Name: "rows", Rule: "collect"},
	)
	addResults(t, m,
		`{"inside":3,"e":1,"T":2.25,"v":[1,2],"c":{"a":1}}`,
		`{"inside":4,"e":3,"T":2.25,"v":[3,4],"c":{"a":2,"b":5}}`,
		`{"inside":5,"e":2,"T":"x","v":[5,6],"c":{}}`,
	)
	want := map[string]float64{
		"inside": 12, "inside.sum": 12, "inside.count": 3,
		"energy[2.25].count": 2, "energy[2.25].sum": 4, "energy[2.25].mean": 2, "energy[2.25].variance": 1,
		"energy[2.25].stddev": 1, "energy[2.25].sample_variance": 2, "energy[2.25].sample_stddev": math.Sqrt2,
		"energy[2.25].min": 1, "energy[2.25].max": 3,
		"energy[x].count": 1, "energy[x].sum": 2, "energy[x].mean": 2, "energy[x].variance": 0, "energy[x].stddev": 0,
		"energy[x].min": 2, "energy[x].max": 2,
		"h.count": 3, "h.underflow": 0, "h.overflow": 0, "h.counts.0": 1, "h.counts.1": 2,
		"lat.count": 3, "lat.min": 1, "lat.max": 3, "lat.p50": 1.9936617014173443,
		"top.0.task": 1, "top.0.key": 3, "top.0.value": 3, "top.1.task": 2, "top.1.key": 2, "top.1.value": 2,
		"best.task": 0, "best.key": 1, "best.value": 2.25,
		"w.count": 3, "w.mean.0": 3, "w.mean.1": 4,
		"cols.a": 3, "cols.a.sum": 3, "cols.a.count": 2, "cols.b": 5, "cols.b.sum": 5, "cols.b.count": 1,
		"rows.rows": 3, "rows.skipped": 0, "rows.refused": 0,
	}
	if diff := cmp.Diff(want, m.Scalars()); diff != "" {
		t.Errorf("Scalars (-want +got):\n%s", diff)
	}
}

// allRuleSpecs has one entry of every fixed-size rule, with groups and a
// "*" field; randomMergeResult makes results for it.
func allRuleSpecs() []MergeSpec {
	return []MergeSpec{
		{Name: "inside", Rule: "sum", Field: "inside"},
		{Name: "energy", Rule: "stats", Field: "energy", GroupBy: GroupKeys{"T"}},
		{Name: "hist", Rule: "histogram", Field: "energy", Min: specFloat(-5), Max: specFloat(5), Bins: 10},
		{Name: "lat", Rule: "quantiles", Field: "lat", Quantiles: []float64{0.1, 0.5, 0.999}},
		{Name: "best", Rule: "topk", Key: "loss", Order: "asc", K: 3, Field: "params"},
		{Name: "worst", Rule: "argmax", Key: "loss"},
		{Name: "grad", Rule: "vector-mean", Field: "grad"},
		{Name: "cols", Rule: "stats", Field: "cols.*"},
		{Name: "pairs", Rule: "stats", Field: "lat", GroupBy: GroupKeys{"T", "loss"}},
	}
}

const goodAllRuleResult = `{"inside":3,"energy":0.5,"T":1,"lat":2,"loss":0.25,"params":{"lr":0.1},"grad":[1,2,3],"cols":{"a":1}}`

// A missing field's message lists the members where its path breaks off
// and the one it most likely meant.
func TestMissingFieldWords(t *testing.T) {
	root, err := decodeResult([]byte(`{"params":{"ls":1,"momentum":0.9},"n":3,"e":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{"params.lr", `field params.lr: missing (params has ls, momentum); did you mean "params.ls"?`},
		{"param.lr", `field param.lr: missing (the result has e, n, params); did you mean "params.lr"?`},
		{"n.x", `field n.x: missing: n is a number, not an object`},
		{"e.x", `field e.x: missing (e is an empty object)`},
		{"zzz", `field zzz: missing (the result has e, n, params)`},
	} {
		p, err := parseMergePath(tc.path)
		if err != nil {
			t.Fatal(err)
		}
		_, rerr := p.lookup(root)
		if rerr == nil {
			t.Fatalf("%s: found", tc.path)
		}
		if got := strings.TrimPrefix(rerr.Error(), "merge: "); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.path, got, tc.want)
		}
	}
}

func TestMergeAddRejectsBadResults(t *testing.T) {
	for _, tc := range []struct {
		name   string
		result string
		want   string
		is     error
	}{
		{"string for a number", `{"inside":"3","energy":0.5,"T":1,"lat":2,"loss":0.25,"params":{},"grad":[1,2,3],"cols":{}}`,
			`merge "inside": field inside: want a number or an array of numbers, got string`, ErrBadResult},
		{"string in an array", `{"inside":[1,"2"],"energy":0.5,"T":1,"lat":2,"loss":0.25,"params":{},"grad":[1,2,3],"cols":{}}`,
			`merge "inside": field inside[1]: want a number, got string`, ErrBadResult},
		{"missing field", `{"energy":0.5,"T":1,"lat":2,"loss":0.25,"params":{},"grad":[1,2,3],"cols":{}}`,
			`merge "inside": field inside: missing (the result has T, cols, energy, grad, lat, loss, params)`, ErrBadResult},
		{"missing field, a close one", `{"insides":3,"energy":0.5,"T":1,"lat":2,"loss":0.25,"params":{},"grad":[1,2,3],"cols":{}}`,
			`merge "inside": field inside: missing (the result has T, cols, energy, grad, insides, lat, loss, params); did you mean "insides"?`, ErrBadResult},
		{"missing group_by field", `{"inside":3,"energy":0.5,"t":1,"lat":2,"loss":0.25,"params":{},"grad":[1,2,3],"cols":{}}`,
			`merge "energy": field T: missing (the result has cols, energy, grad, inside, lat, loss, params, t); did you mean "t"?; ` +
				`group_by reads each task's result, not its params: have the program write T into its result`, ErrBadResult},
		{"missing star prefix", `{"inside":3,"energy":0.5,"T":1,"lat":2,"loss":0.25,"params":{},"grad":[1,2,3],"col":{}}`,
			`merge "cols": field cols.*: missing cols (the result has T, col, energy, grad, inside, lat, loss, params); did you mean "col"?`, ErrBadResult},
		{"vector length", `{"inside":1,"energy":0.5,"T":1,"lat":2,"loss":0.25,"params":{},"grad":[1,2],"cols":{}}`,
			`merge "grad": field grad: want 3 numbers, as in earlier results, got 2`, ErrBadResult},
		{"vector not an array", `{"inside":1,"energy":0.5,"T":1,"lat":2,"loss":0.25,"params":{},"grad":1,"cols":{}}`,
			`merge "grad": field grad: want an array of numbers, got number`, ErrBadResult},
		{"group by an object", `{"inside":1,"energy":0.5,"T":{},"lat":2,"loss":0.25,"params":{},"grad":[1,2,3],"cols":{}}`,
			`merge "energy": field T: want a string, number or boolean to group by, got object`, ErrBadResult},
		{"key not a number", `{"inside":1,"energy":0.5,"T":1,"lat":2,"loss":null,"params":{},"grad":[1,2,3],"cols":{}}`,
			`merge "best": field loss: want a number, got null`, ErrBadResult},
		{"star over a non-object", `{"inside":1,"energy":0.5,"T":1,"lat":2,"loss":1,"params":{},"grad":[1,2,3],"cols":[1]}`,
			`merge "cols": field cols.*: want an object at cols for "*", got array`, ErrBadResult},
		{"bad star member", `{"inside":1,"energy":0.5,"T":1,"lat":2,"loss":1,"params":{},"grad":[1,2,3],"cols":{"b":true,"a":[]}}`,
			`merge "cols": field cols.b: want a number or an array of numbers, got boolean`, ErrBadResult},
		{"number out of range", `{"inside":1,"energy":1e400,"T":1,"lat":2,"loss":1,"params":{},"grad":[1,2,3],"cols":{}}`,
			`merge "energy": field energy: number 1e400 is beyond the float64 range`, ErrBadResult},
		{"huge integer", `{"inside":1` + strings.Repeat("0", 1001) + `,"energy":1,"T":1,"lat":2,"loss":1,"params":{},"grad":[1,2,3],"cols":{}}`,
			`merge "inside": field inside: integer of 1002 digits is too long (at most 1000)`, ErrBadResult},
		{"NaN is not JSON", `{"inside":NaN}`, `merge: result is not valid JSON: invalid character 'N' looking for beginning of value`, ErrBadResult},
		{"not an object", `[1,2]`, `merge: result is not a JSON object (got array)`, ErrBadResult},
		{"trailing data", goodAllRuleResult + ` {}`, `merge: trailing data after the result's JSON object`, ErrBadResult},
		{"empty", ` `, `merge: empty result: want one JSON object`, ErrBadResult},
		{"truncated", `{"inside":`, `merge: result is not valid JSON: unexpected EOF`, ErrBadResult},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := mergerFor(t, allRuleSpecs()...)
			addResults(t, m, goodAllRuleResult)
			before, beforeBin := resultText(t, m), mustMarshalState(t, m)
			err := m.Add(7, []byte(tc.result))
			if err == nil {
				t.Fatal("Add succeeded")
			}
			if diff := cmp.Diff(tc.want, err.Error()); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
			if !errors.Is(err, tc.is) {
				t.Errorf("error %v is not %v", err, tc.is)
			}
			if diff := cmp.Diff(before, resultText(t, m)); diff != "" {
				t.Errorf("Result changed (-before +after):\n%s", diff)
			}
			if !bytes.Equal(beforeBin, mustMarshalState(t, m)) {
				t.Errorf("state changed")
			}
			// The Merger still works.
			if err := m.Add(8, []byte(goodAllRuleResult)); err != nil {
				t.Errorf("Add after the error: %v", err)
			}
		})
	}
}

func TestMergeAddRejectsOutOfSketchRange(t *testing.T) {
	m := mergerFor(t, MergeSpec{Name: "q", Rule: "quantiles", Field: "x"}, MergeSpec{Name: "s", Rule: "sum", Field: "x"})
	err := m.Add(0, []byte(`{"x":1.7e308}`))
	if !errors.Is(err, ErrBadResult) || !strings.HasPrefix(err.Error(), `merge "q": field x: value 1.7e+308 is beyond the quantile sketch's range`) {
		t.Fatalf("Add: %v", err)
	}
	if diff := cmp.Diff(`{"q":{"count":0,"min":null,"max":null,"p50":null,"p90":null,"p99":null},"s":{"count":0,"sum":0}}`, resultText(t, m)); diff != "" {
		t.Errorf("Result (-want +got):\n%s", diff)
	}
}

func mustMarshalState(t testing.TB, m *Merger) []byte {
	t.Helper()
	b, err := m.MarshalBinary()
	if err != nil {
		t.Fatalf("MarshalBinary: %v", err)
	}
	return b
}

func TestMergeSpecValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec MergeSpec
		want string // "" for valid
	}{
		{"sum", MergeSpec{Rule: "sum", Field: "x"}, ""},
		{"histogram", MergeSpec{Rule: "histogram", Field: "x", Min: specFloat(0), Max: specFloat(1), Bins: 10}, ""},
		{"quantiles", MergeSpec{Rule: "quantiles", Field: "x", RelativeAccuracy: 0.02, Quantiles: []float64{0, 0.5, 1}}, ""},
		{"topk", MergeSpec{Rule: "topk", Key: "loss", K: 5, Order: "asc"}, ""},
		{"argmax", MergeSpec{Rule: "argmax", Key: "loss", K: 1}, ""},
		{"collect fields", MergeSpec{Rule: "collect", Fields: []string{"a", "b.c"}}, ""},
		{"star", MergeSpec{Rule: "stats", Field: "columns.*", GroupBy: GroupKeys{"T"}}, ""},
		{"no rule", MergeSpec{Field: "x"}, `merge "x": missing rule (want one of sum, stats, histogram, quantiles, topk, argmin, argmax, vector-mean, vector-sum, collect, concat)`},
		{"unknown rule", MergeSpec{Name: "e", Rule: "avg", Field: "x"}, `merge "e": unknown rule "avg" (want one of sum, stats, histogram, quantiles, topk, argmin, argmax, vector-mean, vector-sum, collect, concat)`},
		{"no field", MergeSpec{Name: "e", Rule: "stats"}, `merge "e": stats needs field = "...", the path of the number in each result`},
		{"histogram range", MergeSpec{Name: "energy", Rule: "histogram", Field: "energy", Min: specFloat(1), Max: specFloat(1), Bins: 3},
			`merge "energy": histogram needs min < max and bins >= 1 (finite)`},
		{"histogram bins", MergeSpec{Name: "energy", Rule: "histogram", Field: "energy", Min: specFloat(0), Max: specFloat(1)},
			`merge "energy": histogram needs min < max and bins >= 1 (finite)`},
		{"histogram width overflows", MergeSpec{Rule: "histogram", Field: "x", Min: specFloat(-math.MaxFloat64), Max: specFloat(math.MaxFloat64), Bins: 3},
			`merge "x": histogram needs min < max and bins >= 1 (finite)`},
		{"bins elsewhere", MergeSpec{Rule: "sum", Field: "x", Bins: 3}, `merge "x": min, max and bins apply only to rule = "histogram"`},
		{"accuracy", MergeSpec{Rule: "quantiles", Field: "x", RelativeAccuracy: 1}, `merge "x": relative_accuracy must be in [0.001, 1), got 1`},
		{"quantile range", MergeSpec{Rule: "quantiles", Field: "x", Quantiles: []float64{1.5}}, `merge "x": quantile 1.5 is not in [0, 1]`},
		{"quantile twice", MergeSpec{Rule: "quantiles", Field: "x", Quantiles: []float64{0.5, 0.5}}, `merge "x": quantile 0.5 is listed twice`},
		{"topk without key", MergeSpec{Name: "t", Rule: "topk"}, `merge "t": topk needs key = "...", the path of the number that ranks results`},
		{"topk order", MergeSpec{Name: "t", Rule: "topk", Key: "k", Order: "up"}, `merge "t": order must be "asc" or "desc", got "up"`},
		{"argmin k", MergeSpec{Name: "t", Rule: "argmin", Key: "k", K: 3}, `merge "t": argmin keeps one result; use rule = "topk" for k = 3`},
		{"key elsewhere", MergeSpec{Rule: "sum", Field: "x", Key: "k"}, `merge "x": k, key and order apply only to topk, argmin and argmax`},
		{"empty segment", MergeSpec{Rule: "sum", Field: "a..b"}, `merge "a..b": field: path "a..b" has an empty segment`},
		{"two stars", MergeSpec{Rule: "sum", Field: "*.*"}, `merge "*.*": field: path "*.*" has more than one "*"`},
		{"star in group_by", MergeSpec{Rule: "sum", Field: "x", GroupBy: GroupKeys{"a.*"}}, `merge "x": group_by cannot contain "*"`},
		{"star in topk", MergeSpec{Rule: "topk", Key: "k", Field: "a.*"}, `merge "a.*": a "*" field works only with sum, stats, histogram, quantiles, vector-mean and vector-sum`},
		{"fields elsewhere", MergeSpec{Rule: "sum", Field: "x", Fields: []string{"a"}}, `merge "x": fields apply only to rule = "collect"`},
		{"field and fields", MergeSpec{Rule: "collect", Field: "x", Fields: []string{"a"}}, `merge "x": collect takes field or fields, not both`},
		{"task column", MergeSpec{Rule: "collect", Fields: []string{"task"}}, `merge "collect": fields: "task" is the row's task index; rename the column`},
		{"concat without field", MergeSpec{Rule: "concat"}, `merge "concat": concat needs field = "...", the path of the text in each result`},
		{"grouped collect", MergeSpec{Rule: "collect", GroupBy: GroupKeys{"g"}}, `merge "collect": collect writes one stream in task order; group_by does not apply`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.spec.Validate()
			got := ""
			if err != nil {
				got = err.Error()
				if !errors.Is(err, ErrMergeSpec) {
					t.Errorf("error is not ErrMergeSpec")
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Validate (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNewMergerErrors(t *testing.T) {
	opener := func(string) (io.Writer, error) { return nil, errors.New("disk full") }
	for _, tc := range []struct {
		name  string
		specs []MergeSpec
		sinks SinkOpener
		want  string
	}{
		{"duplicate name", []MergeSpec{{Rule: "sum", Field: "x"}, {Rule: "stats", Field: "x"}}, nil,
			`merge "x": two merge entries have this name`},
		{"no sink opener", []MergeSpec{{Rule: "collect"}}, nil,
			`merge "collect": collect writes rows to a sink, and no sink opener was given`},
		{"sink fails", []MergeSpec{{Rule: "sum", Field: "x"}, {Name: "out", Rule: "concat", Field: "text"}}, opener,
			`merge "out": open sink: disk full`},
		{"invalid", []MergeSpec{{Rule: "sum"}}, nil, `merge "sum": sum needs field = "...", the path of the number in each result`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewMerger(tc.specs, tc.sinks)
			if err == nil {
				t.Fatal("NewMerger succeeded")
			}
			if diff := cmp.Diff(tc.want, err.Error()); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMergeErrors(t *testing.T) {
	a := mergerFor(t, allRuleSpecs()...)
	addResults(t, a, goodAllRuleResult)
	t.Run("different specs", func(t *testing.T) {
		b := mergerFor(t, MergeSpec{Rule: "sum", Field: "x"})
		if err := a.Merge(b); !errors.Is(err, ErrMergeMismatch) {
			t.Errorf("Merge: %v, want ErrMergeMismatch", err)
		}
		if err := b.UnmarshalBinary(mustMarshalState(t, a)); !errors.Is(err, ErrMergeMismatch) {
			t.Errorf("UnmarshalBinary: %v, want ErrMergeMismatch", err)
		}
	})
	t.Run("ordered", func(t *testing.T) {
		c := mergerFor(t, MergeSpec{Rule: "collect"})
		if err := c.Merge(c); !errors.Is(err, ErrNotMergeable) {
			t.Errorf("Merge: %v, want ErrNotMergeable", err)
		}
		if _, err := c.MarshalBinary(); !errors.Is(err, ErrNotMergeable) {
			t.Errorf("MarshalBinary: %v, want ErrNotMergeable", err)
		}
	})
	t.Run("vector lengths", func(t *testing.T) {
		b := mergerFor(t, allRuleSpecs()...)
		addResults(t, b, strings.Replace(goodAllRuleResult, `[1,2,3]`, `[1,2]`, 1))
		before := resultText(t, a)
		err := a.Merge(b)
		if !errors.Is(err, ErrMergeMismatch) || err.Error() != `merge "grad": vector-mean of 3 numbers and of 2: job: merge states of different specs` {
			t.Errorf("Merge: %v", err)
		}
		if diff := cmp.Diff(before, resultText(t, a)); diff != "" {
			t.Errorf("Result changed (-before +after):\n%s", diff)
		}
	})
	t.Run("with itself", func(t *testing.T) {
		d := mergerFor(t, allRuleSpecs()...)
		addResults(t, d, goodAllRuleResult)
		if err := d.Merge(d); err != nil {
			t.Fatal(err)
		}
		twice := mergerFor(t, allRuleSpecs()...)
		addResults(t, twice, goodAllRuleResult, goodAllRuleResult)
		// Only the topk and argmax task indices tell the two apart.
		got, want := d.Scalars(), twice.Scalars()
		for _, k := range []string{"best.1.task", "worst.task"} {
			delete(got, k)
			delete(want, k)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("self merge (-want +got):\n%s", diff)
		}
	})
}

func TestMergeUnmarshalRejectsDamage(t *testing.T) {
	a := mergerFor(t, allRuleSpecs()...)
	addResults(t, a, goodAllRuleResult, strings.Replace(goodAllRuleResult, `"T":1`, `"T":"x"`, 1))
	enc := mustMarshalState(t, a)
	target := mergerFor(t, allRuleSpecs()...)
	addResults(t, target, goodAllRuleResult)
	before := mustMarshalState(t, target)
	for n := range len(enc) {
		if err := target.UnmarshalBinary(enc[:n]); !errors.Is(err, ErrBadMergeState) && !errors.Is(err, ErrMergeMismatch) {
			t.Fatalf("UnmarshalBinary of %d of %d bytes: %v", n, len(enc), err)
		}
	}
	if err := target.UnmarshalBinary(append(bytes.Clone(enc), 0)); !errors.Is(err, ErrBadMergeState) {
		t.Errorf("UnmarshalBinary with a trailing byte: %v", err)
	}
	if !bytes.Equal(before, mustMarshalState(t, target)) {
		t.Errorf("failed UnmarshalBinary changed the state")
	}
	if err := target.UnmarshalBinary(enc); err != nil {
		t.Fatalf("UnmarshalBinary: %v", err)
	}
	if diff := cmp.Diff(resultText(t, a), resultText(t, target)); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}
