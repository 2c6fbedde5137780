package job

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestFromCanonicalRoundTrip rebuilds jobs of every split rule from their
// canonical bytes and content-addressed files and checks the same ID and
// the same task bytes come out.
func TestFromCanonicalRoundTrip(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("p.wasm", "\x00asm\x01\x00\x00\x00")
	write("data.csv", "a,b,label\n1,2,0\n3,4,1\n5,6,0\n7,8,1\n9,10,0\n")
	tests := map[string]string{
		"range": `[split]
rule = "range"
tasks = 3
[split.params]
samples = 1000
scale = 0.5
[policy]
task_cost = 2.5
cost_param = "samples"
[requirements]
gpu = true
gpu_memory_mib = 8192
gpu_compute_capability = "8.0"
memory_mib = 512
prefer = "memory"
[verify]
min_quorum = 1
spot_check = 0.25
trust_after = 7
check_window = "15m"`,
		"grid": `[split]
rule = "grid"
[split.grid]
T = [1.5, 2, 2.5]
L = [8, 16]
[derive]
x = "2 * s"`,
		"tolerance": `[split]
rule = "range"
tasks = 2
[requirements]
gpu = "optional"
[verify]
rule = "tolerance"
[verify.tolerance]
price = { abs = 1e-3, rel = 1e-4 }
stats.mean = { rel = 0.5 }
"band.lo" = { abs = 2 }`,
		"tolerance and adaptive": `[split]
rule = "range"
tasks = 2
[policy]
redundancy = 3
quorum = 2
[verify]
min_quorum = 1
rule = "tolerance"
[verify.tolerance]
price = { abs = 0 }`,
		"kfold": `[split]
rule = "kfold"
k = 2
input = "data"
shuffle = true`,
		"chunks": `[split]
rule = "chunks"
input = "data"
chunk_bytes = 9
header = true`,
	}
	for name, split := range tests {
		t.Run(name, func(t *testing.T) {
			text := "name = \"t\"\nprogram = \"p.wasm\"\n[inputs]\ndata = \"data.csv\"\n[[merge]]\nfield = \"s\"\nrule = \"sum\"\n[[merge]]\nfield = \"v\"\nrule = \"histogram\"\nmin = 0.0\nmax = 1.0\nbins = 10\n" + split + "\n"
			m, err := ParseManifest("job.toml", dir, []byte(text))
			if err != nil {
				t.Fatal(err)
			}
			j, err := Plan(m)
			if err != nil {
				t.Fatal(err)
			}
			byDigest := map[Digest]string{j.Program.SHA256: j.Program.Path}
			for _, ref := range j.Inputs {
				byDigest[ref.SHA256] = ref.Path
			}
			got, err := FromCanonical(j.Canonical, func(d Digest) string { return byDigest[d] })
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(m.Verify.Tolerances, got.Manifest.Verify.Tolerances); diff != "" {
				t.Errorf("tolerances differ (-want +got):\n%s", diff)
			}
			if m.Requirements.GPU != got.Manifest.Requirements.GPU {
				t.Errorf("requirements.gpu %v, want %v", got.Manifest.Requirements.GPU, m.Requirements.GPU)
			}
			if got.ID != j.ID || got.NumTasks() != j.NumTasks() {
				t.Fatalf("rebuilt job %s with %d tasks, want %s with %d", got.ID, got.NumTasks(), j.ID, j.NumTasks())
			}
			for i := range j.NumTasks() {
				if diff := cmp.Diff(string(j.TaskJSON(j.Task(i))), string(got.TaskJSON(got.Task(i)))); diff != "" {
					t.Errorf("task %d differs:\n%s", i, diff)
				}
				if j.Cost(j.Task(i)) != got.Cost(got.Task(i)) {
					t.Errorf("task %d cost differs", i)
				}
				// CostOf and WorkCostOf, which build no task where the
				// cost takes no parameter, agree with Cost and WorkCost.
				if c, want := j.CostOf(i), j.Cost(j.Task(i)); c != want {
					t.Errorf("task %d: CostOf %v, Cost %v", i, c, want)
				}
				for _, n := range []uint64{0, 1, 7e7, 1e8, 3e8, 1e15} {
					if c, want := j.WorkCostOf(i, n), j.WorkCost(j.Task(i), n); c != want {
						t.Errorf("task %d, %d instructions: WorkCostOf %v, WorkCost %v", i, n, c, want)
					}
				}
			}
			for _, i := range []int64{-1, j.NumTasks()} { // out of range panics, as Task does
				func() {
					defer func() {
						if recover() == nil {
							t.Errorf("CostOf(%d) of a job of %d tasks did not panic", i, j.NumTasks())
						}
					}()
					j.CostOf(i)
				}()
			}
		})
	}
	if _, err := FromCanonical([]byte("garbage"), func(Digest) string { return "" }); err == nil {
		t.Fatal("garbage accepted as a canonical job")
	}
}
