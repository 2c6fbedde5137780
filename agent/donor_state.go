package agent

import "time"

// PoolState is one pool of a Donor in its status: what the agent for it
// is doing, or why there is none.
type PoolState struct {
	// URL is the pool's URL as the donor gave it.
	URL string `json:"url"`
	// Name is the pool's name as it reports it; "" until joined.
	Name string `json:"name,omitempty"`
	// Slots is how many of the donor's workers the pool's agent has (the
	// pools share them by weight); 0 while it has none.
	Slots int `json:"slots"`
	// Running is how many of the pool's tasks this machine holds now.
	Running int `json:"running"`
	// Error says why no agent computes for the pool now (it is retried),
	// e.g. "cannot reach the pool: connection refused"; "" when one does.
	Error string `json:"error,omitempty"`
	// ClockOffsetMS, ClockRefused and UnreachableSince are the pool's
	// agent's (see AgentStatus).
	ClockOffsetMS    int64     `json:"clockOffsetMs,omitempty"`
	ClockRefused     bool      `json:"clockRefused,omitempty"`
	UnreachableSince time.Time `json:"unreachableSince,omitzero"`
	// Peers is the pool's agent's peer-to-peer data plane; nil when it
	// runs none (share_peers=false, an older coordinator).
	Peers *PeerStatus `json:"peers,omitempty"`
}
