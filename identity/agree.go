package identity

import (
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/sha512"
	"fmt"

	"filippo.io/edwards25519"
)

// Agree returns the 32-byte X25519 shared secret (RFC 7748) of k and the
// Ed25519 public key peer: k's private scalar (the first half of the
// SHA-512 of its seed, as Ed25519 derives it, RFC 8032 section 5.1.5)
// times peer's point mapped to the Montgomery form (RFC 7748 section
// 4.1). The holder of peer's private key computes the same secret from
// its key and k's public key, and nobody else can. Use it through a key
// derivation (HKDF) that names its purpose, never as a key itself. Using
// one Ed25519 key pair for signatures and for this agreement is shown
// secure by Thormarker, "On using the same key pair for Ed25519 and an
// X25519 based KEM" (ESORICS 2021). Errors wrap ErrBadKey: peer is not
// 32 bytes, not a point of the curve, or of small order (the secret
// would be all zeros).
func (k *Key) Agree(peer ed25519.PublicKey) ([32]byte, error) {
	var out [32]byte
	if len(peer) != ed25519.PublicKeySize {
		return out, fmt.Errorf("%w: public key of %d bytes", ErrBadKey, len(peer))
	}
	p, err := new(edwards25519.Point).SetBytes(peer)
	if err != nil {
		return out, fmt.Errorf("%w: the public key is not a point of Ed25519's curve", ErrBadKey)
	}
	pub, err := ecdh.X25519().NewPublicKey(p.BytesMontgomery())
	if err != nil {
		return out, fmt.Errorf("%w: %v", ErrBadKey, err)
	}
	secret, err := k.x25519().ECDH(pub)
	if err != nil { // a point of small order: the secret is all zeros
		return out, fmt.Errorf("%w: the public key is of small order", ErrBadKey)
	}
	copy(out[:], secret)
	return out, nil
}

// x25519 returns k's private key as an X25519 key: the first half of
// SHA-512 of its seed, which X25519 clamps as Ed25519 does.
func (k *Key) x25519() *ecdh.PrivateKey {
	h := sha512.Sum512(k.priv.Seed())
	priv, err := ecdh.X25519().NewPrivateKey(h[:32])
	if err != nil {
		panic("identity: x25519 key: " + err.Error()) // only for a length other than 32
	}
	return priv
}
