//go:build unix && (amd64 || arm64 || riscv64 || ppc64le || s390x || loong64 || mips64 || mips64le || ppc64)

package worker

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// mappedMemory is an anonymous private mapping: the kernel gives it pages
// only where it is written, and they read as zero until then.
type mappedMemory struct {
	b []byte
}

// reserveMemory maps n bytes (at least one page) of address space that
// takes no memory until written.
func reserveMemory(n uint64) (reservedMemory, error) {
	if n == 0 {
		n = 1
	}
	b, err := unix.Mmap(-1, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON|unix.MAP_NORESERVE)
	if err != nil {
		return nil, fmt.Errorf("reserve %d bytes of linear memory: %w", n, err)
	}
	return &mappedMemory{b: b[:n]}, nil
}

func (m *mappedMemory) bytes() []byte { return m.b }

// zero makes the first n bytes zero: on Linux MADV_DONTNEED drops the
// pages of a private anonymous mapping, which then read as zero (and the
// machine gets the memory back); elsewhere the bytes are cleared.
func (m *mappedMemory) zero(n int) {
	n = min(n, len(m.b))
	keep := min(n, keptMemoryBytes)
	clear(m.b[:keep])
	if n > keep {
		if runtime.GOOS == "linux" {
			if err := unix.Madvise(m.b[keep:min(pageCeil(n), len(m.b))], unix.MADV_DONTNEED); err == nil {
				return
			}
		}
		clear(m.b[keep:n])
	}
}

func (m *mappedMemory) release() {
	_ = unix.Munmap(m.b[:cap(m.b)])
	m.b = nil
}

// keptMemoryBytes is how much of a reservation stays resident between
// tasks, cleared in place: clearing bytes costs less than the page faults
// that bring zero pages back, and most tasks touch less.
const keptMemoryBytes = 16 << 20

// pageCeil rounds n up to whole pages.
func pageCeil(n int) int {
	p := unix.Getpagesize()
	return (n + p - 1) / p * p
}
