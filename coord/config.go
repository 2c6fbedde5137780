package coord

import (
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"
)

// DefaultListen is the address the coordinator listens on when
// Config.Listen is empty: loopback only, so a pool is never exposed to a
// network by accident.
const DefaultListen = "127.0.0.1:7420"

// Config configures a coordinator. The zero value (with DataDir set) serves
// an open pool named "default" on DefaultListen.
type Config struct {
	// Listen is the TCP address to listen on, HOST:PORT; port 0 picks a
	// free port (see Server.URL). Empty means DefaultListen.
	Listen string
	// DataDir holds the coordinator's state: coordinator.db (SQLite),
	// coordinator.key (its Ed25519 key, mode 0600) and blobs/ (files by
	// SHA-256). It is created (mode 0700) if missing. Required.
	DataDir string
	// Pool is the pool's name, shown to peers and written into every
	// receipt. Empty means "default".
	Pool string
	// InviteToken, when set, makes the pool invite-only: registering needs
	// this token (or an owner on AllowOwners).
	InviteToken string
	// AllowOwners lists owner IDs (identity.IDOf of an owner key, "id…")
	// whose devices may register without a token. A non-empty list also
	// makes the pool invite-only.
	AllowOwners []string
	// StoreBusyTimeout is how long a write to coordinator.db waits for a
	// lock another process holds on it; then the batch is kept, /healthz
	// says so and the batch is tried again with backoff.
	// store.DefaultBusyTimeout when 0.
	StoreBusyTimeout time.Duration
	// Logger receives structured logs; nil discards them.
	Logger *slog.Logger
	// Now is the clock for request timestamps, leases and receipts; nil
	// means time.Now. Tests inject a fake clock here.
	Now func() time.Time
}

// InviteOnly reports whether registering needs an invite token or an
// allow-listed owner.
func (c *Config) InviteOnly() bool { return c.InviteToken != "" || len(c.AllowOwners) > 0 }

// Validate fills in defaults and checks the configuration once. Errors
// wrap ErrConfig and name the field.
func (c *Config) Validate() error {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("%w: listen address %q: want HOST:PORT such as %s", ErrConfig, c.Listen, DefaultListen)
	}
	if c.DataDir == "" {
		return fmt.Errorf("%w: no data directory", ErrConfig)
	}
	if c.Pool == "" {
		c.Pool = "default"
	}
	if len(c.Pool) > 64 || strings.ContainsFunc(c.Pool, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return fmt.Errorf("%w: pool name %q: want at most 64 printable characters", ErrConfig, c.Pool)
	}
	if c.InviteToken != "" && len(c.InviteToken) < 16 {
		return fmt.Errorf("%w: invite token of %d characters is too easy to guess: use at least 16", ErrConfig, len(c.InviteToken))
	}
	for _, o := range c.AllowOwners {
		if !validID(o) {
			return fmt.Errorf("%w: allowed owner %q is not an owner ID (\"id\" and 32 base32 letters)", ErrConfig, o)
		}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}

// validID reports whether s has the form of an identity ID: "id" then 32
// lowercase base32 letters (identity.IDOf).
func validID(s string) bool {
	rest, ok := strings.CutPrefix(s, "id")
	if !ok || len(rest) != 32 {
		return false
	}
	for _, r := range rest {
		if !(r >= 'a' && r <= 'z' || r >= '2' && r <= '7') {
			return false
		}
	}
	return true
}
