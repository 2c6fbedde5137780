// Command loop is a job program that never ends on the task whose index is
// its "loop" parameter and answers {"x": INDEX} on every other task: a
// task that runs past any time limit, as it would on a starved machine.
package main

import (
	"encoding/json"
	"fmt"
	"os"
)

func main() {
	var t struct {
		Index  int64 `json:"index"`
		Params struct {
			Loop int64 `json:"loop"`
		} `json:"params"`
	}
	if err := json.NewDecoder(os.Stdin).Decode(&t); err != nil {
		fmt.Fprintln(os.Stderr, "loop: read task:", err)
		os.Exit(1)
	}
	for n := 0; t.Index == t.Params.Loop; n++ {
		_ = n
	}
	fmt.Printf("{\"x\": %d}\n", t.Index)
}
