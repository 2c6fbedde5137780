package main

import (
	"runtime/debug"
	"testing"
)

// A coordinator collects at serveGCPercent unless the operator set
// GOGC, which is left as it is.
func TestTuneServeGC(t *testing.T) {
	old := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(old) })
	if got := tuneServeGC(func(string) string { return "" }); got != serveGCPercent {
		t.Errorf("without GOGC: %d in force, want %d", got, serveGCPercent)
	}
	debug.SetGCPercent(80) // as GOGC=80 would have set it at start
	if got := tuneServeGC(func(k string) string { return map[string]string{"GOGC": "80"}[k] }); got != 80 {
		t.Errorf("with GOGC=80: %d in force, want 80 left as it is", got)
	}
}
