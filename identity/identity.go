// Package identity holds the key pairs that name devices (peers), their
// owners and coordinators, and signs and checks messages with them.
//
// Every key is Ed25519 (RFC 8032). A key's ID is "id" followed by the
// lowercase, unpadded base32 (RFC 4648) of the first 20 bytes of SHA-256
// over the 32-byte public key: short enough to read, long enough that
// nobody finds a second key with the same ID. A device's peer ID is its key's
// ID; a person's devices share one owner key, whose ID is the owner ID.
//
// Key.Agree gives the secret two key holders share without an exchange
// (X25519, RFC 7748, of one's private key and the other's public key).
//
// Key files hold the 32-byte private seed as base64 on one line, mode 0600.
// Keys are immutable and safe for concurrent use.
package identity

import (
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ErrBadKey marks a key file or public key that cannot be used.
var ErrBadKey = errors.New("identity: bad key")

// KeyFileError says what is wrong with a key file, in words for people:
// Error returns the path and the problem, e.g. "/home/a/.config/idlepool/
// device.key is 17 bytes; a key file holds 45 (one line of 44 base64
// characters)". It matches ErrBadKey. Exposed is true when the file is
// readable by others (its content may be fine: fix the mode), false when
// its content is not a key (truncated, corrupted, empty).
type KeyFileError struct {
	Path    string
	Problem string
	Exposed bool
}

func (e *KeyFileError) Error() string { return e.Path + " " + e.Problem }

// Is reports whether target is ErrBadKey.
func (e *KeyFileError) Is(target error) bool { return target == ErrBadKey }

// keyFileChars is the length of a key file's line: the base64 of a
// 32-byte seed.
var keyFileChars = base64.StdEncoding.EncodedLen(ed25519.SeedSize)

// ErrBadSignature is returned when a signature does not verify.
var ErrBadSignature = errors.New("identity: bad signature")

// Key is an Ed25519 key pair.
type Key struct {
	priv ed25519.PrivateKey
	id   string // IDOf its public key, computed once: a device names itself in every request
}

// newKey returns the Key of priv.
func newKey(priv ed25519.PrivateKey) *Key {
	return &Key{priv: priv, id: IDOf(priv.Public().(ed25519.PublicKey))}
}

var idEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// IDOf returns the ID of a public key (see the package doc).
func IDOf(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return "id" + strings.ToLower(idEncoding.EncodeToString(sum[:20]))
}

// Generate makes a new key from the system's secure random source.
func Generate() (*Key, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	return newKey(priv), nil
}

// FromSeed makes the key of a 32-byte RFC 8032 seed; for tests and imports.
func FromSeed(seed []byte) (*Key, error) {
	if len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("%w: seed of %d bytes, want %d", ErrBadKey, len(seed), ed25519.SeedSize)
	}
	return newKey(ed25519.NewKeyFromSeed(seed)), nil
}

// LoadOrCreate reads the key file at path, or creates it (and its
// directory, mode 0700) with a new key when it does not exist. A file that
// exists but does not hold a key, or that others may read, is a
// *KeyFileError (matching ErrBadKey): a key is never silently replaced.
//
// The new key is written whole to a temporary file beside path and then
// linked to path, which fails if path exists meanwhile: callers racing
// to create it (processes started together, or goroutines) all get the
// one key that won, and none ever reads a created but unwritten file.
// Where the file system has no hard links it falls back to an exclusive
// create.
func LoadOrCreate(path string) (*Key, error) {
	k, err := Load(path)
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		return k, err
	}
	k, err = Generate()
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create key directory: %w", err)
	}
	line := base64.StdEncoding.EncodeToString(k.priv.Seed()) + "\n"
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".new-*") // mode 0600
	if err != nil {
		return nil, fmt.Errorf("create key %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := writeKeyFile(tmp, line); err != nil {
		return nil, fmt.Errorf("write key %s: %w", path, err)
	}
	switch err := os.Link(tmp.Name(), path); {
	case err == nil:
		return k, nil
	case errors.Is(err, os.ErrExist):
		return Load(path) // another made it first
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return Load(path) // another made it first
		}
		return nil, fmt.Errorf("create key %s: %w", path, err)
	}
	if err := writeKeyFile(f, line); err != nil {
		return nil, fmt.Errorf("write key %s: %w", path, err)
	}
	return k, nil
}

// writeKeyFile writes line to f, syncs and closes it.
func writeKeyFile(f *os.File, line string) error {
	if _, err := f.WriteString(line); err != nil {
		f.Close()
		return err
	}
	return errors.Join(f.Sync(), f.Close())
}

// Load reads the key file at path. A missing file gives an error
// satisfying errors.Is(err, os.ErrNotExist); a file that others may read
// or that does not hold a key gives a *KeyFileError naming the file and
// what is wrong with it (its size, a character that is not base64).
func Load(path string) (*Key, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("read key: %w", err)
	}
	if exposed(st.Mode()) {
		return nil, &KeyFileError{Path: path, Exposed: true,
			Problem: fmt.Sprintf("is readable by others (mode %v); a key file must be private (mode 600)", st.Mode().Perm())}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read key: %w", err)
	}
	if p := keyFileProblem(b); p != "" {
		return nil, &KeyFileError{Path: path, Problem: p}
	}
	seed, _ := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
	return FromSeed(seed) // keyFileProblem checked the size
}

// keyFileProblem says what is wrong with a key file's content b, or ""
// when it holds one line of base64 that decodes to a 32-byte seed.
func keyFileProblem(b []byte) string {
	want := fmt.Sprintf("a key file holds %d (one line of %d base64 characters)", keyFileChars+1, keyFileChars)
	line := strings.TrimSpace(string(b))
	switch {
	case len(b) == 0:
		return "is empty; " + want
	case len(line) != keyFileChars:
		return fmt.Sprintf("is %d bytes; %s", len(b), want)
	}
	if i := strings.IndexFunc(line, func(r rune) bool {
		return !strings.ContainsRune("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=", r)
	}); i >= 0 {
		return fmt.Sprintf("holds a character that is not base64 (character %d of its line): it is damaged", i+1)
	}
	seed, err := base64.StdEncoding.DecodeString(line)
	if err != nil || len(seed) != ed25519.SeedSize {
		return fmt.Sprintf("does not decode to a %d-byte key: it is damaged", ed25519.SeedSize)
	}
	return ""
}

// Public returns the 32-byte public key.
func (k *Key) Public() ed25519.PublicKey { return k.priv.Public().(ed25519.PublicKey) }

// Derive returns a 32-byte secret derived from the key's private seed
// for the purpose info names (HKDF-SHA256, RFC 5869, without salt): every
// holder of the same key derives the same secret for the same info, and
// nobody else can. Different infos give independent secrets, none of
// which reveals the key. It is safe for concurrent use.
func (k *Key) Derive(info string) [32]byte {
	var out [32]byte
	b, err := hkdf.Key(sha256.New, k.priv.Seed(), nil, info, len(out))
	if err != nil {
		panic("identity: hkdf: " + err.Error()) // only for a length past 255 hashes
	}
	copy(out[:], b)
	return out
}

// ID returns the key's ID (see IDOf).
func (k *Key) ID() string { return k.id }

// Sign returns the 64-byte Ed25519 signature of msg.
func (k *Key) Sign(msg []byte) []byte { return ed25519.Sign(k.priv, msg) }

// Verify checks sig over msg with the public key pub. It returns
// ErrBadSignature (or ErrBadKey for a key of the wrong size).
func Verify(pub ed25519.PublicKey, msg, sig []byte) error {
	if len(pub) != ed25519.PublicKeySize {
		return fmt.Errorf("%w: public key of %d bytes", ErrBadKey, len(pub))
	}
	if !ed25519.Verify(pub, msg, sig) {
		return ErrBadSignature
	}
	return nil
}

// ParsePublic decodes a base64 (standard, padded) public key.
func ParsePublic(s string) (ed25519.PublicKey, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("%w: want a base64 Ed25519 public key of 32 bytes", ErrBadKey)
	}
	return ed25519.PublicKey(b), nil
}

// EncodePublic encodes a public key as standard base64.
func EncodePublic(pub ed25519.PublicKey) string { return base64.StdEncoding.EncodeToString(pub) }
