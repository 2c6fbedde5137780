package api

import (
	"time"

	"idlepool/p2p"
)

// DefaultSignalWait is how long GET /v1/signals waits for a signal before
// it answers none, when the request gives no "waitMs".
const DefaultSignalWait = 25 * time.Second

// SignalsAnswer is the answer of GET /v1/signals: the signals for the
// caller, oldest first, each with FromKey set to its sender's registered
// key. Each is delivered once.
type SignalsAnswer struct {
	Signals []p2p.Signal `json:"signals"`
}

// ICEAnswer is the answer of GET /v1/ice: the ICE servers for the
// caller's next connection (none when the pool runs no relay), with TURN
// credentials valid for a new allocation until Expires.
type ICEAnswer struct {
	ICEServers []p2p.ICEServer `json:"iceServers"`
	Expires    time.Time       `json:"expires,omitzero"`
}
