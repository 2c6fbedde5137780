package p2p

import "sync/atomic"

// Path says how a connection's bytes travel.
type Path string

// Paths of a connection.
const (
	// PathDirect: the selected ICE candidate pair is host, server
	// reflexive or peer reflexive on both ends: device to device.
	PathDirect Path = "direct"
	// PathRelayed: one end of the selected pair is a relay candidate:
	// the bytes pass through a TURN server.
	PathRelayed Path = "relayed"
	// PathUnknown: no candidate pair is selected (yet).
	PathUnknown Path = ""
)

// ConnInfo describes one open connection.
type ConnInfo struct {
	Peer    string // the peer's device ID
	Offerer bool   // this Node made the offer
	Path    Path
	// LocalType and RemoteType are the ICE candidate types of the
	// selected pair: "host", "srflx", "prflx" or "relay".
	LocalType, RemoteType string
	// LocalAddr and RemoteAddr are the addresses of the selected pair,
	// IP:port.
	LocalAddr, RemoteAddr string
}

// Stats are a Node's counters since it was made. Bytes count data-channel
// messages, headers included; the SCTP, DTLS and TURN overheads are not.
type Stats struct {
	DirectSentBytes, DirectReceivedBytes   uint64
	RelayedSentBytes, RelayedReceivedBytes uint64
	// DirectConns and RelayedConns are the connections open now.
	DirectConns, RelayedConns int
	// DirectConnsTotal and RelayedConnsTotal count every connection that
	// opened.
	DirectConnsTotal, RelayedConnsTotal uint64
}

type counters struct {
	directSent, directReceived, relayedSent, relayedReceived atomic.Uint64
	directOpen, relayedOpen                                  atomic.Int64
	directTotal, relayedTotal                                atomic.Uint64
}

func (s *counters) sent(p Path, n int) {
	if p == PathRelayed {
		s.relayedSent.Add(uint64(n))
	} else {
		s.directSent.Add(uint64(n))
	}
}

func (s *counters) received(p Path, n int) {
	if p == PathRelayed {
		s.relayedReceived.Add(uint64(n))
	} else {
		s.directReceived.Add(uint64(n))
	}
}

func (s *counters) opened(p Path) {
	if p == PathRelayed {
		s.relayedOpen.Add(1)
		s.relayedTotal.Add(1)
	} else {
		s.directOpen.Add(1)
		s.directTotal.Add(1)
	}
}

// moved moves an open connection from one path to another (its path
// became known better after it opened).
func (s *counters) moved(from, to Path) {
	s.closed(from)
	if from == PathRelayed {
		s.relayedTotal.Add(^uint64(0))
	} else {
		s.directTotal.Add(^uint64(0))
	}
	s.opened(to)
}

func (s *counters) closed(p Path) {
	if p == PathRelayed {
		s.relayedOpen.Add(-1)
	} else {
		s.directOpen.Add(-1)
	}
}

// Stats returns the Node's counters; safe for concurrent use.
func (n *Node) Stats() Stats {
	s := &n.stats
	return Stats{
		DirectSentBytes: s.directSent.Load(), DirectReceivedBytes: s.directReceived.Load(),
		RelayedSentBytes: s.relayedSent.Load(), RelayedReceivedBytes: s.relayedReceived.Load(),
		DirectConns: int(s.directOpen.Load()), RelayedConns: int(s.relayedOpen.Load()),
		DirectConnsTotal: s.directTotal.Load(), RelayedConnsTotal: s.relayedTotal.Load(),
	}
}

// Conns returns the open connections, in no particular order.
func (n *Node) Conns() []ConnInfo {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []ConnInfo
	for _, c := range n.conns {
		if c.isReadyNow() {
			out = append(out, c.infoNow())
		}
	}
	return out
}
