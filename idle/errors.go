package idle

import "errors"

// Sentinel errors of package idle. Compare with errors.Is. Probes that are
// not available on a platform return errors.ErrUnsupported.
var (
	// ErrProbeTimeout is why a reading is unknown when its probe did not
	// answer within SamplerConfig.ProbeTimeout, or was still running from an
	// earlier Sample.
	ErrProbeTimeout = errors.New("idle: probe timed out")
	// ErrNoSource means no source is configured or none applies on this
	// machine (no session bus, no display, no sensor, no GPU source).
	ErrNoSource = errors.New("idle: no source")
	// ErrSamplerClosed is returned for readings of a closed Sampler.
	ErrSamplerClosed = errors.New("idle: sampler closed")
)
