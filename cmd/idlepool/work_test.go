package main

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"idlepool/job"
	"idlepool/pool"
)

// TestPoolCreditsWork runs a job whose owner declares 1,000 cost units
// for trivial tasks (pi, 20,000 samples: about 6 × 10^6 instructions) on
// a real pool of two agents of two owners: the pooled result is the solo
// run's bytes, every receipt credits the work its task took
// (job.InstructionsPerCostUnit), far under what was declared, both
// receipts of a task credit the same count, and each agent's history
// shows what was declared, what was counted and what was credited.
func TestPoolCreditsWork(t *testing.T) {
	t.Parallel() // long: runs beside the package's other long tests
	const tasks, declared = 4, 1000
	m := writeManifest(t, "pi", piManifest(tasks, 20000)+fmt.Sprintf("task_cost = %d\n", declared))
	r, want := runJSON(t, t.TempDir(), m)
	_, url := startServe(t, t.TempDir(), "127.0.0.1:0")
	var homes []string
	for i := range 2 {
		home := filepath.Join(t.TempDir(), fmt.Sprintf("agent%d", i))
		homes = append(homes, home)
		startJoin(t, home, url)
	}
	out := idlepool(t, t.TempDir(), "submit", m, "--pool", url, "--follow", "--json")
	if out.code != 0 {
		t.Fatalf("submit --follow: exit %d\n%s", out.code, out.stderr)
	}
	if diff := cmp.Diff(want, out.stdout); diff != "" {
		t.Fatalf("submit --follow --json differs from run --json (-run +submit):\n%s", diff)
	}
	checkLedgerAndHistories(t, url, map[string]int64{r.Job: tasks}, 2, homes)

	work := map[int64]uint64{}
	credited := map[string]float64{}
	counted := map[string]uint64{}
	for _, e := range fetchLedger(t, url) {
		if e.Kind != pool.KindReceipt || e.Job.String() != r.Job {
			continue
		}
		if e.Work == 0 || e.Work > 1e8 {
			t.Errorf("receipt %d of task %d counted %d instructions, want a trivial task's few million", e.Seq, e.Task, e.Work)
		}
		if w, ok := work[e.Task]; ok && w != e.Work {
			t.Errorf("task %d: receipts counted %d and %d instructions, want the same", e.Task, w, e.Work)
		}
		work[e.Task] = e.Work
		if want := float64(e.Work) / job.InstructionsPerCostUnit; e.Cost != want || e.Cost >= declared {
			t.Errorf("receipt %d credits %v for %d instructions, want %v (not the %d declared)", e.Seq, e.Cost, e.Work, want, declared)
		}
		credited[e.Peer] += e.Cost
		counted[e.Peer] += e.Work
	}
	if len(work) != tasks {
		t.Fatalf("receipts for %d tasks, want %d", len(work), tasks)
	}
	t.Logf("instructions per task: %v", work)
	for _, home := range homes {
		id := peerID(t, home)
		var sum struct {
			confirmed      int64
			declared, cost float64
			work           uint64
		}
		for _, d := range history(t, home) {
			sum.confirmed += d.Confirmed
			sum.declared += d.DeclaredCost
			sum.cost += d.ConfirmedCost
			sum.work += d.Work
		}
		if sum.declared != float64(declared*sum.confirmed) || sum.work != counted[id] || math.Abs(sum.cost-credited[id]) > 1e-9 {
			t.Errorf("agent %s: history %+v; want %d declared per receipt, %d instructions and %v credited", id, sum, declared, counted[id], credited[id])
		}
		if text := idlepool(t, home, "history"); text.code != 0 || !strings.Contains(text.stdout, "declared units") || !strings.Contains(text.stdout, "instructions") {
			t.Errorf("history: exit %d\n%s", text.code, text.stdout)
		}
	}
}
