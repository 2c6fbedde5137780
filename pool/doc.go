// Package pool computes the tasks of a job: leases, replicas, quorum,
// verification, receipts and the ledger, and the journal that makes a run
// resumable. A solo run (RunSolo) is a pool of one: it needs no network, no
// coordinator and no account.
//
// Both a solo run and a pool's merger fold outcomes through a Folder, which
// journals each one before folding it, so the same outcomes give the same
// result bytes whichever way they arrived.
//
// RunSolo owns its goroutines: it starts one per slot plus a dispatcher,
// folds results on the calling goroutine, and returns only after all of
// them have stopped. Cancelling its context stops it; what was finished is
// in the journal and a later call with the same run directory continues.
//
//	j, _ := job.Plan(m)
//	out, err := pool.RunSolo(ctx, j, workers, pool.SoloConfig{Slots: 4, RunDir: dir})
//
// A Scheduler is a coordinator's sequencing core: it leases tasks to the
// peers that ask (pull), expires leases that are not heartbeated, compares
// replica digests until a majority of distinct owners agrees, and appends
// one signed, hash-chained ledger Entry per agreeing replica. It never
// merges results. Its state lives behind the Store interface (MemStore here,
// SQLite in package store), written with group commit; Serve runs the
// commit and expiry loops until its context ends.
package pool
