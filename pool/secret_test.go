package pool_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"idlepool/job"
	"idlepool/pool"
	"idlepool/pool/pooltest"
)

// A job with known answers hands their file's digest to OnSecret once
// added, Secrets lists it (also after a restart, to be handed over again),
// and another Scheduler given it with AddSecret refuses to serve the
// file (SecretBlob), idempotently.
func TestSecretHandedToAnotherScheduler(t *testing.T) {
	var told collected[job.Digest]
	ha := newHarness(t, pool.NewMemStore(), func(c *pool.SchedulerConfig) { c.OnSecret = told.add })
	hz := newHarness(t, pool.NewMemStore(), nil)
	if err := os.WriteFile(filepath.Join(ha.Dir, "answers.json"), []byte(`{"0": "`+job.Digest{1}.String()+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	j := ha.Job("secret", 2, pooltest.Policy{Verify: "known_answers = \"answers.json\"\n"}, ha.Device("alice", "alice-1"))
	d := j.KnownAnswers.SHA256
	if got := told.get(); len(got) != 1 || got[0] != d {
		t.Fatalf("OnSecret was told %v, want the known answers' digest %s", got, d)
	}
	if got := ha.S.Secrets(); len(got) != 1 || got[0] != d {
		t.Fatalf("Secrets: %v, want [%s]", got, d)
	}
	ha.Restart()
	if got := ha.S.Secrets(); len(got) != 1 || got[0] != d || !ha.S.SecretBlob(d) {
		t.Fatalf("after a restart: Secrets %v, SecretBlob %v; want the digest kept secret", got, ha.S.SecretBlob(d))
	}
	if hz.S.SecretBlob(d) {
		t.Fatal("Z keeps the file secret before it was told")
	}
	for range 2 {
		if err := hz.S.AddSecret(context.Background(), d); err != nil {
			t.Fatalf("AddSecret: %v", err)
		}
	}
	if !hz.S.SecretBlob(d) || hz.S.SecretBlob(j.Program.SHA256) {
		t.Fatalf("Z after AddSecret: known answers secret %v, program secret %v; want true, false", hz.S.SecretBlob(d), hz.S.SecretBlob(j.Program.SHA256))
	}
	if got := hz.S.Secrets(); len(got) != 0 {
		t.Errorf("Z's Secrets lists %v: it holds no job with known answers", got)
	}
}
