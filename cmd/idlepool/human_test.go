package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"idlepool/pool"
)

// The plain output shows every merged and derived number as --json has
// it: an exact integer sum in all its digits, a float with every digit
// that tells it apart, never a rounded form.
func TestPrintHumanExactNumbers(t *testing.T) {
	result := json.RawMessage(`{
		"total": 9333338000000000000,
		"big": {"sum": -92233720368547758080123, "count": 3},
		"x": {"count": 2, "mean": 0.30000000000000004, "min": 0.1, "max": 123456789.12345679},
		"v": [1, 18446744073709551617],
		"byT": {"1.5": {"count": 2, "sum": 12345678901234567}, "2.5": {"count": 1, "sum": 1e-7}}
	}`)
	out := &pool.Outcome{
		Derived: map[string]float64{"ratio": 0.7853981633974483, "huge": 9.333338e18, "tiny": 1.0000000000000002},
	}
	doc := runDoc{Name: "n", Job: "id", Result: result}
	var b strings.Builder
	printHuman(&b, doc, out, map[string][]string{"byT": {"T"}})
	want := `
job      n
id       id
tasks    0 ok, 0 failed, 0 total

total            9333338000000000000
big              sum -92233720368547758080123   count 3
x                count 2   mean 0.30000000000000004   min 0.1   max 123456789.12345679
v                [1 18446744073709551617]
byT
      T  count                sum
    1.5      2  12345678901234567
    2.5      1               1e-7
huge             9333338000000000000
ratio            0.7853981633974483
tiny             1.0000000000000002
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("printHuman (-want +got):\n%s", diff)
	}
}

// --json names each output file (collect, concat) by its path as well as
// its digest and size, and the plain output says where it landed.
func TestRunDocOutputPaths(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "output-folds.jsonl")
	body := "{\"task\":0}\n{\"task\":1}\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	out := &pool.Outcome{Result: map[string]any{}, Outputs: map[string]string{"folds": path}}
	doc, err := newRunDoc("n", out)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(doc.Outputs)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(body))
	want := map[string]map[string]any{"folds": {"sha256": hex.EncodeToString(sum[:]), "bytes": float64(len(body)), "path": path}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("outputs in --json (-want +got):\n%s", diff)
	}
	var plain strings.Builder
	printHuman(&plain, doc, out, nil)
	if line := "output   folds: " + path + "\n"; !strings.Contains(plain.String(), line) {
		t.Errorf("plain output lacks %q:\n%s", line, plain.String())
	}
}

// An entry grouped by two paths prints one row per pair, with a column
// for each path, in the result's order.
func TestPrintHumanGroupedByTwo(t *testing.T) {
	result := json.RawMessage(`{"e": {
		"0.1": {"1": {"count": 2, "mean": 0.5}, "10": {"count": 1, "mean": 1.5}},
		"0.2": {"1": {"count": 1, "mean": -3}}
	}}`)
	var b strings.Builder
	printHuman(&b, runDoc{Name: "n", Job: "id", Result: result}, &pool.Outcome{}, map[string][]string{"e": {"alpha", "beta"}})
	want := `
job      n
id       id
tasks    0 ok, 0 failed, 0 total

e
    alpha  beta  count  mean
      0.1     1      2   0.5
      0.1    10      1   1.5
      0.2     1      1    -3
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("printHuman (-want +got):\n%s", diff)
	}
}
