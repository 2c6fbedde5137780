package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/pool"
)

// resultsJob writes a csvstats job over a CSV of size bytes with a task
// per chunk of chunk bytes, each computed by redundancy owners, whose
// results (statistics and quantile sketches of three columns) are over
// pool.InlineResultBytes; it returns the manifest's path, `run --json`'s
// output and the job's ID.
func resultsJob(t *testing.T, size, chunk, redundancy int) (manifest, want, id string) {
	t.Helper()
	dataPath, _ := writeCSV(t, size)
	text := strings.Replace(exampleManifest(t, "csvstats"), `data = "data.csv"`, `data = "`+dataPath+`"`, 1)
	text = strings.Replace(text, "chunk_bytes = 1048576", fmt.Sprintf("chunk_bytes = %d", chunk), 1)
	text = strings.Replace(text, "[policy]\n", fmt.Sprintf("[policy]\nredundancy = %d\nquorum = %d\n", redundancy, redundancy), 1)
	m := writeManifest(t, "csvstats", text)
	r, want := runJSON(t, t.TempDir(), m)
	return m, want, r.Job
}

// TestJoinResultsStayWithDevices: with real processes, two `idlepool
// join` agents of two owners compute every task of a csvstats job and
// keep their results (each over 1 KiB); the coordinator compares their
// digests and receives none of their bytes (its metrics), and the
// submitter fetches the accepted results from the agents over data
// channels: its merged result equals `run --json` byte for byte.
func TestJoinResultsStayWithDevices(t *testing.T) {
	t.Parallel() // long: runs beside the package's other long tests
	if testing.Short() {
		t.Skip("runs two agents and a submitter over the data plane")
	}
	_, url := startServe(t, t.TempDir(), "127.0.0.1:0")
	m, want, _ := resultsJob(t, 1<<20, 256<<10, 2)
	homes := []string{filepath.Join(t.TempDir(), "agent0"), filepath.Join(t.TempDir(), "agent1")}
	for _, h := range homes {
		startJoin(t, h, url)
	}
	out := idlepool(t, t.TempDir(), "submit", m, "--pool", url, "--follow", "--json")
	if out.code != 0 {
		t.Fatalf("submit --follow: exit %d\n%s", out.code, out.stderr)
	}
	if diff := cmp.Diff(want, out.stdout); diff != "" {
		t.Fatalf("submit --follow --json differs from run --json (-run +submit):\n%s", diff)
	}
	inline := metricValue(t, url, `idlepool_coord_result_bytes_total{how="inline"}`)
	kept := metricValue(t, url, `idlepool_coord_result_bytes_total{how="kept"}`)
	served := metricValue(t, url, `idlepool_coord_bytes_served_total{kind="result"}`)
	taken := metricValue(t, url, `idlepool_coord_submissions_total{result="taken"}`)
	t.Logf("result bytes: %.0f kept by the devices, %.0f sent to the coordinator inline (%.0f results taken), %.0f served by it", kept, inline, taken, served)
	// Only results of at most 1 KiB travel inline (a chunk of the input
	// without records gives a short one).
	if kept == 0 || inline > taken*pool.InlineResultBytes || served > inline {
		t.Errorf("the coordinator received %.0f result bytes in %.0f results and served %.0f, the devices kept %.0f; want at most %d bytes per result received, the rest kept",
			inline, taken, served, kept, pool.InlineResultBytes)
	}
	if !strings.Contains(out.stderr, "fetched from the devices that computed them") {
		t.Errorf("submit --follow did not say it fetched results from the devices; stderr:\n%s", out.stderr)
	}
}

// TestJoinResultLostIsComputedAgain: with real processes, the submitter
// hands a job to the pool and follows it (saying it fetches kept
// results), then stops (SIGKILL) before any result came; two agents of
// two owners compute every task and keep the results. Both agents are
// killed (SIGKILL) before the submitter fetched anything, and a third
// agent joins. `idlepool result` finds no holder, reports the results
// lost, the pool leases their tasks again (to the third agent, which
// keeps the new results), and the merge completes equal to `run --json`:
// nothing abandoned, nothing folded that was not verified. The third
// agent earns a receipt for each task it computed again.
func TestJoinResultLostIsComputedAgain(t *testing.T) {
	t.Parallel() // long: runs beside the package's other long tests
	if testing.Short() {
		t.Skip("runs three agents and waits for dead holders to time out")
	}
	// The killed agents stop counting as devices waiting for work a
	// second after they last asked for some, not 2 minutes (the
	// default): until then the tail's rules keep the job's tasks from the
	// third agent whenever its first task (which starts its worker) made
	// it look slow against the job's median, and each lost result would
	// wait that long to be computed again.
	_, url := startServe(t, t.TempDir(), "127.0.0.1:0", "--idle-within", "1s")
	m, want, id := resultsJob(t, 512<<10, 256<<10, 2)
	homes := []string{filepath.Join(t.TempDir(), "agent0"), filepath.Join(t.TempDir(), "agent1"), filepath.Join(t.TempDir(), "agent2")}
	// The submitter offers no files (the agents fetch them from the
	// coordinator), but fetches results.
	subHome := t.TempDir()
	if out := idlepool(t, subHome, "settings", "set", "share_peers=false"); out.code != 0 {
		t.Fatalf("settings set share_peers=false: exit %d\n%s", out.code, out.stderr)
	}
	sub := startDaemon(t, "submit", subHome, "submit", m, "--pool", url, "--follow", "--json")
	deadline := patient(t)
	waitStatus := func(what string, done func(tasks int64, complete bool) bool) int64 {
		t.Helper()
		for {
			select {
			case <-sub.done:
				if what == "the pool has the job" {
					// Its cleanup logs the end of its stderr.
					t.Fatalf("submit ended before the pool had the job: %v", sub.cmd.ProcessState)
				}
			default:
			}
			out := idlepool(t, subHome, "status", id, "--pool", url, "--json")
			var st struct {
				Tasks    int64
				Complete bool
			}
			if out.code == 0 && json.Unmarshal([]byte(out.stdout), &st) == nil && done(st.Tasks, st.Complete) {
				return st.Tasks
			}
			if time.Now().After(deadline) {
				t.Fatalf("waiting until %s: %s%s", what, out.stdout, out.stderr)
			}
			time.Sleep(100 * time.Millisecond) // polling a condition
		}
	}
	waitStatus("the pool has the job", func(int64, bool) bool { return true })
	sub.kill()
	first := []*daemon{startJoin(t, homes[0], url), startJoin(t, homes[1], url)}
	tasks := waitStatus("the job is complete", func(_ int64, complete bool) bool { return complete })
	for _, d := range first {
		d.kill()
	}
	startJoin(t, homes[2], url)
	out := idlepool(t, subHome, "result", id, "--pool", url, "--json")
	if out.code != 0 {
		t.Fatalf("result: exit %d\n%s", out.code, out.stderr)
	}
	if diff := cmp.Diff(want, out.stdout); diff != "" {
		t.Fatalf("result after the holders were killed differs from run --json (-run +result):\n%s", diff)
	}
	if !strings.Contains(out.stderr, "the pool has it computed again") {
		t.Errorf("result did not say the lost results are computed again; stderr:\n%s", out.stderr)
	}
	third := peerID(t, homes[2])
	receipts := int64(0)
	for _, e := range fetchLedger(t, url) {
		if e.Peer == third && e.Kind == pool.KindReceipt {
			receipts++
		}
	}
	// Each task whose result was kept was computed again. The input's
	// last few bytes make a last task with a short result (at most 1
	// KiB), which went to the coordinator and needed nothing. A result the
	// third agent kept may itself be lost in turn (on a loaded machine its
	// data plane may not connect within its 30 s), and the task is then
	// computed, and credited, again: more receipts are no fault.
	inline := metricValue(t, url, `idlepool_coord_result_bytes_total{how="inline"}`)
	t.Logf("%d tasks, %.0f result bytes inline; the third agent earned %d receipts", tasks, inline, receipts)
	if want := tasks - 1; receipts < want || inline > 2*pool.InlineResultBytes {
		t.Errorf("the third agent has %d receipts and %.0f result bytes went inline; want at least %d receipts (every task but the short last one) and at most one short result from each of the two owners",
			receipts, inline, want)
	}
}
