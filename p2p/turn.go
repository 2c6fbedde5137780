package p2p

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pion/stun/v4"
	"github.com/pion/turn/v5"
)

// DefaultCredentialTTL is how long TURN credentials handed to a peer are
// good for a new allocation.
const DefaultCredentialTTL = time.Hour

// TURNCredentials returns TURN credentials for deviceID that expire at
// expiry, in the TURN REST API scheme (draft-uberti-behave-turn-rest-00,
// section 2.2): username "EXPIRY:DEVICEID" with EXPIRY in unix seconds,
// password base64(HMAC-SHA1(secret, username)).
func TURNCredentials(secret []byte, deviceID string, expiry time.Time) (username, password string) {
	username = strconv.FormatInt(expiry.Unix(), 10) + ":" + deviceID
	return username, turnPassword(secret, username)
}

func turnPassword(secret []byte, username string) string {
	m := hmac.New(sha1.New, secret)
	m.Write([]byte(username))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// RelayConfig configures a Relay.
type RelayConfig struct {
	// Listen is the UDP address of the TURN server, HOST:PORT (port 0
	// picks one). Required.
	Listen string
	// PublicIP is the address peers reach the relay at, given to them in
	// relay candidates; empty means Listen's host, which must then be a
	// specific address.
	PublicIP string
	// Secret is the shared secret of the TURN REST credentials; at least
	// 16 bytes. Required.
	Secret []byte
	// Realm is the TURN realm; empty means "idlepool".
	Realm string
	// Now is the clock for credential expiry; nil means time.Now.
	Now func() time.Time
	// Logger receives structured logs; nil discards them.
	Logger *slog.Logger
}

// Relay is a TURN server (RFC 8656, pion/turn) on UDP that accepts the
// short-lived credentials of TURNCredentials. It relays to public and
// private addresses, and to loopback only when it listens on loopback
// itself (tests), so it cannot be used to reach services on its own host.
// Create it with NewRelay, run it with Serve.
type Relay struct {
	cfg    RelayConfig
	conn   net.PacketConn
	server *turn.Server
	public net.IP

	closeOnce sync.Once
	closeErr  error
}

// NewRelay binds the UDP port and starts the TURN server. Call Serve (or
// Close). Errors wrap ErrConfig for a bad config.
func NewRelay(cfg RelayConfig) (*Relay, error) {
	if len(cfg.Secret) < 16 {
		return nil, fmt.Errorf("%w: the relay's secret must be at least 16 bytes", ErrConfig)
	}
	host, _, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("%w: relay address %q is not HOST:PORT", ErrConfig, cfg.Listen)
	}
	pub := cfg.PublicIP
	if pub == "" {
		pub = host
	}
	ip := net.ParseIP(pub)
	if ip == nil || ip.IsUnspecified() {
		return nil, fmt.Errorf("%w: the relay's public IP %q is not an address peers can reach: give one", ErrConfig, pub)
	}
	if cfg.Realm == "" {
		cfg.Realm = "idlepool"
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	conn, err := net.ListenPacket("udp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("relay listen: %w", err)
	}
	r := &Relay{cfg: cfg, conn: conn, public: ip}
	if host == "" {
		host = "0.0.0.0"
	}
	// Relayed packets should leave from the address peers were told: bind
	// the allocations to the public IP when this machine has it (behind a
	// 1:1 NAT it does not, and the system picks the source).
	if isLocalIP(ip) {
		host = ip.String()
	}
	loopback := ip.IsLoopback()
	r.server, err = turn.NewServer(turn.ServerConfig{
		Realm:         cfg.Realm,
		AuthHandler:   r.auth,
		LoggerFactory: pionLogs{},
		PacketConnConfigs: []turn.PacketConnConfig{{
			PacketConn:            conn,
			RelayAddressGenerator: &turn.RelayAddressGeneratorStatic{RelayAddress: ip, Address: host},
			PermissionHandler: func(_ net.Addr, peer net.IP) bool {
				if peer.IsLoopback() || peer.IsUnspecified() {
					return loopback
				}
				return !peer.IsMulticast() && !peer.IsLinkLocalUnicast()
			},
		}},
	})
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("start TURN server: %w", err)
	}
	cfg.Logger.Info("Relay ready", "addr", conn.LocalAddr().String(), "publicIP", ip.String())
	return r, nil
}

// isLocalIP reports whether ip is an address of this machine.
func isLocalIP(ip net.IP) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.Equal(ip) {
			return true
		}
	}
	return false
}

// auth checks TURN REST credentials: the HMAC, and for a new allocation
// that they have not expired (an allocation made in time may be
// refreshed, so a long transfer is not cut when its credentials age).
func (r *Relay) auth(ra *turn.RequestAttributes) (string, []byte, bool) {
	exp, device, ok := strings.Cut(ra.Username, ":")
	if !ok || device == "" {
		return "", nil, false
	}
	sec, err := strconv.ParseInt(exp, 10, 64)
	if err != nil {
		return "", nil, false
	}
	if ra.Method == stun.MethodAllocate && r.cfg.Now().Unix() > sec {
		r.cfg.Logger.Info("Relay refused expired credentials", "device", device)
		return "", nil, false
	}
	return device, turn.GenerateAuthKey(ra.Username, ra.Realm, turnPassword(r.cfg.Secret, ra.Username)), true
}

// Addr returns the UDP address the relay listens on.
func (r *Relay) Addr() net.Addr { return r.conn.LocalAddr() }

// PublicAddr returns the address devices reach the relay at,
// PUBLIC-IP:PORT.
func (r *Relay) PublicAddr() string {
	_, port, _ := net.SplitHostPort(r.conn.LocalAddr().String())
	return net.JoinHostPort(r.public.String(), port)
}

// ICEServers returns the relay as ICE servers for deviceID: a STUN server
// (the relay answers STUN binding requests, which gives peers their
// server-reflexive candidates) and a TURN server with credentials that
// expire ttl from now.
func (r *Relay) ICEServers(deviceID string, ttl time.Duration) []ICEServer {
	hostPort := r.PublicAddr()
	user, pass := TURNCredentials(r.cfg.Secret, deviceID, r.cfg.Now().Add(ttl))
	return []ICEServer{
		{URLs: []string{"stun:" + hostPort}},
		{URLs: []string{"turn:" + hostPort + "?transport=udp"}, Username: user, Credential: pass},
	}
}

// Allocations returns the number of TURN allocations open now.
func (r *Relay) Allocations() int { return r.server.AllocationCount() }

// Serve runs until ctx ends, then closes the relay and returns nil.
func (r *Relay) Serve(ctx context.Context) error {
	<-ctx.Done()
	return r.Close()
}

// Close stops the TURN server and closes its port. It is idempotent.
func (r *Relay) Close() error {
	r.closeOnce.Do(func() { r.closeErr = r.server.Close() })
	return r.closeErr
}
