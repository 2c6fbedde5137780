package pool

import (
	"fmt"
	"slices"
	"sort"

	"idlepool/job"
)

// A MemStore keeps every outcome it was given, so its memory grows with
// the tasks a pool decided (a few hundred bytes each with its indexes).
// Once its job's merger acknowledged it, an outcome's Result is gone and
// the Scheduler needs of it only what it counts: that its task is
// decided and whether it was ok. ForgetAcked folds a job's acknowledged
// outcomes into its OutcomeSummary, which Load and Image hand over
// instead of them; Commit checks a new outcome against the summary as
// against the outcomes it stands for, so a second outcome for a task
// is a conflict still.

// Has reports whether task is among s's decided tasks.
func (s *OutcomeSummary) Has(task int64) bool {
	i := sort.Search(len(s.Decided), func(i int) bool { return s.Decided[i].To > task })
	return i < len(s.Decided) && s.Decided[i].From <= task
}

// Check reports whether s hangs together: Upto >= 0, Accepted and Failed
// not negative and adding up to Upto, and Decided sorted, disjoint and
// non-adjacent ranges of task indexes >= 0 covering Upto tasks; an
// error wrapping ErrConflict names what does not.
func (s *OutcomeSummary) Check() error {
	if s.Upto < 0 || s.Accepted < 0 || s.Failed < 0 || s.Accepted+s.Failed != s.Upto {
		return fmt.Errorf("%w: summary of job %s: %d outcomes, %d accepted and %d failed", ErrConflict, s.Job, s.Upto, s.Accepted, s.Failed)
	}
	var n int64
	for i, r := range s.Decided {
		if r.From < 0 || r.To <= r.From || (i > 0 && r.From <= s.Decided[i-1].To) {
			return fmt.Errorf("%w: summary of job %s: task range %d is [%d, %d), after [%d, %d)", ErrConflict, s.Job, i, r.From, r.To,
				s.Decided[max(i-1, 0)].From, s.Decided[max(i-1, 0)].To)
		}
		n += r.To - r.From
	}
	if n != s.Upto {
		return fmt.Errorf("%w: summary of job %s: %d decided tasks for %d outcomes", ErrConflict, s.Job, n, s.Upto)
	}
	return nil
}

// addTasks returns ranges (sorted, disjoint, non-adjacent) with tasks
// added; tasks are not in ranges, nor twice. tasks is sorted in place.
func addTasks(ranges []TaskRange, tasks []int64) []TaskRange {
	slices.Sort(tasks)
	out := make([]TaskRange, 0, len(ranges)+1)
	add := func(r TaskRange) {
		if n := len(out); n > 0 && out[n-1].To >= r.From {
			out[n-1].To = max(out[n-1].To, r.To)
			return
		}
		out = append(out, r)
	}
	i := 0
	for _, t := range tasks {
		for i < len(ranges) && ranges[i].From < t {
			add(ranges[i])
			i++
		}
		add(TaskRange{t, t + 1})
	}
	for ; i < len(ranges); i++ {
		add(ranges[i])
	}
	return slices.Clip(out)
}

// outcomeBase is the Seq up to which job id's outcomes are summarised
// (0: none); m.mu is held.
func (m *MemStore) outcomeBase(id job.ID) int64 {
	if s := m.sums[id]; s != nil {
		return s.Upto
	}
	return 0
}

// decidedSeq returns the Seq of the outcome of (id, task), -1 when it is
// summarised (acknowledged, its Seq no longer known), 0 when the task
// has none; m.mu is held.
func (m *MemStore) decidedSeq(id job.ID, task int64) int64 {
	if seq := m.outcomeTasks[key{id, task}]; seq != 0 {
		return seq
	}
	if s := m.sums[id]; s != nil && s.Has(task) {
		return -1
	}
	return 0
}

// ForgetAcked folds every job's acknowledged outcomes (Seq up to its
// Acked) that m still holds into the job's OutcomeSummary: Load and
// Image return the summary instead of them, and Commit refuses an
// outcome of the same Seq or task as before. It returns how many
// outcomes it folded; folding what is folded does nothing. It costs
// the time of the outcomes it folds (and of the jobs' task ranges), not
// of every outcome m holds.
func (m *MemStore) ForgetAcked() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for id := range m.toSum {
		j := m.jobs[id]
		base := m.outcomeBase(id)
		os := m.outcomes[id] // Seq base+1 on, in order
		k := min(j.Acked-base, int64(len(os)))
		if k <= 0 {
			continue
		}
		s := m.sums[id]
		if s == nil {
			s = &OutcomeSummary{Job: id}
			if m.sums == nil {
				m.sums = map[job.ID]*OutcomeSummary{}
			}
			m.sums[id] = s
		}
		tasks := make([]int64, 0, k)
		for _, o := range os[:k] {
			if o.Status == OutcomeOK {
				s.Accepted++
			} else {
				s.Failed++
			}
			tasks = append(tasks, o.Task)
			delete(m.outcomeTasks, key{id, o.Task})
			delete(m.outcomeSeqs, key{id, o.Seq})
		}
		s.Decided = addTasks(s.Decided, tasks)
		s.Upto += k
		// A new slice, so that the memory of the folded ones goes (an
		// image taken before may still share the old one).
		m.outcomes[id] = append([]OutcomeRecord(nil), os[k:]...)
		n += int(k)
	}
	clear(m.toSum)
	return n
}

// summaries returns copies of m's summaries in the order of jobs; m.mu
// is held.
func (m *MemStore) summaries(jobs []JobRecord) []OutcomeSummary {
	if len(m.sums) == 0 {
		return nil
	}
	out := make([]OutcomeSummary, 0, len(m.sums))
	for _, j := range jobs {
		if s := m.sums[j.ID]; s != nil {
			c := *s
			c.Decided = slices.Clone(s.Decided)
			out = append(out, c)
		}
	}
	return out
}
