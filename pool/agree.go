package pool

import (
	"bytes"

	"idlepool/job"
)

// agrees reports whether replicas a and b agree under the job's [verify]
// rule: the same digest and the same Work (the count of the work the task
// took is part of its answer), or, under rule = "tolerance", the same
// digest or two results whose declared fields are within their
// tolerances (job.Verify.Agree). Where counts are not compared
// (countsApart) the same digest agrees whatever they counted. A failure
// agrees only with the same failure. Symmetric.
func (js *jobState) agrees(a, b *replica) bool {
	if a == nil || b == nil {
		return false
	}
	if a.rec.Digest == b.rec.Digest {
		return js.countsApart() || sameWork(a.rec.Work, b.rec.Work)
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

// countsApart reports whether honest replicas of the job's tasks may count
// different work for the same answer, so that counts are not compared:
// under a tolerance rule, and when the job can use a GPU (gpu = true or
// "optional"), where a task counts its GPU launches' threads on a device
// with a GPU and its instructions on one without. The receipts then
// credit the smallest agreeing count (workCost).
func (js *jobState) countsApart() bool {
	return js.ver.Rule != "" || (js.j != nil && js.j.Manifest.Requirements.GPU.Uses())
}

// workCost returns what each receipt of ts's accepted outcome credits:
// job.Job.WorkCost of the smallest count by this pool's rule among the
// replicas that agree with the outcome (where counts are compared they
// are all the same), and that count; ok is false, and the cost 0, when
// none of them counted by this pool's rule.
func (js *jobState) workCost(ts *taskState, agreeing map[*replica]bool) (cost float64, count uint64, ok bool) {
	for r, agrees := range agreeing {
		if agrees && metered(r.rec.Work) && (!ok || r.rec.Work.Count < count) {
			count, ok = r.rec.Work.Count, true
		}
	}
	if !ok {
		return 0, 0, false
	}
	return js.j.WorkCostOf(ts.index, count), count, true
}
