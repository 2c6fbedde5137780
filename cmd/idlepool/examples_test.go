package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// exampleManifest returns the text of an example's manifest with its
// program renamed to prog.wasm, as writeManifest lays it out.
func exampleManifest(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "examples", name, name+".toml"))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(b), `program = "`+name+`.wasm"`, `program = "prog.wasm"`, 1)
	if text == string(b) {
		t.Fatalf("examples/%s/%s.toml does not name %s.wasm", name, name, name)
	}
	return text
}

// TestIsingSusceptibilityPeak runs the Ising example on a 16x16 lattice
// with short chains (22 tasks, seconds of work on a quiet machine) and
// checks the physics that must show even there: the susceptibility peaks
// just above Onsager's Tc = 2/ln(1+sqrt(2)) = 2.2692 (the finite-size
// pseudo-critical temperature of L = 16 is near 2.37), far above its value
// deep in the ordered and disordered phases. The example as shipped (32x32,
// 164 tasks, about a minute on 2 quiet cores) is checked to within 0.1 of
// Tc with IDLEPOOL_FULL_EXAMPLES=1 (make check-examples).
func TestIsingSusceptibilityPeak(t *testing.T) {
	t.Parallel()
	text := exampleManifest(t, "ising")
	want := map[string]float64{"T=2.3": 0, "T=2.4": 0, "T=2.5": 0} // the peaks allowed
	temps, reps := 11, 2
	if os.Getenv("IDLEPOOL_FULL_EXAMPLES") == "" {
		for old, repl := range map[string]string{"L = 32": "L = 16", "burnin = 1000": "burnin = 300", "sweeps = 6000": "sweeps = 1500", "rep = [0, 1, 2, 3]": "rep = [0, 1]",
			// Workers run at the lowest priority: on a busy machine a task
			// of a tenth of a second may wait minutes for a core.
			`time_limit = "60s"`: `time_limit = "30m"`} {
			if !strings.Contains(text, old) {
				t.Fatalf("examples/ising/ising.toml has no %q", old)
			}
			text = strings.Replace(text, old, repl, 1)
		}
		text = regexp.MustCompile(`(?s)T = \[.*?\]`).ReplaceAllString(text, "T = [1.9, 2.0, 2.1, 2.2, 2.3, 2.4, 2.5, 2.6, 2.7, 2.8, 2.9]")
	} else {
		want = map[string]float64{"T=2.2": 0, "T=2.25": 0, "T=2.3": 0, "T=2.35": 0} // within 0.1 of Tc
		temps, reps = 41, 4
	}
	m := writeManifest(t, "ising", text)
	r, _ := runJSON(t, t.TempDir(), m)
	if r.Tasks.Failed != 0 || r.Tasks.OK != r.Tasks.Total {
		t.Fatalf("tasks = %+v", r.Tasks)
	}
	var chi map[string]struct {
		Count int64   `json:"count"`
		Mean  float64 `json:"mean"`
	}
	if err := json.Unmarshal(r.Result["chi"], &chi); err != nil {
		t.Fatalf("result.chi is not an object of temperature to stats: %v\n%s", err, r.Result["chi"])
	}
	bestT, best := "", -1.0
	byT := map[float64]float64{}
	for key, s := range chi {
		temp, err := strconv.ParseFloat(key, 64)
		if err != nil {
			t.Fatalf("group key %q is not a temperature", key)
		}
		if s.Count != int64(reps) {
			t.Errorf("T=%s: %d replicas merged, want %d", key, s.Count, reps)
		}
		byT[temp] = s.Mean
		if s.Mean > best {
			bestT, best = "T="+strconv.FormatFloat(temp, 'f', -1, 64), s.Mean
		}
	}
	tc := 2 / math.Log(1+math.Sqrt2)
	if _, ok := want[bestT]; len(chi) != temps || !ok {
		t.Fatalf("%d temperatures; susceptibility peaks at %s (chi=%v), want one of %v (Tc=%.4f)", len(chi), bestT, best, slices.Sorted(maps.Keys(want)), tc)
	}
	// A peak, not noise: far above the ordered phase and the hot tail.
	for _, far := range []float64{2, 2.9} {
		if c, ok := byT[far]; temps == 11 && (!ok || c*2 > best) {
			t.Errorf("chi at T=%v is %v, more than half the peak %v at %s", far, c, best, bestT)
		}
	}
	t.Logf("susceptibility peak at %s (mean chi %.3g); Tc=%.4f", bestT, best, tc)
}

// TestCSVStatsMatchesDirectComputation runs csvstats over a generated CSV
// cut into many chunks and checks every column against a single pass over
// the file: count, min and max exactly, mean and standard deviation to the
// last bits (both sides round exact sums once), quantiles within the
// sketch's relative accuracy.
func TestCSVStatsMatchesDirectComputation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	cols := []string{"a", "b", "c"}
	values := map[string][]float64{}
	var sb strings.Builder
	sb.WriteString("a,b,c\n")
	for i := range 20000 {
		a := math.Round(rng.NormFloat64()*1e4) / 1e4
		b := math.Round(rng.ExpFloat64()*1e3) / 1e2
		c := float64(i % 97)
		values["a"] = append(values["a"], a)
		values["b"] = append(values["b"], b)
		values["c"] = append(values["c"], c)
		fmt.Fprintf(&sb, "%s,%s,%s\n", strconv.FormatFloat(a, 'g', -1, 64), strconv.FormatFloat(b, 'g', -1, 64), strconv.FormatFloat(c, 'g', -1, 64))
	}
	data := filepath.Join(dir, "data.csv")
	if err := os.WriteFile(data, []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(exampleManifest(t, "csvstats"), `data = "data.csv"`, `data = "`+data+`"`, 1)
	text = strings.Replace(text, "chunk_bytes = 1048576", "chunk_bytes = 32768", 1)
	m := writeManifest(t, "csvstats", text)
	r, _ := runJSON(t, t.TempDir(), m)
	if r.Tasks.Total < 10 || r.Tasks.Failed != 0 {
		t.Fatalf("tasks = %+v, want 10 or more chunks, none failed", r.Tasks)
	}
	var stats map[string]struct {
		Count          int64
		Mean, Stddev   float64
		Min, Max       float64
		SampleVariance float64 `json:"sample_variance"`
	}
	if err := json.Unmarshal(r.Result["stats"], &stats); err != nil {
		t.Fatalf("result.stats: %v", err)
	}
	var quant map[string]map[string]any
	if err := json.Unmarshal(r.Result["quantiles"], &quant); err != nil {
		t.Fatalf("result.quantiles: %v", err)
	}
	for _, c := range cols {
		xs := values[c]
		got := stats[c]
		mean, sd := exactMeanStddev(xs)
		sorted := append([]float64(nil), xs...)
		sort.Float64s(sorted)
		if got.Count != int64(len(xs)) || got.Min != sorted[0] || got.Max != sorted[len(sorted)-1] {
			t.Errorf("column %s: count/min/max = %d/%v/%v, want %d/%v/%v", c, got.Count, got.Min, got.Max, len(xs), sorted[0], sorted[len(sorted)-1])
		}
		if got.Mean != mean || math.Abs(got.Stddev-sd) > 1e-12*sd {
			t.Errorf("column %s: mean/stddev = %v/%v, want %v/%v", c, got.Mean, got.Stddev, mean, sd)
		}
		for _, q := range []float64{0.25, 0.5, 0.75, 0.99} {
			want := sorted[int(q*float64(len(sorted)-1))]
			gotQ, ok := findQuantile(quant[c], q)
			if !ok {
				t.Fatalf("column %s: no quantile %v in %v", c, q, quant[c])
			}
			if math.Abs(gotQ-want) > 0.0101*math.Abs(want)+1e-12 {
				t.Errorf("column %s: quantile %v = %v, want %v within 1%%", c, q, gotQ, want)
			}
		}
	}
}

// exactMeanStddev computes the mean and the population standard deviation
// from exact rational sums, each rounded once.
func exactMeanStddev(xs []float64) (float64, float64) {
	sum, sq := new(big.Rat), new(big.Rat)
	for _, x := range xs {
		r := new(big.Rat).SetFloat64(x)
		sum.Add(sum, r)
		sq.Add(sq, r.Mul(r, r))
	}
	n := new(big.Rat).SetInt64(int64(len(xs)))
	mean := new(big.Rat).Quo(sum, n)
	variance := new(big.Rat).Sub(new(big.Rat).Quo(sq, n), new(big.Rat).Mul(mean, mean))
	m, _ := mean.Float64()
	v, _ := variance.Float64()
	return m, math.Sqrt(v)
}

// findQuantile finds quantile q in a quantiles result, whatever the key
// spelling ("p50", "0.5", ...).
func findQuantile(obj map[string]any, q float64) (float64, bool) {
	for _, container := range []map[string]any{obj, asMap(obj["quantiles"])} {
		for k, v := range container {
			f, ok := v.(float64)
			if !ok {
				continue
			}
			key := strings.TrimPrefix(k, "p")
			key = strings.ReplaceAll(key, "_", ".")
			if kq, err := strconv.ParseFloat(key, 64); err == nil && (math.Abs(kq-q) < 1e-9 || math.Abs(kq-100*q) < 1e-9) {
				return f, true
			}
		}
	}
	return 0, false
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// objectKeys returns the member names of the JSON object raw in their
// order, and the members.
func objectKeys(t *testing.T, raw json.RawMessage) ([]string, map[string]json.RawMessage) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not a JSON object: %s", raw)
	}
	var keys []string
	members := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, tok.(string))
		members[tok.(string)] = v
	}
	return keys, members
}

// TestSweepExample runs examples/sweep as shipped (60 small tasks): a
// grid of a log-spaced range, a linear range and a list, merged by the
// pair (alpha, beta). The groups nest alpha then beta, each level in
// numeric order, and hold exactly the values the ranges define, written
// as the program echoed them; the plain output shows one row per pair.
func TestSweepExample(t *testing.T) {
	t.Parallel()
	m := writeManifest(t, "sweep", exampleManifest(t, "sweep"))
	home := t.TempDir()
	r, _ := runJSON(t, home, m)
	if r.Tasks.Total != 60 || r.Tasks.OK != 60 {
		t.Fatalf("tasks = %+v, want 60 ok", r.Tasks)
	}
	wantAlpha := []string{"0.0001", "0.00031622776601683794", "0.001", "0.0031622776601683794", "0.01"}
	wantBeta := []string{"0", "0.3", "0.6", "0.9"}
	type stats struct {
		Count int64
		Sum   float64
		Mean  float64
	}
	group := map[string]map[string]map[string]stats{} // entry, alpha, beta
	for _, entry := range []string{"loss", "diverged"} {
		alphas, byAlpha := objectKeys(t, r.Result[entry])
		if diff := cmp.Diff(wantAlpha, alphas); diff != "" {
			t.Fatalf("%s: alpha groups (-want +got):\n%s", entry, diff)
		}
		group[entry] = map[string]map[string]stats{}
		for _, a := range alphas {
			betas, byBeta := objectKeys(t, byAlpha[a])
			if diff := cmp.Diff(wantBeta, betas); diff != "" {
				t.Fatalf("%s[%s]: beta groups (-want +got):\n%s", entry, a, diff)
			}
			group[entry][a] = map[string]stats{}
			for _, b := range betas {
				var s stats
				if err := json.Unmarshal(byBeta[b], &s); err != nil {
					t.Fatal(err)
				}
				if s.Count != 3 {
					t.Errorf("%s[%s][%s] has %d results, want the 3 replicas", entry, a, b, s.Count)
				}
				group[entry][a][b] = s
			}
		}
	}
	for _, b := range wantBeta {
		for _, a := range wantAlpha[:3] {
			if d := group["diverged"][a][b].Sum; d != 0 {
				t.Errorf("alpha %s, beta %s: %v runs diverged, want none", a, b, d)
			}
		}
		if d := group["diverged"]["0.01"][b].Sum; d != 3 {
			t.Errorf("alpha 0.01, beta %s: %v runs diverged, want all 3", b, d)
		}
	}
	if lo, hi := group["loss"]["0.001"]["0.9"].Mean, group["loss"]["0.001"]["0"].Mean; !(lo < -15 && lo < hi) {
		t.Errorf("alpha 0.001: mean log10 loss %v with momentum 0.9 and %v without, want below -15 and below", lo, hi)
	}

	out := idlepool(t, home, "run", m) // from the journal: nothing runs again
	if out.code != 0 {
		t.Fatalf("run: exit %d\n%s", out.code, out.stderr)
	}
	for _, re := range []string{`(?m)^loss\n\s+alpha\s+beta\s+count\s+sum\s+mean\s`, `(?m)^\s+0\.001\s+0\.9\s+3\s`, `(?m)^diverged\n\s+alpha\s+beta\s+count\s+sum\s`} {
		if !regexp.MustCompile(re).MatchString(out.stdout) {
			t.Errorf("plain output does not match %s:\n%s", re, out.stdout)
		}
	}
}
