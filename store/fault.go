package store

import (
	"errors"
	"syscall"

	"idlepool/pool"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// fault is a SQLite failure that says something about the machine rather
// than about the request: the database locked by another process, the
// disk full, the file damaged. It matches its kind (ErrBusy, ErrFull or
// ErrCorrupt) with errors.Is, and pool.ErrStoreUnavailable when it is
// Transient (so that the Scheduler commits the batch again); it unwraps
// to the driver's error.
type fault struct {
	kind error
	err  error
}

func (f *fault) Error() string { return f.err.Error() }
func (f *fault) Unwrap() error { return f.err }
func (f *fault) Is(target error) bool {
	return target == f.kind || target == pool.ErrStoreUnavailable && f.kind != ErrCorrupt
}

// classify wraps err in a fault when SQLite (or the file system under it)
// failed in one of the ways the package names; other errors, and nil,
// come back as they are.
func classify(err error) error {
	if err == nil {
		return nil
	}
	if kind := faultKind(err); kind != nil && !errors.Is(err, kind) {
		return &fault{kind: kind, err: err}
	}
	return err
}

// faultKind is the sentinel for err's kind of fault, nil for none.
func faultKind(err error) error {
	if errors.Is(err, syscall.ENOSPC) {
		return ErrFull
	}
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return nil
	}
	switch se.Code() & 0xff { // the primary result code
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		return ErrBusy
	case sqlite3.SQLITE_FULL:
		return ErrFull
	case sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB:
		return ErrCorrupt
	}
	return nil
}

// Transient reports whether err is a fault that goes away by itself or
// when the person acts, with nothing lost by trying the same write again
// later: the database locked by another process (ErrBusy) or the disk
// full (ErrFull). SQLite rolls back a statement or transaction that fails
// so, so the write did not happen.
func Transient(err error) bool {
	return errors.Is(err, ErrBusy) || errors.Is(err, ErrFull)
}
