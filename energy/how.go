package energy

// How says how a figure of energy was obtained. The values are stored and
// shown: never rename one.
type How string

// The ways of knowing a figure, from the most exact.
const (
	// Measured: read from an energy counter (powercap RAPL, NVML's
	// total energy) at the start and end of every interval.
	Measured How = "measured"
	// Sampled: power readings integrated over time (NVML's power
	// reading, sampled every Config.Period): changes between samples are
	// missed.
	Sampled How = "sampled"
	// Estimated: no reading; CPU time times the processor's rated power
	// per core. It can be off by a factor of two either way.
	Estimated How = "estimated"
)

// rank orders How from the most exact (0).
func (h How) rank() int {
	switch h {
	case Measured:
		return 0
	case Sampled:
		return 1
	case Estimated:
		return 2
	}
	return -1
}

// Worse returns the less exact of h and o: a figure is only as exact as
// its least exact part. The zero How (nothing yet) yields the other.
func (h How) Worse(o How) How {
	if h.rank() >= o.rank() {
		return h
	}
	return o
}

// Valid reports whether h is one of the named values.
func (h How) Valid() bool { return h.rank() >= 0 }
