// Package pooltest holds helpers for tests of pool's Scheduler and of the
// stores that implement pool.Store: a fake clock, a content-addressed blob
// directory, tiny planned jobs and deterministic peer identities. Only
// tests import it.
package pooltest

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"idlepool/identity"
	"idlepool/job"
	"idlepool/pool"
	"idlepool/worker"
)

// Clock is a fake clock that moves only when told. Safe for concurrent
// use.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a clock at 2026-01-02 03:04:05 UTC.
func NewClock() *Clock { return &Clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Blobs maps digests to the files the test jobs were planned from: what a
// coordinator's blob directory does. Safe for concurrent use.
type Blobs struct {
	mu    sync.Mutex
	paths map[job.Digest]string
}

// Path returns the file with digest d ("" when unknown); it is
// pool.SchedulerConfig.Blobs.
func (b *Blobs) Path(d job.Digest) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.paths[d]
}

// Put registers path as the file with digest d.
func (b *Blobs) Put(d job.Digest, path string) { b.add(d, path) }

func (b *Blobs) add(d job.Digest, path string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.paths == nil {
		b.paths = map[job.Digest]string{}
	}
	b.paths[d] = path
}

// Policy is the [policy] of a test job; zero fields take job's defaults.
type Policy struct {
	Redundancy, Quorum int
	Participants       string
	TaskCost           float64
	LeaseTimeout       time.Duration
	TimeLimit          time.Duration // policy.time_limit; 0: the default
	Verify             string        // the [verify] table's lines, e.g. "min_quorum = 1\n"; "" for none
	Requirements       string        // the [requirements] table's lines, e.g. "gpu = \"optional\"\n"; "" for none
}

// Job plans a job named name with tasks "range" tasks and policy pol,
// writing a minimal WebAssembly module and its manifest under dir, and
// registers its files in b. Different names give different jobs.
func Job(tb testing.TB, b *Blobs, dir, name string, tasks int64, pol Policy) *job.Job {
	tb.Helper()
	prog := filepath.Join(dir, "prog.wasm")
	if err := os.WriteFile(prog, []byte("\x00asm\x01\x00\x00\x00"), 0o644); err != nil {
		tb.Fatal(err)
	}
	text := fmt.Sprintf("name = %q\nprogram = \"prog.wasm\"\n\n[split]\nrule = \"range\"\ntasks = %d\n\n[[merge]]\nfield = \"x\"\nrule = \"sum\"\n\n[policy]\n", name, tasks)
	if pol.Redundancy > 0 {
		text += fmt.Sprintf("redundancy = %d\n", pol.Redundancy)
	}
	if pol.Quorum > 0 {
		text += fmt.Sprintf("quorum = %d\n", pol.Quorum)
	}
	if pol.Participants != "" {
		text += fmt.Sprintf("participants = %q\n", pol.Participants)
	}
	if pol.TaskCost > 0 {
		text += fmt.Sprintf("task_cost = %v\n", pol.TaskCost)
	}
	if pol.LeaseTimeout > 0 {
		text += fmt.Sprintf("lease_timeout = %q\n", pol.LeaseTimeout.String())
	}
	if pol.TimeLimit > 0 {
		text += fmt.Sprintf("time_limit = %q\n", pol.TimeLimit.String())
	}
	if pol.Verify != "" {
		text += "\n[verify]\n" + pol.Verify
	}
	if pol.Requirements != "" {
		text += "\n[requirements]\n" + pol.Requirements
	}
	m, err := job.ParseManifest(name+".toml", dir, []byte(text))
	if err != nil {
		tb.Fatalf("manifest: %v\n%s", err, text)
	}
	j, err := job.Plan(m)
	if err != nil {
		tb.Fatalf("plan: %v", err)
	}
	b.add(j.Program.SHA256, prog)
	if j.HasKnownAnswers() {
		b.add(j.KnownAnswers.SHA256, j.KnownAnswers.Path) // a coordinator keeps them by digest
	}
	return j
}

// Key returns a deterministic key for name.
func Key(tb testing.TB, name string) *identity.Key {
	tb.Helper()
	seed := sha256.Sum256([]byte("pooltest/" + name))
	k, err := identity.FromSeed(seed[:])
	if err != nil {
		tb.Fatal(err)
	}
	return k
}

// Device returns the Peer of device name endorsed by owner, ready for
// Scheduler.RegisterPeer.
func Device(tb testing.TB, owner *identity.Key, name string) pool.Peer {
	tb.Helper()
	k := Key(tb, "device/"+name)
	return pool.Peer{
		ID: k.ID(), Owner: owner.ID(), Key: k.Public(), OwnerKey: owner.Public(),
		Endorsement: owner.Sign(pool.EndorsementMessage(k.Public())), Name: name,
	}
}

// WorkCount is the work Result and Failure count (by worker.MeterRule):
// 10,000 cost units' worth, more than the tests' jobs declare a task
// costs, so that a receipt credits the declared cost.
const WorkCount = 1e12

// Result returns a submission of result bytes that counted WorkCount.
func Result(b []byte) pool.Submission {
	return pool.Submission{Digest: pool.ReplicaDigest(b, false, ""), Result: b, Work: &pool.Work{Rule: worker.MeterRule, Count: WorkCount}}
}

// Failure returns a submission of a failure with reason that counted
// WorkCount.
func Failure(reason string) pool.Submission {
	return pool.Submission{Digest: pool.ReplicaDigest(nil, true, reason), Failed: true, Reason: reason,
		Work: &pool.Work{Rule: worker.MeterRule, Count: WorkCount}}
}

// Timeout returns a submission of a timeout, a failure that depends on the
// machine, as an agent sends it (with Machine set).
func Timeout() pool.Submission {
	s := Failure("worker: task failed: timeout: task ran longer than its limit of 1s (raise policy.time_limit if the task needs longer)")
	s.Machine, s.Work = true, nil
	return s
}
