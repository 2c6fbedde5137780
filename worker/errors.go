package worker

import "errors"

// Sentinel errors returned by this package. Compare with errors.Is.
var (
	// ErrClosed is returned by Pool.Run once Pool.Close has been called,
	// including for runs that were in flight when Close was called.
	ErrClosed = errors.New("worker: pool closed")

	// ErrBadFrame wraps every error about a malformed protocol frame: a bad
	// length, an oversized frame, a truncated frame, invalid JSON, an
	// unknown protocol version or a frame that breaks the protocol's rules.
	ErrBadFrame = errors.New("worker: malformed frame")

	// ErrInvalidRequest wraps errors about a Request that cannot be run as
	// given (a bad hash, negative or out-of-range limits, oversized stdin).
	ErrInvalidRequest = errors.New("worker: invalid request")

	// ErrSetup wraps errors the worker process met while preparing a task
	// for reasons outside the task itself: the module file cannot be read or
	// the input directory does not exist.
	ErrSetup = errors.New("worker: task setup failed")

	// ErrStart wraps errors from starting a worker process: the command
	// could not be executed, or it did not greet the pool in time.
	ErrStart = errors.New("worker: start worker process")

	// ErrCUDAUnavailable wraps errors from loading the CUDA driver: no
	// driver library (libcuda.so.1, nvcuda.dll), a library without an
	// entry point the worker needs, or cuInit failing. A task then sees 0
	// devices.
	ErrCUDAUnavailable = errors.New("worker: CUDA driver unavailable")

	// ErrCUDAOutOfMemory is matched by driver errors for
	// CUDA_ERROR_OUT_OF_MEMORY: the device has no room for an allocation.
	ErrCUDAOutOfMemory = errors.New("worker: CUDA device out of memory")

	// ErrCUDANotFound is matched by driver errors for CUDA_ERROR_NOT_FOUND,
	// such as a kernel name that a module does not define.
	ErrCUDANotFound = errors.New("worker: CUDA name not found")
)

// errOutputTooLarge is the panic value raised from the guest's stdout writer
// when a task writes more than its limit. wazero recovers panics from host
// functions and returns them as the call's error, which stops the module at
// once even if it ignores write errors.
var errOutputTooLarge = errors.New("worker: stdout limit exceeded")
