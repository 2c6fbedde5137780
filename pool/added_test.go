package pool_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/job"
	"idlepool/pool"
	"idlepool/pool/pooltest"
)

// Added gives each job the time the pool took it, on the scheduler's
// clock to the millisecond, and the same after a restart; an unknown
// job is ErrUnknownJob.
func TestSchedAdded(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), nil)
	alice := h.Device("alice", "alice-1")
	start := h.Clock.Now()
	h.Clock.Advance(1500 * time.Microsecond)
	first := h.Job("first", 1, pooltest.Policy{}, alice)
	h.Clock.Advance(time.Second)
	second := h.Job("second", 1, pooltest.Policy{}, alice)
	want := []time.Time{start.Add(time.Millisecond), start.Add(time.Second + time.Millisecond)}
	added := func() []time.Time {
		var out []time.Time
		for _, j := range []*job.Job{first, second} {
			at, err := h.S.Added(j.ID)
			if err != nil {
				t.Fatalf("Added(%s): %v", j.Manifest.Name, err)
			}
			out = append(out, at)
		}
		return out
	}
	if diff := cmp.Diff(want, added()); diff != "" {
		t.Errorf("times added (-want +got):\n%s", diff)
	}
	h.Restart()
	if diff := cmp.Diff(want, added()); diff != "" {
		t.Errorf("times added after a restart (-want +got):\n%s", diff)
	}
	if _, err := h.S.Added(job.ID{1}); !errors.Is(err, pool.ErrUnknownJob) {
		t.Errorf("Added of an unknown job: %v, want ErrUnknownJob", err)
	}
}
