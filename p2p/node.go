package p2p

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/ice/v4"
	"github.com/pion/logging"
	"github.com/pion/webrtc/v4"

	"idlepool/identity"
)

// Defaults of Config.
const (
	DefaultMaxPeers       = 32
	DefaultMaxChunkBytes  = 4 << 20
	DefaultFrameBytes     = 60 << 10
	DefaultChannels       = 4
	DefaultConnectTimeout = 30 * time.Second
	DefaultRequestTimeout = 60 * time.Second
	// DefaultSCTPReceiveBufferBytes is the SCTP receive window: pion's
	// default of 1 MiB caps a loopback connection well below 100 MB/s
	// (docs/benchmarks.md, "Device-to-device data channels").
	DefaultSCTPReceiveBufferBytes = 8 << 20
)

// Fixed limits of the wire protocol.
const (
	// maxInFlight is how many requests a side may have open on one data
	// channel; a peer that sends more breaks the protocol.
	maxInFlight = 16
	// maxPendingCandidates bounds the candidates kept for a session whose
	// remote description is not set yet.
	maxPendingCandidates = 64
	// outboxSize bounds the signals waiting to be sent.
	outboxSize = 256
	// highWaterBytes is how much a data channel may buffer before a sender
	// waits for OnBufferedAmountLow; lowWaterBytes is that threshold.
	highWaterBytes = 4 << 20
	lowWaterBytes  = 1 << 20
)

// Config configures a Node. Key and Signaller are required; zero values
// of the rest mean their defaults.
type Config struct {
	// Key is the device key: it signs the signals and so binds the
	// Node's DTLS certificate to the device.
	Key *identity.Key
	// Signaller carries signals through the coordinator.
	Signaller Signaller
	// Chunks serves other peers' requests; nil answers every request
	// not found.
	Chunks ChunkReader
	// MaxPeers bounds the connections, open and being set up, in both
	// directions. Default DefaultMaxPeers.
	MaxPeers int
	// MaxChunkBytes bounds one chunk, sent or received. Default 4 MiB.
	MaxChunkBytes int
	// FrameBytes is the largest data-channel message; a chunk travels as
	// several frames. At most 65,000 (under pion's SCTP message limit
	// with the header). Default 60 KiB.
	FrameBytes int
	// Channels is how many data channels each connection opens; requests
	// spread over them. Default 4.
	Channels int
	// SCTPReceiveBufferBytes is the SCTP receive window per connection.
	// Default 8 MiB.
	SCTPReceiveBufferBytes int
	// ConnectTimeout bounds setting up one connection. Default 30 s.
	ConnectTimeout time.Duration
	// RequestTimeout bounds one Fetch once connected. Default 60 s.
	RequestTimeout time.Duration
	// Upload caps the chunk bytes per second this Node sends, shared with
	// the other Nodes given the same UploadLimit; nil: no cap.
	Upload *UploadLimit
	// RelayOnly sets ICE transport policy "relay": only TURN candidates,
	// for networks where direct traffic is blocked (and for tests).
	RelayOnly bool
	// LoopbackOnly keeps ICE on loopback addresses (127.0.0.1, ::1), so
	// nothing leaves the machine; for tests.
	LoopbackOnly bool
	// Logger receives structured logs; nil discards them.
	Logger *slog.Logger

	// skipPionFingerprintCheck turns off pion's own check of the DTLS
	// certificate against the SDP, so tests show that ours drops it.
	skipPionFingerprintCheck bool
	// sctpChecksum keeps SCTP's CRC32c (benchmarks compare).
	sctpChecksum bool
	// smallUDPBuffers keeps the system's UDP socket buffers (benchmarks
	// compare).
	smallUDPBuffers bool
	// forgeCertificate, in tests, makes this Node sign and offer the
	// fingerprint of one certificate and handshake with another.
	forgeCertificate bool
}

// Validate checks cfg and fills in defaults. Errors wrap ErrConfig and
// name the field.
func (cfg *Config) Validate() error {
	if cfg.Key == nil {
		return fmt.Errorf("%w: Key is required", ErrConfig)
	}
	if cfg.Signaller == nil {
		return fmt.Errorf("%w: Signaller is required", ErrConfig)
	}
	for _, f := range []struct {
		name string
		v    *int
		def  int
	}{
		{"MaxPeers", &cfg.MaxPeers, DefaultMaxPeers},
		{"MaxChunkBytes", &cfg.MaxChunkBytes, DefaultMaxChunkBytes},
		{"FrameBytes", &cfg.FrameBytes, DefaultFrameBytes},
		{"Channels", &cfg.Channels, DefaultChannels},
		{"SCTPReceiveBufferBytes", &cfg.SCTPReceiveBufferBytes, DefaultSCTPReceiveBufferBytes},
	} {
		if *f.v < 0 {
			return fmt.Errorf("%w: %s %d is negative", ErrConfig, f.name, *f.v)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if cfg.FrameBytes < 1024 || cfg.FrameBytes > 65000 {
		return fmt.Errorf("%w: FrameBytes %d: want 1024 to 65000", ErrConfig, cfg.FrameBytes)
	}
	if cfg.Channels > 64 {
		return fmt.Errorf("%w: Channels %d: want at most 64", ErrConfig, cfg.Channels)
	}
	if cfg.ConnectTimeout < 0 || cfg.RequestTimeout < 0 {
		return fmt.Errorf("%w: timeouts must not be negative", ErrConfig)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Node is one device's end of the peer-to-peer data plane: it connects to
// other devices by device ID over WebRTC data channels, accepts their
// connections, serves chunks from Config.Chunks and fetches chunks from
// them (Fetch). Create it with NewNode and run Serve; every other method
// is safe for concurrent use and needs Serve running.
type Node struct {
	cfg    Config
	id     string
	api    *webrtc.API
	cert   webrtc.Certificate
	fp     string // our signed fingerprint
	outbox chan Signal
	done   chan struct{} // closed when Serve stops
	seq    atomic.Uint64
	stats  counters

	mu      sync.Mutex
	conns   map[string]*conn // by peer device ID
	lastSeq map[string]uint64
	serving bool
	stopped bool
	wg      sync.WaitGroup // every goroutine the Node starts
	// closing counts the goroutines closing PeerConnections (started
	// from pion's callbacks too, so not in wg); closed is closed when it
	// drops to 0 while Serve waits.
	closing     int
	closingDone chan struct{}
}

// NewNode checks cfg and makes a Node with a fresh DTLS certificate
// (ECDSA P-256). It starts nothing: run Serve.
func NewNode(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, id: cfg.Key.ID(), outbox: make(chan Signal, outboxSize), done: make(chan struct{}),
		conns: make(map[string]*conn), lastSeq: make(map[string]uint64)}
	cert, err := newCertificate()
	if err != nil {
		return nil, err
	}
	n.cert = cert
	n.fp, err = fingerprintOf(cert)
	if err != nil {
		return nil, err
	}
	if cfg.forgeCertificate {
		other, err := newCertificate()
		if err != nil {
			return nil, err
		}
		n.cert = other // handshake with other, sign n.fp
	}
	se := webrtc.SettingEngine{}
	se.SetSCTPMaxReceiveBufferSize(uint32(cfg.SCTPReceiveBufferBytes))
	// Zero checksum (RFC 9653): DTLS already protects every packet, so
	// SCTP's CRC32c is redundant; both ends must agree, and pion
	// negotiates it.
	se.EnableSCTPZeroChecksum(!cfg.sctpChecksum)
	se.SetICEMulticastDNSMode(ice.MulticastDNSModeDisabled)
	se.SetICETimeouts(5*time.Second, 15*time.Second, 2*time.Second)
	if cfg.LoopbackOnly {
		se.SetIncludeLoopbackCandidate(true)
		se.SetIPFilter(func(ip net.IP) bool { return ip.IsLoopback() })
		se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeUDP4})
	}
	se.DisableCertificateFingerprintVerification(cfg.skipPionFingerprintCheck)
	if !cfg.smallUDPBuffers {
		bn, err := newBufferedNet()
		if err != nil {
			return nil, err
		}
		se.SetNet(bn)
	}
	se.LoggerFactory = pionLogs{}
	n.api = webrtc.NewAPI(webrtc.WithSettingEngine(se))
	// Start sequence numbers at the clock, so a restarted device's
	// signals still climb above the ones the coordinator saw.
	n.seq.Store(uint64(time.Now().UnixNano()))
	return n, nil
}

func newCertificate() (webrtc.Certificate, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return webrtc.Certificate{}, fmt.Errorf("p2p: DTLS key: %w", err)
	}
	c, err := webrtc.GenerateCertificate(k)
	if err != nil {
		return webrtc.Certificate{}, fmt.Errorf("p2p: DTLS certificate: %w", err)
	}
	return *c, nil
}

func fingerprintOf(c webrtc.Certificate) (string, error) {
	fps, err := c.GetFingerprints()
	if err != nil {
		return "", fmt.Errorf("p2p: certificate fingerprint: %w", err)
	}
	for _, fp := range fps {
		if fp.Algorithm == "sha-256" {
			return fp.Algorithm + " " + fp.Value, nil
		}
	}
	return "", fmt.Errorf("p2p: certificate has no sha-256 fingerprint")
}

// ID returns the Node's device ID.
func (n *Node) ID() string { return n.id }

// Serve receives signals and sends the Node's own until ctx ends; then it
// closes every connection, waits for every goroutine the Node started and
// returns nil. A failing Signaller is retried with backoff, so Serve
// returns only when ctx ends. After Serve returns every call fails with
// ErrClosed. Serve may be called once.
func (n *Node) Serve(ctx context.Context) error {
	n.mu.Lock()
	if n.serving || n.stopped {
		n.mu.Unlock()
		return errors.New("p2p: Serve called twice")
	}
	n.serving = true
	n.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	n.goFunc(func() { n.sendLoop(ctx) })
	n.goFunc(func() { n.receiveLoop(ctx) })
	<-ctx.Done()
	cancel()
	n.mu.Lock()
	n.stopped = true
	close(n.done)
	conns := make([]*conn, 0, len(n.conns))
	for _, c := range n.conns {
		conns = append(conns, c)
	}
	n.mu.Unlock()
	for _, c := range conns {
		c.close(ErrClosed)
	}
	n.wg.Wait()
	n.mu.Lock()
	var closing chan struct{}
	if n.closing > 0 {
		closing = make(chan struct{})
		n.closingDone = closing
	}
	n.mu.Unlock()
	if closing != nil {
		<-closing
	}
	return nil
}

// goFunc runs f on a goroutine the Node waits for. It returns false,
// running nothing, once the Node has stopped.
func (n *Node) goFunc(f func()) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopped {
		return false
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		f()
	}()
	return true
}

// sendLoop sends the outbox in order, numbering each signal right before
// it is signed so that sequence numbers climb in the order sent.
func (n *Node) sendLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case s := <-n.outbox:
			s.Seq = n.seq.Add(1)
			s.SentMS = time.Now().UnixMilli()
			s.Sign(n.cfg.Key)
			sctx, cancel := context.WithTimeout(ctx, n.cfg.ConnectTimeout)
			err := n.cfg.Signaller.Send(sctx, s)
			cancel()
			if err != nil && ctx.Err() == nil {
				n.cfg.Logger.Warn("Signal not sent", "peer", s.To, "kind", s.Kind, "err", err)
				if errors.Is(err, ErrPeerOffline) {
					if c := n.session(s.To, s.Session); c != nil {
						c.close(c.fail(err))
					}
				}
			}
		}
	}
}

// signal queues s for sending; it reports false when the outbox is full.
func (n *Node) signal(s Signal) bool {
	select {
	case n.outbox <- s:
		return true
	default:
		n.cfg.Logger.Warn("Signal outbox full; signal dropped", "peer", s.To, "kind", s.Kind)
		return false
	}
}

// receiveLoop long-polls the mailbox and handles each signal.
func (n *Node) receiveLoop(ctx context.Context) {
	backoff := 100 * time.Millisecond
	failing := false // since the last signals received: warned once, then at debug
	for ctx.Err() == nil {
		sigs, err := n.cfg.Signaller.Receive(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if !failing {
				n.cfg.Logger.Warn("Cannot receive signals", "err", err, "retryIn", backoff)
			} else {
				n.cfg.Logger.Debug("Cannot receive signals", "err", err, "retryIn", backoff)
			}
			failing = true
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(2*backoff, 10*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		if failing {
			n.cfg.Logger.Info("Receiving signals again")
			failing = false
		}
		for _, s := range sigs {
			if err := n.handle(s); err != nil {
				n.cfg.Logger.Info("Signal refused", "peer", s.From, "kind", s.Kind, "err", err)
			}
		}
	}
}

// accept checks a delivered signal: well formed, addressed to us, signed
// by the key the coordinator vouches for, and not a replay.
func (n *Node) accept(s Signal) error {
	if err := s.Check(); err != nil {
		return err
	}
	if s.To != n.id {
		return fmt.Errorf("%w: addressed to %s, not to this device (%s)", ErrBadSignal, s.To, n.id)
	}
	if err := s.Verify(s.FromKey); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if s.Seq <= n.lastSeq[s.From] {
		return fmt.Errorf("%w: sequence %d from %s is not above %d", ErrReplay, s.Seq, s.From, n.lastSeq[s.From])
	}
	n.lastSeq[s.From] = s.Seq
	return nil
}

// handle acts on one delivered signal.
func (n *Node) handle(s Signal) error {
	if err := n.accept(s); err != nil {
		return err
	}
	switch s.Kind {
	case KindOffer:
		return n.answer(s)
	case KindAnswer:
		c := n.session(s.From, s.Session)
		if c == nil || !c.offerer {
			return fmt.Errorf("%w: answer for no offer of ours (session %s)", ErrBadSignal, s.Session)
		}
		c.remoteAnswer(s)
	case KindCandidate:
		c := n.session(s.From, s.Session)
		if c == nil {
			return nil // a late candidate of a session already gone
		}
		c.remoteCandidate(s.Candidate)
	case KindBye:
		if c := n.session(s.From, s.Session); c != nil {
			c.close(fmt.Errorf("%w: %s", ErrRefused, s.Reason))
		}
	}
	return nil
}

// session returns the connection to peer with that session, if any.
func (n *Node) session(peer, session string) *conn {
	n.mu.Lock()
	defer n.mu.Unlock()
	if c := n.conns[peer]; c != nil && c.session == session {
		return c
	}
	return nil
}

// answer accepts an offer: a new connection, unless a limit or our own
// offer to the same peer (glare: the lower device ID's offer wins) stands
// in the way.
func (n *Node) answer(s Signal) error {
	n.mu.Lock()
	if n.stopped {
		n.mu.Unlock()
		return ErrClosed
	}
	old := n.conns[s.From]
	if old != nil && old.offerer && !old.isReadyNow() && n.id < s.From {
		n.mu.Unlock()
		return nil // ours wins; the peer answers ours
	}
	if old == nil && len(n.conns) >= n.cfg.MaxPeers {
		n.mu.Unlock()
		n.signal(Signal{To: s.From, Session: s.Session, Kind: KindBye, Reason: "too many peer connections"})
		return fmt.Errorf("%w: %d connections already", ErrTooManyPeers, n.cfg.MaxPeers)
	}
	c, err := n.newConn(s.From, s.Session, false)
	if err != nil {
		n.mu.Unlock()
		return err
	}
	n.conns[s.From] = c
	n.mu.Unlock()
	if old != nil {
		// The peer started over (it restarted, or lost the glare).
		old.replacedBy = c
		old.close(fmt.Errorf("%w: replaced by a new connection from the peer", ErrClosed))
	}
	c.remoteFP = s.Fingerprint
	// Set up on a goroutine of its own: asking for ICE servers and
	// creating the answer must not hold up the signals of other peers.
	if !n.goFunc(func() {
		if err := c.start(s); err != nil {
			c.close(err)
		}
	}) {
		c.close(ErrClosed)
		return ErrClosed
	}
	return nil
}

// Connect returns once a connection to the device peer is open, making
// one if there is none: it signals an offer through the coordinator and
// waits, within ctx and Config.ConnectTimeout, for the answer, ICE, DTLS
// (checking the certificate against the signed fingerprint) and the data
// channels. Concurrent calls for one peer share one attempt. Errors:
// ErrTooManyPeers, ErrRefused, ErrFingerprint (in a *PeerError),
// ErrClosed, or ctx's.
func (n *Node) Connect(ctx context.Context, peer string) error {
	_, err := n.connect(ctx, peer)
	return err
}

func (n *Node) connect(ctx context.Context, peer string) (*conn, error) {
	if peer == n.id {
		return nil, fmt.Errorf("%w: cannot connect to this device itself", ErrConfig)
	}
	for range 3 { // a lost glare hands over to the peer's connection
		c, err := n.dial(peer)
		if err != nil {
			return nil, err
		}
		if err := c.wait(ctx); err != nil {
			if c.replacedBy != nil {
				continue
			}
			return nil, err
		}
		return c, nil
	}
	return nil, &PeerError{Peer: peer, Err: fmt.Errorf("%w: connection replaced again and again", ErrClosed)}
}

// dial returns the connection to peer, starting one if there is none.
func (n *Node) dial(peer string) (*conn, error) {
	n.mu.Lock()
	if n.stopped {
		n.mu.Unlock()
		return nil, fmt.Errorf("%w: the node is not serving", ErrClosed)
	}
	if c := n.conns[peer]; c != nil {
		n.mu.Unlock()
		return c, nil
	}
	if len(n.conns) >= n.cfg.MaxPeers {
		n.mu.Unlock()
		return nil, &PeerError{Peer: peer, Err: fmt.Errorf("%w: %d connections already", ErrTooManyPeers, n.cfg.MaxPeers)}
	}
	var sid [16]byte
	rand.Read(sid[:])
	c, err := n.newConn(peer, hex.EncodeToString(sid[:]), true)
	if err != nil {
		n.mu.Unlock()
		return nil, err
	}
	n.conns[peer] = c
	n.mu.Unlock()
	if err := c.start(Signal{}); err != nil {
		c.close(err)
	}
	return c, nil
}

// closePeerConnection closes pc on a goroutine Serve waits for: pion may
// call back into the Node while it closes.
func (n *Node) closePeerConnection(pc interface{ Close() error }) {
	n.mu.Lock()
	n.closing++
	n.mu.Unlock()
	go func() {
		pc.Close()
		n.mu.Lock()
		defer n.mu.Unlock()
		n.closing--
		if n.closing == 0 && n.closingDone != nil {
			close(n.closingDone)
			n.closingDone = nil
		}
	}()
}

// forget removes c from the Node's connections if it is still there.
func (n *Node) forget(c *conn) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.conns[c.peer] == c {
		delete(n.conns, c.peer)
	}
}

// Disconnect closes the connection to peer, if any.
func (n *Node) Disconnect(peer string) {
	n.mu.Lock()
	c := n.conns[peer]
	n.mu.Unlock()
	if c != nil {
		c.close(fmt.Errorf("%w: disconnected", ErrClosed))
		n.signal(Signal{To: peer, Session: c.session, Kind: KindBye, Reason: "closed"})
	}
}

// pionLogs silences pion's own loggers: the Node logs what matters.
type pionLogs struct{}

func (pionLogs) NewLogger(string) logging.LeveledLogger { return quietLogger{} }

type quietLogger struct{}

func (quietLogger) Trace(string)          {}
func (quietLogger) Tracef(string, ...any) {}
func (quietLogger) Debug(string)          {}
func (quietLogger) Debugf(string, ...any) {}
func (quietLogger) Info(string)           {}
func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Warn(string)           {}
func (quietLogger) Warnf(string, ...any)  {}
func (quietLogger) Error(string)          {}
func (quietLogger) Errorf(string, ...any) {}
