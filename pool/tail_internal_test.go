package pool

import (
	"testing"
	"time"

	"idlepool/job"
)

// TestShownFromFinishedReplicas: a job's median follows its replicas'
// durations; a device's pace is the moving average of its replicas'
// durations against the median at the time; a replica far slower than
// its device's own pace is a stall at the hour it was leased, not pace;
// an expired lease lowers the share kept, a handed-back one is a stall.
func TestShownFromFinishedReplicas(t *testing.T) {
	at := time.Date(2026, 1, 2, 20, 0, 0, 0, time.UTC)
	clock := at
	s := &Scheduler{cfg: SchedulerConfig{Now: func() time.Time { return clock }}, shown: map[string]*shown{}}
	js := &jobState{pol: job.Policy{LeaseTimeout: job.Duration{Duration: 5 * time.Minute}}}
	ret := func(peer string, took time.Duration) {
		r := &replica{js: js, rec: ReplicaRecord{Peer: peer, Created: clock}}
		clock = clock.Add(took)
		s.returnedInTime(r, clock)
	}
	for range paceMinimum {
		ret("other", 10*time.Minute)
	}
	if !js.pace.known() || js.pace.median != 10*time.Minute {
		t.Fatalf("median %v known %v after %d replicas of 10m, want 10m", js.pace.median, js.pace.known(), paceMinimum)
	}
	for range 4 {
		ret("fast", 5*time.Minute)
	}
	d := s.shown["fast"]
	if d.paced != 4 || d.pace < 0.5 || d.pace > 0.7 {
		t.Errorf("fast: pace %.2f of %d replicas, want about 0.5 (it took 5m against medians of 10m down to 5m)", d.pace, d.paced)
	}
	before := d.pace
	created := clock
	ret("fast", 2*time.Hour) // paused along the way
	if d.paced != 4 || d.pace != before || d.stalls[created.Hour()] != 1 {
		t.Errorf("fast after a 2h replica: pace %.2f of %d, stalls at %d:00 %v; want the pace unchanged and one stall",
			d.pace, d.paced, created.Hour(), d.stalls[created.Hour()])
	}
	if d.kept != 1 {
		t.Errorf("fast kept %.2f, want 1: every lease returned", d.kept)
	}
	r := &replica{js: js, rec: ReplicaRecord{Peer: "fast"}}
	s.leaseEnded(r, ReplicaExpired)
	if d.kept >= 1 || d.ended != 6 {
		t.Errorf("fast after an expiry: kept %.2f of %d, want below 1 of 6", d.kept, d.ended)
	}
	s.leaseEnded(r, ReplicaReleased)
	if d.stalls[clock.Hour()] < 1 {
		t.Errorf("a hand-back at %d:00 was not counted as a stall", clock.Hour())
	}
}

// TestLeaseTimeoutBounded: the lease timeout is the job's until a device
// let leases expire, then the job's times the square of the share kept,
// never under a quarter of the job's nor MinLeaseTimeout (unless the
// job's is shorter still), never over the job's.
func TestLeaseTimeoutBounded(t *testing.T) {
	for _, tc := range []struct {
		name      string
		job       time.Duration
		kept      float64
		ended     int
		noRanking bool
		want      time.Duration
	}{
		{"newcomer", 5 * time.Minute, 0, 0, false, 5 * time.Minute},
		{"too few leases to judge", 5 * time.Minute, 0, shownMinimum - 1, false, 5 * time.Minute},
		{"kept every lease", 5 * time.Minute, 1, 10, false, 5 * time.Minute},
		{"kept 90%", 5 * time.Minute, 0.9, 10, false, 243 * time.Second},
		{"kept none: a quarter", 5 * time.Minute, 0, 10, false, 75 * time.Second},
		{"kept none, short job: 30 s", time.Minute, 0, 10, false, 30 * time.Second},
		{"kept none, job under 30 s: the job's", 20 * time.Second, 0, 10, false, 20 * time.Second},
		{"ranking off", 5 * time.Minute, 0, 10, true, 5 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Scheduler{cfg: SchedulerConfig{Tail: TailConfig{NoRanking: tc.noRanking}}, shown: map[string]*shown{}}
			if tc.ended > 0 {
				s.shown["d"] = &shown{kept: tc.kept, ended: tc.ended}
			}
			js := &jobState{pol: job.Policy{LeaseTimeout: job.Duration{Duration: tc.job}}}
			if got := s.leaseTimeout(js, "d"); got != tc.want {
				t.Errorf("lease timeout %v, want %v", got, tc.want)
			}
		})
	}
}

// TestIdleCountedOnce: a device that goes idle, is leased work and goes
// idle again counts once; one that asked longer ago than IdleWithin no
// longer counts; the list of idle devices stays as long as the devices.
func TestIdleCountedOnce(t *testing.T) {
	at := time.Date(2026, 1, 2, 20, 0, 0, 0, time.UTC)
	s := &Scheduler{shown: map[string]*shown{}}
	a, b := Peer{ID: "a"}, Peer{ID: "b"}
	for range 100 {
		s.noteIdle(a, at)
		s.noteLeased(a.ID, at)
		s.noteIdle(a, at)
	}
	s.noteIdle(b, at)
	if all, fast := s.idleCount(at); all != 2 || fast != 2 || len(s.idle) != 2 {
		t.Errorf("idle %d (fast %d), listed %d: want 2, 2, 2", all, fast, len(s.idle))
	}
	later := at.Add(DefaultIdleWithin + time.Second)
	s.noteIdle(b, later)
	if all, _ := s.idleCount(later); all != 1 || len(s.idle) != 1 {
		t.Errorf("idle %d, listed %d after a's last ask passed IdleWithin: want 1, 1", all, len(s.idle))
	}
}
