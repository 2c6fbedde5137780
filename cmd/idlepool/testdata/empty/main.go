// Command empty is the smallest job program: it reads its task and
// returns {"n":1}. Benchmarks use it to measure the runner's per-task
// overhead, built as a command (GOOS=wasip1 go build) and as a reactor
// (the same with -buildmode=c-shared, whose runtime starts once per
// worker; docs/author.md).
package main

import (
	"io"
	"os"
)

func main() { task() }

// task is the whole program; a reactor's worker calls it for each task.
//
//go:wasmexport idlepool_task
func task() {
	io.Copy(io.Discard, os.Stdin)
	os.Stdout.WriteString(`{"n":1}` + "\n")
}
