package identity

import (
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestLoadBadFile: a key file that is truncated, empty, damaged or
// readable by others is refused with a *KeyFileError that names the file
// and says what is wrong with it; a good one loads.
func TestLoadBadFile(t *testing.T) {
	k, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	good := []byte(EncodePublic(k.priv.Seed()) + "\n") // a seed encodes like a public key: 32 bytes
	tests := []struct {
		name    string
		content []byte
		mode    os.FileMode
		want    string // in the message, after the path; "" loads
		exposed bool
	}{
		{"good", good, 0o600, "", false},
		{"good with CRLF", append(good[:len(good)-1:len(good)-1], '\r', '\n'), 0o600, "", false},
		{"truncated", good[:17], 0o600, "is 17 bytes; a key file holds 45 (one line of 44 base64 characters)", false},
		{"empty", nil, 0o600, "is empty; a key file holds 45", false},
		{"damaged", append([]byte("#"), good[1:]...), 0o600, "holds a character that is not base64 (character 1 of its line): it is damaged", false},
		{"readable by others", good, 0o644, "is readable by others (mode -rw-r--r--); a key file must be private (mode 600)", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "device.key")
			if err := os.WriteFile(path, tc.content, tc.mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, tc.mode); err != nil { // past the umask
				t.Fatal(err)
			}
			got, err := Load(path)
			if tc.want == "" {
				if err != nil || got.ID() != k.ID() {
					t.Fatalf("Load = %v, %v; want the key %s", got, err, k.ID())
				}
				return
			}
			kf, ok := errors.AsType[*KeyFileError](err)
			if !ok || !errors.Is(err, ErrBadKey) {
				t.Fatalf("Load = %v, want a *KeyFileError matching ErrBadKey", err)
			}
			if !strings.HasPrefix(err.Error(), path+" "+tc.want) || kf.Path != path || kf.Exposed != tc.exposed {
				t.Errorf("Load: %q (exposed %v), want %q (exposed %v)", err, kf.Exposed, path+" "+tc.want, tc.exposed)
			}
			if _, err := LoadOrCreate(path); !errors.Is(err, ErrBadKey) {
				t.Errorf("LoadOrCreate = %v: a bad key file must never be replaced", err)
			}
		})
	}
}

// Devices started at once (the tray and a command, or one command's
// goroutines) may create the same key file together: each gets the key
// that is on disk, whole, and none reads a file another has created but
// not yet written ("is empty"), which a submit once refused to start on.
func TestLoadOrCreateConcurrent(t *testing.T) {
	for round := range 200 {
		path := filepath.Join(t.TempDir(), "config", "owner.key")
		const n = 8
		keys := make([]*Key, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { keys[i], errs[i] = LoadOrCreate(path) })
		}
		wg.Wait()
		onDisk, err := Load(path)
		if err != nil {
			t.Fatalf("round %d: the key file after the race: %v", round, err)
		}
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("round %d: LoadOrCreate %d: %v", round, i, errs[i])
			}
			if keys[i].ID() != onDisk.ID() {
				t.Fatalf("round %d: LoadOrCreate %d returned %s, the file holds %s", round, i, keys[i].ID(), onDisk.ID())
			}
		}
	}
}

// A key's ID, computed once as the key is made, is IDOf its public key:
// for a generated key and for one made from a seed (RFC 8032 test
// vector 1's seed, whose public key is d75a9801…), and "id" followed by
// 32 lowercase base32 digits.
func TestKeyID(t *testing.T) {
	gen, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := hex.DecodeString("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
	fromSeed, err := FromSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(fromSeed.Public()); got != "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a" {
		t.Fatalf("public key of the seed %s", got)
	}
	for _, k := range []*Key{gen, fromSeed} {
		id := k.ID()
		if id != IDOf(k.Public()) || len(id) != 34 || id[:2] != "id" || strings.ToLower(id) != id {
			t.Errorf("ID %q, IDOf its public key %q", id, IDOf(k.Public()))
		}
	}
}

// Derive gives one secret per key and purpose, the same every time.
func TestDerive(t *testing.T) {
	k1, _ := Generate()
	k2, _ := Generate()
	a, b := k1.Derive("purpose a"), k1.Derive("purpose a")
	if a != b {
		t.Fatal("the same key and info derive different secrets")
	}
	if a == k1.Derive("purpose b") || a == k2.Derive("purpose a") || a == ([32]byte{}) {
		t.Fatal("another info or key derives the same secret")
	}
}
