// Package examples_test checks the examples' job programs written in C
// (examples/c) and Rust (examples/rust) against the Go programs they
// mirror: built as a pool builds them (examples/build-guest.sh), run by
// real worker processes (testdata/worker, worker.Serve as `idlepool
// worker` runs it, built without the race detector), each task twice on
// two processes, and compared byte for byte with the Go program's result
// for the same task.
//
// The C and Rust toolchains are Debian packages (.ci/run installs them);
// where one is missing its tests skip and say which packages to install,
// unless IDLEPOOL_REQUIRE_GUESTS=1 (CI) makes that a failure.
package examples_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/job"
	"idlepool/worker"
)

// requireEnv turns a missing C or Rust toolchain from a skip into a
// failure.
const requireEnv = "IDLEPOOL_REQUIRE_GUESTS"

var (
	buildDir   string // where the tests' programs are built
	workerPath string // testdata/worker, built there
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "idlepool-guests-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	buildDir = dir
	workerPath = filepath.Join(dir, "worker")
	if out, err := exec.Command("go", "build", "-o", workerPath, "./testdata/worker").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build testdata/worker: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// langs are the guest languages and their source file extensions.
var langs = []struct{ name, ext string }{{"c", "c"}, {"rust", "rs"}}

var (
	buildMu sync.Mutex
	built   = map[string]string{} // build key -> output path
)

// needToolchain skips the test (fails it under IDLEPOOL_REQUIRE_GUESTS=1)
// when lang's toolchain cannot build for wasm32-wasi here.
func needToolchain(t *testing.T, lang string) {
	t.Helper()
	out, err := exec.Command("./build-guest.sh", "check", lang).CombinedOutput()
	if err == nil {
		return
	}
	msg := fmt.Sprintf("no %s toolchain for wasm32-wasi: %s", lang, strings.TrimSpace(string(out)))
	if os.Getenv(requireEnv) == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// buildGuest builds src (relative to examples/) for target with
// build-guest.sh, once per test binary, and returns the output's path.
func buildGuest(t *testing.T, lang, target, src string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	key := lang + "/" + target + "/" + src
	if p, ok := built[key]; ok {
		return p
	}
	out := filepath.Join(buildDir, lang+"-"+target, strings.TrimSuffix(filepath.Base(src), filepath.Ext(src)))
	if target != "native" {
		out += ".wasm"
	}
	if b, err := exec.Command("./build-guest.sh", lang, target, src, out).CombinedOutput(); err != nil {
		t.Fatalf("build-guest.sh %s %s %s: %v\n%s", lang, target, src, err, b)
	}
	built[key] = out
	return out
}

// buildGo builds the Go example pkg (./pi, ./ising) for wasip1.
func buildGo(t *testing.T, pkg string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	key := "go/" + pkg
	if p, ok := built[key]; ok {
		return p
	}
	out := filepath.Join(buildDir, "go", filepath.Base(pkg)+".wasm")
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s for wasip1: %v\n%s", pkg, err, b)
	}
	built[key] = out
	return out
}

// newPool returns a pool of two worker processes, which share one
// compilation cache (each module is compiled once), closed when the test
// ends.
func newPool(t *testing.T) *worker.Pool {
	t.Helper()
	p, err := worker.NewPool(worker.Config{
		Command:  []string{workerPath},
		Env:      append(os.Environ(), worker.PriorityEnv+"=normal"),
		Slots:    2,
		CacheDir: filepath.Join(buildDir, "wazero-cache"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// runTask runs one task of module on the pool; avoid, if nonzero, is a
// worker PID the task must not run on.
func runTask(t *testing.T, p *worker.Pool, module, stdin string, avoid int) worker.Result {
	t.Helper()
	b, err := os.ReadFile(module)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	res, err := p.Run(t.Context(), worker.Request{
		ModulePath:   module,
		ModuleSHA256: hex.EncodeToString(sum[:]),
		Stdin:        []byte(stdin),
		Timeout:      10 * time.Minute, // a busy machine makes a task slow, never wrong
		AvoidPID:     avoid,
	})
	if err != nil {
		t.Fatalf("run %s on %s: %v", filepath.Base(module), stdin, err)
	}
	return res
}

// kernelTasks are the tasks each language runs, per example: small sizes,
// seeds at the ends of their range, lattices where neighbours wrap onto
// themselves, temperatures from frozen to hot; and tasks that must fail.
var kernelTasks = map[string][]string{
	"pi": {
		`{"seed":0,"params":{"samples":1}}`,
		`{"seed":18446744073709551615,"params":{"samples":100000}}`,
		`{"job":"ab","index":3,"seed":13587311887558109768,"params":{"samples":250000},"inputs":{}}`,
		`{"seed":7,"params":{"samples":0}}`,
		`{"seed":7,"params":{}}`,
		`{"seed":7,"params":{"samples":1.5}}`,
		`{"seed":-1,"params":{"samples":10}}`,
		`{"seed":7,"params":{"samples":10}} {}`,
	},
	"ising": {
		`{"seed":1,"params":{"T":2.269,"L":16,"burnin":50,"sweeps":300,"rep":2}}`,
		`{"seed":18446744073709551615,"params":{"T":1.5,"L":8,"burnin":0,"sweeps":500,"rep":0}}`,
		`{"seed":99,"params":{"T":3.5,"L":3,"burnin":10,"sweeps":1000,"rep":1}}`,
		`{"seed":5,"params":{"T":0.8,"L":2,"burnin":0,"sweeps":2000,"rep":7}}`,
		`{"seed":6,"params":{"T":1000000,"L":5,"burnin":3,"sweeps":400,"rep":0}}`,
		`{"seed":8,"params":{"T":0.001,"L":4,"burnin":0,"sweeps":10,"rep":0}}`,
		`{"seed":8,"params":{"T":0,"L":4,"burnin":0,"sweeps":10}}`,
		`{"seed":8,"params":{"T":2,"L":1,"burnin":0,"sweeps":10}}`,
		`{"seed":8,"params":{"T":2,"L":4,"burnin":-1,"sweeps":10}}`,
		`{"seed":8,"params":{"T":2,"L":4,"burnin":0,"sweeps":0}}`,
	},
}

// TestGuestExamplesMatchGo runs the pi and Ising examples in C and Rust on
// the worker, each task twice on two worker processes, and wants the Go
// program's bytes every time: the same stdout on success; the same
// failure kind, and the same message where the Go program's is its own
// rather than encoding/json's, on failure.
func TestGuestExamplesMatchGo(t *testing.T) {
	p := newPool(t)
	for _, kernel := range []string{"pi", "ising"} {
		goWasm := buildGo(t, "./"+kernel)
		want := make([]worker.Result, len(kernelTasks[kernel]))
		for i, task := range kernelTasks[kernel] {
			want[i] = runTask(t, p, goWasm, task, 0)
		}
		for _, lang := range langs {
			t.Run(kernel+"/"+lang.name, func(t *testing.T) {
				needToolchain(t, lang.name)
				module := buildGuest(t, lang.name, "wasm", filepath.Join(lang.name, kernel+"."+lang.ext))
				for i, task := range kernelTasks[kernel] {
					first := runTask(t, p, module, task, 0)
					again := runTask(t, p, module, task, first.PID)
					if first.PID == again.PID {
						t.Fatalf("task %s ran twice on worker %d despite AvoidPID", task, first.PID)
					}
					for _, got := range []worker.Result{first, again} {
						checkSameResult(t, task, want[i], got)
					}
				}
			})
		}
	}
}

// checkSameResult compares a guest's result with the Go program's.
func checkSameResult(t *testing.T, task string, want, got worker.Result) {
	t.Helper()
	if (want.Failure == nil) != (got.Failure == nil) {
		t.Fatalf("task %s: failure %v (stderr %q), Go's %v (stderr %q)", task, got.Failure, got.Stderr, want.Failure, want.Stderr)
	}
	if want.Failure != nil {
		if got.Failure.Kind != want.Failure.Kind || len(got.Stdout) != 0 {
			t.Errorf("task %s: failure %v with stdout %q, Go's %v", task, got.Failure, got.Stdout, want.Failure)
		}
		if msg := string(want.Stderr); strings.HasPrefix(msg, "error: params.") && string(got.Stderr) != msg {
			t.Errorf("task %s: stderr %q, Go's %q", task, got.Stderr, msg)
		}
		return
	}
	if string(got.Stdout) != string(want.Stdout) {
		t.Errorf("task %s: stdout\n%s\nGo's\n%s", task, got.Stdout, want.Stdout)
	}
}

// TestGuestFloatFormatMatchesGo has the C header's and the Rust crate's
// float formatting write 40,000 doubles (random bits, powers of two,
// neighbours of 1e-6 and 1e21, short binary fractions), natively and as
// WebAssembly (whose C library is wasi-libc's, not the host's), and wants
// Go's encoding/json bytes for each.
func TestGuestFloatFormatMatchesGo(t *testing.T) {
	const n, seed = 40000, 20251203
	vals := make([]float64, n)
	x := uint64(seed)
	for i := range vals {
		vals[i] = fmtDraw(&x, i)
	}
	wantJSON, err := json.Marshal(vals)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Split(strings.Trim(string(wantJSON), "[]"), ",")
	task := fmt.Sprintf(`{"seed":%d,"params":{"n":%d}}`, seed, n)
	p := newPool(t)
	for _, lang := range langs {
		t.Run(lang.name, func(t *testing.T) {
			needToolchain(t, lang.name)
			src := filepath.Join("testdata", "fmtfloat."+lang.ext)
			cmd := exec.Command(buildGuest(t, lang.name, "native", src))
			cmd.Stdin = strings.NewReader(task)
			native, err := cmd.Output()
			if err != nil {
				t.Fatalf("native fmtfloat: %v", err)
			}
			res := runTask(t, p, buildGuest(t, lang.name, "wasm", src), task, 0)
			if res.Failure != nil {
				t.Fatalf("fmtfloat.wasm: %v\n%s", res.Failure, res.Stderr)
			}
			for _, out := range []struct {
				where string
				text  []byte
			}{{"native", native}, {"wasm", res.Stdout}} {
				got := strings.Split(strings.Trim(strings.TrimSpace(string(out.text)), "[]"), ",")
				if len(got) != n {
					t.Fatalf("%s: %d numbers, want %d", out.where, len(got), n)
				}
				bad := 0
				for i := range got {
					if got[i] != want[i] && bad < 10 {
						bad++
						t.Errorf("%s: %v (bits %#x) written %s, Go writes %s", out.where, vals[i], math.Float64bits(vals[i]), got[i], want[i])
					}
				}
			}
		})
	}
}

// fmtDraw is testdata/fmtfloat.c's draw.
func fmtDraw(x *uint64, i int) float64 {
	*x += 0x9e3779b97f4a7c15
	z := *x
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	b := z ^ z>>31
	var bits uint64
	switch i % 4 {
	case 0:
		bits = b
	case 1:
		bits = b &^ (1<<52 - 1)
	case 2:
		base := 1e21
		if i%8 == 2 {
			base = 1e-6
		}
		bits = math.Float64bits(base) + b%41 - 20
	default:
		v := float64(b%(1<<20)) / 1024
		if b>>63 != 0 {
			v = -v
		}
		return v
	}
	if bits>>52&0x7ff == 0x7ff {
		bits &^= 1 << 62
	}
	return math.Float64frombits(bits)
}

// TestRustGuestCrate runs the unit tests of the Rust guest crate
// (examples/rust/idlepool_task), built natively with rustc --test.
func TestRustGuestCrate(t *testing.T) {
	needToolchain(t, "rust")
	rustc := os.Getenv("RUSTC")
	if rustc == "" {
		rustc = "rustc"
		if _, err := os.Stat("/usr/bin/rustc"); err == nil {
			rustc = "/usr/bin/rustc"
		}
	}
	bin := filepath.Join(t.TempDir(), "crate-test")
	if out, err := exec.Command(rustc, "--edition", "2021", "--test", "-o", bin, "rust/idlepool_task/lib.rs").CombinedOutput(); err != nil {
		t.Fatalf("rustc --test: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).CombinedOutput()
	if err != nil {
		t.Fatalf("the crate's tests failed: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "test result: ok.") {
		t.Errorf("the crate's tests did not all run:\n%s", out)
	}
}

// TestGuestManifests checks that the C and Rust examples' manifests are
// the Go examples' but for the name, the description and the program
// (which is the one beside them), so that they run the same tasks.
func TestGuestManifests(t *testing.T) {
	for _, kernel := range []string{"pi", "ising"} {
		goM, err := job.LoadManifest(filepath.Join(kernel, kernel+".toml"))
		if err != nil {
			t.Fatal(err)
		}
		for _, lang := range langs {
			path := filepath.Join(lang.name, kernel+".toml")
			m, err := job.LoadManifest(path)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			if want := filepath.Join(m.Dir, kernel+".wasm"); m.Program != want {
				t.Errorf("%s: program %s, want %s", path, m.Program, want)
			}
			if !strings.HasPrefix(m.Name, kernel+"-") {
				t.Errorf("%s: name %q, want %s-...", path, m.Name, kernel)
			}
			m.Name, m.Description, m.Program, m.Dir, m.Path = goM.Name, goM.Description, goM.Program, goM.Dir, goM.Path
			if diff := cmp.Diff(goM, m); diff != "" {
				t.Errorf("%s differs from %s/%s.toml in more than name, description and program (-go +%s):\n%s", path, kernel, kernel, lang.name, diff)
			}
		}
	}
}
