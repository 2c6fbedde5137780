//go:build !(js && wasm)

package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "core is the browser peer's WebAssembly: build it with GOOS=js GOARCH=wasm (make webpeer)")
	os.Exit(2)
}
