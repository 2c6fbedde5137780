package worker

import (
	"encoding/hex"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var updateVectors = flag.Bool("update", false, "rewrite testdata/vectors/vectors.json from the wazero worker")

// vectorsFile is the determinism profile's test vectors: tasks of the
// program testdata/vectors/vectors.c and what every host must answer.
const vectorsFile = "testdata/vectors/vectors.json"

// Vectors is the layout of vectorsFile.
type Vectors struct {
	Comment string        `json:"comment"`
	Profile int           `json:"profile"`
	Program string        `json:"program"`
	Tasks   []VectorsTask `json:"tasks"`
}

// VectorsTask is one task and its expected outcome. Stdout is the record
// the program writes, one string per line (each line ends in "\n"); it
// is null when the task fails, as in worker.Result.
type VectorsTask struct {
	Name             string   `json:"name"`
	Seed             string   `json:"seed"`
	Stdin            string   `json:"stdin"`
	MemoryLimitPages uint32   `json:"memoryLimitPages"`
	MaxStdoutBytes   int      `json:"maxStdoutBytes,omitempty"`
	Stdout           []string `json:"stdout"`
	Stderr           string   `json:"stderr"`
	Failure          *Failure `json:"failure"`
}

// requireGuestsEnv turns a missing clang for wasm32 from a skip into a
// failure (CI sets it, as for the C and Rust examples).
const requireGuestsEnv = "IDLEPOOL_REQUIRE_GUESTS"

// cOnce holds each C test program's build (name -> *cBuild).
var cOnce sync.Map

// cBuild is one test program in C, built once per test binary.
type cBuild struct {
	once sync.Once
	m    testModule
	err  error
}

// buildVectors builds testdata/vectors/vectors.c with clang for wasm32,
// once per test binary; it skips the test when clang or wasm-ld is
// missing (fails it under IDLEPOOL_REQUIRE_GUESTS=1).
func buildVectors(t testing.TB) testModule {
	t.Helper()
	return buildC(t, "vectors")
}

// buildTraps builds testdata/vectors/traps.c, the program that traps as
// its stdin says, as buildVectors builds the vectors.
func buildTraps(t testing.TB) testModule {
	t.Helper()
	return buildC(t, "traps")
}

// buildC builds testdata/vectors/NAME.c, a program without a C library,
// with clang for wasm32, once per test binary.
func buildC(t testing.TB, name string) testModule {
	t.Helper()
	v, _ := cOnce.LoadOrStore(name, &cBuild{})
	b := v.(*cBuild)
	b.once.Do(func() {
		clang, err := exec.LookPath("clang")
		if err != nil {
			b.err = err
			return
		}
		out := filepath.Join(testDir, name+".wasm")
		cmd := exec.Command(clang, "--target=wasm32-wasi", "-O2", "-fno-builtin", "-nostdlib",
			"-Wl,--no-entry", "-Wl,--export=_start", "-o", out, "testdata/vectors/"+name+".c")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = &exec.Error{Name: "clang --target=wasm32-wasi", Err: &buildError{msg: strings.TrimSpace(string(out)), err: err}}
			return
		}
		b.m, b.err = hashModule(out)
	})
	if b.err != nil {
		msg := "cannot build the determinism test program " + name + ".c (Debian: apt-get install clang lld): " + b.err.Error()
		if os.Getenv(requireGuestsEnv) == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return b.m
}

type buildError struct {
	msg string
	err error
}

func (e *buildError) Error() string { return e.err.Error() + ": " + e.msg }
func (e *buildError) Unwrap() error { return e.err }

// readVectors reads vectorsFile.
func readVectors(t testing.TB) Vectors {
	t.Helper()
	b, err := os.ReadFile(vectorsFile)
	if err != nil {
		t.Fatal(err)
	}
	var v Vectors
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", vectorsFile, err)
	}
	if v.Profile != ProfileVersion || len(v.Tasks) == 0 {
		t.Fatalf("%s: profile %d with %d tasks, want profile %d and tasks", vectorsFile, v.Profile, len(v.Tasks), ProfileVersion)
	}
	return v
}

// vectorsRequest is the worker request for one task of the vectors.
func vectorsRequest(t testing.TB, m testModule, vt VectorsTask) Request {
	t.Helper()
	seed, err := hex.DecodeString(vt.Seed)
	if err != nil || len(seed) != 32 {
		t.Fatalf("task %s: seed %q is not 64 hex digits", vt.Name, vt.Seed)
	}
	return Request{
		ModulePath:     m.path,
		ModuleSHA256:   m.sha,
		Stdin:          []byte(vt.Stdin),
		Seed:           [32]byte(seed),
		MemoryLimitMiB: int(vt.MemoryLimitPages / pagesPerMiB),
		MaxStdoutBytes: vt.MaxStdoutBytes,
		Timeout:        time.Minute,
	}
}

// outcome is what a host answered to one task of the vectors, in the
// vectors' form.
func outcome(vt VectorsTask, stdout, stderr []byte, f *Failure) VectorsTask {
	got := vt
	got.Stdout, got.Stderr, got.Failure = nil, string(stderr), f
	if stdout != nil {
		got.Stdout = strings.SplitAfter(string(stdout), "\n")
		if n := len(got.Stdout); got.Stdout[n-1] == "" {
			got.Stdout = got.Stdout[:n-1]
		}
		for i := range got.Stdout {
			got.Stdout[i] = strings.TrimSuffix(got.Stdout[i], "\n")
		}
	}
	return got
}

// TestProfileVectors runs the determinism test vectors on real worker
// processes: each task's record (every WASI call and its answer), stderr
// and failure must be the ones in testdata/vectors/vectors.json, byte for
// byte. With -update it rewrites the file instead.
func TestProfileVectors(t *testing.T) {
	m := buildVectors(t)
	v := readVectors(t)
	p := newTestPool(t, 1)
	for i, vt := range v.Tasks {
		res := mustRun(t, p, vectorsRequest(t, m, vt))
		got := outcome(vt, res.Stdout, res.Stderr, res.Failure)
		if *updateVectors {
			v.Tasks[i] = got
			continue
		}
		if diff := cmp.Diff(vt, got); diff != "" {
			t.Errorf("task %s: the worker's answers differ from %s (-want +got):\n%s", vt.Name, vectorsFile, diff)
		}
	}
	if *updateVectors {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(vectorsFile, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestProfileClocks checks the profile's clock sequences against the
// documented formula, reading through wazero's own clock hooks.
func TestProfileClocks(t *testing.T) {
	c := &profileClocks{}
	for n := int64(0); n < 3; n++ {
		sec, nsec := c.walltime()
		if got, want := sec*1e9+int64(nsec), ProfileEpochNanos+n*ProfileTickNanos; got != want {
			t.Errorf("realtime reading %d = %d, want %d", n, got, want)
		}
	}
	for n := int64(0); n < 3; n++ {
		if got, want := c.nanotime(), n*ProfileTickNanos; got != want {
			t.Errorf("monotonic reading %d = %d, want %d", n, got, want)
		}
	}
}
