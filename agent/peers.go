package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"idlepool/castore"
	"idlepool/p2p"
	"idlepool/pool"
)

// PeerStatus is this device's end of the peer-to-peer data plane in one
// pool, for `idlepool status` and the tray app: the connections open now
// and how their bytes travel, and where the chunks of jobs' files came
// from since the agent started.
type PeerStatus struct {
	// Connected is how many peer connections are open; Direct of them go
	// device to device (host or reflexive ICE candidates), Relayed
	// through the pool's TURN relay.
	Connected int `json:"connected"`
	Direct    int `json:"direct"`
	Relayed   int `json:"relayed"`
	// FromPeersBytes and FromCoordinatorBytes are the chunk bytes this
	// device fetched from other devices and from the coordinator.
	FromPeersBytes       int64 `json:"fromPeersBytes"`
	FromCoordinatorBytes int64 `json:"fromCoordinatorBytes"`
	// SentBytes are the data-channel bytes sent to peers (the chunks
	// served, headers included).
	SentBytes uint64 `json:"sentBytes"`
	// UploadCap is the owner's cap on what this device sends to peers,
	// in bytes per second over all its pools (share_upload); 0: none.
	UploadCap int64 `json:"uploadCap,omitempty"`
}

// peerDownFor is how long a peer whose connection failed or closed is not
// dialled again: the fetches sent to a holder that went away fail at once
// instead of each waiting p2p.Config.ConnectTimeout to reach it, and the
// fetcher asks another holder or the coordinator.
const peerDownFor = time.Minute

// peerPlane is the agent's running p2p.Node and its counters.
type peerPlane struct {
	node      *p2p.Node
	now       func() time.Time
	fromPeers atomic.Int64

	mu    sync.Mutex
	down  map[string]time.Time // peer -> when its connection failed
	used  map[string]bool      // peers a chunk came from over a connection
	paths map[string]p2p.Path  // peer -> the path its connection took when last seen open
}

// isDown reports whether peer's connection failed within peerDownFor,
// or closed since a chunk came over it (the peer went away).
func (pp *peerPlane) isDown(peer string) bool {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if pp.used[peer] {
		open := slices.ContainsFunc(pp.node.Conns(), func(c p2p.ConnInfo) bool { return c.Peer == peer })
		if !open {
			delete(pp.used, peer)
			pp.down[peer] = pp.now()
		}
	}
	at, ok := pp.down[peer]
	if ok && pp.now().Sub(at) >= peerDownFor {
		delete(pp.down, peer)
		ok = false
	}
	return ok
}

// failed notes that peer's connection failed (err from Node.Fetch): a
// closed or broken connection, not a chunk the peer lacks.
func (pp *peerPlane) failed(peer string, err error) {
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, context.Canceled) {
		return
	}
	pp.mu.Lock()
	pp.down[peer] = pp.now()
	pp.mu.Unlock()
}

// startPeers makes the agent's p2p.Node when Config.PeerToPeer is set and
// the coordinator signals (GET /v1/ice answers); a coordinator from
// before signalling leaves the agent fetching from the coordinator only.
// It returns nil when there is no Node to serve.
func (a *Agent) startPeers(ctx context.Context) (*p2p.Node, error) {
	if !a.cfg.PeerToPeer || a.cfg.Peers != nil {
		return nil, nil
	}
	err := a.retry(ctx, "ice", func(ctx context.Context) error {
		_, err := a.c.Signaller().ICEServers(ctx)
		return err
	})
	if ae, ok := errors.AsType[*APIError](err); ok && ae.Status == http.StatusNotFound {
		a.log.Info("The coordinator does not relay signals; fetching files from it only")
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("ask the pool for ICE servers: %w", err)
	}
	cfg := a.cfg.P2P
	cfg.Key, cfg.Signaller, cfg.Logger = a.cfg.DeviceKey, a.c.Signaller(), a.log.With("part", "p2p")
	cfg.Chunks = poolShare{a}
	if loopbackPool(a.c.URL()) {
		// Every device of a pool on this machine's loopback runs here.
		cfg.LoopbackOnly = true
	}
	n, err := p2p.NewNode(cfg)
	if err != nil {
		return nil, err
	}
	a.peers.Store(&peerPlane{node: n, now: a.cfg.Now, down: map[string]time.Time{}, used: map[string]bool{}, paths: map[string]p2p.Path{}})
	a.log.Info("Serving and fetching file chunks peer to peer")
	return n, nil
}

// servePeers runs n until ctx ends, then closes its connections.
func (a *Agent) servePeers(ctx context.Context, n *p2p.Node) error {
	err := n.Serve(ctx)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// peerSource returns the chunk source for device id: Config.Peers, or the
// agent's Node once it runs; nil without either (the coordinator gives
// every chunk).
func (a *Agent) peerSource() func(id string) castore.Source {
	if a.cfg.Peers != nil {
		return a.cfg.Peers
	}
	pp := a.peers.Load()
	if pp == nil {
		return nil
	}
	return func(id string) castore.Source {
		if id == a.c.PeerID() {
			return nil
		}
		return nodeSource{pp, id}
	}
}

// peerStatus returns the data plane's state; nil when it does not run.
func (a *Agent) peerStatus() *PeerStatus {
	pp := a.peers.Load()
	if pp == nil {
		return nil
	}
	s := pp.node.Stats()
	return &PeerStatus{
		Connected: s.DirectConns + s.RelayedConns, Direct: s.DirectConns, Relayed: s.RelayedConns,
		FromPeersBytes: pp.fromPeers.Load(), FromCoordinatorBytes: a.c.chunkBytes.Load(),
		SentBytes: s.DirectSentBytes + s.RelayedSentBytes,
		UploadCap: a.uploadCap(),
	}
}

// uploadCap is the data plane's upload cap now, bytes per second; 0 for
// none.
func (a *Agent) uploadCap() int64 {
	if a.cfg.P2P.Upload == nil {
		return 0
	}
	return a.cfg.P2P.Upload.BytesPerSecond()
}

// nodeSource is one peer device as a castore.Source, over the agent's
// Node. The Node checks every chunk against its digest; a peer that sends
// other bytes fails the fetch, and the fetcher avoids it.
type nodeSource struct {
	pp   *peerPlane
	peer string
}

func (s nodeSource) ID() string { return s.peer }

// path is how the connection to the peer carries bytes now, or carried
// them when last seen open (it may close right after a chunk came);
// p2p.PathUnknown when none was ever seen.
func (s nodeSource) path() p2p.Path {
	s.pp.mu.Lock()
	defer s.pp.mu.Unlock()
	for _, c := range s.pp.node.Conns() {
		if c.Peer == s.peer && c.Path != p2p.PathUnknown {
			s.pp.paths[s.peer] = c.Path
		}
	}
	return s.pp.paths[s.peer]
}

func (s nodeSource) Fetch(ctx context.Context, d [32]byte) ([]byte, error) {
	if s.pp.isDown(s.peer) {
		return nil, fmt.Errorf("peer %s: its connection failed less than %v ago", s.peer, peerDownFor)
	}
	b, err := s.pp.node.Fetch(ctx, s.peer, d)
	if err != nil {
		s.pp.failed(s.peer, err)
		return nil, err
	}
	s.pp.fromPeers.Add(int64(len(b)))
	s.pp.mu.Lock()
	s.pp.used[s.peer] = true
	s.pp.mu.Unlock()
	return b, nil
}

// poolShare serves other devices of the pool the chunks this device
// announced to the pool's tracker, and nothing else: the chunks of
// another pool's jobs stay unknown to this pool.
type poolShare struct{ a *Agent }

func (p poolShare) ReadChunk(d [32]byte) ([]byte, error) {
	held := p.a.shared.Load()
	if held == nil || !(*held)[d] {
		return nil, fmt.Errorf("chunk %x: %w", d[:8], fs.ErrNotExist)
	}
	st, err := p.a.cache.ShareStore()
	if err != nil {
		return nil, fmt.Errorf("chunk %x: %w", d[:8], fs.ErrNotExist)
	}
	return st.ReadChunk(d)
}

// loopbackPool reports whether the pool's URL names loopback addresses
// only (127.0.0.0/8, ::1, localhost; every node of a cluster).
func loopbackPool(u string) bool {
	nodes, err := ParsePoolURL(u)
	if err != nil {
		return false
	}
	for _, p := range nodes {
		h := p.Hostname()
		if ip := net.ParseIP(h); h != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return false
		}
	}
	return true
}

// Words says the data plane's state for people: "2 peers connected (2
// direct, 0 relayed); fetched 180 MiB from peers, 2.0 MiB from the
// coordinator; sent 40 MiB", and " (at most 2.0 MiB/s)" under an upload
// cap.
func (s PeerStatus) Words() string {
	w := fmt.Sprintf("%d %s connected (%d direct, %d relayed); fetched %s from peers, %s from the coordinator; sent %s",
		s.Connected, pluralWord(s.Connected, "peer"), s.Direct, s.Relayed,
		ByteSize(s.FromPeersBytes), ByteSize(s.FromCoordinatorBytes), ByteSize(int64(s.SentBytes)))
	if s.UploadCap > 0 {
		w += fmt.Sprintf(" (at most %s/s)", ByteSize(s.UploadCap))
	}
	return w
}

// TransferWords says for people how a job's devices fetched its files
// (pool.JobTransfer): "3 of 4 peers direct, 1 relayed; 180 MiB direct,
// 10 MiB relayed, 2.0 MiB from the coordinator". A device that got
// nothing from peers counts as "from the coordinator only".
func TransferWords(t pool.JobTransfer) string {
	s := fmt.Sprintf("%d of %d %s direct, %d relayed", t.Direct, t.Devices, pluralWord(t.Devices, "peer"), t.Relayed)
	if t.CoordinatorOnly > 0 {
		s += fmt.Sprintf(", %d from the coordinator only", t.CoordinatorOnly)
	}
	return s + fmt.Sprintf("; %s direct, %s relayed, %s from the coordinator",
		ByteSize(t.Bytes.Direct), ByteSize(t.Bytes.Relayed), ByteSize(t.Bytes.Coordinator))
}
