// Command chatty is a job program that logs what it does on stderr, 30
// lines, and then fails: task 0 with a Go panic three calls deep, every
// other task by exiting with status 3. It shows what a failed task's
// reason keeps of a program's log.
package main

import (
	"encoding/json"
	"fmt"
	"os"
)

func main() {
	var t struct {
		Index int64 `json:"index"`
	}
	if err := json.NewDecoder(os.Stdin).Decode(&t); err != nil {
		fmt.Fprintln(os.Stderr, "chatty: read task:", err)
		os.Exit(1)
	}
	for i := 1; i <= 30; i++ {
		fmt.Fprintf(os.Stderr, "chatty: task %d step %d of 30\n", t.Index, i)
	}
	if t.Index == 0 {
		outer(t.Index)
	}
	os.Exit(3)
}

//go:noinline
func outer(i int64) { inner(i) }

//go:noinline
func inner(i int64) { panic(fmt.Sprintf("chatty: task %d gave up after step 30", i)) }
