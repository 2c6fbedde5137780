package castore

import "errors"

var (
	// ErrDigestMismatch means bytes do not hash to the digest they were
	// given or stored under.
	ErrDigestMismatch = errors.New("castore: content does not match its digest")
	// ErrCorrupt means a stored chunk no longer matches its digest (the
	// disk changed it); the chunk is removed, so the error also wraps
	// fs.ErrNotExist.
	ErrCorrupt = errors.New("castore: stored chunk is corrupt")
	// ErrBadManifest means a chunk manifest is malformed or does not
	// describe the file it names.
	ErrBadManifest = errors.New("castore: bad chunk manifest")
	// ErrNoSource means no source is left that could give a chunk: every
	// holder failed or served wrong bytes and there is no fallback (or it
	// failed too).
	ErrNoSource = errors.New("castore: no source can give the chunk")
)
