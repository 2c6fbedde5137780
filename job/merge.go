package job

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"slices"
)

// SinkOpener returns the writer that an ordered entry (collect, concat)
// streams its rows into; name is the entry's Name. The Merger writes each
// row with one Write call, in task order, and never closes the writer: its
// owner does, after Merger.Close.
type SinkOpener func(name string) (io.Writer, error)

// Merger folds the task results of one job into the accumulators its merge
// entries (MergeSpec) describe. Every rule except the ordered sinks keeps a
// fixed-size state whatever the number of tasks, and every rule is exact
// and order-independent: adding the same results in any order, or adding
// them to several Mergers that are then merged in any grouping, gives the
// same bytes from json.Marshal(Result()) and from MarshalBinary.
//
// The rules (MergeSpec.Rule):
//
//   - sum: a number, or an array of numbers (each added), and their count.
//     Integers (written without '.', 'e' or 'E', up to 1000 digits) are
//     summed exactly as integers; other numbers are converted to the
//     nearest float64 and summed exactly by a superaccumulator (Radford
//     Neal, "Fast exact summation using small and large
//     superaccumulators", arXiv:1505.05571, 2015). The total is an integer
//     when every value was one, else the exact total rounded once to the
//     nearest float64, ties to even.
//   - stats: count, sum, mean, population and sample variance and standard
//     deviation, min and max of float64 values, each rounded once from the
//     exact sums of the values and of their squares.
//   - histogram: integer counts in equal-width bins over [min, max), with
//     underflow and overflow.
//   - quantiles: a DDSketch (Masson, Rim and Lee, VLDB 2019) of relative
//     accuracy α, with the exact count, min and max.
//   - topk, argmin, argmax: the best K results by the number at Key, with
//     task index and kept value; ties go to the lower task index.
//   - vector-mean: the element-wise mean of arrays of one length, each
//     element summed exactly and divided with one rounding.
//   - vector-sum: the element-wise exact sum of arrays of one length of
//     integers that fit 64 bits (fixed-point numbers, e.g. a shard's
//     gradient), in 128-bit accumulators; the sums are exact integers.
//   - collect, concat: rows streamed to a sink in task order (SinkOpener,
//     Skip, Close); not fixed-size, not mergeable.
//
// With group_by an entry keeps one accumulator per distinct group value,
// or per distinct tuple of values when group_by lists several paths; with
// a "*" segment in its field, one per key of the object there; at most
// MaxMergeKeys in all. Numbers
// beyond the float64 range are rejected (JSON has no NaN or infinities).
//
// A Merger is not safe for concurrent use; its owner serialises calls.
//
// Each task index must be added at most once; only the ordered sinks can
// tell (ErrDuplicateTask), the fixed-size accumulators would count the
// result twice. Results must be verified before they are added (invariant
// 6 of DESIGN.md): nothing can be taken back out.
type Merger struct {
	specs   []MergeSpec // with defaults filled in
	entries []*mergeEntry
	sinks   []*mergeEntry // the ordered entries, in manifest order
	digest  [32]byte      // names the specs, for Merge and UnmarshalBinary
	closed  bool
	sinkErr error // sticky: the first failed write to a sink

	// entryFailures are the first results that one ordered entry alone
	// could not take (see EntryFailure), at most maxEntryFailures.
	entryFailures []EntryFailure
}

// EntryFailure is a task result that one ordered merge entry (collect)
// could not take although the others did: a whole-result collect row whose
// result has its own "task" member, which would clash with the row's task
// index. The entry writes no row for that task (its result counts it as
// "refused"); every other entry folds the result, and the task is not a
// failure.
type EntryFailure struct {
	Entry   string `json:"entry"`   // the merge entry's name
	Task    int64  `json:"task"`    // the task index
	Problem string `json:"problem"` // what is wrong, as ResultError says it
}

// maxEntryFailures bounds how many EntryFailures a Merger keeps; the
// entry's result counts them all.
const maxEntryFailures = 10

// accumulator is the fixed-size state of one merge entry for one group and
// "*" key. Implementations: sumAcc, statsAcc, histAcc, quantAcc, topAcc,
// vecAcc, vecSumAcc.
type accumulator interface {
	// check reports whether in can be added for task index, without
	// changing the accumulator. It may fill in.raw.
	check(in *accInput, index int64) *ResultError
	// add folds in; it cannot fail once check passed.
	add(in *accInput, index int64)
	// mergeCheck reports whether o, built from the same spec, can be
	// merged in.
	mergeCheck(o accumulator) error
	// merge folds o in; o is not changed and not aliased.
	merge(o accumulator)
	// result is the JSON-able merged value.
	result() any
	// scalars adds the accumulator's numbers to out, named prefix.NAME.
	scalars(prefix string, out map[string]float64)
	// appendState appends a canonical encoding: equal states, equal bytes.
	appendState(b []byte) []byte
	// decodeState reads what appendState wrote into a new accumulator.
	decodeState(r *stateReader)
}

// accInput is one value of one result, parsed and ready to fold.
type accInput struct {
	at      string     // the value's path, for messages
	array   bool       // the value was an array
	floats  []float64  // numbers as float64 (sum: the non-integers only)
	ints    []int64    // sum: integers that fit int64
	bigs    []*big.Int // sum: larger integers
	key     float64    // topk, argmin, argmax: the ranking number
	keyText string     //   ... as written
	value   any        //   ... and the value to keep
	raw     []byte     //   ... canonical, set by check when kept
}

func (in *accInput) reset(at string) {
	*in = accInput{at: at, floats: in.floats[:0], ints: in.ints[:0], bigs: in.bigs[:0]}
}

func (in *accInput) count() int64 { return int64(len(in.floats) + len(in.ints) + len(in.bigs)) }

// accKey names one accumulator of an entry: the group_by value and the key
// matched by "*" ("" when the entry has none). With several group_by
// paths, group is their values joined by joinGroupKey.
type accKey struct{ group, star string }

type accPrep struct {
	key   accKey
	acc   accumulator
	fresh bool // acc is new and joins the entry in apply
	in    accInput
}

type mergeEntry struct {
	spec   MergeSpec
	field  mergePath
	groups []mergePath // group_by
	key    mergePath
	fields []mergePath
	accs   map[accKey]accumulator
	sink   *orderedSink

	// Scratch of Add, between prepare and apply.
	prep    []accPrep
	row     []byte
	refused *ResultError // the result cannot make this entry's row
}

// NewMerger returns a Merger for specs, which it validates (errors.Is
// ErrMergeSpec; names must be distinct). sinks opens the writer of every
// ordered entry (collect, concat); it may be nil when there are none. The
// specs are all checked before any sink is opened; an error from sinks is
// returned wrapped.
func NewMerger(specs []MergeSpec, sinks SinkOpener) (*Merger, error) {
	m := &Merger{}
	seen := map[string]bool{}
	for _, s := range specs {
		if err := s.Validate(); err != nil {
			return nil, err
		}
		s = s.withDefaults()
		if seen[s.Name] {
			return nil, &mergeSpecError{name: s.Name, problem: "two merge entries have this name"}
		}
		seen[s.Name] = true
		if s.Ordered() && sinks == nil {
			return nil, &mergeSpecError{name: s.Name, problem: s.Rule + " writes rows to a sink, and no sink opener was given"}
		}
		m.specs = append(m.specs, s)
		m.entries = append(m.entries, newMergeEntry(s))
	}
	enc, err := json.Marshal(m.specs)
	if err != nil {
		return nil, fmt.Errorf("merge: encode specs: %w", err)
	}
	m.digest = sha256.Sum256(enc)
	for _, e := range m.entries {
		if !e.spec.Ordered() {
			continue
		}
		w, err := sinks(e.spec.Name)
		if err != nil {
			return nil, fmt.Errorf("merge %q: open sink: %w", e.spec.Name, err)
		}
		e.sink = &orderedSink{w: w, held: map[int64]heldRow{}}
		m.sinks = append(m.sinks, e)
	}
	return m, nil
}

// newMergeEntry builds the entry of a validated spec with defaults.
func newMergeEntry(s MergeSpec) *mergeEntry {
	e := &mergeEntry{spec: s, accs: map[accKey]accumulator{}}
	// The paths were checked by Validate.
	e.field, _ = parseMergePath(s.Field)
	for _, g := range s.GroupBy {
		p, _ := parseMergePath(g)
		e.groups = append(e.groups, p)
	}
	e.key, _ = parseMergePath(s.Key)
	for _, f := range s.Fields {
		p, _ := parseMergePath(f)
		e.fields = append(e.fields, p)
	}
	return e
}

// newAcc returns an empty accumulator of the entry's rule.
func (e *mergeEntry) newAcc() accumulator {
	switch e.spec.Rule {
	case RuleSum:
		return &sumAcc{}
	case RuleStats:
		return &statsAcc{}
	case RuleHistogram:
		return newHistAcc(e.spec)
	case RuleQuantiles:
		return newQuantAcc(e.spec)
	case RuleVectorMean:
		return &vecAcc{}
	case RuleVectorSum:
		return &vecSumAcc{}
	default: // topk, argmin, argmax
		return newTopAcc(e.spec)
	}
}

func (e *mergeEntry) grouped() bool { return len(e.groups) > 0 }
func (e *mergeEntry) starred() bool { return e.field.star >= 0 }

// Add folds the result of task index: result is the program's stdout, one
// JSON object (surrounding white space allowed). Numbers are decoded
// exactly (json.Decoder.UseNumber) and converted per rule.
//
// Everything in the result is checked for every entry before anything
// changes, so an error leaves the Merger as it was. A result that does not
// fit an entry gives a *ResultError (errors.Is ErrBadResult), e.g.
// `merge "energy": field energy: want a number, got string`: a task
// failure, not a merge failure. The one exception is a result that only
// an ordered entry cannot take (see EntryFailure): the others fold it,
// that entry writes no row for it, and Add returns nil. Other errors: ErrTaskIndex for a negative
// index, ErrDuplicateTask for an index an ordered sink already has,
// ErrMergerClosed after Close.
//
// If writing to a sink fails, the result has been folded in, Add returns
// the write error (errors.Is ErrSinkWrite), and every later Add and Close
// returns it again.
func (m *Merger) Add(index int64, result []byte) error {
	switch {
	case m.closed:
		return ErrMergerClosed
	case m.sinkErr != nil:
		return m.sinkErr
	case index < 0:
		return fmt.Errorf("merge: task %d: %w", index, ErrTaskIndex)
	}
	obj, rerr := decodeResult(result)
	if rerr != nil {
		return rerr
	}
	for _, e := range m.entries {
		if err := e.prepare(obj, index); err != nil {
			for _, e := range m.entries {
				e.clearPrep()
			}
			return err
		}
	}
	for _, e := range m.entries {
		if e.refused != nil && len(m.entryFailures) < maxEntryFailures {
			m.entryFailures = append(m.entryFailures, EntryFailure{Entry: e.spec.Name, Task: index, Problem: e.refused.Error()})
		}
		e.apply(index)
	}
	m.drain()
	return m.sinkErr
}

// EntryFailures returns the first results (in the order added, at most
// 10) that an ordered entry alone could not take; see EntryFailure. The
// entries' results count all of them. The caller must not modify the
// slice.
func (m *Merger) EntryFailures() []EntryFailure { return m.entryFailures }

// prepare parses and checks the entry's part of a result.
func (e *mergeEntry) prepare(obj map[string]any, index int64) error {
	e.prep = e.prep[:0]
	if rerr := e.prepareValues(obj, index); rerr != nil {
		rerr.Entry = e.spec.Name
		if !rerr.entryOnly || e.sink == nil {
			return rerr
		}
		e.refused = rerr
	}
	if e.sink != nil {
		if e.sink.has(index) {
			return fmt.Errorf("merge %q: task %d: %w", e.spec.Name, index, ErrDuplicateTask)
		}
		return nil
	}
	fresh := 0
	for i := range e.prep {
		p := &e.prep[i]
		p.acc, p.fresh = e.accs[p.key], false
		if p.acc == nil {
			p.acc, p.fresh = e.newAcc(), true
			fresh++
		}
		if rerr := p.acc.check(&p.in, index); rerr != nil {
			rerr.Entry = e.spec.Name
			return rerr
		}
	}
	if fresh > 0 && len(e.accs)+fresh > MaxMergeKeys {
		return &ResultError{Entry: e.spec.Name, Problem: fmt.Sprintf(
			"more than %d distinct groups and keys; group by fewer values", MaxMergeKeys)}
	}
	return nil
}

func (e *mergeEntry) prepareValues(obj map[string]any, index int64) *ResultError {
	group := ""
	if e.grouped() {
		texts := make([]string, len(e.groups))
		for i, g := range e.groups {
			v, rerr := g.lookup(obj)
			if rerr != nil {
				// A grid axis's name is a likely mistake here: it is
				// in the task's params, not in its result.
				rerr.Problem += "; group_by reads each task's result, not its params: have the program write " + g.text + " into its result"
				return rerr
			}
			if texts[i], rerr = groupKeyText(v, g.text); rerr != nil {
				return rerr
			}
		}
		group = joinGroupKey(texts)
	}
	switch e.spec.Rule {
	case RuleCollect, RuleConcat:
		return e.prepareRow(obj, index)
	case RuleTopK, RuleArgmin, RuleArgmax:
		p := e.nextPrep(accKey{group: group}, e.key.text)
		kv, rerr := e.key.lookup(obj)
		if rerr != nil {
			return rerr
		}
		kn, ok := kv.(json.Number)
		if !ok {
			return resultFieldError(e.key.text, "want a number, got %s", resultKind(kv))
		}
		if p.in.key, rerr = parseResultFloat(kn, e.key.text); rerr != nil {
			return rerr
		}
		p.in.keyText = string(kn)
		p.in.value = obj
		if e.field.segs != nil {
			if p.in.value, rerr = e.field.lookup(obj); rerr != nil {
				return rerr
			}
		}
		return nil
	}
	vector := e.spec.Rule == RuleVectorMean || e.spec.Rule == RuleVectorSum
	exactInts := e.spec.Rule == RuleSum || e.spec.Rule == RuleVectorSum
	return e.field.expand(obj, func(star, at string, v any) *ResultError {
		p := e.nextPrep(accKey{group: group, star: star}, at)
		_, p.in.array = v.([]any)
		if vector && !p.in.array {
			return resultFieldError(at, "want an array of numbers, got %s", resultKind(v))
		}
		return numberInput(v, at, true, exactInts, &p.in)
	})
}

// nextPrep returns the next scratch slot, reusing its buffers.
func (e *mergeEntry) nextPrep(k accKey, at string) *accPrep {
	if len(e.prep) < cap(e.prep) {
		e.prep = e.prep[:len(e.prep)+1]
	} else {
		e.prep = append(e.prep, accPrep{})
	}
	p := &e.prep[len(e.prep)-1]
	p.key = k
	p.in.reset(at)
	return p
}

// apply folds what prepare checked; it cannot fail.
func (e *mergeEntry) apply(index int64) {
	if e.sink != nil {
		if e.refused != nil {
			e.sink.refuse(index)
		} else {
			e.sink.put(index, e.row, false)
		}
		e.row, e.refused = nil, nil
		return
	}
	for i := range e.prep {
		p := &e.prep[i]
		if p.fresh {
			e.accs[p.key] = p.acc
		}
		p.acc.add(&p.in, index)
	}
	e.clearPrep()
}

// clearPrep drops the references the scratch holds into the last result.
func (e *mergeEntry) clearPrep() {
	for i := range e.prep {
		p := &e.prep[i]
		p.acc, p.in.value, p.in.raw = nil, nil, nil
		clear(p.in.bigs)
		if cap(p.in.floats) > 1<<16 { // do not keep one huge result's buffer
			p.in.floats = nil
		}
	}
	e.prep = e.prep[:0]
	e.row, e.refused = nil, nil
}

// Skip tells the ordered sinks that task index has no result (it failed
// for good), so the rows after it can be written. Skipping an index that
// already has a result or skip does nothing; so does Skip after Close. A
// failed write is reported by the next Add or Close.
func (m *Merger) Skip(index int64) {
	if m.closed || index < 0 {
		return
	}
	for _, e := range m.sinks {
		if !e.sink.has(index) {
			e.sink.put(index, nil, true)
		}
	}
	m.drain()
}

// drain writes the rows of every sink that no gap holds back.
func (m *Merger) drain() {
	for _, e := range m.sinks {
		if m.sinkErr != nil {
			return
		}
		if err := e.sink.drain(); err != nil {
			m.sinkErr = fmt.Errorf("merge %q: %w: %w", e.spec.Name, ErrSinkWrite, err)
		}
	}
}

// Close ends the run of total tasks (indices 0..total-1). It writes every
// row the ordered sinks still hold, in task order, stepping over tasks that
// have neither a result nor a Skip; if there are any, it returns an error
// (errors.Is ErrMissingTasks) with their number and the first of them.
// Rows of tasks at or beyond total are not written (errors.Is
// ErrTaskIndex). After Close, Add returns ErrMergerClosed and Skip does
// nothing; Result, Scalars, MarshalBinary and Merge work as before. A
// second Close returns ErrMergerClosed.
func (m *Merger) Close(total int64) error {
	if m.closed {
		return ErrMergerClosed
	}
	m.closed = true
	m.drain()
	if m.sinkErr != nil {
		return m.sinkErr
	}
	var errs []error
	for _, e := range m.sinks {
		missing, first, beyond, err := e.sink.finish(total)
		if err != nil {
			m.sinkErr = fmt.Errorf("merge %q: %w: %w", e.spec.Name, ErrSinkWrite, err)
			return m.sinkErr
		}
		if missing > 0 && len(errs) == 0 {
			errs = append(errs, fmt.Errorf("merge %q: %d of %d tasks have no result and no skip, the first is task %d: %w",
				e.spec.Name, missing, total, first, ErrMissingTasks))
		}
		if beyond > 0 {
			errs = append(errs, fmt.Errorf("merge %q: %d results are for tasks at or beyond the total of %d: %w",
				e.spec.Name, beyond, total, ErrTaskIndex))
		}
	}
	return errors.Join(errs...)
}

// Result returns the merged answer, one member per entry in manifest order.
// Its json.Marshal bytes depend only on the set of results added (and
// merged), never on their order or grouping.
//
// An entry's value is its accumulator's result (shapes below); with
// group_by it is an object of group key to that result, with a "*" field an
// object of key to that result, with both an object of group key to object
// of key. With several group_by paths the groups nest, one object level per
// path in group_by's order: {"0.1": {"1": result, "2": result}, ...} for
// group_by = ["alpha", "beta"]. The keys of each level are sorted
// numerically when all keys of that level (across the whole entry) are
// numbers, else by bytes, so groups come in the lexicographic order of
// their tuples; "*" keys likewise. Shapes, per rule:
//
//	sum          {"count": n, "sum": s}  s an exact integer if every value was one, else the float64 nearest the exact sum
//	stats        {"count", "sum", "mean", "variance", "sample_variance", "stddev", "sample_stddev", "min", "max"}  undefined ones null
//	histogram    {"count", "min", "max", "counts": [per bin], "underflow", "overflow"}
//	quantiles    {"count", "min", "max", "p50", "p90", "p99", ...}  one pNN per quantile, '.' written '_' (0.999 is p99_9)
//	topk         [{"task", "key", "value"}, ...]  best first
//	argmin/max   {"task", "key", "value"}, or null before any result
//	vector-mean  {"count": n, "mean": [...]}
//	vector-sum   {"count": n, "sum": [...]}  exact integers
//	collect      {"rows": results added, "skipped": tasks skipped}, plus "refused": n when n results could not make a row (EntryFailure)
//	concat       as collect
//
// Floats that are not finite (a sum beyond the float64 range) appear as
// the strings "+Inf", "-Inf" or "NaN".
func (m *Merger) Result() ResultObject {
	out := make(ResultObject, 0, len(m.entries))
	for _, e := range m.entries {
		out = append(out, KV{Key: e.spec.Name, Value: e.result()})
	}
	return out
}

func (e *mergeEntry) result() any {
	if e.sink != nil {
		return e.sink.result()
	}
	if !e.grouped() && !e.starred() {
		a := e.accs[accKey{}]
		if a == nil {
			a = e.newAcc()
		}
		return a.result()
	}
	byGroup := map[string][]string{}
	for k := range e.accs {
		byGroup[k.group] = append(byGroup[k.group], k.star)
	}
	inner := func(g string) any {
		if !e.starred() {
			return e.accs[accKey{group: g}].result()
		}
		stars := byGroup[g]
		sortGroupKeys(stars)
		obj := make(ResultObject, 0, len(stars))
		for _, s := range stars {
			obj = append(obj, KV{s, e.accs[accKey{g, s}].result()})
		}
		return obj
	}
	if !e.grouped() {
		if len(byGroup) == 0 {
			return ResultObject{}
		}
		return inner("")
	}
	groups := make([]string, 0, len(byGroup))
	for g := range byGroup {
		groups = append(groups, g)
	}
	if len(e.groups) == 1 {
		sortGroupKeys(groups)
		obj := make(ResultObject, 0, len(groups))
		for _, g := range groups {
			obj = append(obj, KV{g, inner(g)})
		}
		return obj
	}
	tuples := make([][]string, len(groups))
	for i, g := range groups {
		tuples[i], _ = splitGroupKey(g, len(e.groups))
	}
	order := sortGroupTuples(tuples)
	return nestGroups(tuples, order, 0, func(i int) any { return inner(groups[i]) })
}

// sortGroupTuples returns the indices of tuples (group values, one per
// group_by path) in lexicographic order, each position compared as
// sortGroupKeys orders the values at that position.
func sortGroupTuples(tuples [][]string) []int {
	n := 0
	if len(tuples) > 0 {
		n = len(tuples[0])
	}
	cmps := make([]func(a, b string) int, n)
	for pos := range cmps {
		col := make([]string, len(tuples))
		for i, t := range tuples {
			col[i] = t[pos]
		}
		cmps[pos] = groupKeyCompare(col)
	}
	order := make([]int, len(tuples))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		for pos, c := range cmps {
			if r := c(tuples[a][pos], tuples[b][pos]); r != 0 {
				return r
			}
		}
		return 0
	})
	return order
}

// nestGroups builds the nested objects of grouped results: order lists
// the tuples in sorted order; the tuples from there that share their first
// depth values are one object keyed by the value at depth.
func nestGroups(tuples [][]string, order []int, depth int, leaf func(i int) any) ResultObject {
	var obj ResultObject
	for start := 0; start < len(order); {
		key := tuples[order[start]][depth]
		end := start + 1
		for end < len(order) && tuples[order[end]][depth] == key {
			end++
		}
		if depth == len(tuples[order[start]])-1 {
			obj = append(obj, KV{key, leaf(order[start])})
		} else {
			obj = append(obj, KV{key, nestGroups(tuples, order[start:end], depth+1, leaf)})
		}
		start = end
	}
	return obj
}

// joinGroupKey makes one group key of the values of an entry's group_by
// paths: the value itself for one path (as before group_by took lists, so
// merge states keep their bytes), else each value as a uvarint length and
// its bytes.
func joinGroupKey(texts []string) string {
	if len(texts) == 1 {
		return texts[0]
	}
	var b []byte
	for _, t := range texts {
		b = binary.AppendUvarint(b, uint64(len(t)))
		b = append(b, t...)
	}
	return string(b)
}

// splitGroupKey undoes joinGroupKey for n paths; it reports false when key
// is not n values so joined.
func splitGroupKey(key string, n int) ([]string, bool) {
	if n == 1 {
		return []string{key}, true
	}
	out := make([]string, 0, n)
	b := []byte(key)
	for len(b) > 0 {
		l, w := binary.Uvarint(b)
		if w <= 0 || l > uint64(len(b)-w) {
			return nil, false
		}
		out = append(out, string(b[w:w+int(l)]))
		b = b[w+int(l):]
	}
	return out, len(out) == n
}

// Scalars returns every number of the result by name, for derived
// expressions. A name starts with the entry's prefix: its Name, then
// "[GROUP]" for each group_by value, then ".KEY" for a "*" key (for example
// "energy", "energy[2.25]", "energy[0.1][2]", "columns.x",
// "energy[2.25].x"). Then, per rule:
//
//	sum          PREFIX (the sum itself), PREFIX.sum, PREFIX.count
//	stats        PREFIX.count, .sum, .mean, .variance, .sample_variance, .stddev, .sample_stddev, .min, .max
//	histogram    PREFIX.count, .underflow, .overflow, .counts.I (bin I from 0)
//	quantiles    PREFIX.count, .min, .max, .pNN per quantile (p50, p99_9)
//	topk         PREFIX.I.task, PREFIX.I.key, PREFIX.I.value (I = rank from 0; value only when a number)
//	argmin/max   PREFIX.task, PREFIX.key, PREFIX.value
//	vector-mean  PREFIX.count, PREFIX.mean.I
//	vector-sum   PREFIX.count, PREFIX.sum.I (the nearest float64)
//	collect      PREFIX.rows, PREFIX.skipped, PREFIX.refused (also concat)
//
// Names whose value is undefined (the mean of nothing, the sample variance
// of one value) are left out. Integer sums beyond 2^53 are rounded to the
// nearest float64.
func (m *Merger) Scalars() map[string]float64 {
	out := map[string]float64{}
	for _, e := range m.entries {
		name := e.spec.Name
		switch {
		case e.sink != nil:
			out[name+".rows"] = float64(e.sink.rows)
			out[name+".skipped"] = float64(e.sink.skipped)
			out[name+".refused"] = float64(e.sink.refused)
		case !e.grouped() && !e.starred():
			a := e.accs[accKey{}]
			if a == nil {
				a = e.newAcc()
			}
			a.scalars(name, out)
		default:
			for k, a := range e.accs {
				prefix := name
				if e.grouped() {
					texts, _ := splitGroupKey(k.group, len(e.groups))
					for _, t := range texts {
						prefix += "[" + t + "]"
					}
				}
				if e.starred() {
					prefix += "." + k.star
				}
				a.scalars(prefix, out)
			}
		}
	}
	return out
}

// sortedKeys returns the entry's accumulator keys in byte order, for the
// canonical encoding.
func (e *mergeEntry) sortedKeys() []accKey {
	keys := make([]accKey, 0, len(e.accs))
	for k := range e.accs {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareAccKeys)
	return keys
}

func compareAccKeys(a, b accKey) int {
	if a.group != b.group {
		if a.group < b.group {
			return -1
		}
		return 1
	}
	switch {
	case a.star < b.star:
		return -1
	case a.star > b.star:
		return 1
	}
	return 0
}
