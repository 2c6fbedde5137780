package job

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestParseManifestAllErrors: a manifest with several problems gets
// every one at once, those of its text with their line and column, an
// unknown key with the known key it most likely meant, and none that
// only follows from another (an entry without its misspelt rule).
func TestParseManifestAllErrors(t *testing.T) {
	tests := []struct {
		name string
		text string
		want []string // the lines of the error
	}{
		{
			name: "a misspelt key, a wrong type and a missing program",
			text: "name = \"sweep\"\n[split]\nrule = \"range\"\ntasks = \"ten\"\n[[merge]]\nfield = \"x\"\nrul = \"sum\"\n",
			want: []string{
				`m.toml:4:9: split.tasks: want an integer, got a TOML string`,
				`m.toml:7:1: merge.rul: unknown field; did you mean "rule"?`,
				`m.toml: program: missing: the path of the .wasm program, e.g. program = "pi.wasm"`,
			},
		},
		{
			name: "unknown key before a wrong type, in file order",
			text: "name = \"x\"\nprogrm = \"p.wasm\"\n[split]\nrule = \"range\"\ntasks = 3.5\n[[merge]]\nrule = \"sum\"\nfield = \"v\"\n",
			want: []string{
				`m.toml:2:1: progrm: unknown field; did you mean "program"?`,
				`m.toml:5:9: split.tasks: want an integer, got a TOML float`,
			},
		},
		{
			name: "wrong types in three tables and an unknown table",
			text: "name = \"x\"\nprogram = \"p.wasm\"\n[split]\nrule = \"range\"\ntasks = 3\n[[merge]]\nrule = \"histogram\"\nfield = \"v\"\nbins = \"many\"\n" +
				"[policy]\nmemory_mib = \"lots\"\ntime_limit = 60\n[outputs]\nx = 1\n",
			want: []string{
				`m.toml:9:8: merge.bins: want an integer, got a TOML string`,
				`m.toml:11:14: policy.memory_mib: want an integer, got a TOML string`,
				`m.toml:12:14: policy.time_limit: want a duration string such as "90s" or "5m", got 60`,
				`m.toml:13:2: outputs: unknown field; the manifest's top level has name, description, link, program, inputs, split, merge, derive, policy, requirements, verify`,
			},
		},
		{
			name: "a key in the wrong table",
			text: "name = \"x\"\nprogram = \"p.wasm\"\ntasks = 3\n[split]\nrule = \"range\"\n[[merge]]\nrule = \"sum\"\nfield = \"v\"\n[policy]\ngpu = true\n",
			want: []string{
				`m.toml:3:1: tasks: unknown field here; [split] has a field "tasks": move it there`,
				`m.toml:10:1: policy.gpu: unknown field here; [requirements] has a field "gpu": move it there`,
				`m.toml: split.tasks: want 1..4294967296 tasks, got 0`,
			},
		},
		{
			name: "a key of several tables",
			text: "name = \"x\"\nprogram = \"p.wasm\"\nrule = \"range\"\n[split]\nrule = \"range\"\ntasks = 2\n[[merge]]\nrule = \"sum\"\nfield = \"v\"\n",
			want: []string{
				`m.toml:3:1: rule: unknown field here; [split], [[merge]] and [verify] have a field "rule": move it there`,
			},
		},
		{
			name: "problems in several sections, none in the text, those without a key last",
			text: "program = \"p.wasm\"\n[split]\nrule = \"sweep\"\n[[merge]]\nrule = \"sum\"\nfield = \"v\"\n[[merge]]\nrule = \"average\"\nfield = \"w\"\n[policy]\nquorum = 3\n",
			want: []string{
				`m.toml:3:1: split.rule: unknown rule "sweep": want one of range, grid, replicas, kfold, chunks`,
				`m.toml:8:1: merge[1]: merge "w": unknown rule "average" (want one of sum, stats, histogram, quantiles, topk, argmin, argmax, vector-mean, vector-sum, collect, concat)`,
				`m.toml:11:1: policy.quorum: want 1..redundancy (2), got 3`,
				`m.toml: name: missing: give the job a short name, e.g. name = "pi"`,
			},
		},
		{
			name: "a syntax error ends the reading",
			text: "name = \"x\"\nnmae = 3\n[split\nrule = \"range\"\n",
			want: []string{`m.toml:3:7: expected ']' to close table name`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseManifest("m.toml", "/jobs", []byte(tc.text))
			if err == nil {
				t.Fatal("ParseManifest succeeded")
			}
			if diff := cmp.Diff(tc.want, strings.Split(err.Error(), "\n")); diff != "" {
				t.Errorf("error lines (-want +got):\n%s", diff)
			}
			if !errors.Is(err, ErrManifest) {
				t.Error("errors.Is(err, ErrManifest) = false")
			}
			var me *ManifestError
			if !errors.As(err, &me) || me.Error() != tc.want[0] {
				t.Errorf("errors.As found %v, want the first problem %q", me, tc.want[0])
			}
			var list ManifestErrors
			if got := errors.As(err, &list); got != (len(tc.want) > 1) {
				t.Errorf("errors.As(err, ManifestErrors) = %v with %d problems", got, len(tc.want))
			}
		})
	}
}

// TestLoadManifestEveryProblemPlaced: a manifest with problems of its text
// and of its fields in every section gets all of them from one reading,
// each with the line and column of its key (a wrong value's of the
// value), in file order.
func TestLoadManifestEveryProblemPlaced(t *testing.T) {
	const text = `name = "bad"
program = "p.wasm"

[split]
rule = "grid"

[split.grid]
T = [1.5, 2.0]
x = { start = 0.0, stop = 1.0, step = -0.1 }

[[merge]]
feild = "v"
rule = "sum"

[[merge]]
field = "w"
rule = "summ"

[derive]
r = "4 * nothing / w"
s = "w.mean"
t = "v * 2"

[policy]
memory_mib = 8000
time_limit = "5 minutes"
redundancy = "two"
participants = "everyone"
`
	path := filepath.Join(t.TempDir(), "bad1.toml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadManifest(path)
	if err == nil {
		t.Fatal("LoadManifest succeeded")
	}
	want := []string{
		path + `:9:1: split.grid.x: step = -0.1 moves away from stop = 1 (start = 0): want a positive step`,
		path + `:12:1: merge.feild: unknown field; did you mean "field"?`,
		path + `:17:1: merge[1]: merge "w": unknown rule "summ" (want one of sum, stats, histogram, quantiles, topk, argmin, argmax, vector-mean, vector-sum, collect, concat)`,
		// s names merge "w", whose rule is wrong, and t the entry whose
		// field is misspelt: neither is a problem of its own.
		path + `:20:1: derive.r: "nothing" names no merged value: names start with a [[merge]] entry's name (sum, w), e.g. "sum" or "sum.count"`,
		path + `:25:1: policy.memory_mib: want 1..4096 MiB, got 8000`,
		path + `:26:14: policy.time_limit: want a duration such as "90s" or "5m": time: unknown unit " minutes" in duration "5 minutes"`,
		path + `:27:14: policy.redundancy: want an integer, got a TOML string`,
		path + `:28:1: policy.participants: want "open", "invite" or "owner", got "everyone"`,
	}
	if diff := cmp.Diff(want, strings.Split(err.Error(), "\n")); diff != "" {
		t.Errorf("error lines (-want +got):\n%s", diff)
	}
	list, ok := errors.AsType[ManifestErrors](err)
	if !ok {
		t.Fatalf("error %T is not ManifestErrors", err)
	}
	for _, e := range list {
		if e.Line == 0 || e.Column == 0 {
			t.Errorf("%v: line %d, column %d; want both", e, e.Line, e.Column)
		}
	}
}

// TestParseManifestFollowingProblems: a problem of a field that follows
// from a problem of the text is left out, and one that does not is kept.
func TestParseManifestFollowingProblems(t *testing.T) {
	const head = "name = \"x\"\nprogram = \"p.wasm\"\n[split]\nrule = \"range\"\ntasks = 2\n"
	tests := []struct {
		name string
		text string
		want []string
	}{
		{
			name: "a mistyped quorum leaves min_quorum unchecked",
			text: head + "[[merge]]\nrule = \"sum\"\nfield = \"v\"\n[policy]\nredundancy = 3\nquorum = \"3\"\n[verify]\nmin_quorum = 3\n",
			want: []string{`m.toml:11:10: policy.quorum: want an integer, got a TOML string`},
		},
		{
			name: "a derived value may name the entry a misspelt name was meant to name",
			text: head + "[[merge]]\nrule = \"sum\"\nnmae = \"n\"\nfield = \"v\"\n[derive]\na = \"n * 2\"\nb = \"v * 2\"\nc = \"q\"\n",
			want: []string{
				`m.toml:8:1: merge.nmae: unknown field; did you mean "name"?`,
				`m.toml:13:1: derive.c: "q" names no merged value: names start with a [[merge]] entry's name (v), e.g. "v" or "v.count"`,
			},
		},
		{
			name: "a problem of one merge entry's text leaves the others checked",
			text: head + "[[merge]]\nrul = \"sum\"\nfield = \"v\"\n[[merge]]\nrule = \"sum\"\nfield = \"w\"\nbins = 3\n",
			want: []string{
				`m.toml:7:1: merge.rul: unknown field; did you mean "rule"?`,
				`m.toml:12:1: merge[1]: merge "w": min, max and bins apply only to rule = "histogram"`,
			},
		},
		{
			name: "every axis of a grid",
			text: "name = \"x\"\nprogram = \"p.wasm\"\n[split]\nrule = \"grid\"\n[split.grid]\nb = []\na = \"x\"\n[[merge]]\nrule = \"sum\"\nfield = \"v\"\n",
			want: []string{
				`m.toml:6:1: split.grid.b: want a non-empty list of values`,
				`m.toml:7:1: split.grid.a: want a list of values, e.g. a = [1.5, 2.0], or a range, e.g. a = { start = 1.5, stop = 3.5, step = 0.05 }; got a string`,
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseManifest("m.toml", "/jobs", []byte(tc.text))
			if err == nil {
				t.Fatal("ParseManifest succeeded")
			}
			if diff := cmp.Diff(tc.want, strings.Split(err.Error(), "\n")); diff != "" {
				t.Errorf("error lines (-want +got):\n%s", diff)
			}
		})
	}
}

// TestNotManifest: a file that cannot be a manifest is named for what it
// is, and a WebAssembly program is told apart.
func TestNotManifest(t *testing.T) {
	tests := []struct {
		name    string
		data    string
		want    string
		program bool
	}{
		{"WebAssembly", "\x00asm\x01\x00\x00\x00\x01\x06", "prog.bin: a WebAssembly program, not a job manifest", true},
		{"zip", "PK\x03\x04\x14\x00\x00\x00", "prog.bin: a zip archive, not a job manifest", false},
		{"ELF", "\x7fELF\x02\x01\x01\x00", "prog.bin: a native program or library (ELF), not a job manifest", false},
		{"gzip", "\x1f\x8b\x08\x00", "prog.bin: a gzip-compressed file, not a job manifest", false},
		{"UTF-16", "\xff\xfen\x00a\x00m\x00e\x00", "prog.bin: UTF-16 text, not a job manifest, which is UTF-8: save it as UTF-8", false},
		{"binary", "name = \"x\"\n\x00\x01\x02", "prog.bin: binary data, not a job manifest (a TOML text file)", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseManifest("prog.bin", "/jobs", []byte(tc.data))
			if err == nil || err.Error() != tc.want {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if !errors.Is(err, ErrNotManifest) || !errors.Is(err, ErrManifest) {
				t.Errorf("errors.Is(err, ErrNotManifest), (err, ErrManifest) = %v, %v; want true, true",
					errors.Is(err, ErrNotManifest), errors.Is(err, ErrManifest))
			}
			if got := errors.Is(err, ErrProgramNotManifest); got != tc.program {
				t.Errorf("errors.Is(err, ErrProgramNotManifest) = %v, want %v", got, tc.program)
			}
		})
	}
	// Text, even text that is no TOML, is the TOML parser's to judge.
	_, err := ParseManifest("notes.txt", "/jobs", []byte("hello there\n"))
	if err == nil || errors.Is(err, ErrNotManifest) {
		t.Errorf("text that is not TOML: error %v, want a TOML error, not ErrNotManifest", err)
	}
}

func TestEditDistance(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"rule", "rule", 0},
		{"rul", "rule", 1},
		{"rlue", "rule", 1}, // a swap is one edit
		{"taskss", "tasks", 1},
		{"tsaks", "tasks", 1},
		{"memory_mb", "memory_mib", 1},
		{"redundacy", "redundancy", 1},
		{"", "abc", 3},
		{"ca", "abc", 3}, // optimal string alignment: no edit of a swapped pair
		{"données", "donnees", 1},
		{"outputs", "inputs", 3},
	}
	for _, tc := range tests {
		if got := EditDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("EditDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := EditDistance(tc.b, tc.a); got != tc.want {
			t.Errorf("EditDistance(%q, %q) = %d, want %d (symmetric)", tc.b, tc.a, got, tc.want)
		}
	}
}
