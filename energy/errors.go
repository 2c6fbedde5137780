package energy

import (
	"errors"
	"fmt"
)

// Sentinel errors of package energy. Compare with errors.Is.
var (
	// ErrNoCounter means this machine exposes no energy counter of the
	// kind asked for (no powercap zone, no GPU reader).
	ErrNoCounter = errors.New("energy: no counter")
	// ErrUnreadable is matched by every *UnreadableError.
	ErrUnreadable = errors.New("energy: counter not readable")
)

// UnreadableError says that an energy counter exists but this user may
// not read it, with what fixes it in words for people. Since Linux 5.10
// the powercap files are readable by root only (a side channel,
// CVE-2020-8694); the idlepool package ships a udev rule that lets the
// group idlepool read them (packaging/deb/60-idlepool-energy.rules).
type UnreadableError struct {
	Path string // the file that could not be read
	Err  error  // the cause, usually fs.ErrPermission
}

func (e *UnreadableError) Error() string {
	return fmt.Sprintf("cannot read the CPU's energy counter %s: %v", e.Path, e.Err)
}

// Hint says how a donor makes the counter readable.
func (e *UnreadableError) Hint() string {
	return "the idlepool .deb lets the group idlepool read them: add yourself with sudo usermod -aG idlepool $USER and log in again (right after installing, first: sudo systemd-sysusers && sudo udevadm trigger --subsystem-match=powercap --action=add); until then the CPU's energy is estimated from CPU time"
}

// Unwrap returns the cause.
func (e *UnreadableError) Unwrap() error { return e.Err }

// Is reports whether target is ErrUnreadable.
func (e *UnreadableError) Is(target error) bool { return target == ErrUnreadable }
