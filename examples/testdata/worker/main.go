// Command worker is an idlepool worker process for examples/guests_test.go:
// worker.Serve on stdin and stdout, as `idlepool worker` runs it. The test
// builds it without the race detector, under which compiling a Go-built
// module takes minutes.
package main

import (
	"context"
	"fmt"
	"os"

	"idlepool/worker"
)

func main() {
	if err := worker.Serve(context.Background(), os.Stdin, os.Stdout, os.Getenv(worker.CacheDirEnv)); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}
