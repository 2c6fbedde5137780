package desktop

import (
	"runtime/debug"
)

// windowGCPercent is the window process's GC target (GOGC): the heap may
// grow to 1.5 times what is live between collections instead of twice.
// The windows' live Go heap is about 19 MB (fonts, widgets, the decoded
// images); at GOGC=100 its goal reached 40 MB. Measured with four windows
// open under Xvfb: 212 MB resident instead of 221 MB; the collections
// cost well under 1% of a core while a window is open. Most of a window
// process's memory is not Go's (see RATIONALE.md, "The window process's
// memory").
const windowGCPercent = 50

// tuneWindowGC sets windowGCPercent unless the user set GOGC (getenv is
// os.Getenv); it returns the percent in force.
func tuneWindowGC(getenv func(string) string) int {
	if getenv("GOGC") != "" {
		old := debug.SetGCPercent(100)
		debug.SetGCPercent(old)
		return old
	}
	debug.SetGCPercent(windowGCPercent)
	return windowGCPercent
}
