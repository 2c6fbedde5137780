package main

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// chattyManifest runs testdata/chatty on two tasks: task 0 logs 30 lines
// and panics, task 1 logs 30 lines and exits with status 3.
const chattyManifest = `name = "chatty"
program = "prog.wasm"

[split]
rule = "range"
tasks = 2

[[merge]]
field = "x"
rule = "sum"
`

// failures returns the part of a result printed for people that lists
// the failed tasks: from the first "failed" line to the end.
func failures(t *testing.T, stdout string) string {
	t.Helper()
	i := strings.Index(stdout, "\nfailed   task ")
	if i < 0 {
		t.Fatalf("no failed task in:\n%s", stdout)
	}
	return stdout[i+1:]
}

var idLine = regexp.MustCompile(`(?m)^id       ([0-9a-f]{64})$`)

// A failed program's reason shows the end of its log: the last lines it
// wrote and, for a Go panic, the panic and the failing goroutine's
// frames, alike in `run`, `submit --follow` and `result`.
func TestFailedProgramLog(t *testing.T) {
	t.Parallel()
	m := writeManifest(t, "chatty", chattyManifest)
	run := idlepool(t, t.TempDir(), "run", m, "--workers", "1")
	if run.code != 1 {
		t.Fatalf("run: exit %d, want 1\nstdout:\n%s\nstderr:\n%s", run.code, run.stdout, run.stderr)
	}
	got := failures(t, run.stdout)
	// Indented under the failure, as printed: the frames keep their tab.
	for _, want := range []string{
		"failed   task 0: worker: task failed: trap: panic: chatty: task 0 gave up after step 30\n" +
			"           program log:\n" +
			"           … 10 earlier lines cut\n" +
			"           chatty: task 0 step 11 of 30\n",
		"           chatty: task 0 step 30 of 30\n" +
			"           panic: chatty: task 0 gave up after step 30\n" +
			"\n" +
			"           goroutine 1 [running]:\n" +
			"           main.inner(",
		"           main.outer(",
		"           main.main()\n" +
			"           \t",
		"testdata/chatty/main.go:",
		"failed   task 1: worker: task failed: exit-status: exit status 3\n" +
			"           program log:\n" +
			"           … 10 earlier lines cut\n" +
			"           chatty: task 1 step 11 of 30\n",
		"           chatty: task 1 step 30 of 30\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("run's failures lack %q:\n%s", want, got)
		}
	}
	for _, notWant := range []string{"step 10 of 30\n", "chatty: task 1 step 30 of 30\n           panic"} {
		if strings.Contains(got, notWant) {
			t.Errorf("run's failures have %q:\n%s", notWant, got)
		}
	}
	if !strings.Contains(run.stderr, "every task failed; the first: task 0: worker: task failed: trap: panic: chatty: task 0 gave up after step 30 (the end of its log is shown with the failures)\n") {
		t.Errorf("run's error does not name the panic in one line:\n%s", run.stderr)
	}
	id := idLine.FindStringSubmatch(run.stdout)
	if id == nil {
		t.Fatalf("run printed no job ID:\n%s", run.stdout)
	}

	// The same reasons come out of a pool: two donors of two owners agree
	// on the failures, and the submitter shows them.
	_, url := startServe(t, t.TempDir(), "127.0.0.1:0")
	for i := range 2 {
		startJoin(t, filepath.Join(t.TempDir(), fmt.Sprintf("donor%d", i)), url)
	}
	owner := t.TempDir()
	follow := idlepool(t, owner, "submit", m, "--pool", url, "--follow")
	if follow.code != 1 {
		t.Fatalf("submit --follow: exit %d, want 1\nstdout:\n%s\nstderr:\n%s", follow.code, follow.stdout, follow.stderr)
	}
	if diff := diffLines(got, failures(t, follow.stdout)); diff != "" {
		t.Errorf("submit --follow's failures differ from run's (-run +follow):\n%s", diff)
	}
	result := idlepool(t, owner, "result", id[1][:12], "--pool", url)
	if result.code != 1 {
		t.Fatalf("result: exit %d, want 1\nstdout:\n%s\nstderr:\n%s", result.code, result.stdout, result.stderr)
	}
	if diff := diffLines(got, failures(t, result.stdout)); diff != "" {
		t.Errorf("result's failures differ from run's (-run +result):\n%s", diff)
	}
}

// diffLines returns the lines of a and b that differ, "" when none do.
func diffLines(a, b string) string {
	if a == b {
		return ""
	}
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	var out strings.Builder
	for i := range max(len(la), len(lb)) {
		var x, y string
		if i < len(la) {
			x = la[i]
		}
		if i < len(lb) {
			y = lb[i]
		}
		if x != y {
			fmt.Fprintf(&out, "line %d:\n-%s\n+%s\n", i+1, x, y)
		}
	}
	return out.String()
}
