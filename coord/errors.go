package coord

import (
	"errors"
	"fmt"
)

// Sentinel errors of package coord; compare with errors.Is.
var (
	// ErrConfig marks a configuration that Config.Validate refused.
	ErrConfig = errors.New("coord: bad configuration")
	// errAuth marks a request whose Authorization header is missing,
	// malformed, stale or does not verify (answered 401).
	errAuth = errors.New("coord: request not authenticated")
	// errClockSkew marks a request whose timestamp is too far from the
	// coordinator's clock (answered 401 clock_skew); it wraps errAuth.
	errClockSkew = fmt.Errorf("%w (clock skew)", errAuth)
)
