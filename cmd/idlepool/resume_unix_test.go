//go:build unix

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestResumeAfterKill kills a run with SIGKILL in the middle, runs it again
// and checks the result is byte-identical to an uninterrupted run.
func TestResumeAfterKill(t *testing.T) {
	m := writeManifest(t, "pi", piManifest(300, 100000))
	_, want := runJSON(t, t.TempDir(), m)

	home := t.TempDir()
	shareCompiled(t, home)
	cmd := exec.Command(binPath, "--home", home, "run", m, "--json", "--workers", "2")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	journal := ""
	deadline := patient(t)
	for {
		if journal == "" {
			matches, _ := filepath.Glob(filepath.Join(home, "data", "runs", "*", "journal"))
			if len(matches) == 1 {
				journal = matches[0]
			}
		}
		if st, err := os.Stat(journal); journal != "" && err == nil && st.Size() > 60*80 {
			break // some tens of tasks are journaled
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatal("the run journaled nothing")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Kill() // SIGKILL to the runner alone: its workers must die with it
	cmd.Wait()
	noStrayWorkers(t, home)

	out := idlepool(t, home, "run", m, "--json", "--workers", "2")
	if out.code != 0 {
		t.Fatalf("resume: exit %d: %s", out.code, out.stderr)
	}
	if !strings.Contains(out.stderr, "were taken from the journal") {
		t.Errorf("resume did not say it continued from the journal; stderr:\n%s", out.stderr)
	}
	if diff := cmp.Diff(want, out.stdout); diff != "" {
		t.Fatalf("resumed run differs from an uninterrupted one (-want +got):\n%s", diff)
	}
}
