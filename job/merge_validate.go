package job

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Merge rule names, as written in a manifest's rule = "...".
const (
	RuleSum        = "sum"
	RuleStats      = "stats"
	RuleHistogram  = "histogram"
	RuleQuantiles  = "quantiles"
	RuleTopK       = "topk"
	RuleArgmin     = "argmin"
	RuleArgmax     = "argmax"
	RuleVectorMean = "vector-mean"
	RuleVectorSum  = "vector-sum"
	RuleCollect    = "collect"
	RuleConcat     = "concat"
)

var mergeRules = []string{
	RuleSum, RuleStats, RuleHistogram, RuleQuantiles, RuleTopK,
	RuleArgmin, RuleArgmax, RuleVectorMean, RuleVectorSum, RuleCollect, RuleConcat,
}

// Defaults and bounds of MergeSpec options.
const (
	DefaultRelativeAccuracy = 0.01
	DefaultTopK             = 10
	// MinRelativeAccuracy bounds a quantile sketch's size: at 1e-3 a sketch
	// whose values span the whole float64 range holds about 709,000 bins
	// (5.7 MB) per sign; typical data spans far less.
	MinRelativeAccuracy = 1e-3
	MaxTopK             = 10000
	MaxHistogramBins    = 1 << 20
	MaxQuantiles        = 64
)

// DefaultQuantiles are reported by a quantiles entry that lists none.
var DefaultQuantiles = []float64{0.5, 0.9, 0.99}

// mergeSpecError is a MergeSpec problem; errors.Is(err, ErrMergeSpec) holds.
// key is the entry's key the problem is about ("rule"), "" for the entry.
type mergeSpecError struct{ name, problem, key string }

func (e *mergeSpecError) Error() string   { return fmt.Sprintf("merge %q: %s", e.name, e.problem) }
func (e *mergeSpecError) Is(t error) bool { return t == ErrMergeSpec }

// entryName is the name a merge entry goes by: Name, else Field, else Rule
// (as the manifest fills it in).
func (s MergeSpec) entryName() string {
	switch {
	case s.Name != "":
		return s.Name
	case s.Field != "":
		return s.Field
	}
	return s.Rule
}

// Ordered reports whether the entry streams rows in task order to a sink
// (collect, concat) rather than folding into a fixed-size accumulator.
// Ordered entries cannot be merged across Mergers.
func (s MergeSpec) Ordered() bool { return s.Rule == RuleCollect || s.Rule == RuleConcat }

func numericRule(rule string) bool {
	switch rule {
	case RuleSum, RuleStats, RuleHistogram, RuleQuantiles, RuleVectorMean, RuleVectorSum:
		return true
	}
	return false
}

// Validate checks one merge entry: a known rule, well-formed paths, and
// only the options its rule uses, each in range. The error (errors.Is
// ErrMergeSpec) names the entry and what is expected, e.g.
// `merge "energy": histogram needs min < max and bins >= 1`.
func (s MergeSpec) Validate() error {
	failAt := func(key, format string, args ...any) error {
		return &mergeSpecError{name: s.entryName(), problem: fmt.Sprintf(format, args...), key: key}
	}
	if !slices.Contains(mergeRules, s.Rule) {
		if s.Rule == "" {
			return failAt("rule", "missing rule (want one of %s)", strings.Join(mergeRules, ", "))
		}
		return failAt("rule", "unknown rule %q (want one of %s)", s.Rule, strings.Join(mergeRules, ", "))
	}
	field, err := parseMergePath(s.Field)
	if err != nil {
		return failAt("field", "field: %v", err)
	}
	for _, p := range [...]struct{ what, path string }{{"key", s.Key}} {
		q, err := parseMergePath(p.path)
		if err != nil {
			return failAt(p.what, "%s: %v", p.what, err)
		}
		if q.star >= 0 {
			return failAt(p.what, "%s cannot contain \"*\"", p.what)
		}
	}
	if len(s.GroupBy) > MaxGroupKeys {
		return failAt("group_by", "group_by lists %d paths, at most %d", len(s.GroupBy), MaxGroupKeys)
	}
	for i, g := range s.GroupBy {
		q, err := parseMergePath(g)
		switch {
		case err != nil:
			return failAt("group_by", "group_by: %v", err)
		case g == "":
			return failAt("group_by", "group_by: an empty path; list the result fields to group by, e.g. group_by = [\"alpha\", \"beta\"]")
		case q.star >= 0:
			return failAt("group_by", "group_by cannot contain \"*\"")
		case slices.Contains(s.GroupBy[:i], g):
			return failAt("group_by", "group_by: %q is listed twice", g)
		}
	}
	if field.star >= 0 && !numericRule(s.Rule) {
		return failAt("field", "a \"*\" field works only with sum, stats, histogram, quantiles, vector-mean and vector-sum")
	}
	if numericRule(s.Rule) && s.Field == "" {
		return failAt("field", "%s needs field = \"...\", the path of the number in each result", s.Rule)
	}

	if s.Rule == RuleHistogram {
		if s.Min == nil || s.Max == nil || !(*s.Min < *s.Max) || s.Bins < 1 ||
			math.IsInf(*s.Max-*s.Min, 0) || math.IsInf(*s.Min, 0) || math.IsInf(*s.Max, 0) {
			return failAt("min", "histogram needs min < max and bins >= 1 (finite)")
		}
		if s.Bins > MaxHistogramBins {
			return failAt("bins", "histogram has %d bins, at most %d", s.Bins, MaxHistogramBins)
		}
	} else if s.Min != nil || s.Max != nil || s.Bins != 0 {
		return failAt(firstSet([]string{"min", "max", "bins"}, []bool{s.Min != nil, s.Max != nil, s.Bins != 0}),
			"min, max and bins apply only to rule = \"histogram\"")
	}

	if s.Rule == RuleQuantiles {
		if s.RelativeAccuracy != 0 && !(s.RelativeAccuracy >= MinRelativeAccuracy && s.RelativeAccuracy < 1) {
			return failAt("relative_accuracy", "relative_accuracy must be in [%g, 1), got %g", MinRelativeAccuracy, s.RelativeAccuracy)
		}
		if len(s.Quantiles) > MaxQuantiles {
			return failAt("quantiles", "%d quantiles, at most %d", len(s.Quantiles), MaxQuantiles)
		}
		for i, q := range s.Quantiles {
			if !(q >= 0 && q <= 1) {
				return failAt("quantiles", "quantile %g is not in [0, 1]", q)
			}
			if slices.Contains(s.Quantiles[:i], q) {
				return failAt("quantiles", "quantile %g is listed twice", q)
			}
		}
	} else if s.RelativeAccuracy != 0 || len(s.Quantiles) > 0 {
		return failAt(firstSet([]string{"relative_accuracy", "quantiles"}, []bool{s.RelativeAccuracy != 0, len(s.Quantiles) > 0}),
			"relative_accuracy and quantiles apply only to rule = \"quantiles\"")
	}

	switch s.Rule {
	case RuleTopK:
		if s.K < 0 || s.K > MaxTopK {
			return failAt("k", "k must be in 1..%d, got %d", MaxTopK, s.K)
		}
		if s.Order != "" && s.Order != "asc" && s.Order != "desc" {
			return failAt("order", "order must be \"asc\" or \"desc\", got %q", s.Order)
		}
	case RuleArgmin, RuleArgmax:
		if s.K > 1 || s.K < 0 {
			return failAt("k", "%s keeps one result; use rule = \"topk\" for k = %d", s.Rule, s.K)
		}
		if s.Order != "" {
			return failAt("order", "%s has a fixed order; leave order unset", s.Rule)
		}
	default:
		if s.K != 0 || s.Key != "" || s.Order != "" {
			return failAt(firstSet([]string{"k", "key", "order"}, []bool{s.K != 0, s.Key != "", s.Order != ""}),
				"k, key and order apply only to topk, argmin and argmax")
		}
	}
	if (s.Rule == RuleTopK || s.Rule == RuleArgmin || s.Rule == RuleArgmax) && s.Key == "" {
		return failAt("key", "%s needs key = \"...\", the path of the number that ranks results", s.Rule)
	}

	if s.Rule == RuleCollect {
		if s.Field != "" && len(s.Fields) > 0 {
			return failAt("fields", "collect takes field or fields, not both")
		}
		for i, f := range s.Fields {
			p, err := parseMergePath(f)
			if err != nil {
				return failAt("fields", "fields: %v", err)
			}
			if p.segs == nil || p.star >= 0 {
				return failAt("fields", "fields: %q is not a plain path", f)
			}
			if f == "task" {
				return failAt("fields", "fields: \"task\" is the row's task index; rename the column")
			}
			if slices.Contains(s.Fields[:i], f) {
				return failAt("fields", "fields: %q is listed twice", f)
			}
		}
	} else if len(s.Fields) > 0 {
		return failAt("fields", "fields apply only to rule = \"collect\"")
	}
	if s.Rule == RuleCollect && s.Field == "task" {
		return failAt("field", "field \"task\" clashes with the row's task index")
	}
	if s.Rule == RuleConcat && s.Field == "" {
		return failAt("field", "concat needs field = \"...\", the path of the text in each result")
	}
	if s.Ordered() && len(s.GroupBy) > 0 {
		return failAt("group_by", "%s writes one stream in task order; group_by does not apply", s.Rule)
	}
	return nil
}

// firstSet returns the first of keys whose set is true, "" if none is.
func firstSet(keys []string, set []bool) string {
	for i, k := range keys {
		if set[i] {
			return k
		}
	}
	return ""
}

// withDefaults returns the spec with Name and the rule's defaults filled in.
func (s MergeSpec) withDefaults() MergeSpec {
	s.Name = s.entryName()
	switch s.Rule {
	case RuleQuantiles:
		if s.RelativeAccuracy == 0 {
			s.RelativeAccuracy = DefaultRelativeAccuracy
		}
		if len(s.Quantiles) == 0 {
			s.Quantiles = slices.Clone(DefaultQuantiles)
		}
	case RuleTopK:
		if s.K == 0 {
			s.K = DefaultTopK
		}
		if s.Order == "" {
			s.Order = "desc"
		}
	case RuleArgmin:
		s.K, s.Order = 1, "asc"
	case RuleArgmax:
		s.K, s.Order = 1, "desc"
	}
	return s
}
