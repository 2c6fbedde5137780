//go:build !(unix && (amd64 || arm64 || riscv64 || ppc64le || s390x || loong64 || mips64 || mips64le || ppc64))

package worker

import "errors"

// reserveMemory is unsupported here: tasks get wazero's growing slices.
func reserveMemory(n uint64) (reservedMemory, error) {
	return nil, errors.ErrUnsupported
}
