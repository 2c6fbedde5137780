package p2p

import (
	"errors"
	"fmt"
)

// Sentinel errors of package p2p; compare with errors.Is.
var (
	// ErrClosed marks an operation on a Node whose Serve has returned, or
	// on a connection that closed while the operation waited.
	ErrClosed = errors.New("p2p: closed")
	// ErrBadSignal marks a signalling message that is malformed, not
	// addressed to this device, or whose signature does not verify with
	// the key of the device it claims to come from (a forgery).
	ErrBadSignal = errors.New("p2p: bad signal")
	// ErrReplay marks a signalling message whose sequence number is not
	// above the last one seen from its sender (a replay).
	ErrReplay = errors.New("p2p: replayed signal")
	// ErrFingerprint marks a connection whose DTLS certificate is not the
	// one its device signed: the connection is dropped.
	ErrFingerprint = errors.New("p2p: DTLS certificate does not match the signed fingerprint")
	// ErrTooManyPeers marks a connection refused because the Node (or the
	// remote one) already has Config.MaxPeers connections.
	ErrTooManyPeers = errors.New("p2p: too many peer connections")
	// ErrRefused marks a connection the remote device refused (it sent a
	// "bye"), with its reason.
	ErrRefused = errors.New("p2p: connection refused by the peer")
	// ErrPeerOffline marks a signal the signalling server did not take
	// because its recipient stopped listening for signals (a device that
	// quit or was killed): a connection to it fails at once instead of
	// waiting out Config.ConnectTimeout.
	ErrPeerOffline = errors.New("p2p: the peer is offline")
	// ErrWrongChunk marks bytes whose SHA-256 is not the digest asked for:
	// the peer that served them is wrong or malicious and should be
	// avoided (see PeerError).
	ErrWrongChunk = errors.New("p2p: chunk does not match its digest")
	// ErrTooLarge marks a message or chunk over the configured limit.
	ErrTooLarge = errors.New("p2p: message too large")
	// ErrProtocol marks a peer that broke the chunk protocol (an unknown
	// message, an answer to no request, too many requests at once): the
	// connection is dropped.
	ErrProtocol = errors.New("p2p: protocol violation")
	// ErrConfig marks a Config or RelayConfig that Validate refused.
	ErrConfig = errors.New("p2p: bad configuration")
)

// PeerError is an error about one peer: the caller may avoid that peer
// (for ErrWrongChunk, ErrProtocol, ErrFingerprint) or try another holder.
// Err wraps the cause; errors.Is sees through it.
type PeerError struct {
	Peer string // the device ID of the peer
	Err  error
}

// Error says which peer and what went wrong.
func (e *PeerError) Error() string { return fmt.Sprintf("peer %s: %v", e.Peer, e.Err) }

// Unwrap returns the cause.
func (e *PeerError) Unwrap() error { return e.Err }
