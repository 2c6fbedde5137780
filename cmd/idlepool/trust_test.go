package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/identity"
	"idlepool/job"
)

// TestPoolCorrectsCaughtLiar: adaptive replication with real processes.
// A donor that lies once it is trusted (testdata/liar, which speaks the
// pool's HTTP API like `idlepool join` but returns wrong bytes after its
// first three tasks) computes tasks alone and earns receipts for them;
// its results are held back from the merge until a check. When the pool
// finds the deviation, the tasks are computed again, the submitter's
// merge gets the right values (the same bytes as a solo run), and every
// receipt the liar earned for a wrong result is revoked by a signed
// ledger entry that `idlepool ledger verify` accepts.
//
// Whether a lie is computed alone depends on which device asks for which
// task first; a round in which every lie fell beside an honest replica
// (caught at once, nothing held) tests nothing of the correction, so the
// test plays up to three rounds, each with a fresh pool, and fails when
// none held a lie (seen in about 1 round of 10 here).
func TestPoolCorrectsCaughtLiar(t *testing.T) {
	t.Parallel() // long: runs beside the package's other long tests
	liarBin := liarBinary(t)
	for round := 1; round <= 3; round++ {
		alone := 0
		t.Run(fmt.Sprintf("round%d", round), func(t *testing.T) { alone = caughtLiarRound(t, liarBin) })
		if t.Failed() || alone > 0 {
			return
		}
		t.Logf("round %d: every lie was computed beside an honest replica; playing another round", round)
	}
	t.Fatal("in 3 rounds no wrong result of the liar was accepted alone: nothing of the correction was tested")
}

// caughtLiarRound plays TestPoolCorrectsCaughtLiar once, with a fresh
// pool, and returns how many of the liar's wrong results were accepted
// alone (each of them must be corrected and its receipt revoked).
func caughtLiarRound(t *testing.T, liarBin string) int {
	_, url := startServe(t, t.TempDir(), "127.0.0.1:0")
	for i := range 3 {
		startJoin(t, filepath.Join(t.TempDir(), "honest"+string(rune('a'+i))), url)
	}
	liarLog := filepath.Join(t.TempDir(), "liar.log")
	logf, err := os.Create(liarLog)
	if err != nil {
		t.Fatal(err)
	}
	liar := exec.Command(liarBin, "-pool", url, "-dir", liarDir(t), "-honest", "3", "-lie", `{"x":1000}`)
	liar.Stderr = logf
	if err := liar.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		liar.Process.Kill()
		liar.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(liarLog)
			t.Logf("liar's log:\n%s", b)
		}
	})
	// A spot check so rare that it never decides this test: the liar is
	// caught when the job runs out of fresh tasks and the held results are
	// checked by a second replica, or when it is leased a task another
	// device started.
	m := writeManifest(t, "params", `name = "held"
program = "prog.wasm"
[split]
rule = "range"
tasks = 120
[split.params]
x = 1
[[merge]]
field = "x"
rule = "sum"
[verify]
min_quorum = 1
spot_check = 0.000001
trust_after = 3
`)
	_, want := runJSON(t, t.TempDir(), m)
	out := idlepool(t, t.TempDir(), "submit", m, "--pool", url, "--follow", "--json")
	if out.code != 0 {
		t.Fatalf("submit --follow: exit %d\n%s", out.code, out.stderr)
	}
	if diff := cmp.Diff(want, out.stdout); diff != "" {
		t.Fatalf("the pool's merge differs from a solo run (-run +submit):\n%s", diff)
	}
	// The liar's wrong results and what the ledger says of them.
	deadline := time.Now().Add(2 * time.Minute)
	var lies []string
	for {
		b, _ := os.ReadFile(liarLog)
		lies = nil
		for _, m := range regexp.MustCompile(`lease ([0-9a-f]+): lie`).FindAllSubmatch(b, -1) {
			lies = append(lies, string(m[1]))
		}
		if len(lies) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	receipts, revoked := map[string]bool{}, map[string]bool{}
	for _, e := range fetchLedger(t, url) {
		switch e.Kind {
		case "receipt":
			receipts[e.Lease] = true
		case "revocation":
			revoked[e.Lease] = true
		}
	}
	alone := 0
	for _, l := range lies {
		if receipts[l] {
			alone++
			if !revoked[l] {
				t.Errorf("the liar's receipt for its wrong result (lease %s) was not revoked", l)
			}
		}
	}
	t.Logf("the liar returned %d wrong results; accepted alone, held, corrected and revoked: %d", len(lies), alone)
	if out := idlepool(t, t.TempDir(), "ledger", "verify", "--pool", url); out.code != 0 || !strings.HasPrefix(out.stdout, "ledger ok: ") {
		t.Errorf("ledger verify --pool: exit %d\n%s%s", out.code, out.stdout, out.stderr)
	}
	return alone
}

// TestPoolTwoColludersDoNotStall: real processes. Two donors of two
// owners that return the same wrong bytes for every task
// (testdata/liar), beside two honest donors of the operator's owners,
// used to stall the job for good: every task split 2-2 and the undecided
// replicas used up every device's bound on unverified work. The job names known answers for
// every fifth task: each liar is caught on one, computes no more of the
// job, and its votes on the tasks it stalled are void, so the honest
// owners decide them and the merge is the solo run's.
func TestPoolTwoColludersDoNotStall(t *testing.T) {
	t.Parallel() // long: runs beside the package's other long tests
	liarBin := liarBinary(t)
	const tasks = 40
	text := fmt.Sprintf("name = \"collude\"\nprogram = \"prog.wasm\"\n[split]\nrule = \"range\"\ntasks = %d\n[split.params]\nx = 1\n[[merge]]\nfield = \"x\"\nrule = \"sum\"\n", tasks)
	m := writeManifest(t, "params", text)
	// The answers: the params program's output is its task's params.
	mf, err := job.ParseManifest(m, filepath.Dir(m), []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	j, err := job.Plan(mf)
	if err != nil {
		t.Fatal(err)
	}
	answers := map[string]string{}
	for i := int64(0); i < tasks; i += 5 {
		var task struct {
			Params json.RawMessage `json:"params"`
		}
		if err := json.Unmarshal(j.TaskJSON(j.Task(i)), &task); err != nil {
			t.Fatal(err)
		}
		answers[fmt.Sprint(i)] = job.Digest(sha256.Sum256(append(task.Params, '\n'))).String()
	}
	b, _ := json.Marshal(answers)
	if err := os.WriteFile(filepath.Join(filepath.Dir(m), "answers.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(m, []byte(text+"[verify]\nknown_answers = \"answers.json\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, want := runJSON(t, t.TempDir(), m)

	// The honest owners are the operator's (serve --trusted-owners), as
	// in a small pool: two new owners never form a quorum together, so
	// the liars, quicker to ask than an agent that compiles its program,
	// cannot pair on the first tasks before anyone is caught.
	var ownerKeys, owners []string
	for range 2 {
		path := filepath.Join(t.TempDir(), "owner.key")
		k, err := identity.LoadOrCreate(path)
		if err != nil {
			t.Fatal(err)
		}
		ownerKeys, owners = append(ownerKeys, path), append(owners, k.ID())
	}
	_, url := startServe(t, t.TempDir(), "127.0.0.1:0", "--trusted-owners", strings.Join(owners, ","))
	for i := range 2 {
		startJoin(t, filepath.Join(t.TempDir(), "honest"+string(rune('a'+i))), url, "--owner-key", ownerKeys[i])
		log := filepath.Join(t.TempDir(), "liar.log")
		logf, err := os.Create(log)
		if err != nil {
			t.Fatal(err)
		}
		liar := exec.Command(liarBin, "-pool", url, "-dir", liarDir(t), "-honest", "0", "-lie", `{"x":1000}`)
		liar.Stderr = logf
		if err := liar.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			liar.Process.Kill()
			liar.Wait()
			logf.Close()
			if t.Failed() {
				b, _ := os.ReadFile(log)
				t.Logf("liar %d's log:\n%s", i, b)
			}
		})
	}
	// Bounded: on a stalled pool follow would wait for good.
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, "--home", t.TempDir(), "submit", m, "--pool", url, "--follow", "--json")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		st := idlepool(t, t.TempDir(), "status", j.ID.String(), "--pool", url)
		t.Fatalf("submit --follow: %v\n%s\nstatus:\n%s%s", err, stderr.String(), st.stdout, st.stderr)
	}
	if diff := cmp.Diff(want, stdout.String()); diff != "" {
		t.Fatalf("the pool's merge differs from a solo run (-run +submit):\n%s", diff)
	}
	liars, honest := map[string]int{}, map[string]int{}
	for _, e := range fetchLedger(t, url) {
		if e.Kind == "deviation" {
			liars[e.Peer]++
		}
		if e.Kind == "receipt" {
			honest[e.Peer]++
		}
	}
	if len(liars) != 2 {
		t.Errorf("deviations by %d devices, want both liars caught: %v", len(liars), liars)
	}
	for p := range liars {
		if honest[p] > 0 {
			t.Errorf("liar %s earned %d receipts", p, honest[p])
		}
	}
	t.Logf("deviations %v; receipts %v", liars, honest)
}
