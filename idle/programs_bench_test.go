package idle

import "testing"

// BenchmarkProgramNames lists the running programs through the platform's
// default process source, as the sampler does once per sample; on Linux it
// reads the real /proc. The first call (a cold cache, where there is one) is
// made before the timer starts, so ns/op is the cost of a sample at rest.
func BenchmarkProgramNames(b *testing.B) {
	src := DefaultSources(SourceOptions{}).Processes
	names, err := src.ProgramNames(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(len(names)), "names")
	b.ResetTimer()
	for b.Loop() {
		if _, err := src.ProgramNames(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
}
