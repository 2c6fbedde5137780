package job

import (
	"fmt"
	"slices"
	"strings"

	"github.com/pelletier/go-toml/v2/unstable"
)

// This file finds where each key of a manifest's text is, so that a
// problem of a field (a memory_mib out of range, a merge entry's unknown
// rule) points at the key it is about, like a problem of the text does.

// manifestKey is one key of a manifest's text: a table's header, the key
// of a key/value expression, or a key of an inline table.
type manifestKey struct {
	// path is the key's full path, each array table with its index:
	// "policy.memory_mib", "merge[1].rule", "split.grid.x.step".
	path string
	// line and col are where the key starts (1-based, col in bytes).
	line, col int
	// valueLine and valueCol are where its value starts; 0 for a header
	// and for an array.
	valueLine, valueCol int
	// start and end are the byte range of a top-level key/value
	// expression, the part that blank may wipe; both 0 for other keys.
	start, end int
	// str is the value, when it is a string (isStr).
	str   string
	isStr bool
}

// manifestKeys is every key of a manifest's text, in file order.
type manifestKeys struct {
	keys   []manifestKey
	byPath map[string]int // the first key of each path, an index into keys
}

// indexKeys lists the keys of data, and the parser's error if the text
// does not parse (the keys before the error are listed).
func indexKeys(data []byte) (*manifestKeys, error) {
	x := &manifestKeys{byPath: map[string]int{}}
	var p unstable.Parser
	p.Reset(data)
	var table []string         // the current table's path, indexed
	arrays := map[string]int{} // array tables seen, by path
	pos := func(n *unstable.Node) (line, col int) {
		s := p.Shape(n.Raw)
		return s.Start.Line, s.Start.Column
	}
	// resolve indexes parts below base: the array tables among them by
	// their latest entry, and the last part, when newEntry, as a new one.
	resolve := func(base []string, parts []string, newEntry bool) []string {
		out := slices.Clone(base)
		for i, name := range parts {
			whole := strings.Join(append(slices.Clone(out), name), ".")
			n, isArray := arrays[whole]
			switch {
			case newEntry && i == len(parts)-1:
				arrays[whole] = n + 1
				name = fmt.Sprintf("%s[%d]", name, n)
			case isArray:
				name = fmt.Sprintf("%s[%d]", name, n-1)
			}
			out = append(out, name)
		}
		return out
	}
	var keyval func(base []string, e *unstable.Node, top bool)
	keyval = func(base []string, e *unstable.Node, top bool) {
		names, nodes := keyParts(e.Key())
		if len(nodes) == 0 {
			return
		}
		path := resolve(base, names, false)
		line, col := pos(nodes[0])
		for i := len(base) + 1; i < len(path); i++ { // the tables a dotted key opens
			x.add(manifestKey{path: strings.Join(path[:i], "."), line: line, col: col})
		}
		k := manifestKey{path: strings.Join(path, "."), line: line, col: col}
		v := e.Value()
		if v.Kind != unstable.Array {
			k.valueLine, k.valueCol = pos(v)
		}
		if v.Kind == unstable.String {
			k.str, k.isStr = string(v.Data), true
		}
		if top {
			k.start, k.end = int(e.Raw.Offset), int(e.Raw.Offset+e.Raw.Length)
		}
		x.add(k)
		if v.Kind == unstable.InlineTable {
			for it := v.Children(); it.Next(); {
				if c := it.Node(); c.Kind == unstable.KeyValue {
					keyval(path, c, false)
				}
			}
		}
	}
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Table, unstable.ArrayTable:
			names, nodes := keyParts(e.Key())
			if len(nodes) == 0 {
				continue
			}
			table = resolve(nil, names, e.Kind == unstable.ArrayTable)
			for i, n := range nodes {
				line, col := pos(n)
				x.add(manifestKey{path: strings.Join(table[:i+1], "."), line: line, col: col})
			}
		case unstable.KeyValue:
			keyval(table, e, true)
		}
	}
	return x, p.Error()
}

func (x *manifestKeys) add(k manifestKey) {
	if _, ok := x.byPath[k.path]; !ok {
		x.byPath[k.path] = len(x.keys)
	}
	x.keys = append(x.keys, k)
}

// find returns the key at path.
func (x *manifestKeys) find(path string) (manifestKey, bool) {
	i, ok := x.byPath[path]
	if !ok {
		return manifestKey{}, false
	}
	return x.keys[i], true
}

// at returns the key that starts at line and col.
func (x *manifestKeys) at(line, col int) (manifestKey, bool) {
	for _, k := range x.keys {
		if k.line == line && k.col == col {
			return k, true
		}
	}
	return manifestKey{}, false
}

// keyParts returns the parts of a key and their nodes.
func keyParts(it unstable.Iterator) ([]string, []*unstable.Node) {
	var parts []string
	var nodes []*unstable.Node
	for it.Next() {
		parts = append(parts, string(it.Node().Data))
		nodes = append(nodes, it.Node())
	}
	return parts, nodes
}

// place gives e the line and column of the key at path, if the text
// has that key and e has no line yet.
func (x *manifestKeys) place(e *ManifestError, path string) {
	if x == nil || e.Line > 0 {
		return
	}
	if k, ok := x.find(path); ok {
		e.Line, e.Column = k.line, k.col
	}
}

// within reports whether the keys a and b are the same, or one holds
// the other ("merge[1]" holds "merge[1].rule", "split" holds
// "split.grid.x").
func within(a, b string) bool {
	return a == b || holds(a, b) || holds(b, a)
}

func holds(outer, inner string) bool {
	return len(inner) > len(outer) && strings.HasPrefix(inner, outer) && (inner[len(outer)] == '.' || inner[len(outer)] == '[')
}

// textDoubt is a key with a problem in a manifest's text, and the key it
// was most likely meant to be ("" when no key is suggested).
type textDoubt struct{ key, suggested string }

// manifestText is what the checks of a manifest's fields need to know
// of its text: where its keys are and which have problems.
type manifestText struct {
	keys   *manifestKeys
	doubts []textDoubt
}

// doubt reports whether a problem of the text may be why the field at
// path is wrong: a problem at that key, in a table that holds it, or in
// a key it holds, or an unknown key that was likely meant to be one of
// them. A nil t has no doubts.
func (t *manifestText) doubt(path string) bool {
	if t == nil {
		return false
	}
	for _, d := range t.doubts {
		if within(d.key, path) || (d.suggested != "" && within(d.suggested, path)) {
			return true
		}
	}
	return false
}

// mayName reports whether a merge entry whose name the text leaves in
// doubt (a misspelt or mistyped name, field or rule, from which the name
// comes) may have been meant to have a name that ref starts with.
func (t *manifestText) mayName(ref string, entries int) bool {
	if t == nil {
		return false
	}
	for i := range entries {
		entry := fmt.Sprintf("merge[%d]", i)
		for _, d := range t.doubts {
			if !holds(entry, d.key) && d.key != entry {
				continue
			}
			namesIt := false
			for _, k := range []string{"name", "field", "rule"} {
				if within(d.key, entry+"."+k) || (d.suggested != "" && within(d.suggested, entry+"."+k)) {
					namesIt = true
				}
			}
			if !namesIt {
				continue
			}
			k, ok := t.keys.find(d.key)
			if !ok || !k.isStr || ref == k.str || strings.HasPrefix(ref, k.str+".") {
				return true
			}
		}
	}
	return false
}
