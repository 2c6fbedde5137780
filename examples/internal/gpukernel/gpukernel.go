// Package gpukernel is what the GPU examples share: finding a task's
// kernel in the PTX module of one of its inputs, and a zeroed device
// buffer to accumulate into.
package gpukernel

import (
	"errors"
	"fmt"
	"os"

	"idlepool/examples/internal/task"
	"idlepool/job/cuda"
)

// ErrNoGPU says the task was given no GPU (cuda.Devices() is 0): the
// program computes on the CPU, as planned, not as a fallback.
var ErrNoGPU = errors.New("no GPU given to this task")

// Load reads the PTX text of task t's input named input (a job input, so
// the kernel is hashed into the job ID), loads it as a module and returns
// its kernel name. It returns ErrNoGPU when the task has no GPU, and the
// input's, the module's or the kernel's error otherwise (cuda.Error for a
// refused module or an unknown kernel).
func Load(t task.Task, input, name string) (*cuda.Function, error) {
	mod, err := LoadModule(t, input)
	if err != nil {
		return nil, err
	}
	return mod.Function(name)
}

// LoadModule is Load for a program that takes several kernels from one
// module: it returns the module, loaded once, with the errors of Load.
func LoadModule(t task.Task, input string) (*cuda.Module, error) {
	if cuda.Devices() == 0 {
		return nil, ErrNoGPU
	}
	path, err := t.Input(input)
	if err != nil {
		return nil, err
	}
	ptx, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the kernel: %w", err)
	}
	return cuda.LoadModule(ptx)
}

// Zeroed allocates size bytes of device memory set to zero, such as a
// counter the kernel's threads add into. The caller frees it.
func Zeroed(size int64) (*cuda.Buffer, error) {
	b, err := cuda.Alloc(size)
	if err != nil {
		return nil, err
	}
	if err := b.Write(0, make([]byte, size)); err != nil {
		b.Free()
		return nil, err
	}
	return b, nil
}
