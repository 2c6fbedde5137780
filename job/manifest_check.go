package job

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// This file finds every problem of a manifest's text at once: a file that
// is no manifest at all (a program, an archive), every unknown key (with
// the closest known one) and every value of the wrong type, each with its
// line and column, so that an author fixes them in one go.

// ManifestErrors is every problem found in one manifest, those with a
// line in file order first (a problem of a field has the line and column
// of its key), then those of fields the text lacks (a missing name) in
// the order the manifest's sections are checked.
// ParseManifest returns it when it found more than one problem, and the
// *ManifestError itself when it found one. errors.As finds the first
// *ManifestError in it, and errors.Is(err, ErrManifest) holds.
type ManifestErrors []*ManifestError

// Error lists the problems, one a line.
func (e ManifestErrors) Error() string {
	lines := make([]string, len(e))
	for i, me := range e {
		lines[i] = me.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the problems, for errors.Is and errors.As.
func (e ManifestErrors) Unwrap() []error {
	out := make([]error, len(e))
	for i, me := range e {
		out[i] = me
	}
	return out
}

// err returns nil for no problem, the one problem, or all of them.
func (e ManifestErrors) err() error {
	switch len(e) {
	case 0:
		return nil
	case 1:
		return e[0]
	}
	return e
}

// add appends err's problems: a *ManifestError, a ManifestErrors, or
// nil (nothing). Other errors are kept as a ManifestError of the file.
func (e *ManifestErrors) add(file string, err error) {
	var list ManifestErrors
	var me *ManifestError
	switch {
	case err == nil:
	case errors.As(err, &list):
		*e = append(*e, list...)
	case errors.As(err, &me):
		*e = append(*e, me)
	default:
		*e = append(*e, &ManifestError{File: file, Msg: err.Error()})
	}
}

// notManifest returns the ManifestError (wrapping ErrNotManifest, and
// ErrProgramNotManifest for a WebAssembly program) for data that cannot
// be a manifest, which is UTF-8 text: a program, an archive, an image, a
// UTF-16 file or other binary data. It returns nil for data that may be
// a manifest; the TOML parser judges that.
func notManifest(file string, data []byte) error {
	fail := func(what string, err error) error {
		return &ManifestError{File: file, Msg: what, Err: err}
	}
	for _, m := range magics {
		if bytes.HasPrefix(data, []byte(m.prefix)) {
			if m.wasm {
				return fail(m.what+", not a job manifest", ErrProgramNotManifest)
			}
			return fail(m.what+", not a job manifest", ErrNotManifest)
		}
	}
	if bytes.HasPrefix(data, []byte{0xff, 0xfe}) || bytes.HasPrefix(data, []byte{0xfe, 0xff}) {
		return fail("UTF-16 text, not a job manifest, which is UTF-8: save it as UTF-8", ErrNotManifest)
	}
	if bytes.IndexByte(data[:min(len(data), 8<<10)], 0) >= 0 {
		return fail("binary data, not a job manifest (a TOML text file)", ErrNotManifest)
	}
	return nil
}

// magics are the first bytes of files that people give in a manifest's
// place. Each holds a byte that TOML text cannot start with, so none is
// a manifest.
var magics = []struct {
	prefix, what string
	wasm         bool
}{
	{"\x00asm", "a WebAssembly program", true},
	{"PK\x03\x04", "a zip archive", false},
	{"PK\x05\x06", "a zip archive", false},
	{"\x1f\x8b", "a gzip-compressed file", false},
	{"\x7fELF", "a native program or library (ELF)", false},
	{"\xcf\xfa\xed\xfe", "a native program (Mach-O)", false},
	{"\xce\xfa\xed\xfe", "a native program (Mach-O)", false},
	{"\xca\xfe\xba\xbe", "a native program (Mach-O) or a Java class", false},
	{"MZ\x90\x00", "a Windows program", false},
	{"\x89PNG", "a PNG image", false},
	{"\xff\xd8\xff", "a JPEG image", false},
	{"SQLite format 3\x00", "an SQLite database", false},
}

// maxManifestErrors bounds how many problems of the text are collected.
const maxManifestErrors = 50

// decodeManifest decodes data into a Manifest, collecting the problems of
// its text: a syntax error (after which nothing more can be read: m is
// nil), every value of the wrong type (each one's key is blanked out and
// the rest decoded again) and every unknown key, with a suggestion.
// text says where the keys are and which have problems (and the keys
// suggested for them), so that the caller can place the problems of
// fields and leave out those that follow from a problem of the text (an
// entry without its misspelt rule).
func decodeManifest(file string, data []byte) (m *Manifest, errs ManifestErrors, text *manifestText) {
	keys, perr := indexKeys(data)
	text = &manifestText{keys: keys}
	work := bytes.Clone(data)
	for range maxManifestErrors {
		var dm Manifest
		err := toml.NewDecoder(bytes.NewReader(work)).DisallowUnknownFields().Decode(&dm)
		if err == nil {
			return &dm, errs, text
		}
		if strict, ok := errors.AsType[*toml.StrictMissingError](err); ok && len(strict.Errors) > 0 {
			for _, de := range strict.Errors {
				row, col := de.Position()
				key := []string(de.Key())
				msg, suggested := unknownKeyWords(key)
				errs = append(errs, &ManifestError{File: file, Line: row, Column: col, Field: strings.Join(key, "."), Msg: msg})
				d := textDoubt{key: strings.Join(key, ".")}
				if k, ok := keys.at(row, col); ok {
					d.key = k.path
				}
				if suggested != "" {
					d.suggested = suggested
					if i := strings.LastIndexByte(d.key, '.'); i >= 0 {
						d.suggested = d.key[:i+1] + suggested[strings.LastIndexByte(suggested, '.')+1:]
					}
				}
				text.doubts = append(text.doubts, d)
			}
			return &dm, errs, text
		}
		me := tomlError(file, work, err)
		if perr != nil { // the text does not parse: nothing more to read
			return nil, append(errs, me), text
		}
		kv, ok := keyvalOf(keys, me, work)
		if !ok {
			return nil, append(errs, me), text
		}
		if me.Line == 0 {
			me.Line, me.Column = kv.line, kv.col
			if kv.valueLine > 0 {
				me.Line, me.Column = kv.valueLine, kv.valueCol
			}
		}
		errs = append(errs, me)
		text.doubts = append(text.doubts, textDoubt{key: kv.path})
		blank(work[kv.start:kv.end])
	}
	return nil, errs, text
}

// keyvalOf finds the top-level key/value expression that a decoding
// problem is about: the one on its line, or else the one of its field
// (the problems go-toml reports without a position name their field).
func keyvalOf(keys *manifestKeys, me *ManifestError, data []byte) (manifestKey, bool) {
	var top []manifestKey
	for _, k := range keys.keys {
		if k.end > k.start {
			top = append(top, k)
		}
	}
	for _, k := range top {
		if me.Line > 0 && lineOf(data, k.start) <= me.Line && me.Line <= lineOf(data, k.end) {
			return k, true
		}
	}
	if me.Line == 0 && me.Field != "" {
		for _, k := range top {
			if unindexed(k.path) == me.Field {
				return k, true
			}
		}
	}
	return manifestKey{}, false
}

// unindexed drops the indexes of array tables from a key's path, as
// go-toml names keys: "merge.rule" of "merge[1].rule".
func unindexed(path string) string {
	var b strings.Builder
	for len(path) > 0 {
		i := strings.IndexByte(path, '[')
		if i < 0 {
			b.WriteString(path)
			break
		}
		b.WriteString(path[:i])
		j := strings.IndexByte(path[i:], ']')
		if j < 0 {
			break
		}
		path = path[i+j+1:]
	}
	return b.String()
}

// lineOf returns the 1-based line of byte offset off in data.
func lineOf(data []byte, off int) int {
	return bytes.Count(data[:min(off, len(data))], []byte{'\n'}) + 1
}

// blank overwrites b with spaces, keeping line breaks, so that the lines
// of what follows stay where they were.
func blank(b []byte) {
	for i, c := range b {
		if c != '\n' && c != '\r' {
			b[i] = ' '
		}
	}
}

// unknownKeyWords says what is wrong with the unknown key (its parts, as
// go-toml gives them) and returns the full key it suggests instead, or
// "": the closest key of the same table, or the tables that have a key of
// that name, or else the keys the table has.
func unknownKeyWords(key []string) (msg, suggested string) {
	parent, name := key[:len(key)-1], key[len(key)-1]
	known := tableKeys(parent)
	if best := closest(name, known); best != "" {
		full := strings.Join(append(slices.Clone(parent), best), ".")
		return fmt.Sprintf("unknown field; did you mean %q?", best), full
	}
	var homes []string
	for _, t := range manifestTables {
		if !slices.Equal(strings.Split(t.path, "."), parent) && slices.Contains(tableKeys(strings.Split(t.path, ".")), name) {
			homes = append(homes, t.header)
		}
	}
	if len(homes) > 0 {
		return fmt.Sprintf("unknown field here; %s %s a field %q: move it there", wordList(homes), has(len(homes)), name), ""
	}
	if len(known) == 0 {
		return "unknown field", ""
	}
	where := "the manifest's top level"
	for _, t := range manifestTables {
		if t.path == strings.Join(parent, ".") {
			where = t.header
		}
	}
	return fmt.Sprintf("unknown field; %s has %s", where, strings.Join(known, ", ")), ""
}

func has(n int) string {
	if n == 1 {
		return "has"
	}
	return "have"
}

// wordList joins words as "a", "a and b", "a, b and c".
func wordList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " and " + words[len(words)-1]
}

// manifestTables are the manifest's tables that have fixed keys, as paths
// and as written in a manifest.
var manifestTables = []struct{ path, header string }{
	{"", "the manifest's top level"},
	{"split", "[split]"},
	{"merge", "[[merge]]"},
	{"policy", "[policy]"},
	{"requirements", "[requirements]"},
	{"verify", "[verify]"},
}

// tableKeys returns the keys the manifest's table at path has, in the
// order of its Go fields; none for a path into a table of free names
// ([inputs], [split.params]) or no table.
func tableKeys(path []string) []string {
	t := reflect.TypeFor[Manifest]()
	if len(path) == 1 && path[0] == "" {
		path = nil
	}
	for _, p := range path {
		f, ok := fieldByTag(t, p)
		if !ok {
			return nil
		}
		t = f.Type
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
			t = t.Elem()
		}
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	var keys []string
	for f := range t.Fields() {
		if tag := tomlTag(f); tag != "" {
			keys = append(keys, tag)
		}
	}
	return keys
}

func fieldByTag(t reflect.Type, tag string) (reflect.StructField, bool) {
	if t.Kind() != reflect.Struct {
		return reflect.StructField{}, false
	}
	for f := range t.Fields() {
		if tomlTag(f) == tag {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func tomlTag(f reflect.StructField) string {
	tag, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
	if tag == "-" || !f.IsExported() {
		return ""
	}
	return tag
}

// closest returns the key in known nearest to name, case ignored, at an
// edit distance (EditDistance) of at most 2 and less than name's length,
// so that a short name is not matched to anything; "" when none is.
func closest(name string, known []string) string {
	best, bestD := "", 3
	for _, k := range known {
		d := EditDistance(strings.ToLower(name), k)
		if d < bestD && d < len(name) {
			best, bestD = k, d
		}
	}
	return best
}

// EditDistance returns the optimal string alignment distance between a
// and b: the fewest insertions, deletions, substitutions and swaps of two
// adjacent characters (runes) that turn one into the other, each
// substring edited once (Damerau–Levenshtein without that relaxation).
// "rul" and "rule" are 1 apart, "tasks" and "taskss" 1, "form" and "from" 1.
func EditDistance(a, b string) int {
	x, y := []rune(a), []rune(b)
	// d[i][j] is the distance between x[:i] and y[:j]; three rows kept.
	prev2 := make([]int, len(y)+1)
	prev := make([]int, len(y)+1)
	cur := make([]int, len(y)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(x); i++ {
		cur[0] = i
		for j := 1; j <= len(y); j++ {
			cost := 1
			if x[i-1] == y[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && x[i-1] == y[j-2] && x[i-2] == y[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(y)]
}

// fieldSection is the part of a field path before its first '.' or '['
// ("merge" of "merge[1]", "split" of "split.tasks").
func fieldSection(field string) string {
	if i := strings.IndexAny(field, ".["); i >= 0 {
		return field[:i]
	}
	return field
}
