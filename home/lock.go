package home

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Lock files, one per kind of process that must run alone on its
// directory.
const (
	// AgentLockFile, under Dirs.Data, is held by the process that computes
	// for pools with this home (`idlepool join`, the tray app).
	AgentLockFile = "agent.lock"
	// DataPlaneLockFile, under Dirs.Data, is held by the process that
	// runs this device's peer-to-peer data plane (a donor, or `submit
	// --follow` offering its job's files): the coordinator relays a
	// device's signals to one mailbox, so two data planes of one device
	// would take each other's.
	DataPlaneLockFile = "dataplane.lock"
	// CoordinatorLockFile, under a coordinator's data directory, is held
	// by the coordinator (`idlepool serve`) that keeps its state there.
	CoordinatorLockFile = "coordinator.lock"
)

// ErrLocked is matched (errors.Is) by the error of Acquire when another
// process holds the lock; errors.As finds a *LockedError with its PID.
var ErrLocked = errors.New("home: locked by another process")

// LockedError says which process holds a lock.
type LockedError struct {
	Path    string // the lock file
	PID     int    // the holder's process ID; 0 when unknown
	Command string // what the holder wrote it was, e.g. "idlepool join"; "" when unknown
}

func (e *LockedError) Error() string {
	who := "another process"
	switch {
	case e.Command != "" && e.PID > 0:
		who = fmt.Sprintf("another process (%s, PID %d)", e.Command, e.PID)
	case e.PID > 0:
		who = fmt.Sprintf("another process (PID %d)", e.PID)
	}
	return fmt.Sprintf("%s holds the lock %s", who, e.Path)
}

// Is matches ErrLocked.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// Lock is an exclusive, advisory lock on a file, held until Release or
// until the process ends (the operating system drops it then, also after
// kill -9, so a lock is never left stale). The file holds the holder's
// PID and command on two lines, for the error of the next process; those
// lines are informative, the lock itself is what counts.
type Lock struct {
	f    *os.File
	path string
}

// Acquire takes the lock at path (creating the file, mode 0600) without
// waiting, recording command (e.g. "idlepool serve") beside this process's
// PID. When another process holds it, the error wraps ErrLocked and is a
// *LockedError naming that process as far as its file tells. On systems
// without file locks it returns an error wrapping errors.ErrUnsupported.
func Acquire(path, command string) (*Lock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := tryLock(f); err != nil {
		f.Close()
		if errors.Is(err, errHeld) {
			return nil, holder(path)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	line := fmt.Sprintf("%d\n%s\n", os.Getpid(), strings.ReplaceAll(command, "\n", " "))
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(line), 0) // informative only: see Lock
	}
	return &Lock{f: f, path: path}, nil
}

// errHeld is tryLock's error when another process holds the lock.
var errHeld = errors.New("held")

// holder reads who holds the lock at path.
func holder(path string) *LockedError {
	e := &LockedError{Path: path}
	b, err := os.ReadFile(path)
	if err != nil {
		return e
	}
	pid, cmd, _ := strings.Cut(string(b), "\n")
	if n, err := strconv.Atoi(strings.TrimSpace(pid)); err == nil && n > 0 {
		e.PID = n
	}
	e.Command = strings.TrimSpace(cmd)
	return e
}

// Path is the lock file's path.
func (l *Lock) Path() string { return l.path }

// Release drops the lock. The file stays (removing it would let a process
// that opened it just before lock a file nobody else can find).
// Releasing twice is nil.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	_ = l.f.Truncate(0)
	err := l.f.Close() // closing the descriptor drops the lock
	l.f = nil
	return err
}
