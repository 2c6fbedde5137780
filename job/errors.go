package job

import "errors"

// Sentinel errors of package job; compare with errors.Is.
var (
	// ErrManifest marks every problem in a manifest (see ManifestError).
	ErrManifest = errors.New("job: bad manifest")
	// ErrBadDigest is returned for a string that is not 64 hex digits.
	ErrBadDigest = errors.New("job: bad SHA-256 digest")
	// ErrExpr marks a derive expression that does not parse or evaluate.
	ErrExpr = errors.New("job: bad expression")
)
