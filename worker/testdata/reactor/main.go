// Command reactor is the reactor test program of package worker: a WASI
// preview 1 reactor (GOOS=wasip1 go build -buildmode=c-shared) whose
// exported idlepool_task behaves as its task says, and whose package
// initialisation leaves state behind (a map, a clock reading, random
// bytes, a heap block) that every task reads.
//
// Task (stdin): {"mode": "..."}. Modes:
//
//	echo   print a JSON report of what the task sees: its stdin, the
//	       tasks this instance has run, random bytes drawn now and at
//	       initialisation, the clocks now and at initialisation, the
//	       order of a map's keys, what /input holds
//	global count this task in a package variable and the non-zero bytes
//	       of a 64 KiB block allocated at initialisation, fill it with
//	       0xAB, print {"seen":S,"dirty":D} and panic when n is 1: in
//	       a task that starts from the state initialisation left always
//	       {"seen":1,"dirty":0}
//	panic  panic
//	exit   exit with status 3
//	empty  print {"n":1}
//
// Built as a command (without -buildmode=c-shared) it is the same program,
// whose main runs one task: BenchmarkHostRun compares the two forms.
package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"
)

var (
	seen      int
	initRand  = randomHex()
	initWall  = time.Now().UnixNano()
	initMono  = time.Since(time.Time{})
	block     = make([]byte, 64<<10)
	table     = map[string]int{"a": 1, "b": 2, "c": 3, "d": 4, "e": 5, "f": 6, "g": 7, "h": 8}
	initStart = time.Now()
)

func randomHex() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

//go:wasmexport idlepool_task
func task() {
	in, _ := io.ReadAll(os.Stdin)
	var t struct {
		Mode string `json:"mode"`
		N    int    `json:"n"`
	}
	if err := json.Unmarshal(in, &t); err != nil {
		fmt.Fprintln(os.Stderr, "bad task:", err)
		os.Exit(1)
	}
	switch t.Mode {
	case "echo":
		seen++
		var keys string
		for k := range table {
			keys += k
		}
		var input []string
		if entries, err := os.ReadDir("/input"); err == nil {
			for _, e := range entries {
				input = append(input, e.Name())
			}
		} else {
			input = append(input, "error: "+err.Error())
		}
		out, _ := json.Marshal(map[string]any{
			"stdin": string(in), "seen": seen, "rand": randomHex(), "init_rand": initRand,
			"wall": time.Now().UnixNano(), "init_wall": initWall, "since_init": time.Since(initStart).Nanoseconds(),
			"init_mono": initMono.Nanoseconds(), "keys": keys, "input": input,
		})
		fmt.Printf("%s\n", out)
		fmt.Fprintln(os.Stderr, "echoed")
	case "global":
		seen++
		dirty := 0
		for i, c := range block {
			if c != 0 {
				dirty++
			}
			block[i] = 0xAB
		}
		fmt.Printf("{\"seen\":%d,\"dirty\":%d}\n", seen, dirty)
		if t.N == 1 {
			panic("after dirtying its memory")
		}
	case "empty":
		fmt.Println(`{"n":1}`)
	case "panic":
		panic("as asked")
	case "exit":
		os.Exit(3)
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", t.Mode)
		os.Exit(1)
	}
}

func main() { task() }
