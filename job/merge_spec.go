package job

import (
	"encoding/json"
	"strconv"
	"strings"
)

// MergeSpec is one [[merge]] entry of a manifest: which field of every task's
// JSON result feeds which accumulator, and how the accumulator is set up.
//
// Field is a dotted path into the result object ("energy", "stats.mean").
// A segment "*" expands over the keys of an object: "columns.*" keeps one
// accumulator per column, named "NAME.KEY" in the merged result. An empty
// Field means the whole result (useful for collect). GroupBy, when set,
// lists dotted paths whose values (strings, numbers or booleans, formatted
// canonically) key a separate accumulator per distinct value, or per
// distinct tuple of values when it lists several, as in a sweep over
// temperature, or over alpha and beta.
type MergeSpec struct {
	// Name is the key of this entry in the merged result; defaults to Field.
	Name string `toml:"name" json:"name,omitempty" cbor:"name,omitempty"`
	// Rule is one of: sum, stats, histogram, quantiles, topk, argmin,
	// argmax, vector-mean, vector-sum, collect, concat.
	Rule string `toml:"rule" json:"rule" cbor:"rule"`
	// Field is the dotted path of the value in each task's result.
	Field string `toml:"field" json:"field,omitempty" cbor:"field,omitempty"`
	// GroupBy lists the dotted paths whose values key one accumulator per
	// distinct value (one path) or tuple of values (several, at most
	// MaxGroupKeys); empty for one accumulator.
	GroupBy GroupKeys `toml:"group_by" json:"group_by,omitempty" cbor:"group_by,omitempty"`

	// Min, Max and Bins define a histogram's fixed, equal-width bins over
	// [Min, Max); values outside fall into underflow and overflow counts.
	Min  *float64 `toml:"min" json:"min,omitempty" cbor:"min,omitempty"`
	Max  *float64 `toml:"max" json:"max,omitempty" cbor:"max,omitempty"`
	Bins int      `toml:"bins" json:"bins,omitempty" cbor:"bins,omitempty"`

	// RelativeAccuracy is the quantile sketch's relative accuracy (0..1,
	// default 0.01); Quantiles lists the quantiles to report (each 0..1,
	// default 0.5, 0.9, 0.99).
	RelativeAccuracy float64   `toml:"relative_accuracy" json:"relative_accuracy,omitempty" cbor:"relative_accuracy,omitempty"`
	Quantiles        []float64 `toml:"quantiles" json:"quantiles,omitempty" cbor:"quantiles,omitempty"`

	// K is how many entries topk keeps (default 10). Key is the dotted path
	// of the number that ranks results for topk, argmin and argmax; the kept
	// value is Field (or the whole result when Field is empty). Order is
	// "desc" (default for topk: largest first) or "asc".
	K     int    `toml:"k" json:"k,omitempty" cbor:"k,omitempty"`
	Key   string `toml:"key" json:"key,omitempty" cbor:"key,omitempty"`
	Order string `toml:"order" json:"order,omitempty" cbor:"order,omitempty"`

	// Fields, for collect, lists the dotted paths that make a row's columns;
	// empty means the whole result.
	Fields []string `toml:"fields" json:"fields,omitempty" cbor:"fields,omitempty"`
}

// MaxGroupKeys is the most paths one group_by may list.
const MaxGroupKeys = 8

// GroupKeys is a merge entry's group_by: the dotted paths whose values
// key its accumulators. A manifest writes one path as a string (group_by =
// "T") or any number as a list (group_by = ["alpha", "beta"]); a list of
// one is the same as the string. In JSON, and so in the job's encoding, one
// path is a string, as it was before lists existed (the IDs of jobs that
// group by one path do not change), and several are a list.
type GroupKeys []string

// UnmarshalText reads the string form (TOML group_by = "T"): one path, or
// none when empty.
func (g *GroupKeys) UnmarshalText(b []byte) error {
	*g = nil
	if len(b) > 0 {
		*g = GroupKeys{string(b)}
	}
	return nil
}

// MarshalJSON writes one path as a JSON string and several as a list.
func (g GroupKeys) MarshalJSON() ([]byte, error) {
	switch len(g) {
	case 0:
		return []byte("null"), nil
	case 1:
		return json.Marshal(g[0])
	}
	return json.Marshal([]string(g))
}

// UnmarshalJSON reads a string, a list of strings or null.
func (g *GroupKeys) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		return g.UnmarshalText([]byte(one))
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return err
	}
	*g = many
	return nil
}

// String writes g as a manifest does: "T", or ["alpha", "beta"].
func (g GroupKeys) String() string {
	if len(g) == 1 {
		return strconv.Quote(g[0])
	}
	q := make([]string, len(g))
	for i, k := range g {
		q[i] = strconv.Quote(k)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
