package worker

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"idlepool/job"
)

// exampleTask is one task of an example job (examples/), ready for
// host.run.
type exampleTask struct {
	name string // "pi/0": program and task index
	body *runBody
}

// exampleJob says how a test plans one example job: the inputs its
// manifest names here, and smaller parameters so that a task runs in tens
// of milliseconds.
type exampleJob struct {
	name   string
	inputs []string // old, new pairs applied to the manifest's text
	small  []string // more pairs, for small tasks
	tasks  []int64
}

var exampleJobs = []exampleJob{
	{"pi", nil, []string{"samples = 1000000", "samples = 20000"}, []int64{0, 1}},
	{"ising", nil, []string{"burnin = 1000", "burnin = 10", "sweeps = 6000", "sweeps = 20", "L = 32", "L = 8"}, []int64{0, 40}},
	{"kfold", []string{`"../../../shared/datasets/iris.csv"`, `"labelled.csv"`}, nil, []int64{0, 4}},
	{"csvstats", nil, []string{"chunk_bytes = 1048576", "chunk_bytes = 4096"}, []int64{0, 1}},
	{"gpupi", nil, []string{"samples = 8388608", "samples = 16384"}, []int64{0}},
	{"optionmc", nil, []string{"paths = 2097152", "paths = 4096"}, []int64{0, 31}},
}

var (
	examplesOnce  [2]sync.Once
	exampleList   [2][]exampleTask
	examplesError [2]error
	// examplesWarm says that the examples' programs, metered and not, are
	// in the compilation cache (warm_test.go), or the race detector is off.
	examplesWarm bool
)

// exampleTasks builds every example program for wasip1 (Go's build cache
// makes this fast after the first time) and plans jobs of them, returning
// a few tasks of each: small ones, or (full) as large as the examples'
// manifests make them. kfold reads a generated labelled CSV, csvstats a
// generated CSV of 1.4 MB, and gpupi and optionmc compute on the CPU (the
// host gives them no GPU). It skips the test without a go tool.
func exampleTasks(tb testing.TB, full bool) []exampleTask {
	tb.Helper()
	i := 0
	if full {
		i = 1
	}
	examplesOnce[i].Do(func() { exampleList[i], examplesError[i] = planExamples(full) })
	switch {
	case errors.Is(examplesError[i], errNoGoTool):
		tb.Skipf("example programs unavailable: %v", examplesError[i])
	case examplesError[i] != nil:
		tb.Fatal(examplesError[i])
	}
	return exampleList[i]
}

func planExamples(full bool) ([]exampleTask, error) {
	dir := filepath.Join(testDir, fmt.Sprintf("examples-full=%v", full))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := writeExampleData(dir); err != nil {
		return nil, err
	}
	var tasks []exampleTask
	var plain []warmModule // the programs unmetered, as TestMeterExamplesUnchanged compiles them too
	for _, ex := range exampleJobs {
		replace := ex.inputs
		if !full {
			replace = append(slices.Clone(replace), ex.small...)
		}
		prog, err := buildWasm(filepath.Join(dir, ex.name+".wasm"), "../examples/"+ex.name)
		if err != nil {
			return nil, err
		}
		plain = append(plain, warmModule{Path: prog.path, SHA256: prog.sha, Plain: true})
		text, err := os.ReadFile(filepath.Join("..", "examples", ex.name, ex.name+".toml"))
		if err != nil {
			return nil, err
		}
		s := string(text)
		for i := 0; i < len(replace); i += 2 {
			if !strings.Contains(s, replace[i]) {
				return nil, fmt.Errorf("examples/%s/%s.toml has no %q", ex.name, ex.name, replace[i])
			}
			s = strings.Replace(s, replace[i], replace[i+1], 1)
		}
		m, err := job.ParseManifest(ex.name+".toml", dir, []byte(s))
		if err != nil {
			return nil, err
		}
		j, err := job.Plan(m)
		if err != nil {
			return nil, err
		}
		inputDir := filepath.Join(dir, ex.name+"-input")
		if err := os.MkdirAll(filepath.Join(inputDir, "chunks"), 0o755); err != nil {
			return nil, err
		}
		for name, ref := range j.Inputs {
			b, err := os.ReadFile(ref.Path)
			if err != nil {
				return nil, err
			}
			if err := os.WriteFile(filepath.Join(inputDir, name), b, 0o644); err != nil {
				return nil, err
			}
		}
		for _, i := range ex.tasks {
			t := j.Task(i)
			if t.Chunk != nil {
				src, err := os.ReadFile(j.Inputs[j.Manifest.Split.Input].Path)
				if err != nil {
					return nil, err
				}
				chunk := src[t.Chunk.Offset : t.Chunk.Offset+t.Chunk.Length]
				if err := os.WriteFile(filepath.Join(inputDir, "chunks", t.Chunk.SHA256.String()), chunk, 0o644); err != nil {
					return nil, err
				}
			}
			tasks = append(tasks, exampleTask{name: fmt.Sprintf("%s/%d", ex.name, i), body: &runBody{
				ModulePath: prog.path, ModuleSHA256: prog.sha, InputDir: inputDir, Stdin: j.TaskJSON(t),
				Seed: hex.EncodeToString(t.Seed[:]), MemoryLimitPages: uint32(m.Policy.MemoryMiB) * pagesPerMiB,
				MaxStdoutBytes: DefaultMaxStdoutBytes, MaxStderrBytes: DefaultMaxStderrBytes,
			}})
		}
	}
	if err := warmCache(plain...); err != nil {
		fmt.Fprintf(os.Stderr, "worker tests: the examples unmetered are compiled by the tests themselves: %v\n", err)
	} else {
		examplesWarm = true
	}
	return tasks, nil
}

// writeExampleData writes the inputs the small example jobs read:
// labelled.csv (kfold: 4 features, a label of 0..2), data.csv (csvstats)
// of 1.4 MB and empty PTX files (gpupi, optionmc read them only on a GPU).
func writeExampleData(dir string) error {
	rng := rand.New(rand.NewPCG(1, 2))
	var lab bytes.Buffer
	lab.WriteString("a,b,c,d,label\n")
	for i := range 90 {
		c := i % 3
		fmt.Fprintf(&lab, "%.1f,%.1f,%.1f,%.1f,%d\n", float64(c)+rng.Float64()*2, rng.Float64()*3, float64(2*c)+rng.Float64(), rng.Float64(), c)
	}
	var data bytes.Buffer
	data.WriteString("x,y,z\n")
	for i := range 70000 {
		fmt.Fprintf(&data, "%.4f,%.3f,%d\n", rng.NormFloat64(), rng.ExpFloat64()*10, i%97)
	}
	for name, b := range map[string][]byte{
		"labelled.csv": lab.Bytes(), "data.csv": data.Bytes(),
		"gpupi.ptx": []byte("// no GPU\n"), "optionmc.ptx": []byte("// no GPU\n"),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// runInHost runs one task through a worker's host in this process,
// metered or not; the module is compiled on the first run of each host.
func runInHost(tb testing.TB, h *host, b *runBody) *resultBody {
	tb.Helper()
	res, err := h.run(context.Background(), b, func() error { return nil })
	if err != nil {
		tb.Fatal(err)
	}
	if res.Error != "" {
		tb.Fatalf("setup: %s", res.Error)
	}
	return res
}

func newTestHost(tb testing.TB, metered bool) *host {
	tb.Helper()
	h, err := newHost(cacheDir)
	if err != nil {
		tb.Fatal(err)
	}
	h.unmetered = !metered
	tb.Cleanup(func() { h.close(context.Background()) })
	return h
}

// TestMeterExamplesUnchanged runs tasks of every example program with and
// without metering: the output bytes (stdout, stderr, the failure) must
// be the same, and the metered count the same on a second run. Both are
// compiled as a worker compiles them; under the race detector, from the
// cache that a build without it filled (warm_test.go), or, when it could
// not, in wazero's interpreter, which compiles ten times faster there
// than the optimizing compiler: the rewritten module means the same to
// both.
func TestMeterExamplesUnchanged(t *testing.T) {
	tasks := exampleTasks(t, false)
	plain, metered := newTestHost(t, false), newTestHost(t, true)
	plain.interpreter, metered.interpreter = !examplesWarm, !examplesWarm
	for _, tk := range tasks {
		t.Run(tk.name, func(t *testing.T) {
			want := runInHost(t, plain, tk.body)
			got := runInHost(t, metered, tk.body)
			if want.Failure != nil {
				t.Fatalf("the unmetered task failed: %v\n%s", want.Failure, want.Stderr)
			}
			if want.Work != 0 {
				t.Errorf("the unmetered run counted %d", want.Work)
			}
			if !bytes.Equal(got.Stdout, want.Stdout) || !bytes.Equal(got.Stderr, want.Stderr) || got.Failure != nil {
				t.Fatalf("metered: stdout %q, stderr %q, failure %v;\nunmetered: stdout %q, stderr %q", got.Stdout, got.Stderr, got.Failure, want.Stdout, want.Stderr)
			}
			if got.Work == 0 {
				t.Fatal("the metered run counted no work")
			}
			if again := runInHost(t, metered, tk.body); again.Work != got.Work {
				t.Errorf("counted %d, then %d for the same task", got.Work, again.Work)
			}
			t.Logf("%s: %d instructions, result %.80s", tk.name, got.Work, bytes.TrimSpace(got.Stdout))
		})
	}
}
