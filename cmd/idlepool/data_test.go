package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// kfoldManifest is a k = 2 cross-validation of the kfold example over
// data.csv beside the manifest, with extra appended to it.
func kfoldManifest(t *testing.T, data, extra string) string {
	t.Helper()
	m := writeManifest(t, "kfold", `name = "cv"
program = "prog.wasm"
[inputs]
data = "data.csv"
[split]
rule = "kfold"
k = 2
input = "data"
[[merge]]
field = "test_rows"
rule = "sum"
[[merge]]
name = "folds"
rule = "collect"
`+extra)
	if err := os.WriteFile(filepath.Join(filepath.Dir(m), "data.csv"), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return m
}

// notStarted fails when stderr shows that the run started computing.
func notStarted(t *testing.T, stderr string) {
	t.Helper()
	if strings.Contains(stderr, "tasks on") || strings.Contains(stderr, "progress") {
		t.Errorf("the run started before the problem was found:\n%s", stderr)
	}
}

// TestKfoldCSVRecords runs issue 9's smallest case end to end: a header and
// four records on five lines, a quoted field holding a line break. The
// split counts records, as the program reads them, so every task works.
func TestKfoldCSVRecords(t *testing.T) {
	m := kfoldManifest(t, "a,label\n1,0\n\"2\n\",1\n3,0\n4,1\n", "")
	r, _ := runJSON(t, t.TempDir(), m)
	if r.Tasks.OK != 2 || r.Tasks.Failed != 0 {
		t.Fatalf("tasks = %+v, failures %+v; want 2 ok", r.Tasks, r.Failures)
	}
	var sum struct{ Sum int64 }
	if err := json.Unmarshal(r.Result["test_rows"], &sum); err != nil || sum.Sum != 4 {
		t.Errorf("test_rows = %s, want a sum of 4 records", r.Result["test_rows"])
	}

	// A file that is not CSV is refused before anything runs, naming the
	// file and the line, with a hint about the data.
	m = kfoldManifest(t, "a,label\n1,0\n\"2\n,1\n3,0\n4,1\n", "")
	out := idlepool(t, t.TempDir(), "run", m)
	if out.code != 1 {
		t.Errorf("exit %d, want 1", out.code)
	}
	for _, w := range []string{"data.csv line 3:", "not closed", `split.format = "lines"`, "hint: the data file is at fault"} {
		if !strings.Contains(out.stderr, w) {
			t.Errorf("stderr lacks %q:\n%s", w, out.stderr)
		}
	}
	notStarted(t, out.stderr)
}

// TestHintsPointAtTheCause checks that the hint after an error is about
// what is wrong: the data, the program, the merge entries or the manifest.
func TestHintsPointAtTheCause(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		manifest    func(t *testing.T) string
		want, avoid []string
		started     bool
	}{
		{"text cell in the data", func(t *testing.T) string {
			return kfoldManifest(t, "a,label\n1,0\nx,1\n3,0\n4,1\n", "")
		}, []string{`not a number: "x"`, "exit status 65", "hint: the program says its input data is wrong"}, []string{"fix the program"}, true},
		{"program that fails", func(t *testing.T) string {
			return writeManifest(t, "fail", "name = \"f\"\nprogram = \"prog.wasm\"\n[split]\nrule = \"range\"\ntasks = 2\n[[merge]]\nfield = \"x\"\nrule = \"sum\"\n")
		}, []string{"hint: fix the program"}, []string{"data"}, true},
		{"result without the merged field", func(t *testing.T) string {
			return writeManifest(t, "params", "name = \"p\"\nprogram = \"prog.wasm\"\n[split]\nrule = \"range\"\ntasks = 2\n[split.params]\nn = 1\n[[merge]]\nfield = \"count\"\nrule = \"sum\"\n")
		}, []string{"field count", "hint: the program's result does not have what the [[merge]] entries read"}, []string{"fix the program"}, true},
		{"unknown manifest field", func(t *testing.T) string {
			return writeManifest(t, "params", "name = \"p\"\nprogram = \"prog.wasm\"\nsplitt = 1\n[split]\nrule = \"range\"\ntasks = 2\n[[merge]]\nfield = \"n\"\nrule = \"sum\"\n")
		}, []string{"splitt: unknown field", "hint: see the manifest format in docs/author.md"}, nil, false},
		{"derive mean of a sum", func(t *testing.T) string {
			return kfoldManifest(t, "a,label\n1,0\n2,1\n", "[derive]\nx = \"test_rows.mean\"\n")
		}, []string{`derive.x: "test_rows.mean" cannot be evaluated: merge "test_rows" (rule sum) gives "test_rows", "test_rows.count"`, "hint: a [derive] name"}, []string{"e.g."}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := idlepool(t, t.TempDir(), "run", tc.manifest(t))
			if out.code != 1 {
				t.Errorf("exit %d, want 1", out.code)
			}
			for _, w := range tc.want {
				if !strings.Contains(out.stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, out.stderr)
				}
			}
			for _, w := range tc.avoid {
				if strings.Contains(out.stderr, w) {
					t.Errorf("stderr has %q:\n%s", w, out.stderr)
				}
			}
			if n := strings.Count(out.stderr, "docs/author.md"); n > 1 {
				t.Errorf("stderr points at the author's guide %d times:\n%s", n, out.stderr)
			}
			if !tc.started {
				notStarted(t, out.stderr)
			}
		})
	}
}

// TestCollectTaskColumn checks a whole-result collect beside results that
// have their own "task": refused before running when the manifest shows it,
// and otherwise costing only that entry its rows, never another entry or
// the task.
func TestCollectTaskColumn(t *testing.T) {
	out := idlepool(t, t.TempDir(), "run", writeManifest(t, "params", `name = "p"
program = "prog.wasm"
[split]
rule = "range"
tasks = 3
[split.params]
task = 7
[[merge]]
name = "all"
rule = "collect"
[[merge]]
field = "task"
rule = "sum"
`))
	if out.code != 1 || !strings.Contains(out.stderr, `merge[0]: collect of the whole result adds a "task" column`) {
		t.Errorf("exit %d, want 1 and a refusal:\n%s", out.code, out.stderr)
	}
	notStarted(t, out.stderr)

	m := writeManifest(t, "params", `name = "p"
program = "prog.wasm"
[split]
rule = "range"
tasks = 3
[split.params]
task = "mine"
n = 2
[[merge]]
name = "all"
rule = "collect"
[[merge]]
field = "n"
rule = "sum"
[[merge]]
name = "ns"
rule = "collect"
fields = ["n"]
`)
	home := t.TempDir()
	out = idlepool(t, home, "run", m, "--json", "--workers", "2")
	if out.code != 1 {
		t.Errorf("exit %d, want 1 (rows are missing)", out.code)
	}
	var doc struct {
		result
		EntryFailures []struct {
			Entry   string
			Task    int64
			Problem string
		} `json:"entry_failures"`
	}
	if err := json.Unmarshal([]byte(out.stdout), &doc); err != nil {
		t.Fatalf("stdout is not one JSON document: %v\n%s", err, out.stdout)
	}
	if doc.Tasks.OK != 3 || doc.Tasks.Failed != 0 {
		t.Errorf("tasks = %+v, want 3 ok", doc.Tasks)
	}
	for name, want := range map[string]string{
		"n":   `{"count":3,"sum":6}`,
		"all": `{"rows":0,"skipped":0,"refused":3}`,
		"ns":  `{"rows":3,"skipped":0}`,
	} {
		var got bytes.Buffer
		if err := json.Compact(&got, doc.Result[name]); err != nil || got.String() != want {
			t.Errorf("result %s = %s, want %s", name, doc.Result[name], want)
		}
	}
	if len(doc.EntryFailures) != 3 || doc.EntryFailures[0].Entry != "all" || !strings.Contains(doc.EntryFailures[0].Problem, `has its own "task"`) {
		t.Errorf("entry_failures = %+v", doc.EntryFailures)
	}
	for _, w := range []string{`merge "all" wrote no row for some tasks`, "hint: the other merge entries have every task"} {
		if !strings.Contains(out.stderr, w) {
			t.Errorf("stderr lacks %q:\n%s", w, out.stderr)
		}
	}
}
