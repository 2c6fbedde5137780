package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// node is a JSON value decoded with object members kept in their order.
type node struct {
	keys   []string // object member names, in order; nil for non-objects
	vals   []node   // object member values
	scalar any      // json.Number, string, bool or nil, for non-objects
	isObj  bool
	isList bool
	list   []node
}

func decodeOrdered(b []byte) (node, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return decodeNode(dec)
}

func decodeNode(dec *json.Decoder) (node, error) {
	tok, err := dec.Token()
	if err != nil {
		return node{}, err
	}
	switch t := tok.(type) {
	case json.Delim:
		if t == '{' {
			n := node{isObj: true}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return node{}, err
				}
				v, err := decodeNode(dec)
				if err != nil {
					return node{}, err
				}
				n.keys = append(n.keys, k.(string))
				n.vals = append(n.vals, v)
			}
			_, err := dec.Token() // '}'
			return n, err
		}
		n := node{isList: true}
		for dec.More() {
			v, err := decodeNode(dec)
			if err != nil {
				return node{}, err
			}
			n.list = append(n.list, v)
		}
		_, err := dec.Token() // ']'
		return n, err
	default:
		return node{scalar: t}, nil
	}
}

func (n node) isScalar() bool { return !n.isObj && !n.isList }

func (n node) String() string {
	switch {
	case n.isList:
		parts := make([]string, len(n.list))
		for i, e := range n.list {
			parts[i] = e.String()
		}
		s := "[" + strings.Join(parts, " ") + "]"
		if len(s) > 60 {
			s = fmt.Sprintf("[%d values]", len(n.list))
		}
		return s
	case n.isObj:
		return fmt.Sprintf("{%d fields}", len(n.keys))
	}
	switch v := n.scalar.(type) {
	case json.Number:
		// The literal as --json has it: an exact sum keeps all its
		// digits, a float every digit that tells it apart.
		return v.String()
	case nil:
		return "-"
	default:
		return fmt.Sprint(v)
	}
}

// maxRows bounds how many rows of one table a person is shown.
const maxRows = 50

// printResult writes a merged result for a person: one line per entry of
// scalars ("inside   sum 785405457   count 1000"), and a table for an entry
// whose members are themselves objects (groups, per-column statistics),
// whose first columns are headed by labels[entry] when set: one column per
// group_by path, the nested groups of several paths flattened into rows.
func printResult(w io.Writer, result any, labels map[string][]string) error {
	b, err := json.Marshal(result)
	if err != nil {
		return err
	}
	root, err := decodeOrdered(b)
	if err != nil || !root.isObj {
		fmt.Fprintf(w, "result   %s\n", b)
		return nil
	}
	for i, name := range root.keys {
		v := root.vals[i]
		switch {
		case v.isScalar() || v.isList:
			fmt.Fprintf(w, "%-16s %s\n", name, v)
		case allScalar(v):
			var parts []string
			for j, k := range v.keys {
				parts = append(parts, k+" "+v.vals[j].String())
			}
			fmt.Fprintf(w, "%-16s %s\n", name, strings.Join(parts, "   "))
		default:
			printTable(w, name, labels[name], v)
		}
	}
	return nil
}

func allScalar(n node) bool {
	for _, v := range n.vals {
		if v.isObj {
			return false
		}
	}
	return true
}

// tableRow is one row of a table: its keys, one per label column, and
// the object of its scalar fields.
type tableRow struct {
	keys []string
	val  node
}

// tableRows flattens depth levels of nested objects into rows.
func tableRows(n node, depth int, prefix []string, out []tableRow) []tableRow {
	for i, k := range n.keys {
		keys := append(prefix[:len(prefix):len(prefix)], k)
		if v := n.vals[i]; depth > 1 && v.isObj {
			out = tableRows(v, depth-1, keys, out)
		} else {
			out = append(out, tableRow{keys, v})
		}
	}
	return out
}

// printTable prints an object of objects as rows (its members) and columns
// (the members' scalar fields, in first-seen order). With several labels
// the object nests one level per label, and each row is a path through
// the levels.
func printTable(w io.Writer, name string, labels []string, n node) {
	rows := tableRows(n, max(len(labels), 1), nil, nil)
	var cols []string
	seen := map[string]bool{}
	for _, row := range rows {
		for j, k := range row.val.keys {
			if !seen[k] && !row.val.vals[j].isObj {
				seen[k] = true
				cols = append(cols, k)
			}
		}
	}
	fmt.Fprintf(w, "%s\n", name)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := labels
	if len(head) == 0 {
		head = []string{""}
	}
	fmt.Fprintf(tw, "  %s\t%s\t\n", strings.Join(head, "\t"), strings.Join(cols, "\t"))
	for i, r := range rows {
		if i == maxRows {
			tw.Flush()
			fmt.Fprintf(w, "  ... and %d more rows (all of them are in --json)\n", len(rows)-maxRows)
			return
		}
		row := r.val
		cells := make([]string, len(cols))
		for c, col := range cols {
			cells[c] = "-"
			for j, k := range row.keys {
				if k == col {
					cells[c] = row.vals[j].String()
				}
			}
		}
		if !row.isObj {
			cells = []string{row.String()}
		}
		keys := r.keys
		for len(keys) < len(head) {
			keys = append(keys, "-")
		}
		fmt.Fprintf(tw, "  %s\t%s\t\n", strings.Join(keys, "\t"), strings.Join(cells, "\t"))
	}
	tw.Flush()
}

// numberText writes a float64 as --json does: encoding/json's shortest form
// that reads back as the same float64 ("0.7853981633974483",
// "9333338000000000000", "1e-7"), or NaN and ±Inf, which JSON cannot hold,
// as Go prints them.
func numberText(f float64) string {
	b, err := json.Marshal(f)
	if err != nil {
		return fmt.Sprint(f)
	}
	return string(b)
}
