package p2p

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/pion/webrtc/v4"

	"idlepool/identity"
)

// Kinds of signalling message.
const (
	// KindOffer carries an SDP offer and the sender's DTLS fingerprint.
	KindOffer = "offer"
	// KindAnswer carries an SDP answer and the sender's DTLS fingerprint.
	KindAnswer = "answer"
	// KindCandidate carries one trickled ICE candidate (RFC 8838).
	KindCandidate = "candidate"
	// KindBye ends a session: the sender refused or closed it; Reason
	// says why.
	KindBye = "bye"
)

// Limits of one signalling message, checked by Signal.Check (and so by
// the coordinator before it relays one).
const (
	MaxSDPBytes       = 16 << 10
	MaxCandidateBytes = 1 << 10
	MaxReasonBytes    = 256
	sessionHexLen     = 32 // 16 random bytes
)

// signalDomain separates signalling signatures from every other message
// an idlepool key signs (requests, endorsements, receipts).
const signalDomain = "idlepool/signal/v1"

// Signal is one signalling message between two devices, relayed by the
// coordinator (docs/api.md, "Signalling"). The sender signs every field
// but FromKey with its device key (Sign); the coordinator checks that
// signature and the sequence before it relays the message, and sets
// FromKey to the sender's registered public key when it delivers it, so
// the receiver checks the signature against the device the coordinator
// vouches for (Verify).
//
// The signature covers the SDP and Fingerprint, which binds the sender's
// DTLS certificate to its device key: a connection whose DTLS handshake
// shows another certificate is dropped (ErrFingerprint).
type Signal struct {
	From    string `json:"from"`    // sender's device ID (identity.IDOf)
	To      string `json:"to"`      // recipient's device ID
	Session string `json:"session"` // 32 hex digits naming one connection attempt
	// Seq is the sender's sequence number, strictly increasing over all
	// the signals it sends; a signal whose Seq is not above the last one
	// seen from its sender is a replay and is refused.
	Seq uint64 `json:"seq"`
	// SentMS is when the sender signed it, unix milliseconds; the
	// coordinator refuses one more than 5 minutes from its clock.
	SentMS int64  `json:"sentMs"`
	Kind   string `json:"kind"` // KindOffer, KindAnswer, KindCandidate or KindBye
	// SDP is the session description of an offer or answer.
	SDP string `json:"sdp,omitempty"`
	// Fingerprint is the SHA-256 fingerprint of the sender's DTLS
	// certificate as in SDP ("sha-256 AB:CD:…", RFC 8122), for an offer
	// or an answer; it must equal every a=fingerprint line of SDP.
	Fingerprint string `json:"fingerprint,omitempty"`
	// Candidate is a JSON webrtc.ICECandidateInit, for KindCandidate.
	Candidate string `json:"candidate,omitempty"`
	// Reason says why, for KindBye.
	Reason string `json:"reason,omitempty"`
	// Sig is the sender's Ed25519 signature over signedBytes.
	Sig []byte `json:"sig"`
	// FromKey is the sender's public key as the coordinator knows it, set
	// on delivery; it is not signed and not sent by the sender.
	FromKey ed25519.PublicKey `json:"fromKey,omitempty"`
}

// signedBytes is what Sig covers: the domain, then each field as a
// 4-byte big-endian length and its bytes, in declaration order.
func (s *Signal) signedBytes() []byte {
	var b []byte
	field := func(v []byte) {
		b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
		b = append(b, v...)
	}
	field([]byte(signalDomain))
	field([]byte(s.From))
	field([]byte(s.To))
	field([]byte(s.Session))
	field(binary.BigEndian.AppendUint64(nil, s.Seq))
	field(binary.BigEndian.AppendUint64(nil, uint64(s.SentMS)))
	field([]byte(s.Kind))
	field([]byte(s.SDP))
	field([]byte(s.Fingerprint))
	field([]byte(s.Candidate))
	field([]byte(s.Reason))
	return b
}

// Sign sets From to key's device ID and Sig to key's signature over the
// message.
func (s *Signal) Sign(key *identity.Key) {
	s.From = key.ID()
	s.Sig = key.Sign(s.signedBytes())
}

// Verify checks that pub is the key of s.From and that Sig is its
// signature over the message. Errors wrap ErrBadSignal.
func (s *Signal) Verify(pub ed25519.PublicKey) error {
	if len(pub) != ed25519.PublicKeySize {
		return fmt.Errorf("%w: no public key for sender %s", ErrBadSignal, s.From)
	}
	if identity.IDOf(pub) != s.From {
		return fmt.Errorf("%w: the key given is not the key of sender %s", ErrBadSignal, s.From)
	}
	if err := identity.Verify(pub, s.signedBytes(), s.Sig); err != nil {
		return fmt.Errorf("%w: the signature of the %s from %s does not verify", ErrBadSignal, s.Kind, s.From)
	}
	return nil
}

// Check says whether s is well formed: known kind, a session of 32 hex
// digits, the fields its kind needs within their limits, and for an offer
// or answer a Fingerprint that every a=fingerprint line of SDP repeats.
// It does not check the signature (Verify). Errors wrap ErrBadSignal and
// name the field.
func (s *Signal) Check() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrBadSignal, fmt.Sprintf(format, args...))
	}
	if s.From == "" || s.To == "" {
		return bad("from and to must name devices")
	}
	if s.From == s.To {
		return bad("a device cannot signal itself (%s)", s.From)
	}
	if len(s.Session) != sessionHexLen {
		return bad("session %q is not %d hex digits", s.Session, sessionHexLen)
	}
	if _, err := hex.DecodeString(s.Session); err != nil {
		return bad("session %q is not hex", s.Session)
	}
	if len(s.Sig) != ed25519.SignatureSize {
		return bad("sig is not a %d-byte Ed25519 signature", ed25519.SignatureSize)
	}
	if len(s.SDP) > MaxSDPBytes {
		return bad("sdp of %d bytes is over the limit of %d", len(s.SDP), MaxSDPBytes)
	}
	if len(s.Candidate) > MaxCandidateBytes {
		return bad("candidate of %d bytes is over the limit of %d", len(s.Candidate), MaxCandidateBytes)
	}
	if len(s.Reason) > MaxReasonBytes {
		return bad("reason of %d bytes is over the limit of %d", len(s.Reason), MaxReasonBytes)
	}
	switch s.Kind {
	case KindOffer, KindAnswer:
		if s.SDP == "" || s.Fingerprint == "" {
			return bad("an %s needs sdp and fingerprint", s.Kind)
		}
		fps := sdpFingerprints(s.SDP)
		if len(fps) == 0 {
			return bad("the %s's sdp has no a=fingerprint line", s.Kind)
		}
		for _, fp := range fps {
			if !strings.EqualFold(fp, s.Fingerprint) {
				return bad("the %s's sdp fingerprint %q is not the signed fingerprint %q", s.Kind, fp, s.Fingerprint)
			}
		}
	case KindCandidate:
		if s.Candidate == "" {
			return bad("a candidate needs candidate")
		}
	case KindBye:
	default:
		return bad("unknown kind %q (want offer, answer, candidate or bye)", s.Kind)
	}
	return nil
}

// sdpFingerprints returns the values of the a=fingerprint lines of sdp.
func sdpFingerprints(sdp string) []string {
	var out []string
	for line := range strings.SplitSeq(sdp, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimRight(line, "\r"), "a=fingerprint:"); ok {
			out = append(out, strings.TrimSpace(v))
		}
	}
	return out
}

// certFingerprint is the SDP form of the SHA-256 of a DER certificate:
// "sha-256 AB:CD:…" (RFC 8122, section 5).
func certFingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	var b strings.Builder
	b.WriteString("sha-256 ")
	for i, c := range sum {
		if i > 0 {
			b.WriteByte(':')
		}
		fmt.Fprintf(&b, "%02X", c)
	}
	return b.String()
}

// Signaller carries signals between devices, through the coordinator in
// production (agent.Client implements it with signed API calls).
type Signaller interface {
	// Send relays s, already signed, to s.To. An error means it was not
	// accepted (refused, mailbox full, coordinator unreachable); one that
	// wraps ErrPeerOffline says s.To no longer listens, and ends the
	// connection s belongs to.
	Send(ctx context.Context, s Signal) error
	// Receive waits up to about 25 seconds for signals addressed to this
	// device and returns them (possibly none), each with FromKey set, in
	// the order they were accepted; each is delivered once. It returns
	// ctx's error when ctx ends.
	Receive(ctx context.Context) ([]Signal, error)
	// ICEServers returns the STUN and TURN servers to use for a new
	// connection, with fresh TURN credentials; none is fine.
	ICEServers(ctx context.Context) ([]ICEServer, error)
}

// ICEServer is a STUN or TURN server for ICE, in the form of the W3C
// RTCIceServer dictionary (and its JSON): URLs such as
// "stun:203.0.113.7:3478" or "turn:203.0.113.7:3478?transport=udp", and
// for TURN a username and credential (TURNCredentials).
type ICEServer struct {
	URLs       []string `json:"urls"`
	Username   string   `json:"username,omitempty"`
	Credential string   `json:"credential,omitempty"`
}

func webrtcServers(in []ICEServer) []webrtc.ICEServer {
	out := make([]webrtc.ICEServer, 0, len(in))
	for _, s := range in {
		out = append(out, webrtc.ICEServer{URLs: s.URLs, Username: s.Username, Credential: s.Credential})
	}
	return out
}
