package job

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
)

// topAcc is the topk, argmin and argmax rules: the K results with the best
// key (a number at the spec's Key path, compared as float64), with their
// task index and kept value (the value at Field, or the whole result, as
// canonical JSON). Order "desc" keeps the largest keys, "asc" the smallest;
// argmin is K = 1 ascending, argmax K = 1 descending. Ties go to the lower
// task index, then to the key's text and the value's bytes, a total order,
// so the kept set does not depend on arrival order. Memory: K values.
type topAcc struct {
	k      int
	desc   bool
	single bool      // argmin, argmax: the result is one object
	items  []topItem // best first, at most k
}

type topItem struct {
	key     float64
	keyText string // the key as written, reported in the result
	task    int64
	raw     []byte // canonical JSON of the kept value
}

func newTopAcc(s MergeSpec) *topAcc {
	return &topAcc{k: s.K, desc: s.Order == "desc", single: s.Rule != RuleTopK}
}

// cmp orders items best first.
func (a *topAcc) cmp(x, y *topItem) int {
	switch {
	case x.key != y.key:
		if (x.key > y.key) == a.desc {
			return -1
		}
		return 1
	case x.task != y.task:
		if x.task < y.task {
			return -1
		}
		return 1
	}
	if c := strings.Compare(x.keyText, y.keyText); c != 0 {
		return c
	}
	return bytes.Compare(x.raw, y.raw)
}

// check encodes the value only when it would be kept.
func (a *topAcc) check(in *accInput, index int64) *ResultError {
	cand := topItem{key: in.key, keyText: in.keyText, task: index}
	if len(a.items) < a.k || a.cmp(&cand, &a.items[len(a.items)-1]) < 0 {
		in.raw = canonicalResultJSON(in.value)
	}
	return nil
}

func (a *topAcc) add(in *accInput, index int64) {
	if in.raw == nil {
		return
	}
	it := topItem{key: in.key, keyText: in.keyText, task: index, raw: in.raw}
	pos, _ := slices.BinarySearchFunc(a.items, &it, func(x topItem, y *topItem) int { return a.cmp(&x, y) })
	a.items = slices.Insert(a.items, pos, it)
	if len(a.items) > a.k {
		a.items = a.items[:a.k]
	}
}

func (a *topAcc) mergeCheck(accumulator) error { return nil }

// merge keeps the best k of both; kept values are shared, never changed.
func (a *topAcc) merge(o accumulator) {
	b := o.(*topAcc)
	all := append(slices.Clip(a.items), b.items...)
	slices.SortFunc(all, func(x, y topItem) int { return a.cmp(&x, &y) })
	a.items = slices.Clip(all[:min(len(all), a.k)])
}

func (a *topAcc) itemResult(it *topItem) ResultObject {
	return ResultObject{
		{"task", it.task},
		{"key", json.Number(it.keyText)},
		{"value", json.RawMessage(it.raw)},
	}
}

func (a *topAcc) result() any {
	if a.single {
		if len(a.items) == 0 {
			return nil
		}
		return a.itemResult(&a.items[0])
	}
	list := make([]any, len(a.items))
	for i := range a.items {
		list[i] = a.itemResult(&a.items[i])
	}
	return list
}

func (a *topAcc) scalars(prefix string, out map[string]float64) {
	for i := range a.items {
		it := &a.items[i]
		p := prefix + "." + strconv.Itoa(i)
		if a.single {
			p = prefix
		}
		out[p+".task"] = float64(it.task)
		out[p+".key"] = it.key
		if v, err := strconv.ParseFloat(string(it.raw), 64); err == nil && isJSONNumberText(string(it.raw)) {
			out[p+".value"] = v
		}
		if a.single {
			return
		}
	}
}

func (a *topAcc) appendState(b []byte) []byte {
	b = appendStateCount(b, int64(len(a.items)))
	for _, it := range a.items {
		b = appendStateString(b, it.keyText)
		b = appendStateCount(b, it.task)
		b = appendStateString(b, string(it.raw))
	}
	return b
}

func (a *topAcc) decodeState(r *stateReader) {
	n := r.uvarint()
	if n > uint64(a.k) {
		r.fail("%d kept results, at most %d", n, a.k)
	}
	for i := uint64(0); i < n && r.err == nil; i++ {
		it := topItem{keyText: r.str(), task: r.count()}
		it.raw = []byte(r.str())
		if r.err != nil {
			return
		}
		f, err := strconv.ParseFloat(it.keyText, 64)
		switch {
		case err != nil || !isJSONNumberText(it.keyText):
			r.fail("bad key")
		case !json.Valid(it.raw):
			r.fail("kept value is not JSON")
		case i > 0 && a.cmp(&a.items[i-1], &topItem{key: f, keyText: it.keyText, task: it.task, raw: it.raw}) > 0:
			// Equal neighbours are allowed: a task added twice, or two
			// states that share a task, keep it twice, as add and merge do.
			r.fail("kept results out of order")
		}
		it.key = f
		a.items = append(a.items, it)
	}
}
