// Command badapply is a training program whose update step fails in round
// 2, for the tests of `idlepool train`: init makes a model of two zeros,
// grad returns the update [1], apply adds it, except in round 2, where it
// exits with an error.
package main

import (
	"encoding/json"
	"fmt"
	"os"
)

func main() {
	var t struct {
		Params struct {
			Mode  string `json:"mode"`
			Round int    `json:"round"`
		} `json:"params"`
	}
	if err := json.NewDecoder(os.Stdin).Decode(&t); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	switch t.Params.Mode {
	case "grad":
		fmt.Println(`{"update":[1]}`)
	case "init":
		fmt.Println(`{"model":[0,0],"loss":0,"accuracy":0}`)
	default:
		if t.Params.Round == 2 {
			fmt.Fprintln(os.Stderr, "apply: the optimizer state is corrupt")
			os.Exit(1)
		}
		fmt.Printf(`{"model":[%d,0],"loss":1,"accuracy":0.5}`+"\n", t.Params.Round)
	}
}
