package job

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Verification rules of [verify] rule.
const (
	// RuleDigest accepts replicas that returned the same bytes (the
	// default; the manifest may also leave rule out).
	RuleDigest = "digest"
	// RuleTolerance accepts replicas whose declared fields are within
	// their tolerances and whose other fields are the same (see
	// Verify.Agree).
	RuleTolerance = "tolerance"
)

// Tolerance is one field's entry of [verify.tolerance]: two values a and
// b agree when |a−b| <= Abs or |a−b| <= Rel·max(|a|, |b|). Both are
// finite and >= 0; a missing one is 0, which adds nothing to the other.
type Tolerance struct {
	Abs float64
	Rel float64
}

// Within reports whether a and b agree under t. It is symmetric in a and
// b; with Abs = Rel = 0 it is numeric equality; a NaN or an infinity never
// agrees with anything, itself included.
func (t Tolerance) Within(a, b float64) bool {
	if math.IsNaN(a) || math.IsNaN(b) || math.IsInf(a, 0) || math.IsInf(b, 0) {
		return false
	}
	d := math.Abs(a - b)
	if math.IsInf(d, 0) { // both finite, but the difference overflows
		return false
	}
	return d <= t.Abs || d <= t.Rel*max(math.Abs(a), math.Abs(b))
}

// Agree reports whether two task results agree under the [verify] rule.
// Under RuleDigest (or no rule) they agree when their bytes are equal.
// Under RuleTolerance both must be one JSON object each (otherwise they
// agree only when byte-equal), and they agree when their JSON trees have
// the same shape (the same members and array lengths), every number
// under a declared field is within that field's Tolerance of its
// counterpart (Tolerance.Within), and every other value is the same:
// the same number literal, string, boolean or null. A declared field
// covers its whole value: every number in a nested object or array under
// it; where declared fields nest, the longest path applies. Agree is
// symmetric, and reflexive except for results with non-finite numbers
// under a declared field.
func (v Verify) Agree(a, b []byte) bool {
	if !v.tolerant() {
		return bytes.Equal(a, b)
	}
	x, errA := decodeResult(a)
	y, errB := decodeResult(b)
	if errA != nil || errB != nil {
		return errA != nil && errB != nil && bytes.Equal(a, b)
	}
	return v.agreeValue("", x, y)
}

// UnmatchedTolerance is a field of [verify.tolerance] that names no member
// of a task's result.
type UnmatchedTolerance struct {
	// Field is the field as [verify.tolerance] names it.
	Field string
	// Closest is the result's member, as a dotted path, that Field most
	// likely meant: at most two edits away and named by no other field of
	// [verify.tolerance]; "" when there is none.
	Closest string
}

// UnmatchedTolerances returns, sorted by field, the fields of
// [verify.tolerance] that name no member of result, one task's JSON
// object: most likely a misspelt field, whose numbers are then compared
// exactly. A field names a member when the result has a value at that
// dotted path (members of objects inside arrays count under the array's
// path, as Agree reads them). Nil when the rule is not "tolerance" or
// result is not a JSON object.
func (v Verify) UnmatchedTolerances(result []byte) []UnmatchedTolerance {
	if !v.tolerant() {
		return nil
	}
	x, err := decodeResult(result)
	if err != nil {
		return nil
	}
	paths := map[string]bool{}
	var walk func(path string, a any)
	walk = func(path string, a any) {
		paths[path] = true
		switch x := a.(type) {
		case map[string]any:
			for k, v := range x {
				walk(joinMergePath(path, k), v)
			}
		case []any:
			for _, v := range x {
				walk(path, v)
			}
		}
	}
	walk("", x)
	var free []string // members no tolerance names
	for p := range paths {
		if _, ok := v.Tolerances[p]; !ok && p != "" {
			free = append(free, p)
		}
	}
	slices.Sort(free)
	var out []UnmatchedTolerance
	for p := range v.Tolerances {
		if !paths[p] {
			out = append(out, UnmatchedTolerance{Field: p, Closest: closest(p, free)})
		}
	}
	slices.SortFunc(out, func(a, b UnmatchedTolerance) int { return strings.Compare(a.Field, b.Field) })
	return out
}

func (v Verify) tolerant() bool { return v.Rule == RuleTolerance && len(v.Tolerances) > 0 }

// toleranceAt returns the tolerance of the longest declared path that is
// path or a prefix of it.
func (v Verify) toleranceAt(path string) (Tolerance, bool) {
	for p := path; ; {
		if t, ok := v.Tolerances[p]; ok {
			return t, true
		}
		i := strings.LastIndexByte(p, '.')
		if i < 0 {
			return Tolerance{}, false
		}
		p = p[:i]
	}
}

func (v Verify) agreeValue(path string, a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, xv := range x {
			yv, ok := y[k]
			if !ok || !v.agreeValue(joinMergePath(path, k), xv, yv) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !v.agreeValue(path, x[i], y[i]) {
				return false
			}
		}
		return true
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		t, declared := v.toleranceAt(path)
		if !declared {
			return x == y
		}
		fx, errX := strconv.ParseFloat(string(x), 64)
		fy, errY := strconv.ParseFloat(string(y), 64)
		return errX == nil && errY == nil && t.Within(fx, fy)
	default: // string, bool, nil
		return a == b
	}
}

// parseTolerances reads the [verify.tolerance] table as written: each key
// is a dotted field path whose value is a table of abs and/or rel; TOML
// dotted keys (stats.mean = {...}) nest tables, so a table that is not such
// an entry is read as a prefix of longer paths.
func (m *Manifest) parseTolerances(raw map[string]any) (map[string]Tolerance, error) {
	out := map[string]Tolerance{}
	var walk func(prefix string, t map[string]any) error
	walk = func(prefix string, t map[string]any) error {
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			path := joinMergePath(prefix, k)
			field := "verify.tolerance." + path
			if _, err := parseMergePath(path); err != nil || strings.Contains(path, "*") {
				return m.fail(field, "want a dotted path of member names such as \"price\" or \"stats.mean\", got %q", path)
			}
			entry, ok := t[k].(map[string]any)
			if !ok {
				return m.fail(field, "want a table of tolerances such as { abs = 1e-6, rel = 1e-9 }, got %v", t[k])
			}
			if !toleranceEntry(entry) {
				if err := walk(path, entry); err != nil {
					return err
				}
				continue
			}
			var tol Tolerance
			names := make([]string, 0, len(entry))
			for name := range entry {
				names = append(names, name)
			}
			slices.Sort(names)
			for _, name := range names {
				val := entry[name]
				if name != "abs" && name != "rel" {
					return m.fail(field+"."+name, "unknown field: an entry has abs (an absolute tolerance) and rel (a relative one), such as { abs = 1e-6, rel = 1e-9 }")
				}
				f, ok := tomlNumber(val)
				if !ok || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
					return m.fail(field+"."+name, "want a finite number at least 0, got %v", val)
				}
				if name == "abs" {
					tol.Abs = f
				} else {
					tol.Rel = f
				}
			}
			if _, dup := out[path]; dup {
				return m.fail(field, "declared twice")
			}
			out[path] = tol
		}
		return nil
	}
	if err := walk("", raw); err != nil {
		return nil, err
	}
	return out, nil
}

// toleranceEntry reports whether t is one field's entry: it has abs or rel
// and every key is one of them. A table with other keys beside abs or rel
// is an entry too, so that its unknown key is reported.
func toleranceEntry(t map[string]any) bool {
	has := false
	for k, v := range t {
		if k == "abs" || k == "rel" {
			_, isTable := v.(map[string]any)
			has = has || !isTable
		}
	}
	return has
}

func tomlNumber(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case int64:
		return float64(n), true
	}
	return 0, false
}

// String writes t as the manifest does.
func (t Tolerance) String() string {
	return fmt.Sprintf("{ abs = %g, rel = %g }", t.Abs, t.Rel)
}
