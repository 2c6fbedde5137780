package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func piManifest(tasks, samples int) string {
	return `name = "pi"
program = "prog.wasm"
[split]
rule = "range"
tasks = ` + strconv.Itoa(tasks) + `
[split.params]
samples = ` + strconv.Itoa(samples) + `
[[merge]]
field = "inside"
rule = "sum"
[[merge]]
field = "samples"
rule = "sum"
[derive]
pi = "4 * inside / samples"
pi_se = "4 * sqrt((inside / samples) * (1 - inside / samples) / samples)"
[policy]
time_limit = "60s"
`
}

func TestPiWithinFourStandardErrors(t *testing.T) {
	m := writeManifest(t, "pi", piManifest(40, 250000))
	home := t.TempDir()
	r, first := runJSON(t, home, m)
	if r.Tasks.OK != 40 || r.Tasks.Failed != 0 {
		t.Fatalf("tasks = %+v, want 40 ok", r.Tasks)
	}
	pi, se := r.Derived["pi"], r.Derived["pi_se"]
	if se <= 0 || math.Abs(pi-math.Pi) > 4*se {
		t.Fatalf("pi = %v ± %v: more than 4 standard errors from %v", pi, se, math.Pi)
	}
	noStrayWorkers(t, home)

	// The same job run again, from scratch in another home, prints the same bytes.
	_, second := runJSON(t, t.TempDir(), m)
	if diff := cmp.Diff(first, second); diff != "" {
		t.Fatalf("two runs differ (-first +second):\n%s", diff)
	}
	// And again in the same home: every task comes from the journal.
	out := idlepool(t, home, "run", m, "--json")
	if out.stdout != first || !strings.Contains(out.stderr, "40 of 40 tasks were taken from the journal") {
		t.Fatalf("rerun in the same home: exit %d, stderr %q, same bytes %v", out.code, out.stderr, out.stdout == first)
	}
}

func TestVerifyRunsEveryTaskTwice(t *testing.T) {
	m := writeManifest(t, "pi", piManifest(6, 10000))
	r, _ := runJSON(t, t.TempDir(), m, "--verify")
	if r.Tasks.OK != 6 || r.Tasks.Failed != 0 {
		t.Fatalf("tasks = %+v, want 6 ok", r.Tasks)
	}
}

func TestKfoldMatchesReferences(t *testing.T) {
	t.Parallel()
	var refs map[string]map[string]struct {
		FoldSizes         []int `json:"fold_sizes"`
		GaussianNBCorrect []int `json:"gaussian_nb_correct"`
		KNN5Correct       []int `json:"knn5_correct"`
	}
	b, err := os.ReadFile(sharedDataset(t, "kfold_refs.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &refs); err != nil {
		t.Fatalf("kfold_refs.json: %v", err)
	}
	// One home for the four runs: the program is compiled once, into its
	// cache, instead of once per run.
	home := t.TempDir()
	for _, data := range []string{"iris", "wine"} {
		for _, k := range []int{5, 10} {
			t.Run(data+"/k="+strconv.Itoa(k), func(t *testing.T) {
				ref, ok := refs[data]["k"+strconv.Itoa(k)]
				if !ok || len(ref.GaussianNBCorrect) != k || len(ref.KNN5Correct) != k || len(ref.FoldSizes) != k {
					t.Fatalf("no reference for %s k=%d in kfold_refs.json", data, k)
				}
				m := writeManifest(t, "kfold", `name = "kfold"
program = "prog.wasm"
[inputs]
data = "`+sharedDataset(t, data+".csv")+`"
[split]
rule = "kfold"
k = `+strconv.Itoa(k)+`
input = "data"
[[merge]]
rule = "collect"
name = "folds"
fields = ["fold", "test_rows", "gaussian_nb_correct", "knn5_correct"]
[[merge]]
field = "gaussian_nb_correct"
rule = "sum"
`)
				r, _ := runJSON(t, home, m)
				path := r.Outputs["folds"].Path
				if want := filepath.Join(home, "data", "runs", r.Job, "output-folds.jsonl"); path != want {
					t.Errorf("outputs.folds.path = %q, want %q", path, want)
				}
				rows := readJSONLines(t, path)
				if len(rows) != k {
					t.Fatalf("%d fold rows, want %d", len(rows), k)
				}
				for f, row := range rows {
					got := [4]any{row["fold"], row["test_rows"], row["gaussian_nb_correct"], row["knn5_correct"]}
					want := [4]any{float64(f), float64(ref.FoldSizes[f]), float64(ref.GaussianNBCorrect[f]), float64(ref.KNN5Correct[f])}
					if got != want {
						t.Errorf("fold %d: (fold, test rows, naive Bayes correct, 5-NN correct) = %v, want %v", f, got, want)
					}
				}
			})
		}
	}
}

func readJSONLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var row map[string]any
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		rows = append(rows, row)
	}
	return rows
}

// The overview of `idlepool help` names every option of run, as
// `idlepool run -h` does.
func TestHelpNamesRunsOptions(t *testing.T) {
	home := t.TempDir()
	overview := idlepool(t, home, "help").stdout
	usage, _, _ := strings.Cut(idlepool(t, home, "run", "-h").stderr, "\n") // flag's usage goes to stderr
	line, ok := strings.CutPrefix(usage, "Usage: idlepool ")
	if !ok {
		t.Fatalf("run -h starts %q", usage)
	}
	if !strings.Contains(overview, "\n  "+line+"\n") {
		t.Errorf("idlepool help lacks the line %q:\n%s", "  "+line, overview)
	}
}

func TestBadInputGivesClearErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name     string
		args     []string
		wantCode int
		want     []string // substrings of stderr
	}{
		{"no manifest", []string{"run"}, 2, []string{"run needs exactly one manifest"}},
		{"missing manifest", []string{"run", filepath.Join(dir, "nope.toml")}, 1, []string{"nope.toml", "no such file"}},
		{"broken toml", []string{"run", write("broken.toml", "name = \"x\"\nprogram = \n")}, 1, []string{"broken.toml:2"}},
		{"unknown rule", []string{"run", write("rule.toml", "name = \"x\"\nprogram = \"p.wasm\"\n[split]\nrule = \"zigzag\"\n")}, 1, []string{"split.rule", "zigzag", "range, grid"}},
		{"missing program", []string{"run", write("prog.toml", "name = \"x\"\nprogram = \"p.wasm\"\n[split]\nrule = \"range\"\ntasks = 1\n[[merge]]\nfield = \"a\"\nrule = \"sum\"\n")}, 1, []string{"program", "p.wasm", "does not exist", "hint: build the program"}},
		{"unknown command", []string{"frobnicate"}, 2, []string{"unknown command"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := idlepool(t, t.TempDir(), tc.args...)
			if out.code != tc.wantCode {
				t.Errorf("exit %d, want %d; stderr:\n%s", out.code, tc.wantCode, out.stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(out.stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, out.stderr)
				}
			}
		})
	}
}

func TestProgramThatFailsEveryTask(t *testing.T) {
	m := writeManifest(t, "fail", `name = "fails"
program = "prog.wasm"
[split]
rule = "range"
tasks = 3
[[merge]]
field = "x"
rule = "sum"
`)
	home := t.TempDir()
	out := idlepool(t, home, "run", m)
	if out.code == 0 {
		t.Fatalf("exit 0 for a program that fails every task; stdout:\n%s", out.stdout)
	}
	for _, w := range []string{"every task failed", "this program always fails", "hint:"} {
		if !strings.Contains(out.stderr, w) {
			t.Errorf("stderr lacks %q:\n%s", w, out.stderr)
		}
	}
	noStrayWorkers(t, home)
}

// A misspelt field of [verify.tolerance] is named in a warning with the
// field it most likely meant, and the closing line of --verify names only
// the fields the results have.
func TestVerifyToleranceNamesOnlyFieldsThatExist(t *testing.T) {
	m := writeManifest(t, "params", `name = "tolerance typo"
program = "prog.wasm"
[split]
rule = "range"
tasks = 2
[split.params]
mean_steps = 1.5
sd = 0.5
[[merge]]
field = "mean_steps"
rule = "stats"
[verify]
rule = "tolerance"
[verify.tolerance]
mean_step = { abs = 0.1 }
sd = { abs = 0.1 }
`)
	out := idlepool(t, t.TempDir(), "run", m, "--verify", "--workers", "2")
	if out.code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", out.code, out.stderr)
	}
	for _, w := range []string{
		`warning: [verify.tolerance] mean_step (did you mean "mean_steps"?): no such field in task `,
		"the results agreed within [verify.tolerance] for sd, and byte for byte elsewhere\n",
	} {
		if !strings.Contains(out.stderr, w) {
			t.Errorf("stderr lacks %q:\n%s", w, out.stderr)
		}
	}
}

// When some tasks fail, the last line points to where the output lists
// them: the "failed" lines of the plain output, "failures" of --json.
func TestSomeTasksFailNamesWhereTheyAreListed(t *testing.T) {
	m := writeManifest(t, "params", `name = "some fail"
program = "prog.wasm"
[split]
rule = "grid"
[split.grid]
v = [1, "a"]
[[merge]]
field = "v"
rule = "sum"
`)
	for _, tc := range []struct {
		args           []string
		stderr, stdout string
		notStderr      string
	}{
		{[]string{"run", m}, `idlepool: 1 of 2 tasks failed; the result leaves them out (see the "failed" lines); the first: task 1: `, "\nfailed   task 1: ", `"failures"`},
		{[]string{"run", m, "--json"}, `idlepool: 1 of 2 tasks failed; the result leaves them out (see "failures"); the first: task 1: `, `"failures": [`, `"failed"`},
	} {
		out := idlepool(t, t.TempDir(), tc.args...)
		if out.code != 1 || !strings.Contains(out.stderr, tc.stderr) || strings.Contains(out.stderr, tc.notStderr) || !strings.Contains(out.stdout, tc.stdout) {
			t.Errorf("%v: exit %d, want 1, stderr with %q (not %q) and stdout with %q\nstdout:\n%s\nstderr:\n%s",
				tc.args, out.code, tc.stderr, tc.notStderr, tc.stdout, out.stdout, out.stderr)
		}
	}
}

// A Go program built with GOOS=js instead of wasip1 is named as such, and
// the hint says how to build it. The module is made by hand: it imports
// gojs.f and exports run and resume, as a GOOS=js build does.
func TestProgramBuiltForJS(t *testing.T) {
	dir := t.TempDir()
	mod := []byte("\x00asm\x01\x00\x00\x00" +
		"\x01\x04\x01\x60\x00\x00" + // type 0: [] -> []
		"\x02\x0a\x01\x04gojs\x01f\x00\x00" + // import gojs.f of type 0
		"\x03\x02\x01\x00" + // function 1 of type 0
		"\x07\x10\x02\x03run\x00\x01\x06resume\x00\x01" + // export run and resume
		"\x0a\x04\x01\x02\x00\x0b") // body: end
	if err := os.WriteFile(filepath.Join(dir, "prog.wasm"), mod, 0o644); err != nil {
		t.Fatal(err)
	}
	m := filepath.Join(dir, "job.toml")
	if err := os.WriteFile(m, []byte("name = \"js\"\nprogram = \"prog.wasm\"\n[split]\nrule = \"range\"\ntasks = 2\n[[merge]]\nfield = \"x\"\nrule = \"sum\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := idlepool(t, t.TempDir(), "run", m)
	if out.code != 1 {
		t.Fatalf("exit %d, want 1; stderr:\n%s", out.code, out.stderr)
	}
	for _, w := range []string{
		"every task failed; the first: task 0: worker: task failed: bad-module: not a WASI command: a Go program built for GOOS=js",
		"build it with GOOS=wasip1 GOARCH=wasm go build\n",
		"hint: the worker cannot run the program as it was built",
	} {
		if !strings.Contains(out.stderr, w) {
			t.Errorf("stderr lacks %q:\n%s", w, out.stderr)
		}
	}
}

// A task that runs past its time limit failed on this machine, not in the
// program: the run says so on its last line, and running the same command
// again computes that task, and only it, again. (The time limit leaves the
// other tasks, which print one line, ample time on a loaded machine; each
// also gets a second try.)
func TestTimedOutTaskIsRetriedByTheNextRun(t *testing.T) {
	t.Parallel() // mostly waits for its tasks' time limits
	m := writeManifest(t, "loop", `name = "loops"
program = "prog.wasm"
[split]
rule = "range"
tasks = 3
[split.params]
loop = 1
[[merge]]
field = "x"
rule = "sum"
[policy]
time_limit = "2s"
`)
	home := t.TempDir()
	const last = "hint: 1 task timed out on this machine (task 1); run the same command again to retry it (only it)"
	for run := 1; run <= 2; run++ {
		out := idlepool(t, home, "run", m, "--json", "--workers", "2")
		if out.code != 1 {
			t.Fatalf("run %d: exit %d, want 1; stderr:\n%s", run, out.code, out.stderr)
		}
		lines := strings.Split(strings.TrimSpace(out.stderr), "\n")
		if got := lines[len(lines)-1]; got != last {
			t.Errorf("run %d: last line %q, want %q", run, got, last)
		}
		var r struct {
			Failures []struct {
				Task   int64
				Reason string
				Retry  string
			}
		}
		if err := json.Unmarshal([]byte(out.stdout), &r); err != nil {
			t.Fatal(err)
		}
		if len(r.Failures) != 1 || r.Failures[0].Task != 1 || r.Failures[0].Retry != "timed out" || !strings.Contains(r.Failures[0].Reason, "time_limit") {
			t.Errorf("run %d: failures %+v, want task 1 timed out, to retry", run, r.Failures)
		}
		if run == 2 && !strings.Contains(out.stderr, "2 of 3 tasks were already done") {
			t.Errorf("run 2 did not take the other tasks from the journal; stderr:\n%s", out.stderr)
		}
	}
	noStrayWorkers(t, home)
}

// TestRunsShareOneCopyOfAnInput: two jobs that name the same 4 MiB input
// (a training's rounds and their data set) keep one copy of it under the
// home, however many runs there are: the second run links the first
// one's file instead of writing the bytes again; a changed input is a
// new file, and a file no run directory links any more leaves the store.
func TestRunsShareOneCopyOfAnInput(t *testing.T) {
	dir, home := t.TempDir(), t.TempDir()
	b, err := os.ReadFile(wasm["params"])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "prog.wasm"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data.bin")
	big := make([]byte, 4<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	if err := os.WriteFile(data, big, 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(round int) string {
		m := filepath.Join(dir, fmt.Sprintf("round-%d.toml", round))
		text := fmt.Sprintf("name = \"round\"\nprogram = \"prog.wasm\"\n[inputs]\ndata = %q\n[split]\nrule = \"range\"\ntasks = 2\n[split.params]\nround = %d\n[[merge]]\nrule = \"sum\"\nfield = \"round\"\n", data, round)
		if err := os.WriteFile(m, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		r, _ := runJSON(t, home, m)
		return filepath.Join(home, "data", "runs", r.Job)
	}
	stat := func(p string) os.FileInfo {
		t.Helper()
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	first, second := run(1), run(2)
	if first == second {
		t.Fatal("the two rounds are one job")
	}
	a, b2 := stat(filepath.Join(first, "input", "data")), stat(filepath.Join(second, "input", "data"))
	if !os.SameFile(a, b2) {
		t.Errorf("the second run wrote its own copy of the 4 MiB input instead of linking the first one's")
	}
	if !os.SameFile(stat(filepath.Join(first, "program.wasm")), stat(filepath.Join(second, "program.wasm"))) {
		t.Errorf("the second run wrote its own copy of the program")
	}
	// A run directory removed (as idlepool train does after each round)
	// and the input changed: the next run copies the new bytes, and the
	// old file, which no run links any more, is gone from the store.
	if err := os.RemoveAll(first); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(second); err != nil {
		t.Fatal(err)
	}
	big[0]++
	if err := os.WriteFile(data, big, 0o644); err != nil {
		t.Fatal(err)
	}
	third := run(3)
	got, err := os.ReadFile(filepath.Join(third, "input", "data"))
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("the third run's input is not the changed file: %v", err)
	}
	store, err := os.ReadDir(filepath.Join(home, "data", "inputs"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range store {
		names = append(names, e.Name())
	}
	if len(names) != 2 { // the program and the changed input
		t.Errorf("the store of inputs holds %v, want the program and the changed input only", names)
	}
}
