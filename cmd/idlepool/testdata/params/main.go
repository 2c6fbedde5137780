// Command params is a job program that returns its task's params as the
// result, so that a test chooses the result by writing split.params.
package main

import (
	"encoding/json"
	"fmt"
	"os"
)

func main() {
	var task struct {
		Params json.RawMessage `json:"params"`
	}
	if err := json.NewDecoder(os.Stdin).Decode(&task); err != nil {
		fmt.Fprintln(os.Stderr, "params:", err)
		os.Exit(1)
	}
	os.Stdout.Write(append(task.Params, '\n'))
}
