package job

// MergeSpec is one [[merge]] entry of a manifest: which field of every task's
// JSON result feeds which accumulator, and how the accumulator is set up.
//
// Field is a dotted path into the result object ("energy", "stats.mean").
// A segment "*" expands over the keys of an object: "columns.*" keeps one
// accumulator per column, named "NAME.KEY" in the merged result. An empty
// Field means the whole result (useful for collect). GroupBy, when set, is a
// dotted path whose value (a string or a number, formatted canonically) keys
// a separate accumulator per distinct value, as in a per-temperature sweep.
type MergeSpec struct {
	// Name is the key of this entry in the merged result; defaults to Field.
	Name string `toml:"name" json:"name,omitempty" cbor:"name,omitempty"`
	// Rule is one of: sum, stats, histogram, quantiles, topk, argmin,
	// argmax, vector-mean, collect, concat.
	Rule string `toml:"rule" json:"rule" cbor:"rule"`
	// Field is the dotted path of the value in each task's result.
	Field string `toml:"field" json:"field,omitempty" cbor:"field,omitempty"`
	// GroupBy is an optional dotted path that keys one accumulator per value.
	GroupBy string `toml:"group_by" json:"group_by,omitempty" cbor:"group_by,omitempty"`

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
