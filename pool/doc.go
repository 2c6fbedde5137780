// Package pool computes the tasks of a job: leases, replicas, verification
// and the journal that makes a run resumable. A solo run (RunSolo) is a pool
// of one: it needs no network, no coordinator and no account.
//
// RunSolo owns its goroutines: it starts one per slot plus a dispatcher,
// folds results on the calling goroutine, and returns only after all of
// them have stopped. Cancelling its context stops it; what was finished is
// in the journal and a later call with the same run directory continues.
//
//	j, _ := job.Plan(m)
//	out, err := pool.RunSolo(ctx, j, workers, pool.SoloConfig{Slots: 4, RunDir: dir})
package pool
