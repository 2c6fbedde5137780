package pool

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"

	"idlepool/job"
)

// TestTallyToleranceDeterministic: under rule = "tolerance", agreement is
// not transitive (1.0 ~ 1.0009 ~ 1.0018 with abs 1e-3, but 1.0 !~ 1.0018),
// yet for a given set of replicas the leading replica (whose bytes are
// folded) and its count are the same whatever order the replicas arrived
// in: the one most replicas agree with, the lowest digest among equals.
func TestTallyToleranceDeterministic(t *testing.T) {
	ver := job.Verify{Rule: job.RuleTolerance, Tolerances: map[string]job.Tolerance{"x": {Abs: 1e-3}}}
	js := &jobState{ver: ver}
	mk := func(owner string, x float64) *replica {
		res := []byte(`{"x":` + strconv.FormatFloat(x, 'g', -1, 64) + `}`)
		return &replica{rec: ReplicaRecord{Owner: owner, Result: res, Digest: ReplicaDigest(res, false, "")}}
	}
	t.Run("chain", func(t *testing.T) {
		rs := []*replica{mk("a", 1.0), mk("b", 1.0009), mk("c", 1.0018)}
		for _, perm := range [][]int{{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}} {
			ts := &taskState{}
			for _, i := range perm {
				ts.returned = append(ts.returned, rs[i])
			}
			lead, c, n := js.tally(ts)
			if lead != rs[1] || c != 3 || n != 3 {
				t.Errorf("order %v: lead %s, %d of %d, want the middle one, 3 of 3", perm, lead.rec.Result, c, n)
			}
		}
	})
	rng := rand.New(rand.NewPCG(7, 11))
	for trial := range 300 {
		n := 2 + rng.IntN(5)
		var rs []*replica
		for i := range n {
			x := 1 + float64(rng.IntN(5))*6e-4 // steps of 0.6e-3: neighbours agree, others not
			if rng.IntN(4) == 0 {
				x = 2 // an outlier
			}
			rs = append(rs, mk(fmt.Sprintf("owner%d", i), x))
		}
		var wantLead job.Digest
		var wantC int
		for p := range 8 {
			perm := rng.Perm(n)
			if p == 0 {
				perm = nil
				for i := range n {
					perm = append(perm, i)
				}
			}
			ts := &taskState{}
			for _, i := range perm {
				ts.returned = append(ts.returned, rs[i])
			}
			lead, c, _ := js.tally(ts)
			if p == 0 {
				wantLead, wantC = lead.rec.Digest, c
				continue
			}
			if lead.rec.Digest != wantLead || c != wantC {
				t.Fatalf("trial %d order %v: lead %s with %d, want %s with %d", trial, perm, lead.rec.Result, c, wantLead, wantC)
			}
		}
	}
}

// TestAgreesDigestRule: without a tolerance rule replicas agree only on
// equal digests, and a failure agrees only with the same failure under
// either rule.
func TestAgreesDigestRule(t *testing.T) {
	res := func(b string) *replica {
		return &replica{rec: ReplicaRecord{Result: []byte(b), Digest: ReplicaDigest([]byte(b), false, "")}}
	}
	fail := func(why string) *replica {
		return &replica{rec: ReplicaRecord{Failed: true, Reason: why, Digest: ReplicaDigest(nil, true, why)}}
	}
	counted := func(r *replica, n uint64) *replica {
		r.rec.Work = &Work{Rule: 1, Count: n}
		return r
	}
	plain := &jobState{}
	tol := &jobState{ver: job.Verify{Rule: job.RuleTolerance, Tolerances: map[string]job.Tolerance{"x": {Abs: 1}}}}
	for _, tc := range []struct {
		js   *jobState
		a, b *replica
		want bool
	}{
		{plain, res(`{"x":1}`), res(`{"x":1}`), true},
		{plain, res(`{"x":1}`), res(`{"x":1.5}`), false},
		{tol, res(`{"x":1}`), res(`{"x":1.5}`), true},
		{tol, res(`{"x":1}`), res(`{"x":2.5}`), false},
		{tol, fail("trap"), fail("trap"), true},
		{tol, fail("trap"), fail("exit 2"), false},
		{tol, fail("trap"), res(`{"x":1}`), false},
		// The count is part of the answer, except under a tolerance.
		{plain, counted(res(`{"x":1}`), 5), counted(res(`{"x":1}`), 5), true},
		{plain, counted(res(`{"x":1}`), 5), counted(res(`{"x":1}`), 6), false},
		{plain, counted(res(`{"x":1}`), 5), res(`{"x":1}`), false},
		{plain, counted(fail("trap"), 5), counted(fail("trap"), 6), false},
		{tol, counted(res(`{"x":1}`), 5), counted(res(`{"x":1}`), 6), true},
		{tol, counted(res(`{"x":1}`), 5), counted(res(`{"x":1.5}`), 6), true},
	} {
		if got := tc.js.agrees(tc.a, tc.b); got != tc.want {
			t.Errorf("agrees(%q, %q) = %v, want %v", tc.a.rec.Result, tc.b.rec.Result, got, tc.want)
		}
	}
}
