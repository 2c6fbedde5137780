package coord

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"idlepool/p2p"
)

// Signalling (docs/api.md, "Signalling"): devices post signed
// p2p.Signals (SDP offers and answers, trickled ICE candidates) for each
// other and long-poll their own mailbox. The coordinator checks each
// signal (the poster is its sender, the sender's signature, a fresh
// timestamp, a sequence above the sender's last: a forged or replayed
// signal is refused), keeps it in the recipient's bounded mailbox for at
// most maxSignalAge, and forgets it once delivered.
const (
	// maxSignalBody bounds POST /v1/signals: one signal with an SDP of
	// p2p.MaxSDPBytes in JSON.
	maxSignalBody = 64 << 10
	// mailboxSize bounds the signals waiting for one device, and
	// mailboxPerSender those from one sender among them.
	mailboxSize      = 256
	mailboxPerSender = 64
	// maxSignalAge is how long an undelivered signal waits; a connection
	// attempt gives up sooner (p2p.DefaultConnectTimeout).
	maxSignalAge = time.Minute
	// maxSignalWait is the longest GET /v1/signals waits for a signal
	// before it answers none (DefaultSignalWait when it asks no "waitMs").
	maxSignalWait = 50 * time.Second
	// offlineAfter is how long a device that listened for signals may go
	// without a long poll open before a signal to it is refused as
	// offline (410): an agent polls again at once, so a longer gap means
	// it quit or was killed, and a connection to it would only wait out
	// its timeout (p2p.DefaultConnectTimeout). A device never seen
	// listening since the coordinator started is not judged.
	offlineAfter = 20 * time.Second
	// listenMemory is how long the last poll of a device is remembered.
	listenMemory = TrackerTTL
)

// errSignal marks a signal the coordinator refuses (answered 400, or 409
// for a replay, 429 for a full mailbox).
var errSignal = errors.New("coord: signal refused")

type queuedSignal struct {
	s  p2p.Signal
	at time.Time
}

type seenSeq struct {
	seq uint64
	at  time.Time
}

// mailboxes holds undelivered signals per recipient and the last sequence
// seen per sender. changed is closed and replaced whenever a signal
// arrives, waking the long polls (each checks its own mailbox).
type mailboxes struct {
	mu      sync.Mutex
	boxes   map[string][]queuedSignal
	lastSeq map[string]seenSeq
	changed chan struct{}
	stop    chan struct{} // closed when the server shuts down
	stopped bool
	// listen records, per device that long-polled its mailbox, its polls
	// open now and when the last one ended (offline).
	listen map[string]listening
	polls  int // long polls waiting now
}

// listening is one device's polls of its mailbox: how many are open and
// when the last one ended.
type listening struct {
	open int
	last time.Time
}

func newMailboxes() *mailboxes {
	return &mailboxes{boxes: map[string][]queuedSignal{}, lastSeq: map[string]seenSeq{},
		changed: make(chan struct{}), stop: make(chan struct{}), listen: map[string]listening{}}
}

// listenStart and listenEnd bracket one long poll of to's mailbox.
func (m *mailboxes) listenStart(to string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.listen[to]
	l.open++
	m.listen[to] = l
}

func (m *mailboxes) listenEnd(to string, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.listen[to]
	l.open = max(l.open-1, 0)
	l.last = now
	m.listen[to] = l
}

// offline says whether to listened for signals and has had no poll open
// for longer than offlineAfter, and since when.
func (m *mailboxes) offline(to string, now time.Time) (bool, time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.listen[to]
	return ok && l.open == 0 && now.Sub(l.last) > offlineAfter, l.last
}

// shutdown ends every long poll.
func (m *mailboxes) shutdown() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.stopped {
		m.stopped = true
		close(m.stop)
	}
}

// prune drops signals older than maxSignalAge and sequence records older
// than the clock skew a timestamp may have (a replay older than that is
// refused by its timestamp). The caller holds m.mu.
func (m *mailboxes) prune(now time.Time) {
	for to, box := range m.boxes {
		i := 0
		for i < len(box) && now.Sub(box[i].at) > maxSignalAge {
			i++
		}
		if i == len(box) {
			delete(m.boxes, to)
		} else if i > 0 {
			m.boxes[to] = box[i:]
		}
	}
	for from, s := range m.lastSeq {
		if now.Sub(s.at) > 2*clockSkew {
			delete(m.lastSeq, from)
		}
	}
	for to, l := range m.listen {
		if l.open == 0 && now.Sub(l.last) > listenMemory {
			delete(m.listen, to)
		}
	}
}

// post queues s for s.To; the caller checked the signature.
func (m *mailboxes) post(s p2p.Signal, now time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.prune(now)
	if last, ok := m.lastSeq[s.From]; ok && s.Seq <= last.seq {
		return fmt.Errorf("%w: %w: sequence %d is not above %d, the last from %s", errSignal, p2p.ErrReplay, s.Seq, last.seq, s.From)
	}
	box := m.boxes[s.To]
	if len(box) >= mailboxSize {
		return fmt.Errorf("%w: %w: the mailbox of %s is full (%d signals)", errSignal, errMailboxFull, s.To, mailboxSize)
	}
	fromSender := 0
	for _, q := range box {
		if q.s.From == s.From {
			fromSender++
		}
	}
	if fromSender >= mailboxPerSender {
		return fmt.Errorf("%w: %w: %d signals from %s already wait for %s", errSignal, errMailboxFull, fromSender, s.From, s.To)
	}
	m.lastSeq[s.From] = seenSeq{seq: s.Seq, at: now}
	m.boxes[s.To] = append(box, queuedSignal{s: s, at: now})
	close(m.changed)
	m.changed = make(chan struct{})
	return nil
}

// take removes and returns the signals waiting for to, and a channel
// closed when another arrives.
func (m *mailboxes) take(to string, now time.Time) ([]p2p.Signal, <-chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.prune(now)
	box := m.boxes[to]
	delete(m.boxes, to)
	out := make([]p2p.Signal, len(box))
	for i, q := range box {
		out[i] = q.s
	}
	return out, m.changed
}

// waiters counts the long polls waiting now.
func (m *mailboxes) waiters() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.polls
}

func (m *mailboxes) polling(d int) {
	m.mu.Lock()
	m.polls += d
	m.mu.Unlock()
}

// pending counts the signals waiting in all mailboxes.
func (m *mailboxes) pending() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, b := range m.boxes {
		n += len(b)
	}
	return n
}

var errMailboxFull = errors.New("mailbox full")

// postSignal is POST /v1/signals: one p2p.Signal, signed by its sender,
// who must be the caller. 202 when queued; 410 (peer_offline) when its
// recipient stopped listening for signals (mailboxes.offline).
func (s *Server) postSignal(w http.ResponseWriter, r *http.Request, c call) error {
	var sig p2p.Signal
	if err := json.Unmarshal(c.body, &sig); err != nil {
		return badRequest("signal: %v", err)
	}
	sig.FromKey = nil
	if sig.From != c.peer.ID {
		return badRequest("signal from %s posted by %s: a device posts only its own signals", sig.From, c.peer.ID)
	}
	if err := sig.Check(); err != nil {
		return badRequest("%v", err)
	}
	if err := sig.Verify(c.peer.Key); err != nil {
		return unauthorized(err)
	}
	now := s.cfg.Now()
	if d := now.Sub(time.UnixMilli(sig.SentMS)); d > clockSkew || d < -clockSkew {
		return &apiError{http.StatusUnauthorized, "clock_skew", fmt.Sprintf("signal sent at %d (unix ms) is more than %v from the coordinator's clock (%d): check the device's clock", sig.SentMS, clockSkew, now.UnixMilli()), nil}
	}
	if _, ok := s.sched.Peer(sig.To); !ok {
		return notFound("unknown_peer", "no device %s in this pool", sig.To)
	}
	if off, since := s.signals.offline(sig.To, now); off {
		return &apiError{http.StatusGone, "peer_offline", fmt.Sprintf("device %s has not listened for signals since %s: it is offline",
			sig.To, since.UTC().Format(time.RFC3339)), nil}
	}
	if err := s.signals.post(sig, now); err != nil {
		switch {
		case errors.Is(err, p2p.ErrReplay):
			return &apiError{http.StatusConflict, "replay", err.Error(), nil}
		case errors.Is(err, errMailboxFull):
			w.Header().Set("Retry-After", "1")
			return &apiError{http.StatusTooManyRequests, "mailbox_full", err.Error(), nil}
		}
		return err
	}
	writeJSON(w, http.StatusAccepted, struct{}{})
	return nil
}

// getSignals is GET /v1/signals[?waitMs=N]: the caller's waiting signals,
// at once if there are any, else when one arrives or after waitMs
// (default 25 s, at most 50 s) with none.
func (s *Server) getSignals(w http.ResponseWriter, r *http.Request, c call) error {
	wait := DefaultSignalWait
	if v := r.URL.Query().Get("waitMs"); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms < 0 {
			return badRequest("waitMs %q: want milliseconds, 0 or more", v)
		}
		wait = min(time.Duration(ms)*time.Millisecond, maxSignalWait)
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	s.signals.listenStart(c.peer.ID)
	defer func() { s.signals.listenEnd(c.peer.ID, s.cfg.Now()) }()
	for {
		sigs, changed := s.signals.take(c.peer.ID, s.cfg.Now())
		if len(sigs) > 0 || wait == 0 {
			for i := range sigs {
				if p, ok := s.sched.Peer(sigs[i].From); ok {
					sigs[i].FromKey = p.Key
				}
			}
			writeJSON(w, http.StatusOK, SignalsAnswer{Signals: sigs})
			return nil
		}
		s.signals.polling(1)
		select {
		case <-changed:
		case <-t.C:
			wait = 0
		case <-s.signals.stop:
			wait = 0
		case <-r.Context().Done():
			s.signals.polling(-1)
			return r.Context().Err()
		}
		s.signals.polling(-1)
	}
}

// getICE is GET /v1/ice: ICE servers with fresh TURN credentials for the
// caller (TURN REST API scheme, p2p.TURNCredentials).
func (s *Server) getICE(w http.ResponseWriter, _ *http.Request, c call) error {
	ans := ICEAnswer{ICEServers: []p2p.ICEServer{}}
	if s.relay != nil {
		ttl := s.cfg.Relay.CredentialTTL
		ans.ICEServers = s.relay.ICEServers(c.peer.ID, ttl)
		ans.Expires = s.cfg.Now().Add(ttl).UTC()
	}
	writeJSON(w, http.StatusOK, ans)
	return nil
}

// RelayConfig configures the TURN relay a coordinator may run
// (`idlepool serve --turn`).
type RelayConfig struct {
	// Listen is the relay's UDP address, HOST:PORT; empty runs no relay.
	Listen string
	// PublicIP is the address peers reach the relay at; empty means
	// Listen's host, which must then be a specific address.
	PublicIP string
	// Secret signs the relay's credentials (at least 16 bytes); empty
	// means a random one per start, which is right for one coordinator
	// with its own relay: credentials live an hour and a restart only
	// makes peers ask again.
	Secret []byte
	// CredentialTTL is how long the credentials handed out are good for
	// a new allocation. Default p2p.DefaultCredentialTTL (1 h).
	CredentialTTL time.Duration
}

func (c *RelayConfig) validate() error {
	if c.Listen == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return fmt.Errorf("%w: relay address %q: want HOST:PORT such as 0.0.0.0:3478", ErrConfig, c.Listen)
	}
	pub := c.PublicIP
	if pub == "" {
		pub = host
	}
	if ip := net.ParseIP(pub); ip == nil || ip.IsUnspecified() {
		return fmt.Errorf("%w: relay public IP %q: give the address peers reach the relay at (--turn-ip)", ErrConfig, pub)
	}
	if c.Secret != nil && len(c.Secret) < 16 {
		return fmt.Errorf("%w: relay secret of %d bytes is too short: use at least 16", ErrConfig, len(c.Secret))
	}
	if c.Secret == nil {
		c.Secret = make([]byte, 32)
		rand.Read(c.Secret)
	}
	if c.CredentialTTL < 0 {
		return fmt.Errorf("%w: relay credential TTL %v is negative", ErrConfig, c.CredentialTTL)
	}
	if c.CredentialTTL == 0 {
		c.CredentialTTL = p2p.DefaultCredentialTTL
	}
	return nil
}

// startRelay starts the TURN relay if the config asks for one.
func (s *Server) startRelay() error {
	if s.cfg.Relay.Listen == "" {
		return nil
	}
	r, err := p2p.NewRelay(p2p.RelayConfig{Listen: s.cfg.Relay.Listen, PublicIP: s.cfg.Relay.PublicIP,
		Secret: s.cfg.Relay.Secret, Now: s.cfg.Now, Logger: s.log.With("component", "relay")})
	if err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	s.relay = r
	return nil
}

// RelayAddr returns the UDP address of the TURN relay, or nil when the
// coordinator runs none.
func (s *Server) RelayAddr() net.Addr {
	if s.relay == nil {
		return nil
	}
	return s.relay.Addr()
}

// RelayPublicAddr returns the address devices reach the TURN relay at,
// or "" when the coordinator runs none.
func (s *Server) RelayPublicAddr() string {
	if s.relay == nil {
		return ""
	}
	return s.relay.PublicAddr()
}

// serveRelay closes the relay when ctx ends.
func (s *Server) serveRelay(ctx context.Context) error {
	if s.relay == nil {
		return nil
	}
	return s.relay.Serve(ctx)
}
