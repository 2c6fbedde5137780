package job

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestParseManifest(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "jobs")
	text := `name = "ising"
description = "sweep"
program = "bin/ising.wasm"

[inputs]
lattice = "data/lattice.txt"
abs = "/srv/data/x.bin"
up = "../shared/table.csv"

[split]
rule = "grid"
[split.params]
sweeps = 1000
[split.grid]
T = [1.5, 2.0]

[[merge]]
rule = "stats"
field = "energy"

[[merge]]
name = "m"
rule = "sum"
field = "magnetisation"

[derive]
e = "energy.mean / 2"

[policy]
redundancy = 3
time_limit = "90s"
`
	m, err := ParseManifest("jobs/ising.toml", dir, []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	want := &Manifest{
		Name:        "ising",
		Description: "sweep",
		Program:     filepath.Join(dir, "bin", "ising.wasm"),
		Inputs: map[string]string{
			"lattice": filepath.Join(dir, "data", "lattice.txt"),
			"abs":     filepath.FromSlash("/srv/data/x.bin"),
			"up":      filepath.Join(filepath.Dir(dir), "shared", "table.csv"),
		},
		Split: SplitSpec{
			Rule:   "grid",
			Params: map[string]any{"sweeps": int64(1000)},
			Grid:   map[string]any{"T": []any{1.5, 2.0}},
		},
		Merge: []MergeSpec{
			{Name: "energy", Rule: "stats", Field: "energy"},
			{Name: "m", Rule: "sum", Field: "magnetisation"},
		},
		Derive: map[string]string{"e": "energy.mean / 2"},
		Dir:    dir,
		Path:   "jobs/ising.toml",
	}
	opts := cmp.Options{cmpopts.IgnoreUnexported(MergeSpec{}), cmpopts.IgnoreFields(Manifest{}, "Policy")}
	if diff := cmp.Diff(want, m, opts); diff != "" {
		t.Errorf("ParseManifest (-want +got):\n%s", diff)
	}
	wantPolicy := basePolicy{Redundancy: 3, Quorum: DefaultQuorum, LeaseTimeout: DefaultLeaseTimeout, MemoryMiB: DefaultMemoryMiB,
		TimeLimit: 90 * time.Second, Participants: DefaultParticipants}
	if diff := cmp.Diff(wantPolicy, basePolicyOf(m.Policy)); diff != "" {
		t.Errorf("Policy (-want +got):\n%s", diff)
	}
}

// basePolicy is the part of Policy these tests pin; further fields (such as
// the cost model) have their own tests.
type basePolicy struct {
	Redundancy, Quorum      int
	LeaseTimeout, TimeLimit time.Duration
	MemoryMiB               int
	Participants            string
}

func basePolicyOf(p Policy) basePolicy {
	return basePolicy{p.Redundancy, p.Quorum, p.LeaseTimeout.Duration, p.TimeLimit.Duration, p.MemoryMiB, p.Participants}
}

func TestParseManifestPolicyDefaults(t *testing.T) {
	tests := []struct {
		policy string
		want   basePolicy
	}{{
		policy: "",
		want: basePolicy{Redundancy: 2, Quorum: 2, LeaseTimeout: 5 * time.Minute, MemoryMiB: 256,
			TimeLimit: 10 * time.Minute, Participants: "open"},
	}, {
		policy: "redundancy = 1",
		want: basePolicy{Redundancy: 1, Quorum: 1, LeaseTimeout: 5 * time.Minute, MemoryMiB: 256,
			TimeLimit: 10 * time.Minute, Participants: "open"},
	}, {
		policy: "redundancy = 5\nquorum = 3\nlease_timeout = \"1s\"\nmemory_mib = 4096\ntime_limit = \"100ms\"\nparticipants = \"owner\"",
		want: basePolicy{Redundancy: 5, Quorum: 3, LeaseTimeout: time.Second, MemoryMiB: 4096,
			TimeLimit: 100 * time.Millisecond, Participants: "owner"},
	}, {
		policy: "lease_timeout = \"1h2m3.004s\"\nparticipants = \"invite\"",
		want: basePolicy{Redundancy: 2, Quorum: 2, LeaseTimeout: time.Hour + 2*time.Minute + 3004*time.Millisecond,
			MemoryMiB: 256, TimeLimit: 10 * time.Minute, Participants: "invite"},
	}}
	for _, tc := range tests {
		t.Run(tc.policy, func(t *testing.T) {
			text := validHead + validSplit + validMerge + "[policy]\n" + tc.policy + "\n"
			m, err := ParseManifest("m.toml", "/d", []byte(text))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, basePolicyOf(m.Policy)); diff != "" {
				t.Errorf("Policy (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseManifestMergeNames(t *testing.T) {
	text := validHead + validSplit + `
[[merge]]
rule = "sum"
field = "a.b"
[[merge]]
rule = "sum"
field = "c"
name = "total"
`
	m, err := ParseManifest("m.toml", "/d", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range m.Merge {
		got = append(got, s.Name)
	}
	if diff := cmp.Diff([]string{"a.b", "total"}, got); diff != "" {
		t.Errorf("merge names (-want +got):\n%s", diff)
	}
}

func TestLoadManifest(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"sub/job.toml": validHead + validSplit + validMerge})
	t.Chdir(dir)
	m, err := LoadManifest(filepath.Join("sub", "job.toml"))
	if err != nil {
		t.Fatal(err)
	}
	// t.TempDir may lie behind a symbolic link; compare resolved paths.
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	gotDir, err := filepath.EvalSymlinks(m.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(realDir, "sub"); gotDir != want || !filepath.IsAbs(m.Dir) {
		t.Errorf("Dir = %q, want the absolute %q", m.Dir, want)
	}
	if want := filepath.Join("sub", "job.toml"); m.Path != want {
		t.Errorf("Path = %q, want %q as given", m.Path, want)
	}
	if want := filepath.Join(m.Dir, "p.wasm"); m.Program != want {
		t.Errorf("Program = %q, want %q", m.Program, want)
	}

	_, err = LoadManifest(filepath.Join(dir, "missing.toml"))
	if !errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrManifest) {
		t.Errorf("LoadManifest(missing) = %v, want a not-exist error that is not ErrManifest", err)
	}
	writeTree(t, dir, map[string]string{"bad.toml": "name = \n"})
	_, err = LoadManifest("bad.toml")
	var me *ManifestError
	if !errors.As(err, &me) || me.File != "bad.toml" || me.Line != 1 {
		t.Errorf("LoadManifest(bad.toml) = %#v, want a ManifestError for bad.toml line 1", err)
	}
}

func TestManifestErrorFormat(t *testing.T) {
	tests := []struct {
		err  ManifestError
		want string
	}{
		{ManifestError{File: "a.toml", Msg: "broken"}, "a.toml: broken"},
		{ManifestError{File: "a.toml", Line: 3, Msg: "broken"}, "a.toml:3: broken"},
		{ManifestError{File: "a.toml", Field: "split.rule", Msg: "broken"}, "a.toml: split.rule: broken"},
		{ManifestError{File: "a.toml", Line: 7, Field: "policy.quorum", Msg: "broken"}, "a.toml:7: policy.quorum: broken"},
	}
	for _, tc := range tests {
		t.Run(tc.want, func(t *testing.T) {
			if got := tc.err.Error(); got != tc.want {
				t.Errorf("Error() = %q, want %q", got, tc.want)
			}
			wrapped := fmt.Errorf("submit: %w", &tc.err)
			if !errors.Is(wrapped, ErrManifest) {
				t.Error("errors.Is(wrapped, ErrManifest) = false")
			}
			if errors.Is(wrapped, ErrExpr) {
				t.Error("errors.Is(wrapped, ErrExpr) = true")
			}
		})
	}
}

// Pieces of a valid manifest for the error cases below: validHead is lines
// 1-2, validSplit lines 3-5 and validMerge lines 6-8 when joined in order.
const (
	validHead  = "name = \"x\"\nprogram = \"p.wasm\"\n"
	validSplit = "[split]\nrule = \"range\"\ntasks = 3\n"
	validMerge = "[[merge]]\nrule = \"sum\"\nfield = \"v\"\n"
	valid      = validHead + validSplit + validMerge
)

// bigGrid has 2048^3 = 2^33 points.
var bigGrid = func() string {
	var b strings.Builder
	for _, axis := range []string{"a", "b", "c"} {
		b.WriteString(axis + " = [0")
		for i := 1; i < 2048; i++ {
			fmt.Fprintf(&b, ",%d", i)
		}
		b.WriteString("]\n")
	}
	return b.String()
}()

func TestParseManifestErrors(t *testing.T) {
	split := func(rest string) string { return validHead + "[split]\n" + rest + "\n" + validMerge }
	policy := func(rest string) string { return valid + "[policy]\n" + rest + "\n" }
	inputs := func(rest string) string { return validHead + "[inputs]\n" + rest + "\n" + validSplit + validMerge }
	tests := []struct {
		name  string
		text  string
		line  int    // 0: no line
		field string // "" : no field
		want  []string
	}{
		// TOML syntax and types: go-toml's message with a line.
		{name: "unterminated string", text: "name = \"x\nprogram = \"p.wasm\"\n", line: 1},
		{name: "missing value", text: validHead + "[split]\nrule =\n", line: 4},
		{name: "bad table header", text: validHead + "[split\nrule = \"range\"\n", line: 3},
		{name: "bare word value", text: validHead + validSplit + "[[merge]]\nrule = sum\n", line: 7},
		{name: "duplicate key", text: validHead + "name = \"y\"\n", line: 3, field: "name", want: []string{"already defined"}},
		{name: "duplicate table", text: valid + "[split]\nrule = \"grid\"\n", line: 9, field: "split", want: []string{"already exists"}},
		{name: "wrong type", text: validHead + "[split]\nrule = \"range\"\ntasks = \"3\"\n" + validMerge, line: 5, field: "split.tasks",
			want: []string{"want an integer, got a TOML string"}},
		{name: "input path not a string", text: inputs("x = 3"), line: 4, field: "inputs.x", want: []string{"integer", "string"}},
		{name: "merge not a list of tables", text: validHead + "merge = 1\n" + validSplit, line: 3, field: "merge"},

		// Unknown fields.
		{name: "unknown top-level field", text: validHead + "nmae = \"x\"\n" + validSplit + validMerge, line: 3, field: "nmae",
			want: []string{"unknown field"}},
		{name: "unknown split field", text: split("rule = \"range\"\ntasks = 3\nshufle = true"), line: 6, field: "split.shufle",
			want: []string{"unknown field"}},
		{name: "unknown merge field", text: valid + "bogus = 1\n", line: 9, field: "merge.bogus", want: []string{"unknown field"}},
		{name: "unknown policy field", text: policy("redundacy = 2"), line: 10, field: "policy.redundacy", want: []string{"unknown field"}},
		{name: "unknown table", text: valid + "[outputs]\nx = 1\n", line: 9, field: "outputs", want: []string{"unknown field"}},

		// Required fields.
		{name: "missing name", text: "program = \"p.wasm\"\n" + validSplit + validMerge, field: "name",
			want: []string{"missing", `name = "pi"`}},
		{name: "blank name", text: "name = \"  \"\nprogram = \"p.wasm\"\n" + validSplit + validMerge, line: 1, field: "name", want: []string{"missing"}},
		{name: "missing program", text: "name = \"x\"\n" + validSplit + validMerge, field: "program",
			want: []string{"missing", ".wasm", `program = "pi.wasm"`}},
		{name: "missing merge", text: validHead + validSplit, field: "merge", want: []string{"missing", "[[merge]]"}},
		{name: "empty merge list", text: validHead + "merge = []\n" + validSplit, line: 3, field: "merge", want: []string{"missing"}},
		{name: "missing split", text: validHead + validMerge, field: "split.rule",
			want: []string{"missing", "range, grid, replicas, kfold, chunks"}},

		// Split rules.
		{name: "unknown rule", text: split(`rule = "sweep"`), line: 4, field: "split.rule",
			want: []string{`unknown rule "sweep"`, "range, grid, replicas, kfold, chunks"}},
		{name: "rule in wrong case", text: split(`rule = "Range"`), line: 4, field: "split.rule", want: []string{`unknown rule "Range"`}},
		{name: "range without tasks", text: split(`rule = "range"`), field: "split.tasks", want: []string{"want 1..4294967296 tasks, got 0"}},
		{name: "range negative tasks", text: split("rule = \"range\"\ntasks = -1"), line: 5, field: "split.tasks", want: []string{"got -1"}},
		{name: "replicas too many tasks", text: split("rule = \"replicas\"\ntasks = 4294967297"), line: 5, field: "split.tasks",
			want: []string{"want 1..4294967296 tasks, got 4294967297"}},
		{name: "grid without axes", text: split(`rule = "grid"`), field: "split.grid", want: []string{"at least one axis", "T = [1.5, 2.0]"}},
		{name: "grid axis not a list", text: split("rule = \"grid\"\n[split.grid]\nT = 1.5"), line: 6, field: "split.grid.T",
			want: []string{"want a list of values, e.g. T = [1.5, 2.0], or a range", "got a float"}},
		{name: "grid axis a table not a range", text: split("rule = \"grid\"\n[split.grid.T]\na = 1"), line: 5, field: "split.grid.T",
			want: []string{`unknown key "a": a range has start, stop, and step or num`}},
		{name: "grid axis empty", text: split("rule = \"grid\"\n[split.grid]\nT = []"), line: 6, field: "split.grid.T",
			want: []string{"want a non-empty list"}},
		{name: "grid axis also a param", text: split("rule = \"grid\"\n[split.params]\nT = 2.0\n[split.grid]\nT = [1.5]"),
			line: 8, field: "split.grid.T", want: []string{"also set in split.params", "either constant or an axis"}},
		{name: "grid axis with a date", text: split("rule = \"grid\"\n[split.grid]\nday = [1979-05-27]"), line: 6, field: "split.grid.day",
			want: []string{"unsupported value", "strings, numbers, booleans, arrays or tables"}},
		{name: "grid axis with nan", text: split("rule = \"grid\"\n[split.grid]\nx = [1.0, nan]"), line: 6, field: "split.grid.x",
			want: []string{"finite"}},
		{name: "grid too large", text: split("rule = \"grid\"\n[split.grid]\n" + bigGrid), line: 5, field: "split.grid",
			want: []string{"more than 4294967296 points"}},
		{name: "kfold without k", text: validHead + "[inputs]\nd = \"d.csv\"\n[split]\nrule = \"kfold\"\ninput = \"d\"\n" + validMerge, field: "split.k", want: []string{"want 2..1000 folds, got 0"}},
		{name: "kfold k = 1", text: split("rule = \"kfold\"\nk = 1\ninput = \"d\""), line: 5, field: "split.k", want: []string{"got 1"}},
		{name: "kfold k too large", text: split("rule = \"kfold\"\nk = 1001\ninput = \"d\""), line: 5, field: "split.k", want: []string{"got 1001"}},
		{name: "kfold without input", text: split("rule = \"kfold\"\nk = 5"), field: "split.input",
			want: []string{"missing", "[inputs]"}},
		{name: "kfold unknown input", text: validHead + "[inputs]\ndata = \"d.csv\"\n" + "[split]\nrule = \"kfold\"\nk = 5\ninput = \"dat\"\n" + validMerge,
			line: 8, field: "split.input", want: []string{`no input named "dat" in [inputs]`}},
		{name: "kfold param clash", text: validHead + "[inputs]\nd = \"d.csv\"\n[split]\nrule = \"kfold\"\nk = 5\ninput = \"d\"\n[split.params]\nfold = 1\n" + validMerge,
			line: 10, field: "split.params.fold", want: []string{`kfold rule sets "fold"`, "another name"}},
		{name: "chunks without chunk_bytes", text: validHead + "[inputs]\nd = \"d.txt\"\n[split]\nrule = \"chunks\"\ninput = \"d\"\n" + validMerge,
			field: "split.chunk_bytes", want: []string{"want a positive chunk size in bytes, got 0"}},
		{name: "chunks negative chunk_bytes", text: split("rule = \"chunks\"\nchunk_bytes = -5\ninput = \"d\""), line: 5, field: "split.chunk_bytes",
			want: []string{"got -5"}},
		{name: "chunks without input", text: split("rule = \"chunks\"\nchunk_bytes = 100"), field: "split.input", want: []string{"missing"}},
		{name: "chunks param clash", text: validHead + "[inputs]\nd = \"d.txt\"\n[split]\nrule = \"chunks\"\nchunk_bytes = 9\ninput = \"d\"\nparams = { offset = 1 }\n" + validMerge,
			line: 9, field: "split.params.offset", want: []string{`chunks rule sets "offset"`}},
		{name: "param with a date", text: split("rule = \"range\"\ntasks = 3\n[split.params]\nwhen = 1979-05-27T07:32:00Z"), line: 6, field: "split.params",
			want: []string{"when", "unsupported value", "strings, numbers, booleans, arrays or tables"}},
		{name: "param with a local time", text: split("rule = \"range\"\ntasks = 3\n[split.params]\nat = 07:32:00"), line: 6, field: "split.params",
			want: []string{"at", "unsupported value"}},
		{name: "param with nan", text: split("rule = \"range\"\ntasks = 3\n[split.params]\nx = nan"), line: 6, field: "split.params",
			want: []string{"x", "want a finite number"}},
		{name: "param with nested inf", text: split("rule = \"range\"\ntasks = 3\n[split.params]\nx = { y = [1.0, -inf] }"), line: 6, field: "split.params",
			want: []string{"x", "want a finite number"}},

		// Inputs.
		{name: "input named chunk", text: inputs(`chunk = "c.txt"`), line: 4, field: "inputs.chunk", want: []string{`"chunk" is reserved`}},
		{name: "input named chunks", text: inputs(`chunks = "c.txt"`), line: 4, field: "inputs.chunks", want: []string{`"chunks" is reserved`}},
		{name: "input name with a dot first", text: inputs(`".hidden" = "h.txt"`), line: 4, field: "inputs..hidden",
			want: []string{"letters, digits, '_', '-' and '.'", "not start with '.'"}},
		{name: "input name with a slash", text: inputs(`"a/b" = "h.txt"`), line: 4, field: "inputs.a/b", want: []string{"letters, digits"}},
		{name: "input name with a space", text: inputs(`"a b" = "h.txt"`), line: 4, field: "inputs.a b", want: []string{"letters, digits"}},
		{name: "input name dot-dot", text: inputs(`".." = "h.txt"`), line: 4, field: "inputs...", want: []string{"letters, digits"}},
		{name: "input name not ASCII", text: inputs(`"données" = "h.txt"`), line: 4, field: "inputs.données", want: []string{"letters, digits"}},
		{name: "input name empty", text: inputs(`"" = "h.txt"`), line: 4, field: "inputs.", want: []string{"letters, digits"}},
		{name: "input name too long", text: inputs(strings.Repeat("n", 129) + ` = "h.txt"`), line: 4, field: "inputs." + strings.Repeat("n", 129),
			want: []string{"letters, digits"}},
		{name: "input empty path", text: inputs(`data = ""`), line: 4, field: "inputs.data", want: []string{"empty path"}},

		// Merge.
		{name: "merge unknown rule", text: validHead + validSplit + "[[merge]]\nrule = \"average\"\nfield = \"v\"\n", line: 7, field: "merge[0]",
			want: []string{"average"}},
		{name: "merge duplicate names", text: valid + "[[merge]]\nrule = \"stats\"\nfield = \"v\"\n", line: 9, field: "merge[1]",
			want: []string{`two merge entries are named "v"`, `name = "..."`}},

		// Derive.
		{name: "derive unbalanced", text: valid + "[derive]\nx = \"2 * (a\"\n", line: 10, field: "derive.x", want: []string{"bad expression", "want ')'"}},
		{name: "derive empty", text: valid + "[derive]\nx = \"\"\n", line: 10, field: "derive.x", want: []string{"unexpected end of expression"}},
		{name: "derive trailing garbage", text: valid + "[derive]\nx = \"a b\"\n", line: 10, field: "derive.x", want: []string{`unexpected "b"`}},
		{name: "derive unknown name", text: valid + "[derive]\nx = \"insid / 2\"\n", line: 10, field: "derive.x",
			want: []string{`"insid" names no merged value`, `e.g. "v" or "v.count"`}},
		{name: "derive mean of a sum", text: valid + "[derive]\nx = \"v.mean\"\n", line: 10, field: "derive.x",
			want: []string{`"v.mean" cannot be evaluated: merge "v" (rule sum) gives "v", "v.count"`}},
		{name: "derive value per group", text: validHead + validSplit + "[[merge]]\nrule = \"stats\"\nfield = \"e\"\ngroup_by = \"T\"\n[derive]\nx = \"e.mean\"\n",
			line: 11, field: "derive.x", want: []string{`merge "e" has group_by = "T"`, "one value per group"}},

		// A whole-result collect adds "task" to each row.
		{name: "collect of the whole result beside a task field", text: valid + "[[merge]]\nname = \"rows\"\nrule = \"collect\"\n[[merge]]\nname = \"t\"\nrule = \"stats\"\nfield = \"task\"\n",
			line: 9, field: "merge[1]", want: []string{`adds a "task" column`, `merge "t" reads "task"`, "fields = [...]"}},
		{name: "collect of the whole result beside a task group", text: valid + "[[merge]]\nrule = \"collect\"\n[[merge]]\nname = \"s\"\nrule = \"sum\"\nfield = \"x\"\ngroup_by = \"task.kind\"\n",
			line: 9, field: "merge[1]", want: []string{`merge "s" reads "task.kind"`}},
		{name: "derive not a string", text: valid + "[derive]\nx = 1\n", line: 10, field: "derive.x"},

		// Policy.
		{name: "redundancy negative", text: policy("redundancy = -1"), line: 10, field: "policy.redundancy", want: []string{"want at least 1, got -1"}},
		{name: "quorum above redundancy", text: policy("redundancy = 2\nquorum = 3"), line: 11, field: "policy.quorum",
			want: []string{"want 1..redundancy (2), got 3"}},
		{name: "quorum above default redundancy", text: policy("quorum = 3"), line: 10, field: "policy.quorum", want: []string{"(2), got 3"}},
		{name: "quorum negative", text: policy("quorum = -1"), line: 10, field: "policy.quorum", want: []string{"got -1"}},
		{name: "lease_timeout too short", text: policy(`lease_timeout = "500ms"`), line: 10, field: "policy.lease_timeout",
			want: []string{"want at least 1s, got 500ms"}},
		{name: "lease_timeout negative", text: policy(`lease_timeout = "-5m"`), line: 10, field: "policy.lease_timeout", want: []string{"got -5m0s"}},
		{name: "lease_timeout below a millisecond", text: policy(`lease_timeout = "1m0.0001s"`), line: 10, field: "policy.lease_timeout",
			want: []string{"whole milliseconds", "1m0.0001s"}},
		{name: "memory_mib too large", text: policy("memory_mib = 5000"), line: 10, field: "policy.memory_mib", want: []string{"want 1..4096 MiB, got 5000"}},
		{name: "memory_mib negative", text: policy("memory_mib = -1"), line: 10, field: "policy.memory_mib", want: []string{"got -1"}},
		{name: "time_limit too short", text: policy(`time_limit = "50ms"`), line: 10, field: "policy.time_limit", want: []string{"want at least 100ms, got 50ms"}},
		{name: "time_limit below a millisecond", text: policy(`time_limit = "100.5ms"`), line: 10, field: "policy.time_limit",
			want: []string{"whole milliseconds", "100.5ms"}},
		{name: "participants unknown", text: policy(`participants = "everyone"`), line: 10, field: "policy.participants",
			want: []string{`want "open", "invite" or "owner", got "everyone"`}},
		{name: "duration without unit", text: policy(`lease_timeout = "300"`), line: 10, field: "policy.lease_timeout",
			want: []string{`duration such as "90s" or "5m"`, "missing unit"}},
		{name: "duration in words", text: policy(`time_limit = "5 minutes"`), line: 10, field: "policy.time_limit",
			want: []string{`duration such as "90s" or "5m"`}},
		{name: "duration as a number", text: policy("time_limit = 5"), line: 10, field: "policy.time_limit",
			want: []string{`want a duration string such as "90s" or "5m", got 5`}},
		{name: "duration as a float", text: policy("lease_timeout = 1.5"), line: 10, field: "policy.lease_timeout",
			want: []string{"duration string", "got 1.5"}},
		{name: "duration as a boolean", text: policy("lease_timeout = true"), line: 10, field: "policy.lease_timeout",
			want: []string{"duration string", "got true"}},
		{name: "duration as a list", text: policy(`lease_timeout = ["5m"]`), line: 10, field: "policy.lease_timeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			const file = "jobs/broken.toml"
			m, err := ParseManifest(file, "/jobs", []byte(tc.text))
			if err == nil {
				t.Fatalf("ParseManifest succeeded: %+v", m)
			}
			if !errors.Is(err, ErrManifest) {
				t.Errorf("errors.Is(%v, ErrManifest) = false", err)
			}
			var me *ManifestError
			if !errors.As(err, &me) {
				t.Fatalf("error %T is not a *ManifestError: %v", err, err)
			}
			if me.File != file || me.Line != tc.line || me.Field != tc.field {
				t.Errorf("File, Line, Field = %q, %d, %q; want %q, %d, %q (%v)", me.File, me.Line, me.Field, file, tc.line, tc.field, err)
			}
			msg := err.Error()
			prefix := file + ": "
			switch {
			case tc.line > 0 && me.Column > 0:
				prefix = fmt.Sprintf("%s:%d:%d: ", file, tc.line, me.Column)
			case tc.line > 0:
				prefix = fmt.Sprintf("%s:%d: ", file, tc.line)
			}
			if tc.field != "" {
				prefix += tc.field + ": "
			}
			if !strings.HasPrefix(msg, prefix) {
				t.Errorf("error %q does not start with %q", msg, prefix)
			}
			if strings.TrimSpace(me.Msg) == "" {
				t.Error("empty Msg")
			}
			for _, s := range tc.want {
				if !strings.Contains(msg, s) {
					t.Errorf("error %q does not contain %q", msg, s)
				}
			}
		})
	}
}

// FuzzParseManifest: ParseManifest never panics, every error is a
// *ManifestError for the file, and what it accepts is normalised.
func FuzzParseManifest(f *testing.F) {
	f.Add([]byte(valid))
	for _, g := range goldenJobs {
		f.Add([]byte(g.manifest))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseManifest("fuzz.toml", "/fuzz", data)
		if err != nil {
			if !errors.Is(err, ErrManifest) {
				t.Fatalf("error is not ErrManifest: %v", err)
			}
			var me *ManifestError
			if !errors.As(err, &me) || me.File != "fuzz.toml" || me.Msg == "" || me.Line < 0 {
				t.Fatalf("error is not a complete *ManifestError for fuzz.toml: %#v", err)
			}
			return
		}
		if strings.TrimSpace(m.Name) == "" || !filepath.IsAbs(m.Program) || len(m.Merge) == 0 {
			t.Fatalf("accepted an incomplete manifest: %+v", m)
		}
		for name, p := range m.Inputs {
			if !validName(name) || !filepath.IsAbs(p) {
				t.Fatalf("accepted input %q = %q", name, p)
			}
		}
		switch m.Split.Rule {
		case "range", "replicas", "grid", "kfold", "chunks":
		default:
			t.Fatalf("accepted split rule %q", m.Split.Rule)
		}
		p := m.Policy
		if p.Redundancy < 1 || p.Quorum < 1 || p.Quorum > p.Redundancy || p.MemoryMiB < 1 || p.MemoryMiB > MaxMemoryMiB ||
			p.LeaseTimeout.Duration < time.Second || p.TimeLimit.Duration < 100*time.Millisecond {
			t.Fatalf("accepted policy %+v", p)
		}
		for name, src := range m.Derive {
			if _, err := ParseExpr(src); err != nil {
				t.Fatalf("accepted derive.%s: %v", name, err)
			}
		}
		// The canonical form of what was accepted must encode.
		j := &Job{Manifest: m, Inputs: map[string]InputRef{}}
		if _, err := j.canonical(); err != nil {
			t.Fatalf("canonical: %v", err)
		}
	})
}

// TestDeriveNamesChecked checks that a derive name is accepted exactly when
// the rule of the entry it starts with gives that scalar (Merger.Scalars),
// before anything runs.
func TestDeriveNamesChecked(t *testing.T) {
	const merges = validHead + validSplit + `[[merge]]
name = "s"
rule = "sum"
field = "s"
[[merge]]
name = "st"
rule = "stats"
field = "x"
[[merge]]
name = "h"
rule = "histogram"
field = "x"
min = 0.0
max = 1.0
bins = 4
[[merge]]
name = "q"
rule = "quantiles"
field = "x"
quantiles = [0.5, 0.999]
[[merge]]
name = "top"
rule = "topk"
key = "x"
k = 3
[[merge]]
name = "best"
rule = "argmax"
key = "x"
[[merge]]
name = "w"
rule = "vector-mean"
field = "w"
[[merge]]
name = "rows"
rule = "collect"
fields = ["x"]
[[merge]]
name = "cols"
rule = "stats"
field = "columns.*"
`
	ok := []string{"s", "s.sum", "s.count", "st.mean", "st.sample_stddev", "st.max", "h.count", "h.counts.0", "h.counts.3",
		"h.overflow", "q.p50", "q.p99_9", "q.min", "top.0.key", "top.2.value", "top.1.task", "best.key", "best.task",
		"w.count", "w.mean.7", "rows.rows", "rows.skipped", "rows.refused", "cols.price.mean", "cols.x"}
	bad := []string{"s.mean", "st", "st.p50", "h.counts.4", "h.counts.01", "h.mean", "q.p90", "q.mean", "top.3.key", "top.key",
		"best.0.key", "w.mean", "w.mean.x", "rows.count", "cols", "nothing"}
	for _, name := range ok {
		if _, err := ParseManifest("job.toml", "/jobs", []byte(merges+"[derive]\nd = \""+name+"\"\n")); err != nil {
			t.Errorf("derive %s refused: %v", name, err)
		}
	}
	for _, name := range bad {
		_, err := ParseManifest("job.toml", "/jobs", []byte(merges+"[derive]\nd = \""+name+"\"\n"))
		if err == nil || !strings.Contains(err.Error(), "derive.d") || !strings.Contains(err.Error(), strconv.Quote(name)) {
			t.Errorf("derive %s: error %v, want one naming derive.d and %q", name, err, name)
		}
	}
}
