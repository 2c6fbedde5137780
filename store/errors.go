package store

import "errors"

// Sentinel errors of package store; compare with errors.Is.
var (
	// ErrNotFound: no row with that key.
	ErrNotFound = errors.New("store: not found")
	// ErrConflict: a compare-and-set found another state than expected.
	// Errors of DB.Commit also wrap pool.ErrConflict.
	ErrConflict = errors.New("store: conflict")
	// ErrSchema: the database was written by a newer idlepool, or a
	// migration failed.
	ErrSchema = errors.New("store: unusable schema")
)

// Faults of the machine under a database, which errors of DB and Local
// wrap (see Transient). The write that failed with one was not applied.
var (
	// ErrBusy: another process (or connection) held the database's write
	// lock for longer than the busy timeout (SQLITE_BUSY, SQLITE_LOCKED).
	ErrBusy = errors.New("store: database is locked by another process")
	// ErrFull: the disk (or the database's size limit) is full
	// (SQLITE_FULL, ENOSPC).
	ErrFull = errors.New("store: disk full")
	// ErrCorrupt: the database file is damaged or is not a SQLite
	// database (SQLITE_CORRUPT, SQLITE_NOTADB, a failed integrity check).
	ErrCorrupt = errors.New("store: database file is damaged")
)
