// Command spin is a CPU-bound job program for the agent's tests, built
// with GOOS=wasip1 GOARCH=wasm: it reads its task and then computes
// forever, so that a test can watch its worker process use the CPU, stop
// and go on. Tests that need the task done let an agent with a fake
// executor finish it.
package main

import (
	"fmt"
	"io"
	"os"
)

func main() {
	_, _ = io.Copy(io.Discard, os.Stdin)
	x := uint64(1)
	for i := uint64(0); ; i++ {
		x = x*6364136223846793005 + i
		if x == 0 && i == 0 {
			fmt.Println(x) // never: keeps the loop from being optimised away
		}
	}
}
