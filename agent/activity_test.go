package agent

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/idle"
	"idlepool/job"
	"idlepool/offers"
	"idlepool/pool"
)

func TestDescribe(t *testing.T) {
	now := time.Date(2026, 3, 3, 12, 0, 0, 0, time.UTC)
	offer := func(peer, owner string, state idle.State, hold idle.Hold, memMiB int64) offers.Offer {
		return offers.Offer{Peer: peer, Owner: owner, Pool: "demo", State: state, Hold: hold,
			Capacity: idle.Capacity{Cores: 4, MemoryMiB: memMiB, Schedule: idle.Schedule{}, TimeZone: "UTC"},
			Issued:   now.Add(-time.Minute), Expires: now.Add(time.Minute)}
	}
	l := offers.Listing{Job: job.ID{1}, Name: "pi", Owner: "idowner", MemoryMiB: 4096, TimeLimit: time.Minute, Quorum: 2, Participants: "open"}
	st := pool.JobStatus{Tasks: 100, Quorum: 2, Redundancy: 2, Owner: "idowner"}
	waiting := func(s pool.JobStatus) pool.JobStatus { s.Waiting, s.Accepted = 50, 0; return s }
	tests := []struct {
		name string
		st   pool.JobStatus
		live []offers.Offer
		want Activity
	}{
		{"no donors", st, nil, Activity{Donors: "no donor offers compute in this pool",
			Stuck: "nothing is leased until a donor joins: start one with 'idlepool join POOL_URL' (or 'join --always' on a machine where nobody types)"}},
		// The pool lost its offers (a restart, a take-over) while donors
		// hold leases: nothing says that no donor is there, and nothing
		// is reasoned from the empty list.
		{"no offer listed, tasks leased", func() pool.JobStatus { s := waiting(st); s.Leased = 11; return s }(), nil, Activity{
			Donors: "no donor's offer is listed now, though 11 tasks are leased: the pool gathers the offers again after a restart or a take-over"}},
		{"every donor waits for its owner", st, []offers.Offer{
			offer("p1", "ida", idle.StateWaiting, idle.HoldOwner, 8192), offer("p2", "idb", idle.StateWaiting, idle.HoldOwner, 8192),
			offer("p3", "idc", idle.StateWaiting, idle.HoldOwner, 8192), offer("p4", "idd", idle.StateWaiting, idle.HoldOwner, 8192),
		}, Activity{Donors: "0 of 4 donors computing: 4 waiting (for its owner)", Matching: 4, Owners: 4,
			Stuck: "4 donors match this job but not computing now: 4 waiting (for its owner)"}},
		{"only the owner's own devices", st, []offers.Offer{
			offer("p1", "idowner", idle.StateComputing, idle.HoldNone, 8192), offer("p2", "idowner", idle.StateComputing, idle.HoldNone, 8192),
		}, Activity{Donors: "2 of 2 donors computing",
			Stuck: "only your own devices offer compute here, and the pool never leases a job to its owner's devices: add a device of another owner, or set participants = \"owner\" to compute on your own"}},
		{"no donor has the memory", st, []offers.Offer{
			offer("p1", "ida", idle.StateComputing, idle.HoldNone, 2458), offer("p2", "idowner", idle.StateComputing, idle.HoldNone, 8192),
		}, Activity{Donors: "2 of 2 donors computing",
			Stuck: "no donor matches this job: needs 4 GiB of memory per task; this machine offers 2.4 GiB (1 donor); " + offers.ReasonOwnJob + " (1 donor)"}},
		{"results wait for a second owner", waiting(st), []offers.Offer{
			offer("p1", "ida", idle.StateComputing, idle.HoldNone, 8192), offer("p2", "idowner", idle.StateComputing, idle.HoldNone, 8192),
		}, Activity{Donors: "2 of 2 donors computing", Matching: 1, Owners: 1,
			Quorum: "50 results waiting for a device of a second owner: a task is accepted when devices of 2 owners return the same bytes, and the donors that match belong to 1 owner"}},
		{"results wait for replicas in flight: no news", func() pool.JobStatus { s := waiting(st); s.Leased = 50; return s }(), []offers.Offer{
			offer("p1", "ida", idle.StateComputing, idle.HoldNone, 8192), offer("p2", "idb", idle.StateComputing, idle.HoldNone, 8192),
		}, Activity{Donors: "2 of 2 donors computing", Matching: 2, Owners: 2}},
		{"results wait and nothing computes them", waiting(st), []offers.Offer{
			offer("p1", "ida", idle.StateWaiting, idle.HoldBattery, 8192), offer("p2", "idb", idle.StateComputing, idle.HoldNone, 8192),
		}, Activity{Donors: "1 of 2 donors computing: 1 waiting (on battery)", Matching: 2, Owners: 2,
			Quorum: "50 results waiting for the agreeing results of other devices (quorum 2), and none is computing one now", Idle: true}},
		{"tasks timing out", func() pool.JobStatus {
			s := st
			s.Leased, s.Retrying, s.TimingOut, s.TimeoutDevices = 2, 3, 3, 2
			s.Timeouts = "3 tasks timing out: each ran past the 1m time limit, on 2 devices in all; a task ends failed (unverified) once it timed out on 5 devices or failed 6 times"
			return s
		}(), []offers.Offer{
			offer("p1", "ida", idle.StateComputing, idle.HoldNone, 8192), offer("p2", "idb", idle.StateComputing, idle.HoldNone, 8192),
		}, Activity{Donors: "2 of 2 donors computing", Matching: 2, Owners: 2,
			Timeouts: "3 tasks timing out: each ran past the 1m time limit, on 2 devices in all; a task ends failed (unverified) once it timed out on 5 devices or failed 6 times"}},
		{"results wait in a split no owner can settle: the pool's words", func() pool.JobStatus {
			s := waiting(st)
			s.Trouble = "task 7 needs a third agreeing owner: 2 owners agree with each other against 2 others, and no other owner of the pool may compute it"
			return s
		}(), []offers.Offer{
			offer("p1", "ida", idle.StateComputing, idle.HoldNone, 8192), offer("p2", "idb", idle.StateComputing, idle.HoldNone, 8192),
			offer("p3", "idc", idle.StateComputing, idle.HoldNone, 8192), offer("p4", "idd", idle.StateComputing, idle.HoldNone, 8192),
		}, Activity{Donors: "4 of 4 donors computing", Matching: 4, Owners: 4,
			Quorum: "50 results waiting: task 7 needs a third agreeing owner: 2 owners agree with each other against 2 others, and no other owner of the pool may compute it"}},
		{"a donor not heard from, its offer not expired (a closed tab)", st, []offers.Offer{
			offer("p1", "ida", idle.StateComputing, idle.HoldNone, 8192),
			func() offers.Offer {
				o := offer("p2", "idb", idle.StateComputing, idle.HoldNone, 8192)
				o.Silent = true
				return o
			}(),
		}, Activity{Donors: "1 of 2 donors computing: 1 not heard from for over a minute", Matching: 2, Owners: 2}},
		{"cancelled", func() pool.JobStatus { s := st; s.Cancelled = true; return s }(), nil, Activity{
			Donors: "no donor offers compute in this pool", Stuck: "the job was cancelled by its owner: it leases nothing more"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Describe(tc.st, l, tc.live, now)
			tc.want.Status = tc.st
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Describe (-want +got):\n%s", diff)
			}
		})
	}
}

// TestEstimator: the time left follows the pool's recent rate of results
// (accepted or waiting for a quorum); a stall gives no estimate, not
// hours of one.
func TestEstimator(t *testing.T) {
	t0 := time.Date(2026, 3, 3, 12, 0, 0, 0, time.UTC)
	var e estimator
	// 55 minutes without a result, then 50 of 100 in 5 minutes.
	for m := 0; m <= 55; m += 5 {
		e.observe(t0.Add(time.Duration(m)*time.Minute), 0, 0)
	}
	if left, rate := e.left(100); left != 0 || rate != 0 {
		t.Errorf("after a stall: left %v, rate %v; want no estimate", left, rate)
	}
	for s := 0; s <= 300; s += 5 {
		e.observe(t0.Add(55*time.Minute+time.Duration(s)*time.Second), int64(s/6), int64(s/6))
	}
	left, rate := e.left(100)
	if want := 5 * time.Minute; left < want-10*time.Second || left > want+10*time.Second {
		t.Errorf("at 50 results in 5 min: left %v (rate %.3f/s), want about %v", left, rate, want)
	}
	// The first results after a slow start (the program compiling): the
	// rate is theirs, not diluted by the minutes before them.
	var c estimator
	for s := 0; s <= 240; s += 5 {
		c.observe(t0.Add(time.Duration(s)*time.Second), 0, 0)
	}
	for s := 245; s <= 300; s += 5 {
		c.observe(t0.Add(time.Duration(s)*time.Second), int64(s-240)/5*2, int64(s-240)/5*2)
	}
	if left, rate := c.left(264); left < 9*time.Minute || left > 11*time.Minute {
		t.Errorf("24 results in the minute after a 4-minute start: left %v (rate %.2f/s), want about 10 min", left, rate)
	}
	// Results keep coming but wait for a quorum: the time left counts the
	// tasks without an outcome, at the rate results come.
	var w estimator
	for s := 0; s <= 300; s += 5 {
		w.observe(t0.Add(time.Duration(s)*time.Second), 40+int64(s/6), int64(s/6))
	}
	if left, _ := w.left(100); left < 4*time.Minute || left > 6*time.Minute {
		t.Errorf("50 outcomes and 40 results ahead of them, 10 results a minute: left %v, want about 5 min", left)
	}
	// Then nothing moves for the whole window: no estimate again.
	for s := 5; s <= 330; s += 5 {
		e.observe(t0.Add(60*time.Minute+time.Duration(s)*time.Second), 50, 50)
	}
	if left, _ := e.left(100); left != 0 {
		t.Errorf("after 5 min without a result: left %v, want no estimate", left)
	}
}
