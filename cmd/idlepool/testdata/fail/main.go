// Command fail is a job program that fails every task: it reads its task
// and exits 1 with a message, as a broken program would.
package main

import (
	"fmt"
	"io"
	"os"
)

func main() {
	io.Copy(io.Discard, os.Stdin)
	fmt.Fprintln(os.Stderr, "fail: this program always fails")
	os.Exit(1)
}
