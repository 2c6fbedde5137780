package job

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
)

// Limits that keep a merge's memory independent of the number of tasks even
// when a program misbehaves.
const (
	// MaxMergeKeys is the most accumulators one merge entry keeps: distinct
	// group_by values times distinct keys under a "*" field. A result that
	// would create more is rejected.
	MaxMergeKeys = 1 << 16
	// MaxVectorLen is the longest array vector-mean accepts (each element
	// costs one 552-byte superaccumulator).
	MaxVectorLen = 1 << 20
	// maxIntDigits bounds the integers sum accepts exactly (about 2^3300).
	maxIntDigits = 1000
)

// ResultError reports a task result that does not fit a merge entry: not a
// JSON object, a missing field, a value of the wrong type or out of range.
// errors.Is(err, ErrBadResult) is true for it. Its message reads, e.g.,
// `merge "energy": field energy: want a number, got string`.
type ResultError struct {
	// Entry is the merge entry's name; empty for a problem with the result
	// as a whole.
	Entry string
	// Field is the dotted path of the offending value; empty when the
	// problem is not about one value.
	Field string
	// Problem says what is wrong, for people.
	Problem string

	// entryOnly marks a problem that only an ordered entry's row has:
	// Merger.Add folds the result into the other entries.
	entryOnly bool
}

// Error returns `merge "ENTRY": field FIELD: PROBLEM`, leaving out the parts
// that are empty.
func (e *ResultError) Error() string {
	var b strings.Builder
	b.WriteString("merge")
	if e.Entry != "" {
		b.WriteString(" ")
		b.WriteString(strconv.Quote(e.Entry))
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString("field ")
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Problem)
	return b.String()
}

// Is reports whether target is ErrBadResult.
func (e *ResultError) Is(target error) bool { return target == ErrBadResult }

// resultFieldError is a ResultError without its entry, filled in by the caller.
func resultFieldError(field, format string, args ...any) *ResultError {
	return &ResultError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// decodeResult parses one task result: exactly one JSON object, numbers kept
// as json.Number.
func decodeResult(data []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &ResultError{Problem: "empty result: want one JSON object"}
		}
		return nil, &ResultError{Problem: "result is not valid JSON: " + err.Error()}
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, &ResultError{Problem: "result is not a JSON object (got " + resultKind(v) + ")"}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, &ResultError{Problem: "trailing data after the result's JSON object"}
	}
	return obj, nil
}

// resultKind names the JSON type of a decoded value, for messages.
func resultKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case json.Number, float64:
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	default:
		return fmt.Sprintf("%T", v)
	}
}

// mergePath is a parsed dotted path into a result object. A "*" segment
// (at most one, only in a numeric rule's field) stands for every key of the
// object at that point.
type mergePath struct {
	text string
	segs []string // nil for the whole result
	star int      // index of the "*" segment, or -1
}

func parseMergePath(s string) (mergePath, error) {
	p := mergePath{text: s, star: -1}
	if s == "" {
		return p, nil
	}
	p.segs = strings.Split(s, ".")
	for i, seg := range p.segs {
		switch seg {
		case "":
			return p, fmt.Errorf("path %q has an empty segment", s)
		case "*":
			if p.star >= 0 {
				return p, fmt.Errorf("path %q has more than one \"*\"", s)
			}
			p.star = i
		}
	}
	return p, nil
}

// walk follows segs from v; ok is false when a segment is missing or
// crosses a non-object. at is the path walked so far, for messages.
func walkResult(v any, segs []string) (any, bool) {
	for _, seg := range segs {
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		v, ok = obj[seg]
		if !ok {
			return nil, false
		}
	}
	return v, true
}

// lookup returns the value at a path without "*".
func (p mergePath) lookup(root map[string]any) (any, *ResultError) {
	v, ok := walkResult(root, p.segs)
	if !ok {
		return nil, resultFieldError(p.text, "missing%s", missingWhere(root, p.segs))
	}
	return v, nil
}

// maxListedMembers is how many members of an object a message about a
// missing field lists.
const maxListedMembers = 12

// missingWhere says more about segs, a path walkResult did not find in
// root, for the message that it is missing: the members of the object
// where the path breaks off (the result's, or a nested object's) and the
// one it most likely meant, so that "step" points to "steps"; or that a
// value on the way is not an object.
func missingWhere(root map[string]any, segs []string) string {
	var v any = root
	for i, seg := range segs {
		at := mergePathOrWhole(strings.Join(segs[:i], "."))
		obj, ok := v.(map[string]any)
		if !ok {
			kind := resultKind(v)
			return fmt.Sprintf(": %s is %s %s, not an object", at, article(kind), kind)
		}
		if v, ok = obj[seg]; ok {
			continue
		}
		if len(obj) == 0 {
			return fmt.Sprintf(" (%s is an empty object)", at)
		}
		keys := slices.Sorted(maps.Keys(obj))
		hint := ""
		if best := closest(seg, keys); best != "" {
			hint = fmt.Sprintf("; did you mean %q?", joinMergePath(strings.Join(segs[:i], "."), best, strings.Join(segs[i+1:], ".")))
		}
		if len(keys) > maxListedMembers {
			keys = append(keys[:maxListedMembers:maxListedMembers], fmt.Sprintf("… (%d in all)", len(obj)))
		}
		return fmt.Sprintf(" (%s has %s)%s", at, strings.Join(keys, ", "), hint)
	}
	return ""
}

// article is "an" before a JSON kind that starts with a vowel, else "a".
func article(kind string) string {
	if strings.ContainsRune("aeiou", rune(kind[0])) {
		return "an"
	}
	return "a"
}

// expand calls fn for every value the path names, with the key matched by
// "*" (empty without one) and the concrete path; keys come in sorted order
// so that the first error is the same in every run.
func (p mergePath) expand(root map[string]any, fn func(star, at string, v any) *ResultError) *ResultError {
	if p.star < 0 {
		v, err := p.lookup(root)
		if err != nil {
			return err
		}
		return fn("", p.text, v)
	}
	prefix := strings.Join(p.segs[:p.star], ".")
	v, ok := walkResult(root, p.segs[:p.star])
	if !ok {
		return resultFieldError(p.text, "missing %s%s", prefix, missingWhere(root, p.segs[:p.star]))
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return resultFieldError(p.text, "want an object at %s for \"*\", got %s", mergePathOrWhole(prefix), resultKind(v))
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	rest := p.segs[p.star+1:]
	for _, k := range keys {
		at := joinMergePath(prefix, k, strings.Join(rest, "."))
		v, ok := walkResult(obj[k], rest)
		if !ok {
			return resultFieldError(at, "missing")
		}
		if err := fn(k, at, v); err != nil {
			return err
		}
	}
	return nil
}

func mergePathOrWhole(prefix string) string {
	if prefix == "" {
		return "the result"
	}
	return prefix
}

func joinMergePath(parts ...string) string {
	var b strings.Builder
	for _, s := range parts {
		if s == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(s)
	}
	return b.String()
}

// isIntegerText reports whether a JSON number is written as an integer (no '.',
// 'e' or 'E').
func isIntegerText(s string) bool { return !strings.ContainsAny(s, ".eE") }

// parseResultFloat converts a JSON number to the nearest float64, rejecting one
// beyond the float64 range.
func parseResultFloat(n json.Number, at string) (float64, *ResultError) {
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil && !math.IsInf(f, 0) {
		return 0, resultFieldError(at, "bad number %s", clipToken(string(n)))
	}
	if math.IsInf(f, 0) {
		return 0, resultFieldError(at, "number %s is beyond the float64 range", clipToken(string(n)))
	}
	return f, nil
}

// clip shortens a long token for a message.
func clipToken(s string) string {
	if len(s) > 40 {
		return s[:37] + "..."
	}
	return s
}

// numberInput collects the numbers of one value: a number, or an array of
// numbers when arrays is true. Integers go to ints/bigs when exactInts is
// set (the sum rule), to floats otherwise.
func numberInput(v any, at string, arrays, exactInts bool, in *accInput) *ResultError {
	switch x := v.(type) {
	case json.Number:
		return in.addNumber(x, at, exactInts)
	case []any:
		if !arrays {
			break
		}
		for i, e := range x {
			n, ok := e.(json.Number)
			if !ok {
				return resultFieldError(at+"["+strconv.Itoa(i)+"]", "want a number, got %s", resultKind(e))
			}
			if err := in.addNumber(n, at+"["+strconv.Itoa(i)+"]", exactInts); err != nil {
				return err
			}
		}
		return nil
	}
	if arrays {
		return resultFieldError(at, "want a number or an array of numbers, got %s", resultKind(v))
	}
	return resultFieldError(at, "want a number, got %s", resultKind(v))
}

func (in *accInput) addNumber(n json.Number, at string, exactInts bool) *ResultError {
	s := string(n)
	if exactInts && isIntegerText(s) {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			in.ints = append(in.ints, i)
			return nil
		}
		digits := strings.TrimPrefix(s, "-")
		if len(digits) > maxIntDigits {
			return resultFieldError(at, "integer of %d digits is too long (at most %d)", len(digits), maxIntDigits)
		}
		b, ok := new(big.Int).SetString(s, 10)
		if !ok {
			return resultFieldError(at, "bad integer %s", clipToken(s))
		}
		in.bigs = append(in.bigs, b)
		return nil
	}
	f, err := parseResultFloat(n, at)
	if err != nil {
		return err
	}
	in.floats = append(in.floats, f)
	return nil
}

// groupKeyText formats a group_by value as a group key: a string as itself, a
// number canonically (integers exactly, other numbers as the shortest form
// of their float64, so 2.50 and 2.5 are one group), a boolean as true or
// false.
func groupKeyText(v any, at string) (string, *ResultError) {
	switch x := v.(type) {
	case string:
		return x, nil
	case bool:
		return strconv.FormatBool(x), nil
	case json.Number:
		s := string(x)
		if isIntegerText(s) {
			if len(s) > maxIntDigits {
				return "", resultFieldError(at, "group key of %d digits is too long", len(s))
			}
			b, ok := new(big.Int).SetString(s, 10)
			if !ok {
				return "", resultFieldError(at, "bad integer %s", clipToken(s))
			}
			return b.String(), nil
		}
		f, err := parseResultFloat(x, at)
		if err != nil {
			return "", err
		}
		if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			return strconv.FormatInt(int64(f), 10), nil
		}
		return strconv.FormatFloat(f, 'g', -1, 64), nil
	}
	return "", resultFieldError(at, "want a string, number or boolean to group by, got %s", resultKind(v))
}

// sortGroupKeys sorts group or "*" keys: by numeric value when every key is a
// JSON number (ties, possible for huge integers, by text), else by bytes.
func sortGroupKeys(keys []string) {
	slices.SortFunc(keys, groupKeyCompare(keys))
}

// groupKeyCompare returns the order of sortGroupKeys for keys: numeric
// when every one of keys is a JSON number, else by bytes. The comparison
// takes only keys among keys.
func groupKeyCompare(keys []string) func(a, b string) int {
	vals := make(map[string]float64, len(keys))
	for _, k := range keys {
		f, err := strconv.ParseFloat(k, 64)
		if err != nil || !isJSONNumberText(k) {
			return strings.Compare
		}
		vals[k] = f
	}
	return func(a, b string) int {
		if va, vb := vals[a], vals[b]; va != vb {
			if va < vb {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	}
}

// isJSONNumberText reports whether s is a number in JSON syntax.
func isJSONNumberText(s string) bool {
	if s == "" || (s[0] != '-' && (s[0] < '0' || s[0] > '9')) {
		return false
	}
	var v any
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	if dec.Decode(&v) != nil {
		return false
	}
	_, ok := v.(json.Number)
	return ok && dec.InputOffset() == int64(len(s))
}

// canonicalResultJSON encodes a decoded value deterministically: object keys
// sorted, numbers exactly as written, no HTML escaping, no newline.
func canonicalResultJSON(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Values decoded from JSON always encode; keep a marker rather
		// than panic if that ever changes.
		return []byte("null")
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// KV is one member of a ResultObject.
type KV struct {
	Key   string
	Value any
}

// ResultObject is a JSON object whose members marshal in slice order, so
// merged results keep a fixed, deterministic layout (entries in manifest
// order, groups sorted, fields in a fixed order). Values are nil, bool,
// int64, float64, string (also for non-finite floats: "+Inf", "-Inf",
// "NaN"), json.Number, json.RawMessage, []any, []int64 or ResultObject.
type ResultObject []KV

// MarshalJSON encodes the members in order.
func (o ResultObject) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, kv := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := json.Marshal(kv.Key)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		v, err := json.Marshal(kv.Value)
		if err != nil {
			return nil, fmt.Errorf("member %q: %w", kv.Key, err)
		}
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// Get returns the value of the member named key, and whether there is one.
func (o ResultObject) Get(key string) (any, bool) {
	for _, kv := range o {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return nil, false
}

// resultFloat returns f for a result: the float itself when finite, else
// its name ("+Inf", "-Inf", "NaN"), since JSON has no such numbers.
func resultFloat(f float64) any {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return strconv.FormatFloat(f, 'g', -1, 64)
	}
	return f
}
