package desktop

import (
	"runtime/debug"
	"testing"
)

// TestTuneWindowGC: the window process collects at windowGCPercent
// unless the user set GOGC, which is left as it is.
func TestTuneWindowGC(t *testing.T) {
	old := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(old) })
	if got := tuneWindowGC(func(string) string { return "" }); got != windowGCPercent || debug.SetGCPercent(100) != windowGCPercent {
		t.Errorf("without GOGC: %d, want %d in force", got, windowGCPercent)
	}
	debug.SetGCPercent(80) // as GOGC=80 would have set it at start
	if got := tuneWindowGC(func(k string) string { return map[string]string{"GOGC": "80"}[k] }); got != 80 || debug.SetGCPercent(80) != 80 {
		t.Errorf("with GOGC=80: %d, want 80 left in force", got)
	}
}
