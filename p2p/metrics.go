package p2p

import "github.com/prometheus/client_golang/prometheus"

// Collectors returns Prometheus collectors of the Node's Stats, for a
// /metrics page: idlepool_p2p_sent_bytes_total and
// idlepool_p2p_received_bytes_total (data-channel bytes), and
// idlepool_p2p_connections (open now), each with a constant label path
// of "direct" or "relayed". Register them once per Node.
func (n *Node) Collectors() []prometheus.Collector {
	var out []prometheus.Collector
	for _, p := range []Path{PathDirect, PathRelayed} {
		labels := prometheus.Labels{"path": string(p)}
		relayed := p == PathRelayed
		pick := func(direct, relay uint64) float64 {
			if relayed {
				return float64(relay)
			}
			return float64(direct)
		}
		out = append(out,
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "idlepool_p2p_sent_bytes_total", ConstLabels: labels,
				Help: "Bytes sent to peers over data channels, by path (direct or relayed through TURN)."},
				func() float64 { s := n.Stats(); return pick(s.DirectSentBytes, s.RelayedSentBytes) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "idlepool_p2p_received_bytes_total", ConstLabels: labels,
				Help: "Bytes received from peers over data channels, by path (direct or relayed through TURN)."},
				func() float64 { s := n.Stats(); return pick(s.DirectReceivedBytes, s.RelayedReceivedBytes) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "idlepool_p2p_connections", ConstLabels: labels,
				Help: "Peer connections open now, by path."},
				func() float64 { s := n.Stats(); return pick(uint64(s.DirectConns), uint64(s.RelayedConns)) }),
		)
	}
	return out
}
