package main

import (
	"log/slog"
	"runtime/debug"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// serveGCPercent is a coordinator's GC target (GOGC): the heap may grow
// to five times what is live between collections instead of twice.
// Collections were a sixth of a JetStream node's CPU at saturation,
// driven by what each task allocates rather than by what is kept (a
// node's state is bounded: snapshots, archives). Measured with
// scripts/bench-cluster.sh (100,000 tasks, two rounds side by side;
// docs/operator.md, "Running a pool"): one SQLite coordinator 79 µs of
// CPU per accepted task against 85 at GOGC=100, one JetStream node 65-68
// against 72-76, for about twice the peak resident memory (223-235
// against 118-125 MiB; 753-872 against 363-400 MiB). Measured again over
// the second half of 400,000-task runs (docs/benchmarks.md, "A node
// warming up, and a node that has run a while"): 84-100 µs against
// 90-107, three rounds.
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

// serveMemoryRatio is the share of the memory a coordinator may use at
// which the Go runtime's soft memory limit (GOMEMLIMIT) stops its heap
// growing freely: the collector then works harder instead. With
// serveGCPercent a busy JetStream node reached 1.2 GB resident after
// 800,000 tasks (its live heap 130-220 MiB), which a small machine may
// not have.
const serveMemoryRatio = 0.9

// serveMemory says what a coordinator may use, in bytes: its cgroup's
// memory limit where one is set (a container's), else the machine's
// memory.
var serveMemory = memlimit.ApplyFallback(memlimit.FromCgroup, memlimit.FromSystem)

// tuneServeMemory sets the runtime's soft memory limit to
// serveMemoryRatio of what provider says (serveMemory), unless the
// environment sets GOMEMLIMIT, or AUTOMEMLIMIT: "off" for no limit, or
// another ratio in (0, 1] (package memlimit's setting,
// github.com/KimMachineGun/automemlimit). It returns the limit in force,
// in bytes (math.MaxInt64 where provider knows of no limit), and an
// error, with the limit left as it was, where provider fails or
// AUTOMEMLIMIT is not a ratio.
func tuneServeMemory(provider memlimit.Provider) (int64, error) {
	return memlimit.Set(memlimit.WithProvider(provider), memlimit.WithRatio(serveMemoryRatio),
		memlimit.WithLogger(slog.New(slog.DiscardHandler)))
}
