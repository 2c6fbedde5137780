// Command big is a job program whose result is as large as its task asks:
// {"n": N, "pad": "xx…"} with params.bytes bytes of padding, for tests of
// the stdout limit.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

func main() {
	var task struct {
		Params struct {
			Bytes int `json:"bytes"`
		} `json:"params"`
	}
	if err := json.NewDecoder(os.Stdin).Decode(&task); err != nil {
		fmt.Fprintln(os.Stderr, "big:", err)
		os.Exit(1)
	}
	w := bufio.NewWriter(os.Stdout)
	fmt.Fprintf(w, "{\"n\":%d,\"pad\":\"%s\"}\n", task.Params.Bytes, strings.Repeat("x", task.Params.Bytes))
	if err := w.Flush(); err != nil {
		fmt.Fprintln(os.Stderr, "big:", err)
		os.Exit(1)
	}
}
