package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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
	liarBin := filepath.Join(t.TempDir(), "liar")
	if out, err := exec.Command("go", "build", "-o", liarBin, "./testdata/liar").CombinedOutput(); err != nil {
		t.Fatalf("build the liar: %v\n%s", err, out)
	}
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
	liar := exec.Command(liarBin, "-pool", url, "-dir", t.TempDir(), "-honest", "3", "-lie", `{"x":1000}`)
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
