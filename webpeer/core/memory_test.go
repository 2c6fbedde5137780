package main

import (
	"bytes"
	"errors"
	"testing"
)

// module is a WebAssembly header, a custom section and a memory section
// with the given limits bytes.
func module(limits ...byte) []byte {
	b := []byte("\x00asm\x01\x00\x00\x00")
	b = append(b, 0, 3, 1, 'x', 7) // custom section "x"
	mem := append([]byte{1}, limits...)
	b = append(b, 5, byte(len(mem)))
	return append(b, mem...)
}

// TestCapMemory checks that a module's memory maximum is capped at the
// task's limit as wazero caps it for a native worker, and that a minimum
// over the limit is refused with wazero's words.
func TestCapMemory(t *testing.T) {
	for _, tc := range []struct {
		name  string
		in    []byte
		pages uint32
		want  []byte
		over  bool
	}{
		{"no maximum gets the limit", module(0, 2), 4096, module(1, 2, 0x80, 0x20), false},
		{"a larger maximum is lowered", module(1, 2, 0x80, 0x80, 0x04), 16, module(1, 2, 16), false},
		{"a smaller maximum stays", module(1, 2, 3), 16, module(1, 2, 3), false},
		{"a minimum over the limit", module(0, 17), 16, nil, true},
		{"no memory section", []byte("\x00asm\x01\x00\x00\x00"), 16, []byte("\x00asm\x01\x00\x00\x00"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := capMemory(tc.in, tc.pages)
			if tc.over {
				var ol *overLimitError
				if !errors.As(err, &ol) || err.Error() != "min 17 pages (1 Mi) over limit of 16 pages (1 Mi)" {
					t.Fatalf("capMemory: %v, want the over-limit error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tc.want) {
				t.Errorf("capMemory = % x, want % x", got, tc.want)
			}
		})
	}
	if _, err := capMemory([]byte("not wasm"), 16); err == nil {
		t.Error("capMemory accepted bytes that are not WebAssembly")
	}
}
