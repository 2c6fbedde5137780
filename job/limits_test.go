package job

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// policy.stdout_mib raises (or lowers) a task's stdout limit up to the
// ceiling every worker and pool accepts; left out or at its default it
// keeps the job ID the job had before the setting existed.
func TestPolicyStdoutMiB(t *testing.T) {
	base := plan(t, rangeManifest, goldenFiles)
	tests := []struct {
		name, policy string
		want         int
		sameID       bool
	}{
		{"absent", "", DefaultStdoutMiB, true},
		{"default", "stdout_mib = 16", 16, true},
		{"raised", "stdout_mib = 64", 64, false},
		{"lowered", "stdout_mib = 1", 1, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j := plan(t, rangeManifest+"[policy]\n"+tc.policy+"\n", goldenFiles)
			if got := j.Manifest.Policy.StdoutMiB; got != tc.want {
				t.Errorf("StdoutMiB = %d, want %d", got, tc.want)
			}
			if same := j.ID == base.ID; same != tc.sameID {
				t.Errorf("ID %s, without the setting %s: same = %v, want %v", j.ID, base.ID, same, tc.sameID)
			}
			back, err := FromCanonical(j.Canonical, func(d Digest) string { return j.Program.Path })
			if err != nil {
				t.Fatalf("FromCanonical: %v", err)
			}
			if back.ID != j.ID || back.Manifest.Policy.StdoutMiB != tc.want {
				t.Errorf("rebuilt from its canonical bytes: ID %s, StdoutMiB %d; want %s, %d", back.ID, back.Manifest.Policy.StdoutMiB, j.ID, tc.want)
			}
		})
	}
	for _, bad := range []string{"stdout_mib = 65", "stdout_mib = -1", "stdout_mib = 4096"} {
		t.Run(bad, func(t *testing.T) {
			_, err := ParseManifest("m.toml", "/d", []byte(rangeManifest+"[policy]\n"+bad+"\n"))
			var me *ManifestError
			if !errors.As(err, &me) || me.Field != "policy.stdout_mib" || !strings.Contains(me.Msg, "1..64 MiB") {
				t.Errorf("error %v, want a ManifestError on policy.stdout_mib naming the range 1..64 MiB", err)
			}
		})
	}
}

// A program larger than a worker loads is refused when the job is planned,
// not by every worker when it runs.
func TestPlanRefusesOversizedProgram(t *testing.T) {
	dir := t.TempDir()
	prog := filepath.Join(dir, "prog.wasm")
	if err := os.WriteFile(prog, []byte(wasm), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(prog, MaxProgramBytes+1); err != nil { // sparse: no disk used
		t.Fatal(err)
	}
	m, err := ParseManifest("m.toml", dir, []byte(rangeManifest))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Plan(m)
	var me *ManifestError
	if !errors.As(err, &me) || me.Field != "program" || !strings.Contains(me.Msg, "larger than the 256 MiB a worker loads") {
		t.Errorf("Plan: %v, want a ManifestError on program naming the 256 MiB limit", err)
	}
	if err := os.Truncate(prog, MaxProgramBytes); err != nil {
		t.Fatal(err)
	}
	if _, err := Plan(m); err != nil {
		t.Errorf("Plan of a program of exactly %d bytes: %v", MaxProgramBytes, err)
	}
}
