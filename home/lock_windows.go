//go:build windows

package home

import (
	"errors"
	"os"

	"golang.org/x/sys/windows"
)

// tryLock takes an exclusive LockFileEx lock on f without waiting. It
// locks one byte far past the file's end, not its content, so that the
// next process can still read the holder's PID (Windows locks are
// mandatory for the bytes they cover).
func tryLock(f *os.File) error {
	ol := &windows.Overlapped{Offset: 0, OffsetHigh: 0x7fffffff}
	err := windows.LockFileEx(windows.Handle(f.Fd()),
		windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, ol)
	if errors.Is(err, windows.ERROR_LOCK_VIOLATION) || errors.Is(err, windows.ERROR_IO_PENDING) {
		return errHeld
	}
	return err
}
