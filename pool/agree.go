package pool

import (
	"bytes"

	"idlepool/job"
)

// agrees reports whether replicas a and b agree under the job's [verify]
// rule: the same digest, or, under rule = "tolerance", two results whose
// declared fields are within their tolerances (job.Verify.Agree). A
// failure agrees only with the same failure. Symmetric.
func (js *jobState) agrees(a, b *replica) bool {
	if a == nil || b == nil {
		return false
	}
	if a.rec.Digest == b.rec.Digest {
		return true
	}
	if a.rec.Failed || b.rec.Failed || js.ver.Rule == "" {
		return false
	}
	// Parsing two results is the expensive part, and tally asks for every
	// pair each time a task is considered: remember the answer on the task
	// (it goes with the task once decided).
	ts := a.ts
	if ts == nil {
		ts = b.ts
	}
	key := [2]job.Digest{a.rec.Digest, b.rec.Digest}
	if bytes.Compare(key[0][:], key[1][:]) > 0 {
		key[0], key[1] = key[1], key[0]
	}
	if ts != nil {
		if v, ok := ts.agreed[key]; ok {
			return v
		}
	}
	v := js.ver.Agree(a.rec.Result, b.rec.Result)
	if ts != nil {
		if ts.agreed == nil {
			ts.agreed = map[[2]job.Digest]bool{}
		}
		ts.agreed[key] = v
	}
	return v
}

// leads reports whether a replica agreed with by k voters should lead
// over the current lead agreed with by c: more agreeing voters, or as many
// and, under a tolerance rule, the lower digest, so that which replica is
// folded depends only on the set of results, never on the order they
// arrived in. (Under the digest rule agreement is equality and a tie
// leaves no majority, so the first keeps the lead as before.)
func (js *jobState) leads(r *replica, k int, lead *replica, c int) bool {
	if k != c || lead == nil {
		return k > c
	}
	return js.ver.Rule != "" && bytes.Compare(r.rec.Digest[:], lead.rec.Digest[:]) < 0
}
