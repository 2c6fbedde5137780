package p2p

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/ice/v4"
	"github.com/pion/webrtc/v4"
)

// conn is one WebRTC connection to a peer: a PeerConnection and
// Config.Channels pre-negotiated data channels (IDs 0…n-1).
type conn struct {
	n        *Node
	peer     string
	session  string
	offerer  bool
	remoteFP string // the peer's signed fingerprint
	chans    []*channel
	ready    chan struct{} // closed once open and checked
	closed   chan struct{} // closed by close
	nextID   atomic.Uint32
	rr       atomic.Uint32

	mu           sync.Mutex
	pc           *webrtc.PeerConnection
	remoteSet    bool
	pendingCands []webrtc.ICECandidateInit
	localSent    bool     // our offer or answer is queued
	localCands   []string // candidates gathered before that
	opened       int
	// remoteRelays are the addresses (IP:port) of the peer's relay
	// candidates: a check that arrives from one before the candidate
	// itself is seen as peer reflexive, yet the path is relayed.
	remoteRelays map[string]bool
	// turnIPs are the IPs of the TURN servers this connection was given
	// that are not addresses of this machine.
	turnIPs  map[string]bool
	certOK   bool
	isReady  bool
	isClosed bool
	err      error
	info     ConnInfo
	// replacedBy is the connection that took this one's place (the peer
	// offered anew); Connect waits for that one instead.
	replacedBy *conn
}

// newConn makes a connection record; the caller holds n.mu.
func (n *Node) newConn(peer, session string, offerer bool) (*conn, error) {
	c := &conn{n: n, peer: peer, session: session, offerer: offerer,
		ready: make(chan struct{}), closed: make(chan struct{})}
	c.info = ConnInfo{Peer: peer, Offerer: offerer}
	return c, nil
}

func (c *conn) isReadyNow() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.isReady
}

// start sets up the PeerConnection and sends our offer, or (offer set)
// answers the peer's offer. The setup is bounded by ConnectTimeout.
func (c *conn) start(offer Signal) error {
	n := c.n
	if !n.goFunc(c.watchSetup) {
		return ErrClosed
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.ConnectTimeout)
	defer cancel()
	servers, err := n.cfg.Signaller.ICEServers(ctx)
	if err != nil {
		return c.fail(fmt.Errorf("get ICE servers: %w", err))
	}
	c.mu.Lock()
	c.turnIPs = remoteTURNIPs(servers)
	c.mu.Unlock()
	cfg := webrtc.Configuration{ICEServers: webrtcServers(servers), Certificates: []webrtc.Certificate{n.cert}}
	if n.cfg.RelayOnly {
		cfg.ICETransportPolicy = webrtc.ICETransportPolicyRelay
	}
	pc, err := n.api.NewPeerConnection(cfg)
	if err != nil {
		return c.fail(fmt.Errorf("new peer connection: %w", err))
	}
	c.mu.Lock()
	if c.isClosed {
		c.mu.Unlock()
		pc.Close()
		return ErrClosed
	}
	c.pc = pc
	c.mu.Unlock()
	pc.OnICECandidate(func(cand *webrtc.ICECandidate) {
		if cand == nil {
			return
		}
		b, err := json.Marshal(cand.ToJSON())
		if err == nil {
			c.localCandidate(string(b))
		}
	})
	pc.OnConnectionStateChange(func(st webrtc.PeerConnectionState) {
		switch st {
		case webrtc.PeerConnectionStateConnected:
			c.connected()
		case webrtc.PeerConnectionStateFailed:
			c.close(&PeerError{Peer: c.peer, Err: fmt.Errorf("%w: the connection failed (ICE or DTLS)", ErrClosed)})
		case webrtc.PeerConnectionStateClosed:
			c.close(&PeerError{Peer: c.peer, Err: fmt.Errorf("%w: the connection closed", ErrClosed)})
		}
	})
	for i := range n.cfg.Channels {
		negotiated, id := true, uint16(i)
		dc, err := pc.CreateDataChannel(fmt.Sprintf("chunks-%d", i), &webrtc.DataChannelInit{Negotiated: &negotiated, ID: &id})
		if err != nil {
			return c.fail(fmt.Errorf("data channel: %w", err))
		}
		c.chans = append(c.chans, newChannel(c, dc))
	}
	kind := KindAnswer
	if c.offerer {
		kind = KindOffer
		o, err := pc.CreateOffer(nil)
		if err != nil {
			return c.fail(fmt.Errorf("create offer: %w", err))
		}
		if err := pc.SetLocalDescription(o); err != nil {
			return c.fail(fmt.Errorf("set offer: %w", err))
		}
	} else {
		if err := c.setRemote(webrtc.SessionDescription{Type: webrtc.SDPTypeOffer, SDP: offer.SDP}); err != nil {
			return c.fail(err)
		}
		a, err := pc.CreateAnswer(nil)
		if err != nil {
			return c.fail(fmt.Errorf("create answer: %w", err))
		}
		if err := pc.SetLocalDescription(a); err != nil {
			return c.fail(fmt.Errorf("set answer: %w", err))
		}
	}
	sdp := pc.LocalDescription().SDP
	if n.cfg.forgeCertificate {
		sdp = replaceFingerprints(sdp, n.fp)
	}
	n.signal(Signal{To: c.peer, Session: c.session, Kind: kind, SDP: sdp, Fingerprint: n.fp})
	c.mu.Lock()
	c.localSent = true
	cands := c.localCands
	c.localCands = nil
	c.mu.Unlock()
	for _, cand := range cands {
		n.signal(Signal{To: c.peer, Session: c.session, Kind: KindCandidate, Candidate: cand})
	}
	return nil
}

// fail wraps err as being about the peer.
func (c *conn) fail(err error) error { return &PeerError{Peer: c.peer, Err: err} }

// replaceFingerprints rewrites every a=fingerprint line of sdp to fp (a
// lying peer, in tests).
func replaceFingerprints(sdp, fp string) string {
	lines := strings.Split(sdp, "\r\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "a=fingerprint:") {
			lines[i] = "a=fingerprint:" + fp
		}
	}
	return strings.Join(lines, "\r\n")
}

// watchSetup closes the connection if it is not open within
// ConnectTimeout.
func (c *conn) watchSetup() {
	t := time.NewTimer(c.n.cfg.ConnectTimeout)
	defer t.Stop()
	select {
	case <-c.ready:
	case <-c.closed:
	case <-t.C:
		c.close(c.fail(fmt.Errorf("%w: not connected within %v", context.DeadlineExceeded, c.n.cfg.ConnectTimeout)))
	}
}

// localCandidate sends one of our candidates, once our description went.
func (c *conn) localCandidate(cand string) {
	c.mu.Lock()
	if !c.localSent {
		if len(c.localCands) < maxPendingCandidates {
			c.localCands = append(c.localCands, cand)
		}
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	c.n.signal(Signal{To: c.peer, Session: c.session, Kind: KindCandidate, Candidate: cand})
}

// setRemote sets the remote description, then adds the candidates that
// came before it.
func (c *conn) setRemote(d webrtc.SessionDescription) error {
	c.mu.Lock()
	pc := c.pc
	c.mu.Unlock()
	if pc == nil {
		return ErrClosed
	}
	if err := pc.SetRemoteDescription(d); err != nil {
		return fmt.Errorf("set remote %s: %w", d.Type, err)
	}
	c.mu.Lock()
	c.remoteSet = true
	cands := c.pendingCands
	c.pendingCands = nil
	c.mu.Unlock()
	for _, cand := range cands {
		if err := pc.AddICECandidate(cand); err != nil {
			c.n.cfg.Logger.Debug("Remote candidate refused", "peer", c.peer, "err", err)
		}
	}
	return nil
}

// remoteAnswer applies the peer's answer to our offer.
func (c *conn) remoteAnswer(s Signal) {
	c.mu.Lock()
	if c.remoteSet || c.pc == nil {
		c.mu.Unlock()
		return
	}
	c.remoteFP = s.Fingerprint
	c.mu.Unlock()
	if err := c.setRemote(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: s.SDP}); err != nil {
		c.close(c.fail(err))
	}
}

// remoteCandidate adds a trickled candidate of the peer.
func (c *conn) remoteCandidate(cand string) {
	var init webrtc.ICECandidateInit
	if err := json.Unmarshal([]byte(cand), &init); err != nil {
		c.n.cfg.Logger.Debug("Remote candidate unreadable", "peer", c.peer, "err", err)
		return
	}
	if ic, err := ice.UnmarshalCandidate(init.Candidate); err == nil && ic.Type() == ice.CandidateTypeRelay {
		c.mu.Lock()
		if c.remoteRelays == nil {
			c.remoteRelays = make(map[string]bool)
		}
		c.remoteRelays[net.JoinHostPort(ic.Address(), strconv.Itoa(ic.Port()))] = true
		c.mu.Unlock()
		defer c.reclassify()
	}
	c.mu.Lock()
	pc := c.pc
	if !c.remoteSet || pc == nil {
		if len(c.pendingCands) < maxPendingCandidates {
			c.pendingCands = append(c.pendingCands, init)
		}
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	if err := pc.AddICECandidate(init); err != nil {
		c.n.cfg.Logger.Debug("Remote candidate refused", "peer", c.peer, "err", err)
	}
}

// connected checks the DTLS certificate the peer showed against the
// fingerprint it signed, and drops the connection when they differ.
func (c *conn) connected() {
	c.mu.Lock()
	pc, want := c.pc, c.remoteFP
	c.mu.Unlock()
	if pc == nil {
		return
	}
	got := certFingerprint(pc.SCTP().Transport().GetRemoteCertificate())
	if want == "" || !strings.EqualFold(got, want) {
		c.n.cfg.Logger.Warn("Peer dropped: its DTLS certificate is not the one its device signed", "peer", c.peer, "signed", want, "shown", got)
		c.close(c.fail(fmt.Errorf("%w: signed %q, shown %q", ErrFingerprint, want, got)))
		return
	}
	info := c.classify(pc)
	c.mu.Lock()
	c.certOK = true
	c.info = info
	c.mu.Unlock()
	c.maybeReady()
}

// classify reports the connection's selected candidate pair and whether
// it is relayed: a relay candidate on either end, or a remote candidate at
// the address of one of the peer's relay candidates.
func (c *conn) classify(pc *webrtc.PeerConnection) ConnInfo {
	info := ConnInfo{Peer: c.peer, Offerer: c.offerer, Path: PathUnknown}
	pair, err := pc.SCTP().Transport().ICETransport().GetSelectedCandidatePair()
	if err != nil || pair == nil {
		return info
	}
	info.LocalType, info.RemoteType = pair.Local.Typ.String(), pair.Remote.Typ.String()
	info.LocalAddr = net.JoinHostPort(pair.Local.Address, strconv.Itoa(int(pair.Local.Port)))
	info.RemoteAddr = net.JoinHostPort(pair.Remote.Address, strconv.Itoa(int(pair.Remote.Port)))
	info.Path = PathDirect
	c.mu.Lock()
	viaRelay := c.remoteRelays[net.JoinHostPort(pair.Remote.Address, strconv.Itoa(int(pair.Remote.Port)))] ||
		(pair.Remote.Typ == webrtc.ICECandidateTypePrflx && c.turnIPs[pair.Remote.Address])
	c.mu.Unlock()
	if pair.Local.Typ == webrtc.ICECandidateTypeRelay || pair.Remote.Typ == webrtc.ICECandidateTypeRelay || viaRelay {
		info.Path = PathRelayed
	}
	return info
}

// remoteTURNIPs returns the IPs of the TURN servers among servers that
// are not addresses of this machine: a peer-reflexive candidate at one of
// those is the peer's relay allocation, seen before its candidate came.
func remoteTURNIPs(servers []ICEServer) map[string]bool {
	local := map[string]bool{}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				local[ipn.IP.String()] = true
			}
		}
	}
	out := map[string]bool{}
	for _, s := range servers {
		for _, u := range s.URLs {
			rest, ok := strings.CutPrefix(u, "turn:")
			if !ok {
				rest, ok = strings.CutPrefix(u, "turns:")
			}
			if !ok {
				continue
			}
			rest, _, _ = strings.Cut(rest, "?")
			host, _, err := net.SplitHostPort(rest)
			if err != nil {
				host = rest
			}
			if ip := net.ParseIP(strings.Trim(host, "[]")); ip != nil && !local[ip.String()] && !ip.IsLoopback() {
				out[ip.String()] = true
			}
		}
	}
	return out
}

// reclassify looks at the path again once a relay candidate of the peer
// arrives after the connection opened, and moves the counts.
func (c *conn) reclassify() {
	c.mu.Lock()
	pc, ready, closed, old := c.pc, c.isReady, c.isClosed, c.info.Path
	c.mu.Unlock()
	if pc == nil || !ready || closed {
		return
	}
	info := c.classify(pc)
	if info.Path == old {
		return
	}
	c.mu.Lock()
	c.info = info
	c.mu.Unlock()
	c.n.stats.moved(old, info.Path)
	c.n.cfg.Logger.Info("Peer connection path", "peer", c.peer, "path", string(info.Path), "local", info.LocalType, "remote", info.RemoteType)
}

// channelOpened counts an open data channel.
func (c *conn) channelOpened() {
	c.mu.Lock()
	c.opened++
	c.mu.Unlock()
	c.maybeReady()
}

// maybeReady marks the connection open once the certificate is checked
// and every data channel is open, and starts serving requests.
func (c *conn) maybeReady() {
	c.mu.Lock()
	if c.isReady || c.isClosed || !c.certOK || c.opened < len(c.chans) || len(c.chans) == 0 {
		c.mu.Unlock()
		return
	}
	c.isReady = true
	info := c.info
	c.mu.Unlock()
	for _, ch := range c.chans {
		if !c.n.goFunc(ch.serve) {
			c.close(ErrClosed)
			return
		}
	}
	c.n.stats.opened(info.Path)
	c.n.cfg.Logger.Info("Peer connected", "peer", c.peer, "path", string(info.Path), "local", info.LocalType, "remote", info.RemoteType)
	close(c.ready)
}

// wait waits until the connection is open (nil) or closed (why).
func (c *conn) wait(ctx context.Context) error {
	select {
	case <-c.closed:
		return c.closeErr()
	case <-c.ready:
		select {
		case <-c.closed:
			return c.closeErr()
		default:
			return nil
		}
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *conn) closeErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// close ends the connection once, with err as the reason every waiter
// sees; the PeerConnection is closed on a goroutine the Node waits for.
func (c *conn) close(err error) {
	c.mu.Lock()
	if c.isClosed {
		c.mu.Unlock()
		return
	}
	c.isClosed = true
	c.err = err
	wasReady := c.isReady
	path := c.info.Path
	pc := c.pc
	c.mu.Unlock()
	// Forgotten before its waiters wake: a Connect that returns the
	// failure finds the Node holding no attempt for the peer.
	c.n.forget(c)
	close(c.closed)
	if wasReady {
		c.n.stats.closed(path)
		c.n.cfg.Logger.Info("Peer disconnected", "peer", c.peer, "reason", err)
	}
	if pc != nil {
		c.n.closePeerConnection(pc)
	}
}

// Info returns what is known of the connection.
func (c *conn) infoNow() ConnInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.info
}
