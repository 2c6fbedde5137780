package p2p

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"sync"
	"time"

	"idlepool/identity"
)

// hub is an in-memory signalling relay that behaves like the
// coordinator's (coord/signal.go): it checks each signal's signature with
// the sender's registered key and its sequence, keeps bounded mailboxes,
// and delivers each signal once with FromKey set. The coordinator's own
// tests cover the HTTP side.
type hub struct {
	mu      sync.Mutex
	keys    map[string]ed25519.PublicKey
	boxes   map[string][]Signal
	wake    map[string]chan struct{}
	lastSeq map[string]uint64
	servers func(id string) []ICEServer
	sent    []Signal        // every signal accepted, for tests that replay one
	offline map[string]bool // devices no longer listening: signals to them are refused
}

func newHub() *hub {
	return &hub{keys: map[string]ed25519.PublicKey{}, boxes: map[string][]Signal{},
		wake: map[string]chan struct{}{}, lastSeq: map[string]uint64{}}
}

// endpoint registers key and returns its Signaller.
func (h *hub) endpoint(key *identity.Key) Signaller {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.keys[key.ID()] = key.Public()
	h.wake[key.ID()] = make(chan struct{}, 1)
	return &hubEnd{h: h, id: key.ID()}
}

func (h *hub) post(from string, s Signal) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.From != from {
		return fmt.Errorf("%w: from %s posted by %s", ErrBadSignal, s.From, from)
	}
	if err := s.Check(); err != nil {
		return err
	}
	if err := s.Verify(h.keys[s.From]); err != nil {
		return err
	}
	if s.Seq <= h.lastSeq[s.From] {
		return ErrReplay
	}
	h.lastSeq[s.From] = s.Seq
	if _, ok := h.keys[s.To]; !ok {
		return fmt.Errorf("unknown device %s", s.To)
	}
	if h.offline[s.To] {
		return fmt.Errorf("%w: %s stopped listening", ErrPeerOffline, s.To)
	}
	if len(h.boxes[s.To]) >= 256 {
		return fmt.Errorf("mailbox of %s full", s.To)
	}
	s.FromKey = h.keys[s.From]
	h.boxes[s.To] = append(h.boxes[s.To], s)
	h.sent = append(h.sent, s)
	select {
	case h.wake[s.To] <- struct{}{}:
	default:
	}
	return nil
}

type hubEnd struct {
	h  *hub
	id string
}

func (e *hubEnd) Send(_ context.Context, s Signal) error { return e.h.post(e.id, s) }

func (e *hubEnd) Receive(ctx context.Context) ([]Signal, error) {
	t := time.NewTimer(25 * time.Second)
	defer t.Stop()
	for {
		e.h.mu.Lock()
		box := e.h.boxes[e.id]
		delete(e.h.boxes, e.id)
		wake := e.h.wake[e.id]
		e.h.mu.Unlock()
		if len(box) > 0 {
			return box, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
			return nil, nil
		case <-wake:
		}
	}
}

func (e *hubEnd) ICEServers(context.Context) ([]ICEServer, error) {
	e.h.mu.Lock()
	f := e.h.servers
	e.h.mu.Unlock()
	if f == nil {
		return nil, nil
	}
	return f(e.id), nil
}
