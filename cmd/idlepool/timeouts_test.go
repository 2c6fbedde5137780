package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// loopManifest runs testdata/loop on two tasks: task 0 never ends, task 1
// answers. Each task may run 3 s; a device whose task timed out is
// leased it again only while no other device may take it, 6 s after its
// lease and then 12 s after the next (twice the time limit, doubling):
// well after a third device has joined.
const loopManifest = `name = "loop"
program = "prog.wasm"

[split]
rule = "range"
tasks = 2

[split.params]
loop = 0

[[merge]]
field = "x"
rule = "sum"

[policy]
time_limit = "3s"
lease_timeout = "10m"
`

var submittedLine = regexp.MustCompile(`job loop \(([0-9a-f]{12})\): 2 tasks submitted`)

// A task that times out again and again: submit --follow says as it
// happens that it is timing out (how many tasks, after how long, on how
// many devices), and so does status; once it timed out on --max-timeouts
// devices the pool gives up on it, and the job ends with it failed, its
// reason saying so and that it is no verified result.
func TestFollowTellsTimeoutsAndEnds(t *testing.T) {
	t.Parallel() // mostly waits for its tasks' time limits
	m := writeManifest(t, "loop", loopManifest)
	_, url := startServe(t, t.TempDir(), "127.0.0.1:0", "--max-timeouts", "3")
	for i := range 2 {
		startJoin(t, filepath.Join(t.TempDir(), fmt.Sprintf("donor%d", i)), url)
	}
	owner := t.TempDir()
	follow := startDaemon(t, "submit --follow", owner, "submit", m, "--pool", url, "--follow")
	const timingOut = "1 task timing out: it ran past the 3s time limit, on 2 devices in all; a task ends failed (unverified) once it timed out on 3 devices or failed 6 times\n"
	waitFile(t, follow, follow.stderr, timingOut)
	b, _ := os.ReadFile(follow.stderr)
	id := submittedLine.FindSubmatch(b)
	if id == nil {
		t.Fatalf("submit named no job:\n%s", b)
	}
	if out := idlepool(t, owner, "status", string(id[1]), "--pool", url); out.code != 0 || !strings.Contains(out.stdout, "timeouts "+timingOut) {
		t.Errorf("status: exit %d, want a line %q\n%s%s", out.code, "timeouts "+timingOut, out.stdout, out.stderr)
	}

	// A third device: the task times out there too, and the pool gives up.
	startJoin(t, filepath.Join(t.TempDir(), "donor2"), url)
	select {
	case <-follow.done:
	case <-time.After(time.Until(patient(t))):
		t.Fatal("submit --follow did not end once the task timed out on the third device")
	}
	stdout, _ := os.ReadFile(follow.stdout)
	stderr, _ := os.ReadFile(follow.stderr)
	// The two first devices may have taken it again before the third
	// joined: "timed out on 3 devices", or "timed out 4 times on 3
	// devices".
	failedRE := regexp.MustCompile(`failed   task 0: unverified: timed out (\d times )?on 3 devices, after 3s each: the pool gave up on it, which is its decision and no verified result \(raise policy.time_limit if the task needs longer\)\n`)
	failed := failedRE.FindString(string(stdout))
	if code := follow.cmd.ProcessState.ExitCode(); code != 1 || failed == "" ||
		!strings.Contains(string(stdout), "tasks    1 ok, 1 failed, 2 total") {
		t.Errorf("submit --follow: exit %d, want 1 and a line matching %q\nstdout:\n%s\nstderr:\n%s", code, failedRE, stdout, stderr)
	}
	for _, want := range []string{
		"idlepool: 1 of 2 tasks failed; the result leaves them out (see the \"failed\" lines); the first: " + strings.TrimSuffix(strings.TrimPrefix(failed, "failed   "), "\n"),
		"hint: raise policy.time_limit in the manifest if the task needs longer (the pool tried it on several devices",
	} {
		if !strings.Contains(string(stderr), want) {
			t.Errorf("submit --follow's stderr lacks %q:\n%s", want, stderr)
		}
	}
	result := idlepool(t, owner, "result", string(id[1]), "--pool", url)
	if result.code != 1 || !strings.Contains(result.stdout, failed) {
		t.Errorf("result: exit %d, want 1 and %q\n%s%s", result.code, failed, result.stdout, result.stderr)
	}
}
