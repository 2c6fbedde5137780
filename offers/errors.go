package offers

import "errors"

// Sentinel errors of package offers; compare with errors.Is.
var (
	// ErrInvalid: an offer is malformed (an empty peer or pool, a negative
	// amount, a weight outside 0..1, an expiry not after its issue time).
	ErrInvalid = errors.New("offers: invalid offer")
	// ErrExpired: the offer's Expires is not after the time it was checked
	// at.
	ErrExpired = errors.New("offers: offer expired")
	// ErrWrongPeer: the key given to Verify is not the key of the offer's
	// Peer.
	ErrWrongPeer = errors.New("offers: offer is not this peer's")
	// ErrBadSignature: the signature does not verify with the peer's key.
	ErrBadSignature = errors.New("offers: bad signature")
)
