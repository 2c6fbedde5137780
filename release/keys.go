package release

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Keys are the private keys of a release repository's roles, Ed25519
// each. Root signs the root metadata (the list of every role's keys);
// RootThreshold of them must sign it. Targets, Snapshot and Timestamp
// sign their roles' metadata. Publish needs Root only when it creates
// the repository: later releases are signed with the other three, so
// the root keys can stay offline.
type Keys struct {
	Root          []ed25519.PrivateKey
	RootThreshold int
	Targets       ed25519.PrivateKey
	Snapshot      ed25519.PrivateKey
	Timestamp     ed25519.PrivateKey
}

// GenerateKeys returns fresh keys: nRoot root keys with threshold
// threshold (1 <= threshold <= nRoot) and one key per other role.
func GenerateKeys(nRoot, threshold int) (Keys, error) {
	if nRoot < 1 || threshold < 1 || threshold > nRoot {
		return Keys{}, fmt.Errorf("%w: %d root keys with threshold %d (want 1 <= threshold <= keys)", ErrBadKeys, nRoot, threshold)
	}
	gen := func() ed25519.PrivateKey {
		_, k, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			panic(err) // crypto/rand never fails (Go 1.24+)
		}
		return k
	}
	k := Keys{RootThreshold: threshold, Targets: gen(), Snapshot: gen(), Timestamp: gen()}
	for range nRoot {
		k.Root = append(k.Root, gen())
	}
	return k, nil
}

// Key files in a keys directory: one file per key, 64 hex digits (the
// Ed25519 seed) and a newline. Root keys are root-1.key, root-2.key...;
// root-threshold holds RootThreshold in decimal.
const (
	targetsKeyFile   = "targets.key"
	snapshotKeyFile  = "snapshot.key"
	timestampKeyFile = "timestamp.key"
	thresholdFile    = "root-threshold"
)

// Save writes k into dir (created 0700), each file 0600.
func (k Keys) Save(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("save keys: %w", err)
	}
	write := func(name string, key ed25519.PrivateKey) error {
		if key == nil {
			return nil
		}
		return os.WriteFile(filepath.Join(dir, name), []byte(hex.EncodeToString(key.Seed())+"\n"), 0o600)
	}
	for i, r := range k.Root {
		if err := write(fmt.Sprintf("root-%d.key", i+1), r); err != nil {
			return fmt.Errorf("save keys: %w", err)
		}
	}
	if len(k.Root) > 0 {
		if err := os.WriteFile(filepath.Join(dir, thresholdFile), fmt.Appendf(nil, "%d\n", k.RootThreshold), 0o600); err != nil {
			return fmt.Errorf("save keys: %w", err)
		}
	}
	for name, key := range map[string]ed25519.PrivateKey{targetsKeyFile: k.Targets, snapshotKeyFile: k.Snapshot, timestampKeyFile: k.Timestamp} {
		if err := write(name, key); err != nil {
			return fmt.Errorf("save keys: %w", err)
		}
	}
	return nil
}

// LoadKeys reads the keys Save wrote. The root keys and root-threshold
// may be absent (kept offline once the repository exists); the other
// three must be there. A malformed file is an error wrapping ErrBadKeys
// that names it.
func LoadKeys(dir string) (Keys, error) {
	read := func(name string) (ed25519.PrivateKey, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadKeys, err)
		}
		seed, err := hex.DecodeString(strings.TrimSpace(string(b)))
		if err != nil || len(seed) != ed25519.SeedSize {
			return nil, fmt.Errorf("%w: %s is not 64 hex digits (an Ed25519 seed)", ErrBadKeys, filepath.Join(dir, name))
		}
		return ed25519.NewKeyFromSeed(seed), nil
	}
	var k Keys
	var err error
	if k.Targets, err = read(targetsKeyFile); err != nil {
		return Keys{}, err
	}
	if k.Snapshot, err = read(snapshotKeyFile); err != nil {
		return Keys{}, err
	}
	if k.Timestamp, err = read(timestampKeyFile); err != nil {
		return Keys{}, err
	}
	roots, err := filepath.Glob(filepath.Join(dir, "root-*.key"))
	if err != nil {
		return Keys{}, fmt.Errorf("%w: %w", ErrBadKeys, err)
	}
	slices.Sort(roots)
	for _, p := range roots {
		r, err := read(filepath.Base(p))
		if err != nil {
			return Keys{}, err
		}
		k.Root = append(k.Root, r)
	}
	if len(k.Root) > 0 {
		b, err := os.ReadFile(filepath.Join(dir, thresholdFile))
		if errors.Is(err, fs.ErrNotExist) {
			k.RootThreshold = len(k.Root)
		} else if err != nil {
			return Keys{}, fmt.Errorf("%w: %w", ErrBadKeys, err)
		} else if _, err := fmt.Sscanf(strings.TrimSpace(string(b)), "%d", &k.RootThreshold); err != nil || k.RootThreshold < 1 || k.RootThreshold > len(k.Root) {
			return Keys{}, fmt.Errorf("%w: %s must be a number from 1 to %d (the root keys there)", ErrBadKeys, filepath.Join(dir, thresholdFile), len(k.Root))
		}
	}
	return k, nil
}
