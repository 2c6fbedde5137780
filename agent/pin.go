package agent

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"idlepool/coord/api"
	"idlepool/identity"
)

// pinnedPool is what a device remembers of a pool it joined: the file
// <config>/pools/<hash of the URL>.json.
type pinnedPool struct {
	URL  string `json:"url"`
	Pool string `json:"pool"`
	Key  []byte `json:"key"` // the coordinator's public key, base64
}

// PinFile returns the file in configDir that pins the key of the pool at
// poolURL.
func PinFile(configDir, poolURL string) string {
	sum := sha256.Sum256([]byte(poolURL))
	return filepath.Join(configDir, "pools", hex.EncodeToString(sum[:8])+".json")
}

// PoolKey fetches the pool's name and coordinator key and checks the key
// against the one pinned in configDir when this device first met the pool
// (trust on first use, like SSH host keys). The first time, it pins it.
// A key that changed is an error wrapping ErrPoolKeyChanged: receipts
// signed by another key would not be this pool's.
func PoolKey(ctx context.Context, c *Client, configDir string) (api.PoolInfo, error) {
	info, err := c.Pool(ctx)
	if err != nil {
		return info, err
	}
	path := PinFile(configDir, c.URL())
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		var p pinnedPool
		if err := json.Unmarshal(b, &p); err != nil {
			return info, fmt.Errorf("read pinned pool key %s: %w", path, err)
		}
		if !bytes.Equal(p.Key, info.Key) {
			return info, fmt.Errorf("%w: pool %s at %s now has coordinator key %s, pinned %s (in %s)",
				ErrPoolKeyChanged, info.Pool, c.URL(), identity.IDOf(info.Key), identity.IDOf(ed25519.PublicKey(p.Key)), path)
		}
		return info, nil
	case errors.Is(err, os.ErrNotExist):
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return info, fmt.Errorf("pin pool key: %w", err)
		}
		b, _ := json.MarshalIndent(pinnedPool{URL: c.URL(), Pool: info.Pool, Key: info.Key}, "", "  ")
		if err := writeFileAtomic(path, append(b, '\n')); err != nil {
			return info, fmt.Errorf("pin pool key: %w", err)
		}
		return info, nil
	default:
		return info, fmt.Errorf("read pinned pool key: %w", err)
	}
}
