package cuda

import (
	"errors"
	"fmt"
)

// Sentinel errors, one per error code of the idlepool_cuda host module;
// compare with errors.Is. An [*Error] unwraps to the sentinel of its code.
var (
	// ErrNoDevice (code -1): no GPU was given to this task, there is no
	// driver, the ordinal is out of range, or the program was not built for
	// WebAssembly.
	ErrNoDevice = errors.New("cuda: no GPU device")
	// ErrInvalidArgument (code -2): a bad size, dimension, count or
	// parameter kind, or an output buffer too small.
	ErrInvalidArgument = errors.New("cuda: invalid argument")
	// ErrOutOfBounds (code -3): a guest memory range outside linear memory,
	// or a device range (offset, length) outside the buffer.
	ErrOutOfBounds = errors.New("cuda: range out of bounds")
	// ErrInvalidHandle (code -4): a module, function or buffer that is not
	// live in this task (freed, or never returned by the host).
	ErrInvalidHandle = errors.New("cuda: invalid handle")
	// ErrOutOfMemory (code -5): the allocation would pass the task's
	// device-memory cap (the donor's memory share of that GPU), or the
	// driver ran out of memory.
	ErrOutOfMemory = errors.New("cuda: out of device memory")
	// ErrModuleLoad (code -6): the driver refused the PTX (syntax, an
	// unsupported target).
	ErrModuleLoad = errors.New("cuda: module load failed")
	// ErrNotFound (code -7): no kernel of that name in the module.
	ErrNotFound = errors.New("cuda: kernel not found")
	// ErrLaunch (code -8): a launch or a synchronize failed.
	ErrLaunch = errors.New("cuda: launch failed")
	// ErrDriver (code -9, and any negative code this package does not
	// know): any other driver error.
	ErrDriver = errors.New("cuda: driver error")
	// ErrLimit (code -10): too many live handles (at most 4096 buffers, 64
	// modules and 1024 functions per task).
	ErrLimit = errors.New("cuda: too many live handles")
)

// The host module's error codes (its functions return them as int32 < 0).
const (
	codeNoDevice        int32 = -1
	codeInvalidArgument int32 = -2
	codeOutOfBounds     int32 = -3
	codeInvalidHandle   int32 = -4
	codeOutOfMemory     int32 = -5
	codeModuleLoad      int32 = -6
	codeNotFound        int32 = -7
	codeLaunch          int32 = -8
	codeDriver          int32 = -9
	codeLimit           int32 = -10
)

// sentinels maps each known error code to its sentinel.
var sentinels = map[int32]error{
	codeNoDevice:        ErrNoDevice,
	codeInvalidArgument: ErrInvalidArgument,
	codeOutOfBounds:     ErrOutOfBounds,
	codeInvalidHandle:   ErrInvalidHandle,
	codeOutOfMemory:     ErrOutOfMemory,
	codeModuleLoad:      ErrModuleLoad,
	codeNotFound:        ErrNotFound,
	codeLaunch:          ErrLaunch,
	codeDriver:          ErrDriver,
	codeLimit:           ErrLimit,
}

// Error is a failed call of the idlepool_cuda host module.
type Error struct {
	// Code is the host module's error code, < 0 (-1 ErrNoDevice … -10
	// ErrLimit).
	Code int32
	// Op names the call that failed, e.g. "module_load" or "launch
	// count_inside".
	Op string
	// Message is the host's last_error text for the failure (the driver's
	// own words where the driver failed), or a message of this package for
	// errors found before calling the host; it may be empty.
	Message string
}

// Error returns "cuda: OP: SENTINEL TEXT (code N): MESSAGE".
func (e *Error) Error() string {
	kind := "unknown error"
	if s := e.Unwrap(); s != nil {
		kind = s.Error()
		if len(kind) > len("cuda: ") {
			kind = kind[len("cuda: "):]
		}
	}
	msg := fmt.Sprintf("cuda: %s: %s (code %d)", e.Op, kind, e.Code)
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

// Unwrap returns the sentinel of e's code: ErrNoDevice for -1 … ErrLimit
// for -10, ErrDriver for any other negative code, nil for a code >= 0.
func (e *Error) Unwrap() error {
	if s, ok := sentinels[e.Code]; ok {
		return s
	}
	if e.Code < 0 {
		return ErrDriver
	}
	return nil
}
