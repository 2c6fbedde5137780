package coord

import "errors"

// Sentinel errors of package coord; compare with errors.Is.
var (
	// ErrConfig marks a configuration that Config.Validate refused.
	ErrConfig = errors.New("coord: bad configuration")
	// errAuth marks a request whose Authorization header is missing,
	// malformed, stale or does not verify (answered 401).
	errAuth = errors.New("coord: request not authenticated")
)
