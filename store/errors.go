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
