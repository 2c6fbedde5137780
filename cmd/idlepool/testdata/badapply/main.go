// Command badapply is a training program whose update step fails in round
// 2, for the tests of `idlepool train`: init makes a model of two zeros,
// grad returns the update [1], apply makes the model [round, 0], except in
// round 2, where it exits with an error, and eval counts one of two
// held-out examples right. Models travel as the base64 of
// their float64 little-endian bytes.
package main

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
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
		fmt.Println(`{"model":"AAAAAAAAAAAAAAAAAAAAAA=="}`) // two float64 zeros
	case "eval":
		fmt.Println(`{"eval":[1,2,0]}`) // one of two held-out examples right
	default:
		if t.Params.Round == 2 {
			fmt.Fprintln(os.Stderr, "apply: the optimizer state is corrupt")
			os.Exit(1)
		}
		var m [16]byte
		binary.LittleEndian.PutUint64(m[:], math.Float64bits(float64(t.Params.Round)))
		fmt.Printf(`{"model":%q,"loss":1}`+"\n", base64.StdEncoding.EncodeToString(m[:]))
	}
}
