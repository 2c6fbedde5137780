//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/agent"
	"idlepool/home"
	"idlepool/idle"
	"idlepool/store"
)

// TestGameHandsTaskBack: a donor whose owner's policy pauses it while a
// listed program runs (pause_for) holds a task when that program starts,
// a real process the test runs. The donor hands the task back at once,
// and says so in its status and events; two other agents then compute
// the whole job, whose lease timeout (10 minutes) is never reached: the
// coordinator's lease records show the donor's lease released, none
// expired, and the paused donor still paused at the end. The merged
// result is byte for byte `idlepool run`'s.
func TestGameHandsTaskBack(t *testing.T) {
	t.Parallel() // mostly waits on its processes
	sleepBin, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep program to stand for a game")
	}
	m := writeManifest(t, "pi", piManifest(8, 200000)+"lease_timeout = \"10m\"\n")
	start := time.Now()
	solo := make(chan runOut, 1) // beside the pool: it waits for a compile as long
	go func() {
		solo <- idlepool(t, t.TempDir(), "run", m, "--json", "--workers", "2")
	}()

	data := t.TempDir()
	co, url := startServe(t, data, "127.0.0.1:0")

	// The paused donor: its policy computes on this test machine (no
	// input wait, any load of other programs, no temperature ceiling)
	// and pauses while "ipgame" plus a number unique to this run runs.
	// It computes at 5% of the CPU, so that it is in the middle of a task
	// when the game starts.
	game := fmt.Sprintf("ipgame%d", os.Getpid()) // at most 15 bytes: what Linux keeps of a process's name
	donor := filepath.Join(t.TempDir(), "donor")
	ownCompiled(t, donor)
	if out := idlepool(t, donor, "settings", "set", "idle_for=0", "max_other_cpu=100%", "max_temperature=0",
		"pause_for_games=false", "pause_for="+game, "cpu_time=5%"); out.code != 0 {
		t.Fatalf("settings set: exit %d\n%s", out.code, out.stderr)
	}
	startDaemon(t, "join donor", donor, "join", url, "--workers", "1")
	dirs, err := home.Resolve(donor)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dirs.Data, agent.LocalAPIFile)
	status := func() agent.AgentStatus {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, _ := agent.ReadStatus(ctx, sock)
		return st
	}

	followed := make(chan runOut, 1)
	go func() { followed <- idlepool(t, t.TempDir(), "submit", m, "--pool", url, "--follow", "--json") }()

	deadline := patient(t)
	for len(status().Running) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the donor took no task: %+v", status())
		}
		time.Sleep(20 * time.Millisecond)
	}

	t.Logf("the donor holds a task: %s", time.Since(start).Round(time.Millisecond))
	// Two agents of other owners join to compute the job; the donor,
	// which computes slowly, is still in the middle of its task when the
	// game starts.
	for i := range 2 {
		startJoin(t, filepath.Join(t.TempDir(), "agent"+string(rune('a'+i))), url)
	}

	// The game starts: a copy of sleep under the game's name.
	bin := filepath.Join(t.TempDir(), game)
	b, err := os.ReadFile(sleepBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	g := exec.Command(bin, "600")
	if err := g.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Process.Kill(); _ = g.Wait() })

	var handed agent.HandedBackTask
	for {
		if st := status(); len(st.HandedBack) > 0 {
			handed = st.HandedBack[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the donor did not hand its task back: %+v", status())
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("handed back: %s", time.Since(start).Round(time.Millisecond))
	if handed.Why != "a program you pause for started" {
		t.Errorf("handed back because %q", handed.Why)
	}

	var out runOut
	select {
	case out = <-followed:
	case <-time.After(time.Until(deadline)):
		t.Fatal("the job did not finish")
	}
	t.Logf("job done: %s", time.Since(start).Round(time.Millisecond))
	if out.code != 0 {
		t.Fatalf("submit --follow: exit %d\n%s", out.code, out.stderr)
	}
	r := <-solo
	if r.code != 0 {
		t.Fatalf("run --json: exit %d\n%s", r.code, r.stderr)
	}
	if diff := cmp.Diff(r.stdout, out.stdout); diff != "" {
		t.Fatalf("submit --follow --json differs from run --json (-run +submit):\n%s", diff)
	}

	st := status()
	if st.Decision.Cause != idle.CauseProgram || len(st.Running) != 0 {
		t.Errorf("the donor is no longer paused for the game: %+v", st.Decision)
	}
	events := idlepool(t, donor, "events", "-n", "0")
	if line := "handed back task " + strconv.FormatInt(handed.Task, 10) + " of job pi: a program you pause for started"; !strings.Contains(events.stdout, line) {
		t.Errorf("the donor's events lack %q:\n%s", line, events.stdout)
	}
	if out := idlepool(t, donor, "status"); !strings.Contains(out.stdout, "handed back task "+strconv.FormatInt(handed.Task, 10)+" of job pi") {
		t.Errorf("the donor's status does not say it handed the task back:\n%s", out.stdout)
	}

	// The lease records: the donor's lease released, none expired.
	co.stop()
	db, err := store.Open(filepath.Join(data, "coordinator.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	snap, err := db.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range snap.Replicas {
		if r.Lease == handed.Lease {
			found = true
			if r.State != "released" || r.Task != handed.Task {
				t.Errorf("the handed-back lease's record: task %d, state %q; want task %d released", r.Task, r.State, handed.Task)
			}
		}
		if r.State == "expired" {
			t.Errorf("lease %s of task %d expired", r.Lease, r.Task)
		}
	}
	if !found {
		t.Errorf("no record of the handed-back lease %s among %d", handed.Lease, len(snap.Replicas))
	}
}
