package worker

import (
	"context"

	"github.com/tetratelabs/wazero/experimental"
)

// The linear memory of a task.
//
// wazero's default linear memory is a Go slice: every task allocates a
// fresh one on the worker's Go heap, and every memory.grow copies it into a
// larger one. A Go-built program grows its memory a few times while its
// runtime starts, so a task cost several megabytes of copying, and the
// garbage those copies left let the worker's heap reach several times the
// largest task's memory before a collection (76-244 MiB on pi).
//
// Instead, a worker reserves address space for the largest memory the
// task's limit allows, once (reservedMemory, on 64-bit Unix an anonymous
// mapping the kernel backs with pages only where they are touched), and
// hands it to each task in turn: memory.grow only lengthens the slice, and
// nothing is copied. When a task ends, every byte it could have touched,
// the prefix up to the largest length it reached, is zeroed: the first
// keptMemoryBytes (16 MiB) are cleared in place and stay resident, since
// clearing costs less than the page faults that would bring zero pages
// back (a Go program's start touches a few megabytes); the rest is given
// back to the kernel (on Linux; cleared elsewhere). So the next task
// starts from the same all-zero memory a fresh allocation has: tasks stay
// independent, and a worker holds at most 16 MiB of linear memory between
// tasks, however much one task used.

// memoryReuse hands one reserved linear memory to one task at a time. Not
// safe for concurrent use; a worker runs one task at a time.
type memoryReuse struct {
	kept reservedMemory // nil until the first task; reused after
}

// reservedMemory is address space for a linear memory: all of it reads
// as zero until written.
type reservedMemory interface {
	// bytes returns the whole reserved range.
	bytes() []byte
	// zero makes the first n bytes read as zero again.
	zero(n int)
	// release gives the range back to the OS; the memory is unusable after.
	release()
}

// forTask returns a context that makes wazero build the task's linear
// memory on the kept reservation, and a function to call once the task's
// module is closed (or failed to instantiate), which zeroes what the task
// touched and keeps the reservation for the next task.
func (r *memoryReuse) forTask(ctx context.Context) (context.Context, func()) {
	t := &taskMemory{reuse: r}
	return experimental.WithMemoryAllocator(ctx, t), t.done
}

// close gives the kept reservation back to the OS.
func (r *memoryReuse) close() {
	if r.kept != nil {
		r.kept.release()
		r.kept = nil
	}
}

// taskMemory is the experimental.MemoryAllocator of one task: the first
// memory it allocates is on the kept reservation (or a new one, if that is
// too small), any other is a plain Go slice.
type taskMemory struct {
	reuse *memoryReuse
	mem   *linearMemory // the memory on the reservation, nil if none yet
}

// Allocate implements experimental.MemoryAllocator. max is the memory's
// limit in bytes (the module's maximum or the task's limit, the smaller).
func (t *taskMemory) Allocate(capBytes, maxBytes uint64) experimental.LinearMemory {
	if t.mem != nil {
		return &sliceMemory{max: maxBytes}
	}
	r := t.reuse
	if r.kept != nil && uint64(len(r.kept.bytes())) < maxBytes {
		r.kept.release()
		r.kept = nil
	}
	if r.kept == nil {
		res, err := reserveMemory(maxBytes)
		if err != nil {
			// No address space to reserve (a 32-bit machine, a
			// ulimit -v): wazero's own growing slice.
			return &sliceMemory{max: maxBytes}
		}
		r.kept = res
	}
	t.mem = &linearMemory{res: r.kept, max: maxBytes}
	return t.mem
}

// done zeroes what the task's memory reached and keeps the reservation. It
// is safe to call whether or not wazero has freed the memory.
func (t *taskMemory) done() {
	if t.mem != nil {
		t.mem.Free()
	}
}

// linearMemory is one task's linear memory on a reservation.
type linearMemory struct {
	res   reservedMemory
	max   uint64
	used  int  // the largest length handed out
	freed bool // zeroed and given back; nothing may use it any more
}

// Reallocate implements experimental.LinearMemory: the first size bytes
// of the reservation, or nil past its max or once freed.
func (m *linearMemory) Reallocate(size uint64) []byte {
	if m.freed || size > m.max {
		return nil
	}
	if int(size) > m.used {
		m.used = int(size)
	}
	return m.res.bytes()[:size:size]
}

// Free implements experimental.LinearMemory: it zeroes every byte the task
// could have written. Only the first call counts.
func (m *linearMemory) Free() {
	if m.freed {
		return
	}
	m.freed = true
	m.res.zero(m.used)
}

// sliceMemory is a linear memory on the Go heap, as wazero makes by
// default.
type sliceMemory struct {
	buf []byte
	max uint64
}

// Reallocate implements experimental.LinearMemory.
func (m *sliceMemory) Reallocate(size uint64) []byte {
	if size > m.max {
		return nil
	}
	if size <= uint64(cap(m.buf)) {
		m.buf = m.buf[:size]
		return m.buf
	}
	b := make([]byte, size, min(max(size, 2*uint64(cap(m.buf))), m.max))
	copy(b, m.buf)
	m.buf = b
	return b
}

// Free implements experimental.LinearMemory.
func (m *sliceMemory) Free() { m.buf = nil }
