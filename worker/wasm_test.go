package worker

import (
	"os"
	"path/filepath"
	"testing"
)

// Hand-assembled WebAssembly modules for cases a Go program cannot produce
// (and that compile in microseconds). Each section's content is shorter
// than 128 bytes, so its size fits one LEB128 byte.

func wasmModule(sections ...[]byte) []byte {
	b := []byte("\x00asm\x01\x00\x00\x00")
	for _, s := range sections {
		b = append(b, s...)
	}
	return b
}

func wasmSection(id byte, content ...byte) []byte {
	return append([]byte{id, byte(len(content))}, content...)
}

var (
	typeVoid         = wasmSection(1, 1, 0x60, 0, 0)                                                    // type 0: [] -> []
	funcType0        = wasmSection(3, 1, 0)                                                             // one function of type 0
	exportStart0     = wasmSection(7, 1, 6, '_', 's', 't', 'a', 'r', 't', 0, 0)                         // _start = func 0
	exportStart1     = wasmSection(7, 1, 6, '_', 's', 't', 'a', 'r', 't', 0, 1)                         // _start = func 1
	exportMain0      = wasmSection(7, 1, 4, 'm', 'a', 'i', 'n', 0, 0)                                   // main = func 0
	exportRunResume0 = wasmSection(7, 2, 3, 'r', 'u', 'n', 0, 0, 6, 'r', 'e', 's', 'u', 'm', 'e', 0, 0) // run and resume = func 0, as GOOS=js exports
	importGoJS       = wasmSection(2, 1, 4, 'g', 'o', 'j', 's', 1, 'f', 0, 0)                           // gojs.f of type 0, as GOOS=js imports
	codeEmpty        = wasmSection(10, 1, 2, 0, 0x0b)                                                   // body: end
	codeTrap         = wasmSection(10, 1, 3, 0, 0x00, 0x0b)                                             // body: unreachable end
	importEnvF       = wasmSection(2, 1, 3, 'e', 'n', 'v', 1, 'f', 0, 0)                                // env.f of type 0
	memoryMin32      = wasmSection(5, 1, 0, 32)                                                         // memory of at least 32 pages (2 MiB)
)

// emptyModule is a WASI command that does nothing.
func emptyModule() []byte { return wasmModule(typeVoid, funcType0, exportStart0, codeEmpty) }

// writeModule writes a module into the test's temporary directory.
func writeModule(t testing.TB, name string, bin []byte) testModule {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, bin, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := hashModule(path)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
