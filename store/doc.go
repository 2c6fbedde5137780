// Package store keeps idlepool's state in SQLite (modernc.org/sqlite, pure
// Go, no cgo). It holds two kinds of database, each its own file:
//
//   - DB (Open): a coordinator's pool state. It implements pool.Store: the
//     Scheduler in package pool keeps every scheduling rule and hands DB
//     plain records to apply atomically (Commit) and to load after a
//     restart (Load). Nothing here decides anything about leases, quorums
//     or receipts.
//   - Local (OpenLocal): a donor device's own contributions: a pending
//     receipt for every result it returned, confirmed when the
//     coordinator's signed receipt arrives, rejected otherwise, with the
//     result bytes kept until the coordinator acknowledged them.
//
// Both open the database in WAL mode with synchronous=FULL: a commit
// returns only after its write-ahead log frames are fsynced, so a
// committed transaction survives kill -9 and power loss. (NORMAL would
// survive kill -9 only; the coordinator batches writes by group commit, so
// FULL costs one fsync per batch, not per task.) busy_timeout makes a
// second process wait for the write lock instead of failing (10 s,
// WithBusyTimeout); past it a write fails with ErrBusy, on a full disk
// with ErrFull (both Transient: nothing was written, try again later),
// and on a damaged file with ErrCorrupt (OpenLocalRepairing moves a
// damaged local store aside and starts a new one). Schemas are
// embedded, numbered .sql files under migrations/, applied in order, each
// in its own transaction, and recorded in a schema_version table.
//
// State changes are compare-and-set (UPDATE ... WHERE key = ? AND
// version/state = ?); zero rows affected is a conflict (ErrConflict), never
// silent success.
//
// Both types are safe for concurrent use by many goroutines; use one value
// per file per process.
//
//	db, err := store.Open(filepath.Join(dataDir, "coordinator.db"))
//	s, err := pool.NewScheduler(ctx, pool.SchedulerConfig{Store: db, ...})
package store
