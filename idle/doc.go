// Package idle watches the donor's machine — input idle time, CPU load of
// other processes, power, temperatures, listed programs, GPUs — and turns
// the owner's settings and those signals into a decision: compute on these
// cores and GPUs, or wait, with the reason in words.
//
// Probes run off the caller's path with timeouts: a probe that hangs yields
// an unknown reading, never a blocked agent, API or tray. Unknown input idle
// time is not idleness.
package idle
