package main

import (
	"fmt"
	"unsafe"
)

//go:wasmimport wasi_snapshot_preview1 path_open
//go:noescape
func pathOpen(fd int32, dirflags int32, path unsafe.Pointer, pathLen int32, oflags int32, rightsBase int64, rightsInheriting int64, fdflags int32, newfd unsafe.Pointer) int32

//go:wasmimport wasi_snapshot_preview1 fd_close
func fdClose(fd int32) int32

// rawOpen calls WASI path_open on the preopened directory (fd 3) with p as
// given, following symbolic links, asking for read rights.
func rawOpen(p string) error {
	b := []byte(p)
	var fd int32
	const lookupSymlinkFollow = 1
	const rightsFdRead = 1 << 1
	errno := pathOpen(3, lookupSymlinkFollow, unsafe.Pointer(&b[0]), int32(len(b)), 0, rightsFdRead, 0, 0, unsafe.Pointer(&fd))
	if errno != 0 {
		return fmt.Errorf("errno %d", errno)
	}
	fdClose(fd)
	return nil
}
