package main

import "runtime/debug"

// serveGCPercent is a coordinator's GC target (GOGC): the heap may grow
// to five times what is live between collections instead of twice.
// Collections were a sixth of a JetStream node's CPU at saturation,
// driven by what each task allocates rather than by what is kept (a
// node's state is bounded: snapshots, archives). Measured with
// scripts/bench-cluster.sh (100,000 tasks, two rounds side by side;
// docs/operator.md, "Running a pool"): one SQLite coordinator 79 µs of
// CPU per accepted task against 85 at GOGC=100, one JetStream node 65-68
// against 72-76, for about twice the peak resident memory (223-235
// against 118-125 MiB; 753-872 against 363-400 MiB).
const serveGCPercent = 400

// tuneServeGC sets serveGCPercent unless the operator set GOGC (getenv
// is os.Getenv), and returns the percent in force.
func tuneServeGC(getenv func(string) string) int {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(serveGCPercent)
	}
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}
