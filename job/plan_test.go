package job

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/fxamacker/cbor/v2"
	"github.com/google/go-cmp/cmp"

	"idlepool/job/fold"
)

// wasm is the start of a WebAssembly module: Plan only checks the magic.
const wasm = "\x00asm\x01\x00\x00\x00"

// writeTree writes files, keyed by slash-separated paths relative to dir.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// loadIn writes files and the manifest (as job.toml) under dir and loads it.
func loadIn(t *testing.T, dir, manifest string, files map[string]string) *Manifest {
	t.Helper()
	writeTree(t, dir, files)
	path := filepath.Join(dir, "job.toml")
	if err := os.WriteFile(path, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := LoadManifest(path)
	if err != nil {
		t.Fatalf("LoadManifest: %v", err)
	}
	return m
}

// planIn loads a manifest with its files under dir and plans it.
func planIn(t *testing.T, dir, manifest string, files map[string]string) *Job {
	t.Helper()
	j, err := Plan(loadIn(t, dir, manifest, files))
	if err != nil {
		t.Fatalf("Plan: %v", err)
	}
	return j
}

// plan is planIn in a fresh temporary directory.
func plan(t *testing.T, manifest string, files map[string]string) *Job {
	t.Helper()
	return planIn(t, t.TempDir(), manifest, files)
}

// planErr loads a manifest in a fresh directory, which it returns, and
// returns Plan's error, failing when Plan succeeds.
func planErr(t *testing.T, manifest string, files map[string]string) (dir string, err error) {
	t.Helper()
	dir = t.TempDir()
	if _, err = Plan(loadIn(t, dir, manifest, files)); err == nil {
		t.Fatal("Plan succeeded, want an error")
	}
	return dir, err
}

// withFiles returns files with the given entries replaced or added.
func withFiles(files map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range files {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// Files and manifests of the golden jobs, one per split rule. Their IDs
// are pinned in testdata/golden/ids.txt.
var (
	goldenFiles = map[string]string{
		"prog.wasm":   wasm + "program v1",
		"data.csv":    "x,y\n1,2\n3,4\n5,6\n7,8\n9,10\n11,12\n",
		"lines.txt":   "word count\nalpha beta\ngamma\ndelta epsilon zeta\neta\ntheta iota\n",
		"config.json": `{"steps": 10}`,
	}

	rangeManifest = `name = "pi"
program = "prog.wasm"

[split]
rule = "range"
tasks = 100

[split.params]
samples = 1000000

[[merge]]
rule = "sum"
field = "inside"

[derive]
pi = "4 * inside / (100 * 1000000)"
`

	gridManifest = `name = "ising"
description = "2D Ising model sweep"
program = "prog.wasm"

[split]
rule = "grid"

[split.params]
sweeps = 1000

[split.grid]
T = [1.5, 2.0, 2.5]
L = [16, 32]

[[merge]]
name = "energy"
rule = "stats"
field = "energy"
group_by = "T"

[[merge]]
rule = "sum"
field = "flips"

[policy]
redundancy = 3
quorum = 2
`

	// gridRangeManifest pins the encoding and the expansion of ranges.
	gridRangeManifest = `name = "sweep"
program = "prog.wasm"

[split]
rule = "grid"

[split.grid]
T = { start = 1.5, stop = 3.5, step = 0.05 }
alpha = { start = 1e-3, stop = 1e3, num = 7, spacing = "log" }
n = { start = 8, stop = 64, step = 8 }
x = { start = 0.0, stop = 1.0, num = 3 }

[[merge]]
rule = "stats"
field = "energy"
group_by = ["T", "alpha"]
`

	replicasManifest = `name = "ensemble"
program = "prog.wasm"

[inputs]
config = "config.json"

[split]
rule = "replicas"
tasks = 8

[[merge]]
rule = "histogram"
field = "x"
min = 0.0
max = 1.0
bins = 10

[policy]
participants = "invite"
memory_mib = 512
time_limit = "30s"
lease_timeout = "2m"
`

	kfoldManifest = `name = "cv"
program = "prog.wasm"

[inputs]
data = "data.csv"
config = "config.json"

[split]
rule = "kfold"
k = 3
input = "data"

[[merge]]
rule = "stats"
field = "accuracy"
`

	kfoldShuffleManifest = strings.Replace(kfoldManifest, `input = "data"`, "input = \"data\"\nshuffle = true", 1)

	chunksManifest = `name = "wc"
program = "prog.wasm"

[inputs]
text = "lines.txt"
config = "config.json"

[split]
rule = "chunks"
input = "text"
chunk_bytes = 24
header = true

[[merge]]
rule = "sum"
field = "words"
`

	goldenJobs = []struct {
		name     string
		manifest string
	}{
		{"range", rangeManifest},
		{"grid", gridManifest},
		{"grid-range", gridRangeManifest},
		{"replicas", replicasManifest},
		{"kfold", kfoldManifest},
		{"kfold-shuffle", kfoldShuffleManifest},
		{"chunks", chunksManifest},
	}
)

func TestPlanGoldenIDs(t *testing.T) {
	var ids, tasks bytes.Buffer
	for _, g := range goldenJobs {
		j := plan(t, g.manifest, goldenFiles)
		fmt.Fprintf(&ids, "%s %s\n", g.name, j.ID)
		fmt.Fprintf(&tasks, "# %s: %d tasks\n", g.name, j.NumTasks())
		for _, i := range []int64{0, j.NumTasks() - 1} {
			fmt.Fprintf(&tasks, "%s\n", j.TaskJSON(j.Task(i)))
		}
	}
	checkGolden(t, "ids.txt", ids.Bytes())
	checkGolden(t, "tasks.txt", tasks.Bytes())
}

func TestPlanIDIsHashOfCanonical(t *testing.T) {
	for _, g := range goldenJobs {
		t.Run(g.name, func(t *testing.T) {
			dir := t.TempDir()
			j := planIn(t, dir, g.manifest, goldenFiles)
			if got := ID(sha256.Sum256(j.Canonical)); got != j.ID {
				t.Errorf("ID = %s, SHA-256 of Canonical = %s", j.ID, got)
			}
			// Deterministic CBOR: decoding and re-encoding gives the same bytes.
			var v any
			if err := cbor.Unmarshal(j.Canonical, &v); err != nil {
				t.Fatalf("Canonical is not CBOR: %v", err)
			}
			again, err := canonicalEncMode.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(again, j.Canonical) {
				t.Errorf("Canonical is not in deterministic form:\n got %x\nwant %x", j.Canonical, again)
			}
			// Files are named by digest, never by path.
			for _, s := range []string{dir, "prog.wasm", "data.csv", "lines.txt", "config.json"} {
				if bytes.Contains(j.Canonical, []byte(s)) {
					t.Errorf("Canonical contains the path %q", s)
				}
			}
			if !bytes.Contains(j.Canonical, []byte(j.Program.SHA256.String())) {
				t.Errorf("Canonical does not name the program digest %s", j.Program.SHA256)
			}
			for name, ref := range j.Inputs {
				if !bytes.Contains(j.Canonical, []byte(ref.SHA256.String())) {
					t.Errorf("Canonical does not name input %s by its digest %s", name, ref.SHA256)
				}
			}
		})
	}
}

// TestPlanIDSameJobWrittenDifferently: whitespace, comments, key order,
// TOML spelling, explicit defaults and where the files lie do not change
// the ID.
func TestPlanIDSameJobWrittenDifferently(t *testing.T) {
	tests := []struct {
		name     string
		base     string
		manifest string
		files    map[string]string
	}{{
		name: "whitespace, comments, key order, TOML spelling",
		base: gridManifest,
		manifest: `# A sweep over temperature and size.
program='prog.wasm'     # literal string
name    =   "ising"
description = """2D Ising model sweep"""
split.rule = "grid"
split.params = { sweeps = 1_000 }

[[merge]]
field="energy"
group_by = 'T'
rule = "stats"
name = "energy"

[[merge]]
  field = "flips"
  rule  = "sum"

[policy]
quorum = 2
redundancy = 3

[split.grid]
L = [ 0x10, 32, ]  # axes in any order
T = [
  1.5,
  2e0,   # the same float
  25e-1,
]
`,
		files: goldenFiles,
	}, {
		name:     "CRLF line endings",
		base:     gridManifest,
		manifest: strings.ReplaceAll(gridManifest, "\n", "\r\n"),
		files:    goldenFiles,
	}, {
		name: "explicit policy defaults",
		base: kfoldManifest,
		manifest: kfoldManifest + `
[policy]
redundancy = 2
quorum = 2
lease_timeout = "300s"
memory_mib = 256
time_limit = "600000ms"
participants = "open"
`,
		files: goldenFiles,
	}, {
		name:     "shuffle = false spelled out",
		base:     kfoldManifest,
		manifest: strings.Replace(kfoldManifest, `input = "data"`, "input = \"data\"\nshuffle = false", 1),
		files:    goldenFiles,
	}, {
		name: "program and inputs under other names and directories",
		base: chunksManifest,
		manifest: strings.NewReplacer(
			`"prog.wasm"`, `"build/wc-v1.wasm"`,
			`"lines.txt"`, `"../shared/corpus/all lines.txt"`,
			`"config.json"`, `"conf/settings.json"`,
		).Replace(chunksManifest),
		files: map[string]string{
			"build/wc-v1.wasm":               goldenFiles["prog.wasm"],
			"../shared/corpus/all lines.txt": goldenFiles["lines.txt"],
			"conf/settings.json":             goldenFiles["config.json"],
		},
	}, {
		name: "kfold input under another file name",
		base: kfoldManifest,
		manifest: strings.NewReplacer(`"data.csv"`, `"folds/iris.csv"`, `"prog.wasm"`, `"a.out"`).
			Replace(kfoldManifest),
		files: map[string]string{
			"folds/iris.csv": goldenFiles["data.csv"],
			"a.out":          goldenFiles["prog.wasm"],
			"config.json":    goldenFiles["config.json"],
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want := plan(t, tc.base, goldenFiles)
			// A nested directory, so that "../shared" stays inside the
			// test's temporary directory.
			got := planIn(t, filepath.Join(t.TempDir(), "jobs", "x"), tc.manifest, tc.files)
			if got.ID != want.ID {
				t.Errorf("ID = %s, want %s (same job)", got.ID, want.ID)
			}
			if !bytes.Equal(got.Canonical, want.Canonical) {
				t.Errorf("Canonical differs:\n got %x\nwant %x", got.Canonical, want.Canonical)
			}
			for i := range want.NumTasks() {
				if g, w := got.TaskJSON(got.Task(i)), want.TaskJSON(want.Task(i)); !bytes.Equal(g, w) {
					t.Errorf("task %d JSON differs:\n got %s\nwant %s", i, g, w)
				}
			}
		})
	}
}

func TestPlanIDAbsoluteProgramPath(t *testing.T) {
	want := plan(t, rangeManifest, goldenFiles)
	elsewhere := t.TempDir()
	writeTree(t, elsewhere, map[string]string{"bin/pi.wasm": goldenFiles["prog.wasm"]})
	abs := filepath.Join(elsewhere, "bin", "pi.wasm")
	manifest := strings.Replace(rangeManifest, `"prog.wasm"`, fmt.Sprintf("%q", abs), 1)
	got := plan(t, manifest, nil)
	if got.ID != want.ID {
		t.Errorf("ID = %s, want %s", got.ID, want.ID)
	}
	if got.Program.Path != abs {
		t.Errorf("Program.Path = %q, want %q", got.Program.Path, abs)
	}
}

// flipByte returns s with its byte at i changed.
func flipByte(s string, i int) string {
	b := []byte(s)
	b[i] ^= 0x01
	return string(b)
}

// TestPlanIDChanges: any change to the program, an input, the split, the
// merge, the derive table or the policy gives a new ID, and no two of these
// changes give the same one.
func TestPlanIDChanges(t *testing.T) {
	// edit replaces each old by new in base, once; old must be there.
	edit := func(base string, oldNew ...string) string {
		for i := 0; i+1 < len(oldNew); i += 2 {
			if !strings.Contains(base, oldNew[i]) {
				t.Fatalf("manifest has no %q:\n%s", oldNew[i], base)
			}
			base = strings.Replace(base, oldNew[i], oldNew[i+1], 1)
		}
		return base
	}
	prog, data, lines, config := goldenFiles["prog.wasm"], goldenFiles["data.csv"], goldenFiles["lines.txt"], goldenFiles["config.json"]
	// Two inputs with the same bytes, to change only which one is split.
	twin := withFiles(goldenFiles, "twin.dat", data)
	kfoldTwin := edit(kfoldManifest, `config = "config.json"`, "config = \"config.json\"\ntwin = \"twin.dat\"")
	chunksTwin := edit(chunksManifest, `config = "config.json"`, "config = \"config.json\"\ntwin = \"twin.dat\"")
	chunksTwinFiles := withFiles(goldenFiles, "twin.dat", lines)
	gridWithoutL := edit(gridManifest, "L = [16, 32]\n", "")
	variants := []struct {
		name     string
		manifest string
		files    map[string]string // nil: goldenFiles
	}{
		// Program and inputs, one byte each.
		{"program last byte", rangeManifest, withFiles(goldenFiles, "prog.wasm", flipByte(prog, len(prog)-1))},
		{"program extra byte", rangeManifest, withFiles(goldenFiles, "prog.wasm", prog+"\x00")},
		{"replicas input byte", replicasManifest, withFiles(goldenFiles, "config.json", flipByte(config, 5))},
		{"kfold data byte", kfoldManifest, withFiles(goldenFiles, "data.csv", flipByte(data, 8))},
		{"kfold data header byte", kfoldManifest, withFiles(goldenFiles, "data.csv", flipByte(data, 0))},
		{"kfold other input byte", kfoldManifest, withFiles(goldenFiles, "config.json", flipByte(config, 0))},
		{"chunks data byte", chunksManifest, withFiles(goldenFiles, "lines.txt", flipByte(lines, 20))},
		{"chunks header byte", chunksManifest, withFiles(goldenFiles, "lines.txt", flipByte(lines, 1))},
		{"chunks other input byte", chunksManifest, withFiles(goldenFiles, "config.json", flipByte(config, 3))},
		{"input added", edit(rangeManifest, "[split]", "[inputs]\nconfig = \"config.json\"\n\n[split]"), nil},
		{"input renamed", edit(replicasManifest, `config = "config.json"`, `settings = "config.json"`), nil},
		// Name and description.
		{"name", edit(rangeManifest, `name = "pi"`, `name = "pi2"`), nil},
		{"description", edit(gridManifest, `2D Ising`, `2d Ising`), nil},
		{"link added", edit(rangeManifest, `name = "pi"`, "name = \"pi\"\nlink = \"https://example.org/pi\""), nil},
		{"link changed", edit(rangeManifest, `name = "pi"`, "name = \"pi\"\nlink = \"https://example.org/pi2\""), nil},
		// Split.
		{"range tasks", edit(rangeManifest, "tasks = 100", "tasks = 101"), nil},
		{"range to replicas", edit(rangeManifest, `rule = "range"`, `rule = "replicas"`), nil},
		{"params value", edit(rangeManifest, "samples = 1000000", "samples = 1000001"), nil},
		{"params type", edit(rangeManifest, "samples = 1000000", "samples = \"1000000\""), nil},
		{"params added", edit(rangeManifest, "samples = 1000000", "samples = 1000000\nburn_in = 0"), nil},
		{"params renamed", edit(gridManifest, "sweeps = 1000", "steps = 1000"), nil},
		{"grid value", edit(gridManifest, "2.5]", "2.6]"), nil},
		{"grid value order", edit(gridManifest, "[1.5, 2.0, 2.5]", "[2.0, 1.5, 2.5]"), nil},
		{"grid value added", edit(gridManifest, "[16, 32]", "[16, 32, 64]"), nil},
		{"grid axis renamed", edit(gridManifest, "L = [16, 32]", "N = [16, 32]"), nil},
		{"grid axis added", edit(gridManifest, "L = [16, 32]", "L = [16, 32]\nh = [0.0]"), nil},
		{"grid axis removed", gridWithoutL, nil},
		{"grid axis to param", edit(gridWithoutL, "sweeps = 1000", "sweeps = 1000\nL = 16"), nil},
		{"replicas tasks", edit(replicasManifest, "tasks = 8", "tasks = 9"), nil},
		{"kfold k", edit(kfoldManifest, "k = 3", "k = 4"), nil},
		{"kfold twin input", kfoldTwin, twin},
		{"kfold split the twin", edit(kfoldTwin, `input = "data"`, `input = "twin"`), twin},
		{"chunks chunk_bytes", edit(chunksManifest, "chunk_bytes = 24", "chunk_bytes = 25"), nil},
		{"chunks header", edit(chunksManifest, "header = true", "header = false"), nil},
		{"chunks twin input", chunksTwin, chunksTwinFiles},
		{"chunks split the twin", edit(chunksTwin, `input = "text"`, `input = "twin"`), chunksTwinFiles},
		// Merge.
		{"merge rule", edit(kfoldManifest, `rule = "stats"`, `rule = "sum"`), nil},
		{"merge field", edit(kfoldManifest, `field = "accuracy"`, `field = "loss"`), nil},
		{"merge name", edit(kfoldManifest, `field = "accuracy"`, "field = \"accuracy\"\nname = \"acc\""), nil},
		{"merge group_by", edit(gridManifest, `group_by = "T"`, `group_by = "L"`), nil},
		{"merge group_by removed", edit(gridManifest, "group_by = \"T\"\n", ""), nil},
		{"merge added", edit(kfoldManifest, "[[merge]]", "[[merge]]\nrule = \"sum\"\nfield = \"n\"\n\n[[merge]]"), nil},
		{"histogram bins", edit(replicasManifest, "bins = 10", "bins = 20"), nil},
		{"histogram min", edit(replicasManifest, "min = 0.0", "min = -1.0"), nil},
		{"histogram max", edit(replicasManifest, "max = 1.0", "max = 2.0"), nil},
		// Derive.
		{"derive expression", edit(rangeManifest, "4 * inside", "2 * inside"), nil},
		{"derive name", edit(rangeManifest, "pi = ", "pi_estimate = "), nil},
		{"derive added", edit(kfoldManifest, "[[merge]]", "[derive]\nerr = \"1 - accuracy.mean\"\n\n[[merge]]"), nil},
		// Policy.
		{"policy redundancy", edit(gridManifest, "redundancy = 3", "redundancy = 4"), nil},
		{"policy quorum", edit(gridManifest, "quorum = 2", "quorum = 3"), nil},
		{"policy lease_timeout", edit(replicasManifest, `lease_timeout = "2m"`, `lease_timeout = "2m1s"`), nil},
		{"policy lease_timeout ms", edit(replicasManifest, `lease_timeout = "2m"`, `lease_timeout = "120001ms"`), nil},
		{"policy time_limit", edit(replicasManifest, `time_limit = "30s"`, `time_limit = "31s"`), nil},
		{"policy time_limit ms", edit(replicasManifest, `time_limit = "30s"`, `time_limit = "30.001s"`), nil},
		{"policy memory_mib", edit(replicasManifest, "memory_mib = 512", "memory_mib = 513"), nil},
		{"policy participants", edit(replicasManifest, `participants = "invite"`, `participants = "owner"`), nil},
		{"policy redundancy 1", edit(kfoldManifest, "[[merge]]", "[policy]\nredundancy = 1\n\n[[merge]]"), nil},
	}

	seen := map[ID]string{}
	for _, g := range goldenJobs {
		j := plan(t, g.manifest, goldenFiles)
		if prev, dup := seen[j.ID]; dup {
			t.Errorf("golden jobs %s and %s have the same ID %s", prev, g.name, j.ID)
		}
		seen[j.ID] = "golden " + g.name
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			files := v.files
			if files == nil {
				files = goldenFiles
			}
			j := plan(t, v.manifest, files)
			if prev, dup := seen[j.ID]; dup {
				t.Errorf("ID %s is the same as for %s", j.ID, prev)
			}
			seen[j.ID] = v.name
		})
	}
}

func TestPlanFileErrors(t *testing.T) {
	tests := []struct {
		name     string
		manifest string
		files    map[string]string
		field    string
		want     []string // substrings of the message; "$DIR" is the manifest's directory
	}{{
		name:     "missing program",
		manifest: rangeManifest,
		files:    map[string]string{},
		field:    "program",
		want:     []string{"$DIR" + string(filepath.Separator) + "prog.wasm", "does not exist"},
	}, {
		name:     "missing input",
		manifest: kfoldManifest,
		files:    map[string]string{"prog.wasm": wasm, "data.csv": goldenFiles["data.csv"]},
		field:    "inputs.config",
		want:     []string{"$DIR" + string(filepath.Separator) + "config.json", "does not exist"},
	}, {
		name:     "missing kfold input",
		manifest: kfoldManifest,
		files:    map[string]string{"prog.wasm": wasm, "config.json": "{}"},
		field:    "inputs.data",
		want:     []string{"data.csv", "does not exist"},
	}, {
		name:     "missing chunks input",
		manifest: chunksManifest,
		files:    map[string]string{"prog.wasm": wasm, "config.json": "{}"},
		field:    "inputs.text",
		want:     []string{"lines.txt"},
	}, {
		name:     "program is not wasm",
		manifest: rangeManifest,
		files:    map[string]string{"prog.wasm": "#!/bin/sh\necho hi\n"},
		field:    "program",
		want:     []string{"prog.wasm", "not a WebAssembly module", "GOOS=wasip1 GOARCH=wasm go build"},
	}, {
		name:     "program is empty",
		manifest: rangeManifest,
		files:    map[string]string{"prog.wasm": ""},
		field:    "program",
		want:     []string{"not a WebAssembly module", "GOOS=wasip1 GOARCH=wasm go build"},
	}, {
		name:     "program shorter than the magic",
		manifest: rangeManifest,
		files:    map[string]string{"prog.wasm": "\x00as"},
		field:    "program",
		want:     []string{"not a WebAssembly module"},
	}, {
		name:     "program is a directory",
		manifest: rangeManifest,
		files:    map[string]string{"prog.wasm/x": "x"},
		field:    "program",
		want:     []string{"prog.wasm"},
	}, {
		name:     "kfold fewer rows than folds",
		manifest: kfoldManifest,
		files:    withFiles(goldenFiles, "data.csv", "x,y\n1,2\n\n3,4\n"),
		field:    "split.k",
		want:     []string{`"data" has 2 data rows`, "k = 3"},
	}, {
		name:     "kfold empty file",
		manifest: kfoldManifest,
		files:    withFiles(goldenFiles, "data.csv", ""),
		field:    "split.k",
		want:     []string{"0 data rows"},
	}, {
		name:     "chunks line longer than the memory limit",
		manifest: chunksManifest + "[policy]\nmemory_mib = 1\n",
		files:    withFiles(goldenFiles, "lines.txt", "h\nshort\n"+strings.Repeat("x", 2<<20)+"\n"),
		field:    "inputs.text",
		want:     []string{"line 3: the line at byte 8 is 2.0 MiB (2097153 bytes), more than the task's memory limit of 1 MiB"},
	}, {
		name:     "chunks nothing after header",
		manifest: chunksManifest,
		files:    withFiles(goldenFiles, "lines.txt", "word count\n"),
		field:    "inputs.text",
		want:     []string{"no data to split", "no rows after the header"},
	}, {
		name:     "chunks empty file",
		manifest: strings.Replace(chunksManifest, "header = true", "header = false", 1),
		files:    withFiles(goldenFiles, "lines.txt", ""),
		field:    "inputs.text",
		want:     []string{"no data to split"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir, err := planErr(t, tc.manifest, tc.files)
			if !errors.Is(err, ErrManifest) {
				t.Errorf("errors.Is(%v, ErrManifest) = false", err)
			}
			var me *ManifestError
			if !errors.As(err, &me) {
				t.Fatalf("error %T is not a *ManifestError: %v", err, err)
			}
			if me.Field != tc.field {
				t.Errorf("Field = %q, want %q (%v)", me.Field, tc.field, err)
			}
			if want := filepath.Join(dir, "job.toml"); me.File != want {
				t.Errorf("File = %q, want %q", me.File, want)
			}
			for _, s := range tc.want {
				s = strings.ReplaceAll(s, "$DIR", dir)
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
		})
	}
}

func TestPlanTaskIndexOutOfRangePanics(t *testing.T) {
	j := plan(t, rangeManifest, goldenFiles)
	for _, i := range []int64{-1, j.NumTasks(), j.NumTasks() + 1} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("Task(%d) did not panic", i)
				}
			}()
			j.Task(i)
		})
	}
}

func TestSplitRange(t *testing.T) {
	for _, rule := range []string{"range", "replicas"} {
		t.Run(rule, func(t *testing.T) {
			manifest := fmt.Sprintf(`name = "r"
program = "prog.wasm"
[inputs]
config = "config.json"
[split]
rule = %q
tasks = 7
[split.params]
samples = 10
label = "s"
scale = 0.5
on = true
list = [1, "a"]
nested = { a = 1, b = [2.5] }
[[merge]]
rule = "sum"
field = "v"
`, rule)
			j := plan(t, manifest, goldenFiles)
			if got := j.NumTasks(); got != 7 {
				t.Fatalf("NumTasks = %d, want 7", got)
			}
			wantParams := map[string]any{
				"samples": int64(10), "label": "s", "scale": 0.5, "on": true,
				"list":   []any{int64(1), "a"},
				"nested": map[string]any{"a": int64(1), "b": []any{2.5}},
			}
			for i := range j.NumTasks() {
				task := j.Task(i)
				want := Task{
					Index:  i,
					Seed:   TaskSeed(j.ID, i),
					Params: wantParams,
					Inputs: map[string]string{"config": "/input/config"},
				}
				if diff := cmp.Diff(want, task); diff != "" {
					t.Errorf("Task(%d) (-want +got):\n%s", i, diff)
				}
			}
			if j.Chunks() != nil {
				t.Errorf("Chunks() = %v, want nil", j.Chunks())
			}
			if _, err := j.FoldAssignment(); err == nil {
				t.Error("FoldAssignment of a non-kfold job succeeded")
			}
		})
	}
}

func TestSplitReplicasEmptyParams(t *testing.T) {
	manifest := `name = "r"
program = "prog.wasm"
split = { rule = "replicas", tasks = 2 }
merge = [{ rule = "sum", field = "v" }]
`
	j := plan(t, manifest, goldenFiles)
	got := string(j.TaskJSON(j.Task(1)))
	for _, s := range []string{`"params":{}`, `"inputs":{}`} {
		if !strings.Contains(got, s) {
			t.Errorf("TaskJSON = %s, want it to contain %s", got, s)
		}
	}
}

func TestSplitGrid(t *testing.T) {
	manifest := `name = "g"
program = "prog.wasm"
[split]
rule = "grid"
[split.params]
n = 7
[split.grid]
b = [1, 2]
c = [true, false]
a = ["x", "y", "z"]
[[merge]]
rule = "sum"
field = "v"
`
	j := plan(t, manifest, goldenFiles)
	// Axes in name order a, b, c; the last (c) varies fastest.
	var want []map[string]any
	for _, a := range []string{"x", "y", "z"} {
		for _, b := range []int64{1, 2} {
			for _, c := range []bool{true, false} {
				want = append(want, map[string]any{"a": a, "b": b, "c": c, "n": int64(7)})
			}
		}
	}
	if got := j.NumTasks(); got != int64(len(want)) {
		t.Fatalf("NumTasks = %d, want %d", got, len(want))
	}
	var got []map[string]any
	for i := range j.NumTasks() {
		got = append(got, j.Task(i).Params)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("grid params (-want +got):\n%s", diff)
	}
}

func TestSplitGridCounts(t *testing.T) {
	tests := []struct {
		grid string
		want int64
	}{
		{"x = [1]", 1},
		{"x = [1, 2, 3]", 3},
		{"x = [1, 2, 3]\ny = [1, 2]", 6},
		{"x = [1, 2, 3]\ny = [1, 2]\nz = [[1, 2], [3]]\nw = [{ a = 1 }, { a = 2 }, { a = 3 }, { a = 4 }]", 48},
	}
	for _, tc := range tests {
		t.Run(tc.grid, func(t *testing.T) {
			manifest := "name = \"g\"\nprogram = \"prog.wasm\"\n[[merge]]\nrule = \"sum\"\nfield = \"v\"\n[split]\nrule = \"grid\"\n[split.grid]\n" + tc.grid + "\n"
			j := plan(t, manifest, goldenFiles)
			if got := j.NumTasks(); got != tc.want {
				t.Errorf("NumTasks = %d, want %d", got, tc.want)
			}
			// Every point of the grid appears exactly once.
			points := map[string]bool{}
			for i := range j.NumTasks() {
				b, err := json.Marshal(j.Task(i).Params)
				if err != nil {
					t.Fatal(err)
				}
				points[string(b)] = true
			}
			if int64(len(points)) != tc.want {
				t.Errorf("%d distinct points, want %d", len(points), tc.want)
			}
		})
	}
}

func TestSplitKfold(t *testing.T) {
	// A header, empty lines (not rows), CRLF lines, a quoted field with a
	// line break, a doubled quote and no newline at the end: 5 data rows
	// on 9 lines.
	csv := "a,b\r\n1,2\n\n3,4\r\n\"5\n\",6\n\r\n7,\"8\"\"\"\n9,10"
	for _, shuffle := range []bool{false, true} {
		t.Run(fmt.Sprintf("shuffle=%v", shuffle), func(t *testing.T) {
			manifest := fmt.Sprintf(`name = "cv"
program = "prog.wasm"
[inputs]
data = "d.csv"
[split]
rule = "kfold"
k = 2
input = "data"
shuffle = %v
[split.params]
epochs = 3
[[merge]]
rule = "stats"
field = "accuracy"
`, shuffle)
			j := plan(t, manifest, map[string]string{"prog.wasm": wasm, "d.csv": csv})
			if got := j.NumTasks(); got != 2 {
				t.Fatalf("NumTasks = %d, want 2", got)
			}
			for f := range j.NumTasks() {
				task := j.Task(f)
				want := map[string]any{"epochs": int64(3), "k": int64(2), "fold": f, "rows": int64(5), "shuffle": shuffle}
				if shuffle {
					want["permutation_seed"] = Seed64(Seed(j.ID))
					want["permutation_seed_hex"] = Seed64Hex(Seed(j.ID))
				}
				if diff := cmp.Diff(want, task.Params); diff != "" {
					t.Errorf("Task(%d).Params (-want +got):\n%s", f, diff)
				}
				if diff := cmp.Diff(map[string]string{"data": "/input/data"}, task.Inputs); diff != "" {
					t.Errorf("Task(%d).Inputs (-want +got):\n%s", f, diff)
				}
			}
			got, err := j.FoldAssignment()
			if err != nil {
				t.Fatal(err)
			}
			want, err := fold.Assign(5, 2, shuffle, Seed64(Seed(j.ID)))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("FoldAssignment (-want +got):\n%s", diff)
			}
			if ref := j.Inputs["data"]; ref.Size != int64(len(csv)) || ref.SHA256 != sha256.Sum256([]byte(csv)) {
				t.Errorf("Inputs[data] = %+v, want size %d and the file's SHA-256", ref, len(csv))
			}
		})
	}
}

func TestSplitKfoldCountRows(t *testing.T) {
	tests := []struct {
		name, data string
		want       int
	}{
		{"empty", "", 0},
		{"header only", "a,b\n", 0},
		{"header without newline", "a,b", 0},
		{"only blank lines", "\n\n  \n", 0},
		{"one row", "a,b\n1,2\n", 1},
		{"no trailing newline", "a,b\n1,2\n3,4", 2},
		{"blank lines ignored", "a,b\n\n1,2\n\n\n3,4\n\n", 2},
		{"white-space lines ignored", "a,b\n \t \n1,2\r\n\r\n3,4\n", 2},
		{"blank lines before the header", "\n\na,b\n1,2\n", 1},
		{"CRLF", "a,b\r\n1,2\r\n3,4\r\n5,6\r\n", 3},
		{"long line", "a\n" + strings.Repeat("x", 200<<10) + "\n1\n", 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "d.csv")
			if err := os.WriteFile(path, []byte(tc.data), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := countRows(path, FormatLines)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("countRows = %d, want %d", got, tc.want)
			}
		})
	}
	if _, err := countRows(filepath.Join(t.TempDir(), "missing.csv"), FormatCSV); err == nil {
		t.Error("countRows of a missing file succeeded")
	}
}

// checkChunks checks the chunks of data cut at size: they lie back to back
// from the end of the header, each ends at a line boundary, is at most size
// bytes, is as long as it can be, has the right digest, and together they
// are the file minus its header.
func checkChunks(t *testing.T, data string, size int64, header bool, ref InputRef, chunks []Chunk, hdr string) {
	t.Helper()
	if want := sha256.Sum256([]byte(data)); ref.SHA256 != want || ref.Size != int64(len(data)) {
		t.Errorf("ref = size %d, %s; want size %d, %s", ref.Size, ref.SHA256, len(data), Digest(want))
	}
	body := data
	if header {
		first, rest, found := strings.Cut(data, "\n")
		if !found {
			rest = ""
		}
		if want := strings.TrimRight(first, "\r"); hdr != want {
			t.Errorf("header = %q, want %q", hdr, want)
		}
		body = rest
	} else if hdr != "" {
		t.Errorf("header = %q without split.header", hdr)
	}
	var joined strings.Builder
	off := int64(len(data) - len(body))
	for i, c := range chunks {
		if c.Offset != off {
			t.Errorf("chunk %d at offset %d, want %d", i, c.Offset, off)
		}
		if c.Offset+c.Length > int64(len(data)) {
			t.Fatalf("chunk %d [%d, +%d) runs past the end of the file (%d bytes)", i, c.Offset, c.Length, len(data))
		}
		piece := data[c.Offset : c.Offset+c.Length]
		// A line longer than size is a chunk of its own.
		if c.Length < 1 || c.Length > size && strings.Count(strings.TrimSuffix(piece, "\n"), "\n") > 0 {
			t.Errorf("chunk %d is %d bytes, want 1..%d or one line", i, c.Length, size)
		}
		last := i == len(chunks)-1
		if !strings.HasSuffix(piece, "\n") && !(last && c.Offset+c.Length == int64(len(data))) {
			t.Errorf("chunk %d %q does not end at a line boundary", i, piece)
		}
		if c.SHA256 != sha256.Sum256([]byte(piece)) {
			t.Errorf("chunk %d: SHA256 %s is not the digest of its bytes", i, c.SHA256)
		}
		if !last {
			// Greedy: the next line would not have fitted.
			rest := data[c.Offset+c.Length:]
			next := rest
			if nl := strings.IndexByte(rest, '\n'); nl >= 0 {
				next = rest[:nl+1]
			}
			if c.Length+int64(len(next)) <= size {
				t.Errorf("chunk %d (%d bytes) had room for the next line %q (size %d)", i, c.Length, next, size)
			}
		}
		joined.WriteString(piece)
		off += c.Length
	}
	if joined.String() != body {
		t.Errorf("chunks joined = %q, want the file minus the header %q", joined.String(), body)
	}
}

func TestSplitChunksFile(t *testing.T) {
	var varied strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&varied, "%d,%s\n", i, strings.Repeat("v", (i*7919)%90))
	}
	longLine := strings.Repeat("L", 3<<19) + "\n" // longer than the 1 MiB read buffer
	tests := []struct {
		name   string
		data   string
		size   int64
		header bool
		chunks int // -1: don't check the count
	}{
		{"one chunk", "a\nb\nc\n", 100, false, 1},
		{"one line each", "aaaa\nbbbb\ncccc\n", 5, false, 3},
		{"two lines each", "aaaa\nbbbb\ncccc\n", 10, false, 2},
		{"line exactly chunk_bytes", "aaaa\nbb\n", 5, false, 2},
		{"no trailing newline", "aaaa\nbbbb\ncc", 5, false, 3},
		{"no trailing newline, fits", "aaaa\nbb", 7, false, 1},
		{"empty lines", "\n\n\n", 1, false, 3},
		{"CRLF lines", "ab\r\ncd\r\nef\r\n", 8, false, 2},
		{"header", "h1,h2\n1,2\n3,4\n5,6\n", 8, true, 2},
		{"CRLF header", "h1,h2\r\n1,2\r\n3,4\r\n", 5, true, 2},
		{"header longer than chunk_bytes", "a very long header line\n1\n2\n", 2, true, 2},
		{"empty header line", "\nx\ny\n", 2, true, 2},
		{"header then one line without newline", "h\nx", 1, true, 1},
		{"varied lines", varied.String(), 200, false, -1},
		{"varied lines with header", varied.String(), 97, true, -1},
		{"line longer than the read buffer", "h\n" + longLine + "x\n", 2 << 20, true, 1},
		{"lines longer than the read buffer", longLine + longLine + "x\n", 2 << 20, false, 2},
		{"line longer than chunk_bytes alone", "ab\nabcdef\ncd\n", 5, false, 3},
		{"long line first", "abcdef\nab\ncd\n", 5, false, 3},
		{"long lines in a row", "abcdef\nabcdefg\nab\n", 5, false, 3},
		{"long last line without newline", "ab\nabcdef", 5, false, 2},
		{"long line after header", "header\nabcdef\nx\n", 5, true, 2},
		{"line longer than the read buffer and chunk_bytes", "a\n" + longLine + "b\nc\n", 1 << 10, false, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "in.txt")
			if err := os.WriteFile(path, []byte(tc.data), 0o644); err != nil {
				t.Fatal(err)
			}
			ref, chunks, hdr, err := chunkFile(path, tc.size, tc.header, FormatLines, DefaultMemoryMiB<<20)
			if err != nil {
				t.Fatalf("chunkFile: %v", err)
			}
			if tc.chunks >= 0 && len(chunks) != tc.chunks {
				t.Errorf("%d chunks, want %d: %+v", len(chunks), tc.chunks, chunks)
			}
			if ref.Path != path {
				t.Errorf("ref.Path = %q, want %q", ref.Path, path)
			}
			checkChunks(t, tc.data, tc.size, tc.header, ref, chunks, hdr)
		})
	}
}

func TestSplitChunksFileErrors(t *testing.T) {
	const mem = 1 << 20 // the task's memory limit: 1 MiB
	long := strings.Repeat("x", mem+mem/2)
	tests := []struct {
		name   string
		data   string
		size   int64
		header bool
		format string
		want   string
	}{
		{"line longer than the memory limit", "ab\n" + long + "\n", 5, false, FormatLines,
			"line 2: the line at byte 3 is 1.5 MiB (1572865 bytes), more than the task's memory limit of 1 MiB, so no task could hold it: raise [policy] memory_mib (at most 4096)"},
		{"last line without newline", "ab\n" + long, 5, false, FormatLines, "line 2: the line at byte 3 is 1.5 MiB (1572864 bytes)"},
		{"after header", "header\n" + long + "\n", 5, true, FormatLines, "line 2: the line at byte 7 is 1.5 MiB"},
		{"longer than the read buffer too", "a\nb\n" + strings.Repeat("x", 3<<20), 5, false, FormatLines,
			"line 3: the line at byte 4 is longer than 1048576 bytes, more than the task's memory limit of 1 MiB"},
		{"longer than the read buffer after a header", "a\nb\n" + strings.Repeat("x", 17<<20), 5, true, FormatLines,
			"line 3: the line at byte 4 is longer than 16777216 bytes, more than the task's memory limit of 1 MiB"},
		{"longer than chunk_bytes and memory", "ab\n" + strings.Repeat("x", 3<<20) + "\n", 2 << 20, true, FormatLines,
			"line 2: the line at byte 3 is 3.0 MiB (3145729 bytes), more than split.chunk_bytes = 2097152 and the task's memory limit of 1 MiB"},
		{"CSV record", "a,b\n1,2\n\n3,\"" + long + "\"\n", 6, true, FormatCSV,
			"line 4: the record at byte 9 is 1.5 MiB (1572869 bytes), more than the task's memory limit of 1 MiB"},
		{"CSV quote left open", "a,b\n1,2\n\n3,\"" + strings.Repeat("x", 3<<20), 6, false, FormatCSV,
			"line 4: the record at byte 9 is longer than 1048576 bytes, more than the task's memory limit of 1 MiB, so no task could hold it: is a quote left open? raise"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "in.txt")
			if err := os.WriteFile(path, []byte(tc.data), 0o644); err != nil {
				t.Fatal(err)
			}
			_, _, _, err := chunkFile(path, tc.size, tc.header, tc.format, mem)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("chunkFile error = %v, want one containing %q", err, tc.want)
			}
		})
	}
	// Empty files give no chunks (Plan turns that into an error).
	for _, data := range []string{"", "header\n", "header"} {
		path := filepath.Join(t.TempDir(), "in.txt")
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		_, chunks, _, err := chunkFile(path, 10, true, FormatLines, DefaultMemoryMiB<<20)
		if err != nil || len(chunks) != 0 {
			t.Errorf("chunkFile(%q) = %v, %v; want no chunks", data, chunks, err)
		}
	}
}

func TestSplitChunksTasks(t *testing.T) {
	data := "id,text\r\n1,alpha\n2,beta\n3,gamma\n4,delta\n5,epsilon"
	manifest := `name = "c"
program = "prog.wasm"
[inputs]
rows = "rows.csv"
config = "config.json"
[split]
rule = "chunks"
input = "rows"
chunk_bytes = 16
header = true
[split.params]
lang = "en"
[[merge]]
rule = "sum"
field = "v"
`
	j := plan(t, manifest, map[string]string{"prog.wasm": wasm, "rows.csv": data, "config.json": "{}"})
	checkChunks(t, data, 16, true, j.Inputs["rows"], j.Chunks(), j.header)
	if got, want := j.NumTasks(), int64(len(j.Chunks())); got != want || got < 2 {
		t.Fatalf("NumTasks = %d, want len(Chunks()) = %d, at least 2", got, want)
	}
	for i := range j.NumTasks() {
		c := j.Chunks()[i]
		want := Task{
			Index: i,
			Seed:  TaskSeed(j.ID, i),
			Params: map[string]any{
				"lang": "en", "chunk_index": i, "offset": c.Offset, "length": c.Length,
				"sha256": c.SHA256.String(), "header": "id,text",
			},
			Inputs: map[string]string{
				"config": "/input/config",
				"chunk":  "/input/chunks/" + c.SHA256.String(),
			},
			Chunk: &c,
		}
		if diff := cmp.Diff(want, j.Task(i)); diff != "" {
			t.Errorf("Task(%d) (-want +got):\n%s", i, diff)
		}
	}

	// Without header the first line is data and tasks have no "header".
	j = plan(t, strings.Replace(manifest, "header = true", "header = false", 1),
		map[string]string{"prog.wasm": wasm, "rows.csv": data, "config.json": "{}"})
	checkChunks(t, data, 16, false, j.Inputs["rows"], j.Chunks(), j.header)
	if _, ok := j.Task(0).Params["header"]; ok {
		t.Error("task params have a header without split.header")
	}
}

func TestSplitChunkPath(t *testing.T) {
	d := Digest(sha256.Sum256([]byte("x")))
	if got, want := ChunkPath(d), "/input/chunks/"+d.String(); got != want {
		t.Errorf("ChunkPath = %q, want %q", got, want)
	}
}

// seedRef computes a seed from its documented definition.
func seedRef(label string, id ID, index ...int64) [32]byte {
	b := append([]byte(label), 0)
	b = append(b, id[:]...)
	for _, i := range index {
		b = append(b, byte(i>>56), byte(i>>48), byte(i>>40), byte(i>>32), byte(i>>24), byte(i>>16), byte(i>>8), byte(i))
	}
	return sha256.Sum256(b)
}

func TestSeedDefinition(t *testing.T) {
	ids := []ID{{}, sha256.Sum256([]byte("job a")), sha256.Sum256([]byte("job b"))}
	for _, id := range ids {
		if got, want := Seed(id), seedRef("idlepool/job-seed/v1", id); got != want {
			t.Errorf("Seed(%s) = %x, want %x", id, got, want)
		}
		for _, i := range []int64{0, 1, 255, 256, 1 << 40, MaxTasks - 1} {
			if got, want := TaskSeed(id, i), seedRef("idlepool/task-seed/v1", id, i); got != want {
				t.Errorf("TaskSeed(%s, %d) = %x, want %x", id, i, got, want)
			}
		}
	}
}

func TestSeedDistinct(t *testing.T) {
	a, b := ID(sha256.Sum256([]byte("job a"))), ID(sha256.Sum256([]byte("job b")))
	seen := map[[32]byte]string{Seed(a): "Seed(a)", Seed(b): "Seed(b)"}
	seen64 := map[uint64]bool{}
	for _, id := range []ID{a, b} {
		for i := range int64(5000) {
			s := TaskSeed(id, i)
			name := fmt.Sprintf("TaskSeed(%s, %d)", id.String()[:8], i)
			if prev, dup := seen[s]; dup {
				t.Fatalf("%s = %s", name, prev)
			}
			seen[s] = name
			if seen64[Seed64(s)] {
				t.Fatalf("%s: Seed64 repeats", name)
			}
			seen64[Seed64(s)] = true
			if s != TaskSeed(id, i) {
				t.Fatalf("%s is not stable", name)
			}
		}
	}
}

func TestSeedGolden(t *testing.T) {
	id := ID(sha256.Sum256([]byte("idlepool golden job")))
	var b bytes.Buffer
	fmt.Fprintf(&b, "id %s\n", id)
	s := Seed(id)
	fmt.Fprintf(&b, "seed %x %d\n", s, Seed64(s))
	for _, i := range []int64{0, 1, 2, 1000, MaxTasks - 1} {
		s := TaskSeed(id, i)
		fmt.Fprintf(&b, "task %d %x %d\n", i, s, Seed64(s))
	}
	checkGolden(t, "seeds.txt", b.Bytes())
}

func TestSeed64BigEndian(t *testing.T) {
	var s [32]byte
	for i := range s {
		s[i] = byte(i + 1)
	}
	if got, want := Seed64(s), uint64(0x0102030405060708); got != want {
		t.Errorf("Seed64 = %#x, want %#x", got, want)
	}
	s[0] = 0xff
	if got, want := Seed64(s), uint64(0xff02030405060708); got != want {
		t.Errorf("Seed64 = %#x, want %#x", got, want)
	}
}

func TestPlanTaskSeeds(t *testing.T) {
	j := plan(t, gridManifest, goldenFiles)
	for i := range j.NumTasks() {
		if got, want := j.Task(i).Seed, TaskSeed(j.ID, i); got != want {
			t.Errorf("Task(%d).Seed = %x, want TaskSeed = %x", i, got, want)
		}
	}
}

// jsonKeysSorted reports the first object in the JSON text whose keys are
// not in sorted order, or "" when all are.
func jsonKeysSorted(t *testing.T, data []byte) string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	type frame struct {
		object bool
		keys   []string
		key    bool // the next token in an object is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.key {
			if s, ok := tok.(string); ok {
				top.keys = append(top.keys, s)
				top.key = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, key: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'):
			if !slices.IsSorted(top.keys) {
				return strings.Join(top.keys, ",")
			}
			stack = stack[:len(stack)-1]
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		// A value ended: the enclosing object expects a key next.
		if len(stack) > 0 && stack[len(stack)-1].object {
			stack[len(stack)-1].key = true
		}
	}
	return ""
}

func TestPlanTaskJSON(t *testing.T) {
	for _, g := range goldenJobs {
		t.Run(g.name, func(t *testing.T) {
			j := plan(t, g.manifest, goldenFiles)
			// The same job planned elsewhere: the same bytes.
			other := planIn(t, filepath.Join(t.TempDir(), "elsewhere"), g.manifest, goldenFiles)
			for i := range j.NumTasks() {
				task := j.Task(i)
				b := j.TaskJSON(task)
				if again := j.TaskJSON(j.Task(i)); !bytes.Equal(b, again) {
					t.Errorf("task %d: TaskJSON differs between calls:\n%s\n%s", i, b, again)
				}
				if o := other.TaskJSON(other.Task(i)); !bytes.Equal(b, o) {
					t.Errorf("task %d: TaskJSON differs between plans:\n%s\n%s", i, b, o)
				}
				if keys := jsonKeysSorted(t, b); keys != "" {
					t.Errorf("task %d: keys %s not sorted in %s", i, keys, b)
				}
				var top map[string]json.RawMessage
				if err := json.Unmarshal(b, &top); err != nil {
					t.Fatalf("task %d: %v", i, err)
				}
				if diff := cmp.Diff([]string{"index", "inputs", "job", "params", "seed", "seed_decimal", "seed_hex"}, slices.Sorted(maps.Keys(top))); diff != "" {
					t.Errorf("task %d: top-level keys (-want +got):\n%s", i, diff)
				}
				var doc struct {
					Job    string            `json:"job"`
					Index  int64             `json:"index"`
					Seed   uint64            `json:"seed"`
					Params map[string]any    `json:"params"`
					Inputs map[string]string `json:"inputs"`
				}
				dec := json.NewDecoder(bytes.NewReader(b))
				dec.UseNumber()
				if err := dec.Decode(&doc); err != nil {
					t.Fatalf("task %d: %v", i, err)
				}
				if doc.Job != j.ID.String() || doc.Index != i || doc.Seed != Seed64(task.Seed) {
					t.Errorf("task %d: job %s index %d seed %d, want %s %d %d", i, doc.Job, doc.Index, doc.Seed, j.ID, i, Seed64(task.Seed))
				}
				if diff := cmp.Diff(task.Inputs, doc.Inputs); diff != "" {
					t.Errorf("task %d inputs (-want +got):\n%s", i, diff)
				}
				if len(doc.Params) != len(task.Params) {
					t.Errorf("task %d: %d params in JSON, want %d", i, len(doc.Params), len(task.Params))
				}
			}
		})
	}
}

func TestPlanTaskJSONExact(t *testing.T) {
	manifest := `name = "x"
program = "prog.wasm"
[inputs]
cfg = "config.json"
[split]
rule = "grid"
[split.params]
z = "<&>"
big = 9007199254740993
[split.grid]
T = [0.1, 1e21]
[[merge]]
rule = "sum"
field = "v"
`
	j := plan(t, manifest, goldenFiles)
	task := j.Task(1)
	s := Seed64(task.Seed)
	want := fmt.Sprintf(`{"index":1,"inputs":{"cfg":"/input/cfg"},"job":"%s","params":{"T":1e+21,"big":9007199254740993,"z":"\u003c\u0026\u003e"},"seed":%d,"seed_decimal":"%d","seed_hex":"%016x"}`,
		j.ID, s, s, s)
	if diff := cmp.Diff(want, string(j.TaskJSON(task))); diff != "" {
		t.Errorf("TaskJSON (-want +got):\n%s", diff)
	}
}

// A reader that parses JSON numbers as doubles (JavaScript, jq, many C
// libraries) gets a different seed for every seed above 2^53, which is most
// of them; the seed's strings give it the exact value, and the hex form is
// the first 8 bytes of SHA-256("idlepool/task-seed/v1" 0x00 job ID index).
func TestPlanTaskJSONSeedStrings(t *testing.T) {
	tests := []struct {
		name, manifest string
		task           int64
	}{
		{"range", rangeManifest, 0},
		{"kfold-shuffle", kfoldShuffleManifest, 1},
	}
	above := 0
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j := plan(t, tc.manifest, goldenFiles)
			var doc struct {
				Seed        json.Number    `json:"seed"`
				SeedDecimal string         `json:"seed_decimal"`
				SeedHex     string         `json:"seed_hex"`
				Params      map[string]any `json:"params"`
			}
			dec := json.NewDecoder(bytes.NewReader(j.TaskJSON(j.Task(tc.task))))
			dec.UseNumber()
			if err := dec.Decode(&doc); err != nil {
				t.Fatal(err)
			}
			h := sha256.New()
			h.Write([]byte("idlepool/task-seed/v1\x00"))
			h.Write(j.ID[:])
			h.Write([]byte{0, 0, 0, 0, 0, 0, 0, byte(tc.task)})
			first8 := h.Sum(nil)[:8]
			want := binary.BigEndian.Uint64(first8)
			if want > 1<<53 {
				above++
			}
			got := [3]string{doc.Seed.String(), doc.SeedDecimal, doc.SeedHex}
			if w := [3]string{strconv.FormatUint(want, 10), strconv.FormatUint(want, 10), hex.EncodeToString(first8)}; got != w {
				t.Errorf("(seed, seed_decimal, seed_hex) = %q, want %q", got, w)
			}
			if tc.name != "kfold-shuffle" {
				return
			}
			js := Seed(j.ID)
			if got, want := doc.Params["permutation_seed_hex"], hex.EncodeToString(js[:8]); got != want {
				t.Errorf("params.permutation_seed_hex = %v, want %q", got, want)
			}
		})
	}
	if above == 0 {
		t.Error("no seed above 2^53 among the cases: the test shows nothing")
	}
}

func TestParseDigestID(t *testing.T) {
	d := Digest(sha256.Sum256([]byte("abc")))
	s := d.String()
	if s != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Errorf("String = %s", s)
	}
	for _, in := range []string{s, strings.ToUpper(s)} {
		got, err := ParseDigest(in)
		if err != nil || got != d {
			t.Errorf("ParseDigest(%q) = %s, %v; want %s", in, got, err, d)
		}
	}
	for _, bad := range []string{"", s[:62], s + "00", "g" + s[1:], " " + s[1:], "0x" + s[2:]} {
		if _, err := ParseDigest(bad); !errors.Is(err, ErrBadDigest) {
			t.Errorf("ParseDigest(%q) error = %v, want ErrBadDigest", bad, err)
		}
	}
}
