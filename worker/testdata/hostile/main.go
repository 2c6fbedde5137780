// Command hostile is the WebAssembly test program of package worker: a WASI
// preview 1 command (GOOS=wasip1 GOARCH=wasm) that behaves well or badly as
// its task says. One program with modes, not one per behaviour, so that the
// tests compile a single module (compiling a Go module in wazero takes
// seconds under the race detector).
//
// Task (stdin): {"mode": "...", "n": N, "data": "..."}. Modes:
//
//	echo     print a JSON report of what the sandbox shows: stdin data,
//	         random bytes, time, args, environment, /input
//	busy     run a busy loop of n iterations and print the sum
//	fib      compute fib(n) recursively (call-heavy) and print it
//	loop     loop forever
//	panic    panic
//	nil      dereference a nil pointer
//	exit     exit with status 3
//	membomb  allocate 1 MiB blocks forever, keeping them
//	flood    write 1 MiB blocks to stdout forever, ignoring errors
//	stderr   write n bytes of log lines to stderr, then succeed
//	escape   try to read and write outside /input and print the outcomes
//	net      try to reach the host listeners named in data and print
//	         the outcomes
//	global   count this task in a package variable, count the non-zero
//	         bytes of a zero-initialised array and of a fresh 32 MiB heap
//	         block (memory the runtime got from memory.grow, which Go
//	         does not clear), fill both with 0xAB, print
//	         {"seen":S,"dirty":D}, and panic afterwards when n is 1: in
//	         a fresh instance always {"seen":1,"dirty":0}
package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	randv2 "math/rand/v2"
	"net"
	"os"
	"strings"
	"time"
)

// seen counts the tasks this instance ran (mode global).
var seen int

// big is zero-initialised memory of the module (mode global).
var big [1 << 20]byte

type task struct {
	Mode string `json:"mode"`
	N    int    `json:"n"`
	Data string `json:"data"`
}

func main() {
	var t task
	if err := json.NewDecoder(os.Stdin).Decode(&t); err != nil {
		fmt.Fprintln(os.Stderr, "bad task:", err)
		os.Exit(1)
	}
	switch t.Mode {
	case "echo":
		echo(t)
	case "busy":
		x := uint64(0)
		for i := 0; i < t.N; i++ {
			x = x*6364136223846793005 + uint64(i)
		}
		fmt.Println(x)
	case "fib":
		fmt.Println(fib(t.N))
	case "loop":
		x := 0
		for {
			x++
			if x == -1 {
				fmt.Println(x)
			}
		}
	case "panic":
		panic("boom")
	case "nil":
		var p *task
		fmt.Println(p.Mode)
	case "exit":
		fmt.Fprintln(os.Stderr, "exiting with status 3")
		os.Exit(3)
	case "membomb":
		var keep [][]byte
		for {
			b := make([]byte, 1<<20)
			for i := range b {
				b[i] = byte(i)
			}
			keep = append(keep, b)
		}
	case "global":
		seen++
		dirty := 0
		for i, c := range big {
			if c != 0 {
				dirty++
			}
			big[i] = 0xAB
		}
		b := make([]byte, 32<<20)
		for i, c := range b {
			if c != 0 {
				dirty++
			}
			b[i] = 0xAB
		}
		fmt.Printf("{\"seen\":%d,\"dirty\":%d}\n", seen, dirty)
		if t.N == 1 {
			panic("after dirtying its memory")
		}
	case "flood":
		b := bytes.Repeat([]byte("x"), 1<<20)
		for {
			_, _ = os.Stdout.Write(b)
		}
	case "stderr":
		line := strings.Repeat("log ", 15) + "\n"
		for written := 0; written < t.N; written += len(line) {
			fmt.Fprint(os.Stderr, line)
		}
		fmt.Println(`{"ok":true}`)
	case "escape":
		escape()
	case "net":
		network(t.Data)
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", t.Mode)
		os.Exit(1)
	}
}

func fib(n int) int {
	if n < 2 {
		return n
	}
	return fib(n-1) + fib(n-2)
}

func echo(t task) {
	random := make([]byte, 32)
	_, _ = rand.Read(random)
	m := map[int]bool{}
	for i := range 20 {
		m[i] = true
	}
	var order []int
	for k := range m {
		order = append(order, k)
	}
	before := time.Now()
	time.Sleep(10 * time.Millisecond)
	input, err := os.ReadFile("/input/hello.txt")
	inputText := string(input)
	if err != nil {
		inputText = "error: " + err.Error()
	}
	out := map[string]any{
		"data":     t.Data,
		"rand":     hex.EncodeToString(random),
		"mathRand": randv2.Uint64(),
		"mapOrder": order,
		"now":      before.UnixNano(),
		"slept":    time.Since(before).String(),
		"args":     os.Args,
		"env":      os.Environ(),
		"input":    inputText,
	}
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
}

// escape prints {"attempt": "ok" or the error}. Every attempt but
// "read /input/hello.txt" must fail.
func escape() {
	res := map[string]string{}
	try := func(name string, err error) {
		if err != nil {
			res[name] = "error: " + err.Error()
		} else {
			res[name] = "ok"
		}
	}
	read := func(p string) error { _, err := os.ReadFile(p); return err }
	try("read /input/hello.txt", read("/input/hello.txt"))
	for _, p := range []string{
		"/etc/passwd", "../etc/passwd", "../../../../etc/passwd",
		"/input/../etc/passwd", "/input/../../../etc/passwd", "input/../../../etc/passwd",
		"/input/link", "/input/dirlink/passwd",
	} {
		try("read "+p, read(p))
	}
	_, err := os.ReadDir("/")
	try("readdir /", err)
	try("create /input/new.txt", os.WriteFile("/input/new.txt", []byte("x"), 0o644))
	f, err := os.OpenFile("/input/hello.txt", os.O_WRONLY|os.O_APPEND, 0)
	if err == nil {
		_, err = f.Write([]byte("more"))
		f.Close()
	}
	try("append /input/hello.txt", err)
	f, err = os.OpenFile("/input/hello.txt", os.O_RDWR|os.O_TRUNC, 0)
	if err == nil {
		f.Close()
	}
	try("truncate /input/hello.txt", err)
	try("mkdir /input/d", os.Mkdir("/input/d", 0o755))
	try("remove /input/hello.txt", os.Remove("/input/hello.txt"))
	try("rename /input/hello.txt", os.Rename("/input/hello.txt", "/input/moved.txt"))
	try("symlink /input/s", os.Symlink("/etc/passwd", "/input/s"))
	try("chmod /input/hello.txt", os.Chmod("/input/hello.txt", 0o777))
	// Raw WASI calls, past Go's own path cleaning: "../" relative to the
	// preopened /input (file descriptor 3).
	for _, p := range []string{"../../../../etc/passwd", "..", "link", "dirlink/passwd", "hello.txt"} {
		try("path_open "+p, rawOpen(p))
	}
	report(res)
}

// network tries the network; data is "TCPADDR UDPADDR" of listeners on
// the host. Go's wasip1 port has an in-process fake network, so a listener
// or a UDP "connection" of the guest's own may succeed: what matters is that
// nothing reaches the host.
func network(data string) {
	res := map[string]string{}
	try := func(name string, err error) {
		if err != nil {
			res[name] = "error: " + err.Error()
		} else {
			res[name] = "ok"
		}
	}
	addrs := strings.Fields(data)
	if len(addrs) != 2 {
		fmt.Fprintln(os.Stderr, "net: want data \"TCPADDR UDPADDR\"")
		os.Exit(1)
	}
	c, err := net.DialTimeout("tcp", addrs[0], time.Second)
	if err == nil {
		_, err = c.Write([]byte("hello from the guest"))
		c.Close()
	}
	try("dial tcp", err)
	c, err = net.Dial("udp", addrs[1])
	if err == nil {
		_, err = c.Write([]byte("hello from the guest"))
		c.Close()
	}
	try("send udp", err)
	_, err = net.LookupHost("example.com")
	try("lookup", err)
	report(res)
}

// report prints res as one JSON object (encoding/json sorts the keys).
func report(res map[string]string) {
	b, _ := json.Marshal(res)
	fmt.Println(string(b))
}
