// Command idlepool runs jobs that split into independent tasks: alone and
// offline (`idlepool run`), or, in later versions, on a pool of machines.
// `idlepool worker` is the sandboxed subprocess that runs one task at a time;
// people do not start it themselves.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
