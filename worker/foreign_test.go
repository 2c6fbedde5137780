package worker

import (
	"bytes"
	"testing"
)

// TestMeterModuleExported checks that MeterModule is the worker's own
// metering: the same bytes as meterModule, and the same refusal.
func TestMeterModuleExported(t *testing.T) {
	bin := []byte("\x00asm\x01\x00\x00\x00")
	want, err := meterModule(bin)
	if err != nil {
		t.Fatal(err)
	}
	got, err := MeterModule(bin)
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("MeterModule = % x, %v; want % x", got, err, want)
	}
	if _, err := MeterModule([]byte("not wasm")); err == nil {
		t.Error("MeterModule accepted bytes that are not WebAssembly")
	}
}
