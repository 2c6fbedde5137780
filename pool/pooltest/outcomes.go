package pooltest

import (
	"fmt"
	"slices"

	"idlepool/job"
	"idlepool/pool"
)

// OutcomeForgetter is a Store that folds acknowledged outcomes into
// summaries on demand (pool.MemStore.ForgetAcked); StoreConformance
// calls it where a store may summarise. It returns how many it folded.
type OutcomeForgetter interface {
	ForgetAcked() int
}

// Decided is what a Snapshot says of one job's decided tasks, whether
// a store handed over each outcome or summarised some (DecidedOf).
type Decided struct {
	Outcomes int64   // outcomes Seq 1 to Outcomes
	Accepted int64   // of them with Status pool.OutcomeOK
	Failed   int64   // the others
	Tasks    []int64 // their tasks, in order
	// Unacked maps the Seq of each unacknowledged outcome to its
	// result.
	Unacked map[int64]string
}

// DecidedOf reads job id's decided tasks from s: its summary (if any)
// and its outcomes, which must follow the summary with Seq 1, 2, ...,
// each task once, and results only while unacknowledged; an error
// names what does not hold.
func DecidedOf(s *pool.Snapshot, id job.ID) (Decided, error) {
	var d Decided
	var acked int64 = -1
	for _, j := range s.Jobs {
		if j.ID == id {
			acked = j.Acked
		}
	}
	if acked < 0 {
		return d, fmt.Errorf("job %s is not in the snapshot", id)
	}
	seen := map[int64]bool{}
	for _, sum := range s.Summaries {
		if sum.Job != id {
			continue
		}
		if d.Outcomes > 0 {
			return d, fmt.Errorf("job %s: two summaries", id)
		}
		if err := sum.Check(); err != nil {
			return d, err
		}
		if sum.Upto > acked {
			return d, fmt.Errorf("job %s: summary up to %d, acknowledged %d", id, sum.Upto, acked)
		}
		d.Outcomes, d.Accepted, d.Failed = sum.Upto, sum.Accepted, sum.Failed
		for _, r := range sum.Decided {
			for t := r.From; t < r.To; t++ {
				d.Tasks = append(d.Tasks, t)
				seen[t] = true
			}
		}
	}
	for _, o := range s.Outcomes {
		if o.Job != id {
			continue
		}
		if o.Seq != d.Outcomes+1 || seen[o.Task] {
			return d, fmt.Errorf("job %s: outcome %d of task %d follows %d (or its task is decided)", id, o.Seq, o.Task, d.Outcomes)
		}
		d.Outcomes = o.Seq
		seen[o.Task] = true
		d.Tasks = append(d.Tasks, o.Task)
		if o.Status == pool.OutcomeOK {
			d.Accepted++
		} else {
			d.Failed++
		}
		switch {
		case o.Seq > acked:
			if d.Unacked == nil {
				d.Unacked = map[int64]string{}
			}
			d.Unacked[o.Seq] = string(o.Result)
		case o.Result != nil:
			return d, fmt.Errorf("job %s: acknowledged outcome %d kept its result", id, o.Seq)
		}
	}
	slices.Sort(d.Tasks)
	return d, nil
}
