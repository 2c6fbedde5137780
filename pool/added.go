package pool

import (
	"fmt"
	"time"

	"idlepool/job"
)

// Added returns when job id was added to the pool (ErrUnknownJob if
// absent): its JobRecord.Added, by the clock of the coordinator that took
// it (SchedulerConfig.Now), to the millisecond, the same before and after
// a restart. Jobs lists the pool's jobs in the order they were added;
// Added places each in time, so that the jobs of several pools can be
// listed in one order (the shards of a divided pool: coord.ShardRouter).
func (s *Scheduler) Added(id job.ID) (time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	js, ok := s.jobs[id]
	if !ok {
		return time.Time{}, fmt.Errorf("time job %s was added: %w", id, ErrUnknownJob)
	}
	return js.rec.Added, nil
}
