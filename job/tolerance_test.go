package job_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"idlepool/job"
)

const tolBase = "name = \"v\"\nprogram = \"p.wasm\"\n[split]\nrule = \"range\"\ntasks = 3\n[[merge]]\nfield = \"x\"\nrule = \"sum\"\n"

func parseVerify(t *testing.T, table string) job.Verify {
	t.Helper()
	m, err := job.ParseManifest("v.toml", t.TempDir(), []byte(tolBase+table))
	if err != nil {
		t.Fatal(err)
	}
	return m.Verify
}

func TestToleranceTable(t *testing.T) {
	for _, tc := range []struct {
		name, table string
		want        map[string]job.Tolerance
	}{
		{"one field", "[verify]\nrule = \"tolerance\"\n[verify.tolerance]\nprice = { abs = 1e-3, rel = 1e-3 }\n",
			map[string]job.Tolerance{"price": {Abs: 1e-3, Rel: 1e-3}}},
		{"abs alone, an integer", "[verify]\nrule = \"tolerance\"\n[verify.tolerance]\nn = { abs = 2 }\n",
			map[string]job.Tolerance{"n": {Abs: 2}}},
		{"nested, dotted and quoted keys", "[verify]\nrule = \"tolerance\"\n[verify.tolerance]\nstats.mean = { rel = 1e-6 }\n\"stats.sd\" = { abs = 0.1 }\n[verify.tolerance.energy]\ntotal = { abs = 1 }\n",
			map[string]job.Tolerance{"stats.mean": {Rel: 1e-6}, "stats.sd": {Abs: 0.1}, "energy.total": {Abs: 1}}},
		{"a field named abs", "[verify]\nrule = \"tolerance\"\n[verify.tolerance]\nerr.abs = { abs = 1 }\n",
			map[string]job.Tolerance{"err.abs": {Abs: 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := parseVerify(t, tc.table)
			if v.Rule != job.RuleTolerance {
				t.Errorf("rule %q", v.Rule)
			}
			if diff := cmp.Diff(tc.want, v.Tolerances); diff != "" {
				t.Errorf("tolerances (-want +got):\n%s", diff)
			}
		})
	}
	// "digest" written out is the default: the same job, the same ID.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.wasm"), []byte("\x00asm\x01\x00\x00\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	plan := func(table string) job.ID {
		m, err := job.ParseManifest("v.toml", dir, []byte(tolBase+table))
		if err != nil {
			t.Fatal(err)
		}
		j, err := job.Plan(m)
		if err != nil {
			t.Fatal(err)
		}
		return j.ID
	}
	if a, b := plan(""), plan("[verify]\nrule = \"digest\"\n"); a != b {
		t.Errorf("rule = \"digest\" changed the job ID: %s, want %s", b, a)
	}
	if a, b := plan(""), plan("[verify]\nrule = \"tolerance\"\n[verify.tolerance]\nx = { abs = 1 }\n"); a == b {
		t.Error("rule = \"tolerance\" did not change the job ID")
	}
	if a, b := plan("[verify]\nrule = \"tolerance\"\n[verify.tolerance]\nx = { abs = 1 }\n"),
		plan("[verify]\nrule = \"tolerance\"\n[verify.tolerance]\nx = { abs = 1, rel = 0 }\n"); a != b {
		t.Error("rel = 0 written out changed the job ID")
	}
}

// TestToleranceManifestErrors: each bad form of the table is refused with
// a message naming the field and what is wanted.
func TestToleranceManifestErrors(t *testing.T) {
	for _, tc := range []struct {
		name, table, field, says string
	}{
		{"rule typo", "[verify]\nrule = \"tolerence\"\n", "verify.rule", `want "digest"`},
		{"unknown key in the table", "[verify]\nrule = \"tolerance\"\ntolerence = 1\n", "verify.tolerence", "unknown field"},
		{"unknown key in an entry", "[verify]\nrule = \"tolerance\"\n[verify.tolerance]\nprice = { abs = 1e-3, rell = 1e-3 }\n", "verify.tolerance.price.rell", "unknown field"},
		{"negative abs", "[verify]\nrule = \"tolerance\"\n[verify.tolerance]\nprice = { abs = -1e-3 }\n", "verify.tolerance.price.abs", "at least 0"},
		{"negative rel", "[verify]\nrule = \"tolerance\"\n[verify.tolerance]\nprice = { rel = -0.5 }\n", "verify.tolerance.price.rel", "at least 0"},
		{"nan", "[verify]\nrule = \"tolerance\"\n[verify.tolerance]\nprice = { abs = nan }\n", "verify.tolerance.price.abs", "finite"},
		{"infinite", "[verify]\nrule = \"tolerance\"\n[verify.tolerance]\nprice = { rel = inf }\n", "verify.tolerance.price.rel", "finite"},
		{"a string", "[verify]\nrule = \"tolerance\"\n[verify.tolerance]\nprice = { abs = \"0.1\" }\n", "verify.tolerance.price.abs", "finite number"},
		{"not a table", "[verify]\nrule = \"tolerance\"\n[verify.tolerance]\nprice = 0.1\n", "verify.tolerance.price", "{ abs = 1e-6"},
		{"a star", "[verify]\nrule = \"tolerance\"\n[verify.tolerance]\n\"prices.*\" = { abs = 1 }\n", "verify.tolerance.prices.*", "dotted path"},
		{"empty segment", "[verify]\nrule = \"tolerance\"\n[verify.tolerance]\n\"a..b\" = { abs = 1 }\n", "verify.tolerance.a..b", "dotted path"},
		{"no fields", "[verify]\nrule = \"tolerance\"\n", "verify.tolerance", "at least one field"},
		{"tolerances without the rule", "[verify]\n[verify.tolerance]\nprice = { abs = 1 }\n", "verify.tolerance", `rule = "tolerance"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := job.ParseManifest("v.toml", t.TempDir(), []byte(tolBase+tc.table))
			var me *job.ManifestError
			if !errors.As(err, &me) || me.Field != tc.field || !strings.Contains(me.Msg, tc.says) {
				t.Fatalf("error %v, want one naming %s that says %q", err, tc.field, tc.says)
			}
			if !errors.Is(err, job.ErrManifest) {
				t.Errorf("error %v is not ErrManifest", err)
			}
		})
	}
}

func TestToleranceWithin(t *testing.T) {
	inf, nan := math.Inf(1), math.NaN()
	for _, tc := range []struct {
		tol  job.Tolerance
		a, b float64
		want bool
	}{
		{job.Tolerance{Abs: 1e-3}, 1, 1.0009, true},
		{job.Tolerance{Abs: 1e-3}, 1, 1.0011, false},
		{job.Tolerance{Rel: 1e-3}, 1000, 1000.9, true},
		{job.Tolerance{Rel: 1e-3}, 1000, 1001.1, false},
		{job.Tolerance{Abs: 1e-3, Rel: 1e-3}, 1000, 1000.9, true}, // rel alone suffices
		{job.Tolerance{Abs: 1e-3, Rel: 1e-3}, 0, 0.0009, true},    // abs alone suffices
		{job.Tolerance{Abs: 1e-3, Rel: 1e-3}, 0, 0.002, false},
		{job.Tolerance{}, 0.1, 0.1, true},
		{job.Tolerance{}, 0.1, math.Nextafter(0.1, 1), false},
		{job.Tolerance{Abs: 1}, nan, nan, false},
		{job.Tolerance{Abs: 1}, 1, nan, false},
		{job.Tolerance{Abs: math.MaxFloat64}, inf, inf, false},
		{job.Tolerance{Rel: 1}, -math.MaxFloat64, math.MaxFloat64, false},
	} {
		if got := tc.tol.Within(tc.a, tc.b); got != tc.want {
			t.Errorf("%v.Within(%v, %v) = %v, want %v", tc.tol, tc.a, tc.b, got, tc.want)
		}
	}
}

func TestVerifyAgree(t *testing.T) {
	v := parseVerify(t, "[verify]\nrule = \"tolerance\"\n[verify.tolerance]\nprice = { abs = 1e-3 }\nstats = { rel = 1e-2 }\n\"stats.exact\" = { abs = 0 }\n")
	for _, tc := range []struct {
		name, a, b string
		want       bool
	}{
		{"within abs", `{"price": 1.0, "n": 5}`, `{"n":5,"price":1.0005}`, true},
		{"outside abs", `{"price": 1.0, "n": 5}`, `{"price": 1.002, "n": 5}`, false},
		{"undeclared number differs", `{"price": 1.0, "n": 5}`, `{"price": 1.0, "n": 6}`, false},
		{"undeclared number written otherwise", `{"price": 1.0, "n": 5}`, `{"price": 1.0, "n": 5.0}`, false},
		{"undeclared string differs", `{"price": 1.0, "s": "a"}`, `{"price": 1.0, "s": "b"}`, false},
		{"a member missing", `{"price": 1.0, "n": 5}`, `{"price": 1.0}`, false},
		{"a member added", `{"price": 1.0}`, `{"price": 1.0, "extra": null}`, false},
		{"nested under a declared field", `{"stats": {"mean": 100, "sd": [1, 2]}}`, `{"stats": {"mean": 100.5, "sd": [1.01, 2]}}`, true},
		{"nested outside", `{"stats": {"mean": 100, "sd": [1, 2]}}`, `{"stats": {"mean": 102, "sd": [1, 2]}}`, false},
		{"array lengths differ", `{"stats": {"sd": [1, 2]}}`, `{"stats": {"sd": [1, 2, 3]}}`, false},
		{"the longest path wins", `{"stats": {"exact": 1}}`, `{"stats": {"exact": 1.001}}`, false},
		{"a number against a string", `{"price": 1}`, `{"price": "1"}`, false},
		{"overflow is not finite", `{"price": 1e999}`, `{"price": 1e999}`, false},
		{"not JSON, equal bytes", `oops`, `oops`, true},
		{"not JSON, other bytes", `oops`, `oops!`, false},
		{"one not JSON", `{"price": 1}`, `oops`, false},
		{"whitespace and key order", "{\"a\": [1, {\"b\": true}], \"price\": 2}\n", `{"price":2,"a":[1,{"b":true}]}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := v.Agree([]byte(tc.a), []byte(tc.b)); got != tc.want {
				t.Errorf("Agree(%s, %s) = %v, want %v", tc.a, tc.b, got, tc.want)
			}
			if got := v.Agree([]byte(tc.b), []byte(tc.a)); got != tc.want {
				t.Errorf("Agree(%s, %s) = %v, want %v (not symmetric)", tc.b, tc.a, got, tc.want)
			}
		})
	}
	var digest job.Verify
	if digest.Agree([]byte(`{"price": 1.0}`), []byte(`{"price":1.0}`)) || !digest.Agree([]byte(`{"a":1}`), []byte(`{"a":1}`)) {
		t.Error("the digest rule is not byte equality")
	}
}

// TestToleranceProperties checks, over many random pairs, that Within is
// symmetric, that a zero tolerance is numeric equality, that a NaN or an
// infinity never agrees, and that Agree on results built from the same
// numbers gives the same verdict as Within.
func TestToleranceProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	num := func() float64 {
		switch rng.IntN(6) {
		case 0:
			return 0
		case 1:
			return rng.NormFloat64() * 1e-6
		case 2:
			return rng.NormFloat64() * 1e12
		default:
			return rng.NormFloat64()
		}
	}
	tol := func() job.Tolerance {
		pick := func() float64 {
			if rng.IntN(3) == 0 {
				return 0
			}
			return math.Pow(10, -float64(rng.IntN(12)))
		}
		return job.Tolerance{Abs: pick(), Rel: pick()}
	}
	for i := range 20000 {
		a := num()
		b := a
		switch rng.IntN(3) {
		case 0:
			b = num()
		case 1:
			b = a * (1 + rng.NormFloat64()*1e-4)
		}
		tl := tol()
		if tl.Within(a, b) != tl.Within(b, a) {
			t.Fatalf("pair %d: %v.Within not symmetric for %v, %v", i, tl, a, b)
		}
		if got := (job.Tolerance{}).Within(a, b); got != (a == b) {
			t.Fatalf("pair %d: zero tolerance Within(%v, %v) = %v, want %v", i, a, b, got, a == b)
		}
		for _, bad := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
			if tl.Within(a, bad) || tl.Within(bad, a) || tl.Within(bad, bad) {
				t.Fatalf("pair %d: %v agrees with %v", i, bad, a)
			}
		}
	}
	for i := range 500 {
		tl := tol()
		v := job.Verify{Rule: job.RuleTolerance, Tolerances: map[string]job.Tolerance{"x": tl}}
		a, b := num(), num()
		if rng.IntN(2) == 0 {
			b = a * (1 + rng.NormFloat64()*1e-6)
		}
		ra := []byte(`{"x": ` + strconv.FormatFloat(a, 'g', -1, 64) + `, "k": 1}`)
		rb := []byte(`{"k": 1, "x": ` + strconv.FormatFloat(b, 'g', -1, 64) + `}`)
		want := tl.Within(a, b)
		if got := v.Agree(ra, rb); got != want || v.Agree(rb, ra) != want {
			t.Fatalf("case %d: Agree(%s, %s) = %v, want %v", i, ra, rb, got, want)
		}
	}
}

// FuzzVerifyAgree feeds Agree pairs of results as peers could send them:
// it never panics and is symmetric.
func FuzzVerifyAgree(f *testing.F) {
	f.Add([]byte(`{"x": 1.0, "n": 5}`), []byte(`{"n": 5, "x": 1.0005}`))
	f.Add([]byte(`{"x": [1, 2, {"y": 3}]}`), []byte(`{"x": [1, 2, {"y": 3.0001}]}`))
	f.Add([]byte(`{"x": 1e999}`), []byte(`{"x": 1e999}`))
	f.Add([]byte(`not json`), []byte(`{"x": 1}`))
	f.Add([]byte(`{"s": {"x": "a"}}`), []byte(`{"s": {"x": "a"}}`))
	v := job.Verify{Rule: job.RuleTolerance, Tolerances: map[string]job.Tolerance{"x": {Abs: 1e-3}, "s.x": {Rel: 0.1}}}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		ab, ba := v.Agree(a, b), v.Agree(b, a)
		if ab != ba {
			t.Fatalf("Agree(%q, %q) = %v but the other way %v", a, b, ab, ba)
		}
	})
}

func TestUnmatchedTolerances(t *testing.T) {
	v := job.Verify{Rule: job.RuleTolerance, Tolerances: map[string]job.Tolerance{
		"price": {Abs: 1e-4}, "prize": {Abs: 1e-4}, "stats.mean": {Rel: 1e-6}, "rows.x": {Abs: 1}, "stats.none": {Abs: 1},
		"mean_step": {Abs: 1}, "stats.sd": {Abs: 1},
	}}
	got := v.UnmatchedTolerances([]byte(`{"price": 10.4, "stats": {"mean": 1.5, "sdev": 2}, "rows": [{"x": 1}, {"x": 2}], "mean_steps": 3}`))
	// prize is as close to price as mean_step to mean_steps, but price
	// has a tolerance of its own.
	want := []job.UnmatchedTolerance{{Field: "mean_step", Closest: "mean_steps"}, {Field: "prize"}, {Field: "stats.none"}, {Field: "stats.sd", Closest: "stats.sdev"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("UnmatchedTolerances (-want +got):\n%s", diff)
	}
	if got := v.UnmatchedTolerances([]byte(`[1, 2]`)); got != nil {
		t.Errorf("for a result that is not an object: %v, want nil", got)
	}
	if got := (job.Verify{}).UnmatchedTolerances([]byte(`{"a": 1}`)); got != nil {
		t.Errorf("under the digest rule: %v, want nil", got)
	}
}
