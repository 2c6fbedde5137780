package job

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/DataDog/sketches-go/ddsketch"
	"github.com/DataDog/sketches-go/ddsketch/store"
)

// quantAcc is the quantiles rule: a DDSketch (Masson, Rim and Lee,
// "DDSketch: a fast and fully-mergeable quantile sketch with
// relative-error guarantees", VLDB 2019) plus the exact count, minimum and
// maximum. Every reported quantile is within the relative accuracy of a
// value of that rank, clamped to [min, max]; quantile 0 is the exact
// minimum and quantile 1 the exact maximum.
//
// Why the library: DDSketch's logarithmic bins make the sketch a pure
// function of the multiset of values, so merging is exact and
// order-independent by construction, and DataDog's implementation is the
// reference one, maintained and fuzzed; writing another would only add
// risk. We use its unbounded dense store (LogUnboundedDenseDDSketch): the
// collapsing stores fold the lowest or highest bins together once full,
// and which bins fold depends on arrival order.
//
// Order-independence, and its one bound: the library keeps bin counts as
// float64. Every count we add is 1 and every merge adds whole counts, so
// counts stay exact integers, and the sketch's state, quantiles and our
// encoding are the same bits in any order, as long as the sketch holds at
// most 2^53 (about 9·10^15) values. The encoding rejects larger counts.
//
// Memory grows with the range of the values, not their number: about
// ln(max/min)/ln((1+α)/(1−α)) bins of 8 bytes per sign for relative
// accuracy α, e.g. 3,500 bins (28 KB) for values over 1e-15..1e15 at
// α = 0.01, and at most 71,000 bins (570 KB) per sign at that accuracy.
type quantAcc struct {
	quantiles []float64
	sketch    *ddsketch.DDSketch
	count     int64
	min, max  float64
}

func newQuantAcc(s MergeSpec) *quantAcc {
	sk, err := ddsketch.LogUnboundedDenseDDSketch(s.RelativeAccuracy)
	if err != nil {
		// Validate keeps the accuracy in [MinRelativeAccuracy, 1), which
		// the mapping accepts.
		panic(fmt.Sprintf("job: quantile sketch for a validated spec: %v", err))
	}
	return &quantAcc{quantiles: s.Quantiles, sketch: sk}
}

func (a *quantAcc) check(in *accInput, _ int64) *ResultError {
	limit := a.sketch.MaxIndexableValue()
	for _, f := range in.floats {
		if math.Abs(f) > limit {
			return resultFieldError(in.at, "value %g is beyond the quantile sketch's range (±%g)", f, limit)
		}
	}
	return nil
}

func (a *quantAcc) add(in *accInput, _ int64) {
	for _, f := range in.floats {
		if a.count == 0 {
			a.min, a.max = f, f
		}
		a.min = min(a.min, f)
		a.max = max(a.max, f)
		a.count++
		_ = a.sketch.Add(f) // check rejected what Add would
	}
}

func (a *quantAcc) mergeCheck(o accumulator) error {
	if !a.sketch.IndexMapping.Equals(o.(*quantAcc).sketch.IndexMapping) {
		return fmt.Errorf("quantile sketches with different accuracies: %w", ErrMergeMismatch)
	}
	return nil
}

func (a *quantAcc) merge(o accumulator) {
	b := o.(*quantAcc)
	if b.count == 0 {
		return
	}
	if a.count == 0 {
		a.min, a.max = b.min, b.max
	}
	a.min = min(a.min, b.min)
	a.max = max(a.max, b.max)
	a.count += b.count
	_ = a.sketch.MergeWith(b.sketch) // mergeCheck compared the mappings
}

// quantile returns the value at quantile q of a non-empty sketch.
func (a *quantAcc) quantile(q float64) float64 {
	switch q {
	case 0:
		return a.min
	case 1:
		return a.max
	}
	v, err := a.sketch.GetValueAtQuantile(q)
	if err != nil {
		return math.NaN()
	}
	return min(max(v, a.min), a.max)
}

// quantileName names quantile q as a percentile: 0.5 is "p50", 0.999 is
// "p99_9", 1 is "p100" ('_' for the decimal point keeps it one name in
// derived expressions).
func quantileName(q float64) string {
	s := strconv.FormatFloat(q, 'f', -1, 64)
	whole, frac, _ := strings.Cut(s, ".")
	frac += "00"
	digits := strings.TrimLeft(whole+frac[:2], "0")
	if digits == "" {
		digits = "0"
	}
	if rest := strings.TrimRight(frac[2:], "0"); rest != "" {
		return "p" + digits + "_" + rest
	}
	return "p" + digits
}

func (a *quantAcc) result() any {
	obj := ResultObject{{"count", a.count}, {"min", nil}, {"max", nil}}
	if a.count > 0 {
		obj[1].Value, obj[2].Value = a.min, a.max
	}
	for _, q := range a.quantiles {
		var v any
		if a.count > 0 {
			v = resultFloat(a.quantile(q))
		}
		obj = append(obj, KV{quantileName(q), v})
	}
	return obj
}

func (a *quantAcc) scalars(prefix string, out map[string]float64) {
	out[prefix+".count"] = float64(a.count)
	if a.count == 0 {
		return
	}
	out[prefix+".min"] = a.min
	out[prefix+".max"] = a.max
	for _, q := range a.quantiles {
		out[prefix+"."+quantileName(q)] = a.quantile(q)
	}
}

func (a *quantAcc) appendState(b []byte) []byte {
	b = appendStateCount(b, a.count)
	b = appendStateFloat(b, a.min)
	b = appendStateFloat(b, a.max)
	b = appendStateCount(b, int64(a.sketch.GetZeroCount()))
	b = appendStore(b, a.sketch.GetPositiveValueStore())
	return appendStore(b, a.sketch.GetNegativeValueStore())
}

// appendStore writes the non-empty bins in index order: their number, then
// per bin the index (as a delta from the previous one) and the count.
func appendStore(b []byte, s store.Store) []byte {
	n := 0
	s.ForEach(func(int, float64) bool { n++; return false })
	b = appendStateCount(b, int64(n))
	prev := 0
	s.ForEach(func(i int, c float64) bool {
		b = binary.AppendVarint(b, int64(i-prev))
		b = appendStateCount(b, int64(c))
		prev = i
		return false
	})
	return b
}

func (a *quantAcc) decodeState(r *stateReader) {
	a.count = r.count()
	a.min = r.float()
	a.max = r.float()
	zero := r.uvarint()
	if zero > maxSketchCount {
		r.fail("sketch count beyond 2^53")
	}
	if r.err != nil {
		return
	}
	if zero > 0 {
		_ = a.sketch.AddWithCount(0, float64(zero))
	}
	lo := a.sketch.Index(a.sketch.MinIndexableValue())
	hi := a.sketch.Index(a.sketch.MaxIndexableValue())
	total := zero
	total += r.sketchStore(a.sketch.GetPositiveValueStore(), lo, hi)
	total += r.sketchStore(a.sketch.GetNegativeValueStore(), lo, hi)
	switch {
	case r.err != nil:
	case total != uint64(a.count):
		r.fail("sketch counts do not add up")
	case a.count == 0 && (math.Float64bits(a.min) != 0 || math.Float64bits(a.max) != 0):
		r.fail("empty sketch with values")
	case a.min > a.max:
		r.fail("sketch with min > max")
	}
}

// maxSketchCount is the largest count a float64 bin holds exactly.
const maxSketchCount = 1 << 53

// sketchStore reads what appendStore wrote into the empty s, with indices
// in [lo, hi]; it returns the total count.
func (r *stateReader) sketchStore(s store.Store, lo, hi int) uint64 {
	n := r.uvarint()
	if n > uint64(hi-lo+1) {
		r.fail("too many sketch bins")
	}
	var total uint64
	prev := int64(0)
	for i := uint64(0); i < n && r.err == nil; i++ {
		d := r.varint()
		idx := prev + d
		c := r.uvarint()
		switch {
		case r.err != nil:
			return 0
		case i > 0 && d <= 0:
			r.fail("sketch bins out of order")
		case idx < int64(lo) || idx > int64(hi):
			r.fail("sketch bin %d out of range", idx)
		case c == 0 || c > maxSketchCount:
			r.fail("bad sketch bin count")
		default:
			s.AddWithCount(int(idx), float64(c))
			total += c
			if total > maxSketchCount {
				r.fail("sketch count beyond 2^53")
			}
		}
		prev = idx
	}
	return total
}
