package identity

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"testing"

	"filippo.io/edwards25519"
)

func TestAgreeIsMutual(t *testing.T) {
	for range 8 {
		a, err := Generate()
		if err != nil {
			t.Fatal(err)
		}
		b, err := Generate()
		if err != nil {
			t.Fatal(err)
		}
		ab, err := a.Agree(b.Public())
		if err != nil {
			t.Fatal(err)
		}
		ba, err := b.Agree(a.Public())
		if err != nil {
			t.Fatal(err)
		}
		if ab != ba {
			t.Fatalf("a with b's key gives %x, b with a's %x", ab, ba)
		}
		if ab == [32]byte{} {
			t.Fatal("the secret is all zeros")
		}
		c, _ := Generate()
		if ac, _ := a.Agree(c.Public()); ac == ab {
			t.Fatal("a gives the same secret with b's key and with c's")
		}
	}
}

// The X25519 key Agree uses is the Ed25519 key's own: its public key is
// the Ed25519 public key mapped to the Montgomery form (RFC 7748 section
// 4.1), so that the other side's mapping of the public key meets it.
func TestAgreeUsesTheSameKeyPair(t *testing.T) {
	for range 8 {
		k, err := Generate()
		if err != nil {
			t.Fatal(err)
		}
		p, err := new(edwards25519.Point).SetBytes(k.Public())
		if err != nil {
			t.Fatal(err)
		}
		if got, want := k.x25519().PublicKey().Bytes(), p.BytesMontgomery(); !bytes.Equal(got, want) {
			t.Fatalf("X25519 public key %x, the Ed25519 key's Montgomery form %x", got, want)
		}
	}
}

func TestAgreeRefusesBadKeys(t *testing.T) {
	k, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	var notPoint []byte // a y for which no x is on the curve
	for y := byte(2); notPoint == nil; y++ {
		b := make([]byte, 32)
		b[0] = y
		if _, err := new(edwards25519.Point).SetBytes(b); err != nil {
			notPoint = b
		}
	}
	identityPoint := make([]byte, 32)
	identityPoint[0] = 1 // y = 1: the neutral element, of order 1
	for _, c := range []struct {
		name string
		key  ed25519.PublicKey
	}{
		{"empty", nil},
		{"31 bytes", make([]byte, 31)},
		{"not a point", notPoint},
		{"small order", identityPoint},
	} {
		if _, err := k.Agree(c.key); !errors.Is(err, ErrBadKey) {
			t.Errorf("%s: err = %v, want ErrBadKey", c.name, err)
		}
	}
}
