package p2p

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"time"

	"github.com/pion/webrtc/v4"
)

// ChunkReader gives the bytes of a chunk by its SHA-256 digest. The Node
// serves other peers' requests from it. ReadChunk returns an error
// wrapping fs.ErrNotExist when it does not hold the chunk; it must be safe
// for concurrent use.
type ChunkReader interface {
	ReadChunk(digest [32]byte) ([]byte, error)
}

// The chunk protocol on a data channel (RATIONALE.md, "Peer-to-peer
// data plane"). Every message is binary:
//
//	request:  'q' id[4] digest[32]
//	response: 'r' id[4] status[1] last[1] payload
//
// id is the requester's number for the request, big-endian. A response
// travels as one or more frames of at most Config.FrameBytes, all on the
// channel the request came on, the final one with last=1. A side may have
// at most maxInFlight requests open per channel.
const (
	msgRequest   = 'q'
	msgResponse  = 'r'
	requestLen   = 1 + 4 + 32
	responseHead = 1 + 4 + 1 + 1

	statusOK       = 0
	statusNotFound = 1
	statusError    = 2
	statusTooLarge = 3
)

// channel is one data channel of a connection, both a client (requests we
// sent) and a server (requests the peer sent).
type channel struct {
	c        *conn
	dc       *webrtc.DataChannel
	low      chan struct{} // a signal from OnBufferedAmountLow
	inflight chan struct{} // our open requests (semaphore)
	reqs     chan request  // the peer's requests, for serve

	sendMu  sync.Mutex
	mu      sync.Mutex
	pending map[uint32]*call
}

type request struct {
	id     uint32
	digest [32]byte
	at     time.Time // when it arrived
}

// call is one of our requests waiting for its answer.
type call struct {
	buf    []byte
	status byte
	err    error
	done   chan struct{}
}

func newChannel(c *conn, dc *webrtc.DataChannel) *channel {
	ch := &channel{c: c, dc: dc, low: make(chan struct{}, 1), inflight: make(chan struct{}, maxInFlight),
		reqs: make(chan request, 2*maxInFlight), pending: make(map[uint32]*call)}
	dc.SetBufferedAmountLowThreshold(lowWaterBytes)
	dc.OnBufferedAmountLow(func() {
		select {
		case ch.low <- struct{}{}:
		default:
		}
	})
	dc.OnOpen(c.channelOpened)
	dc.OnClose(func() { c.close(c.fail(fmt.Errorf("%w: data channel %s closed", ErrClosed, dc.Label()))) })
	dc.OnMessage(ch.receive)
	return ch
}

// send sends one message, first waiting while the channel buffers more
// than highWaterBytes (back-pressure: nothing queues without bound).
func (ch *channel) send(ctx context.Context, b []byte) error {
	ch.sendMu.Lock()
	defer ch.sendMu.Unlock()
	for ch.dc.BufferedAmount() > highWaterBytes {
		select {
		case <-ch.low:
		case <-ch.c.closed:
			return ch.c.closeErr()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := ch.dc.Send(b); err != nil {
		return ch.c.fail(fmt.Errorf("send: %w", err))
	}
	ch.c.n.stats.sent(ch.c.infoNow().Path, len(b))
	return nil
}

// receive handles one message from the peer. It never blocks: a request
// is queued for serve (a peer over its in-flight limit is dropped) and a
// response frame is appended to its call.
func (ch *channel) receive(msg webrtc.DataChannelMessage) { ch.receiveBytes(msg.Data, msg.IsString) }

func (ch *channel) receiveBytes(b []byte, isString bool) {
	c := ch.c
	c.n.stats.received(c.infoNow().Path, len(b))
	if isString || len(b) == 0 {
		c.close(c.fail(fmt.Errorf("%w: text message", ErrProtocol)))
		return
	}
	switch b[0] {
	case msgRequest:
		if len(b) != requestLen {
			c.close(c.fail(fmt.Errorf("%w: request of %d bytes", ErrProtocol, len(b))))
			return
		}
		r := request{id: binary.BigEndian.Uint32(b[1:5]), at: time.Now()}
		copy(r.digest[:], b[5:])
		select {
		case ch.reqs <- r:
		default:
			c.close(c.fail(fmt.Errorf("%w: more than %d requests open on one channel", ErrProtocol, maxInFlight)))
		}
	case msgResponse:
		if len(b) < responseHead {
			c.close(c.fail(fmt.Errorf("%w: response of %d bytes", ErrProtocol, len(b))))
			return
		}
		id, status, last := binary.BigEndian.Uint32(b[1:5]), b[5], b[6] == 1
		ch.mu.Lock()
		cl := ch.pending[id]
		if cl == nil {
			ch.mu.Unlock()
			return // the answer to a request we gave up on
		}
		cl.status = status
		if len(cl.buf)+len(b)-responseHead > c.n.cfg.MaxChunkBytes {
			cl.err = c.fail(fmt.Errorf("%w: chunk over %d bytes", ErrTooLarge, c.n.cfg.MaxChunkBytes))
			cl.buf, last = nil, true
		} else {
			cl.buf = append(cl.buf, b[responseHead:]...)
		}
		if last {
			delete(ch.pending, id)
			close(cl.done)
		}
		ch.mu.Unlock()
	default:
		c.close(c.fail(fmt.Errorf("%w: unknown message type %#x", ErrProtocol, b[0])))
	}
}

// serve answers the peer's requests on this channel until the connection
// closes.
func (ch *channel) serve() {
	c := ch.c
	// send gives up when the connection closes, and so does a wait for
	// the upload cap.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-c.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		select {
		case <-c.closed:
			return
		case r := <-ch.reqs:
			if err := ch.answer(ctx, r); err != nil {
				if c.closeErr() == nil {
					c.close(err)
				}
				return
			}
		}
	}
}

// answer reads the chunk and sends it in frames. A request that waited
// longer than Config.RequestTimeout (behind others, under an upload cap)
// is not answered: its asker gave up on it, and sending it would spend
// the cap on bytes nobody reads.
func (ch *channel) answer(ctx context.Context, r request) error {
	n := ch.c.n
	if time.Since(r.at) > n.cfg.RequestTimeout {
		return nil
	}
	var data []byte
	status := byte(statusOK)
	if n.cfg.Chunks == nil {
		status = statusNotFound
	} else {
		var err error
		data, err = n.cfg.Chunks.ReadChunk(r.digest)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			status, data = statusNotFound, nil
		case err != nil:
			n.cfg.Logger.Warn("Cannot read a chunk a peer asked for", "peer", ch.c.peer, "digest", fmt.Sprintf("%x", r.digest), "err", err)
			status, data = statusError, nil
		case len(data) > n.cfg.MaxChunkBytes:
			status, data = statusTooLarge, nil
		}
	}
	max := n.cfg.FrameBytes - responseHead
	for first := true; first || len(data) > 0; first = false {
		part := data[:min(len(data), max)]
		data = data[len(part):]
		frame := make([]byte, responseHead, responseHead+len(part))
		frame[0] = msgResponse
		binary.BigEndian.PutUint32(frame[1:5], r.id)
		frame[5] = status
		if len(data) == 0 {
			frame[6] = 1
		}
		frame = append(frame, part...)
		if err := n.cfg.Upload.wait(ctx, len(frame)); err != nil {
			if cerr := ch.c.closeErr(); cerr != nil {
				return cerr
			}
			return fmt.Errorf("upload cap: %w", err)
		}
		if err := ch.send(ctx, frame); err != nil {
			return err
		}
	}
	return nil
}

// Fetch asks the device peer for the chunk named digest (SHA-256),
// connecting first if needed, and returns its bytes once their SHA-256 is
// digest. Errors: one wrapping fs.ErrNotExist when the peer does not hold
// the chunk; a *PeerError wrapping ErrWrongChunk when the peer sent other
// bytes (avoid that peer), ErrTooLarge, ErrProtocol or ErrClosed; the
// errors of Connect; or ctx's. The request is bounded by
// Config.RequestTimeout once connected.
func (n *Node) Fetch(ctx context.Context, peer string, digest [32]byte) ([]byte, error) {
	c, err := n.connect(ctx, peer)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.RequestTimeout)
	defer cancel()
	ch := c.chans[int(c.rr.Add(1))%len(c.chans)]
	select {
	case ch.inflight <- struct{}{}:
	case <-c.closed:
		return nil, c.closeErr()
	case <-ctx.Done():
		return nil, fmt.Errorf("fetch chunk %x from peer %s: %w", digest, peer, ctx.Err())
	}
	defer func() { <-ch.inflight }()
	id := c.nextID.Add(1)
	cl := &call{done: make(chan struct{})}
	ch.mu.Lock()
	ch.pending[id] = cl
	ch.mu.Unlock()
	forget := func() {
		ch.mu.Lock()
		delete(ch.pending, id)
		ch.mu.Unlock()
	}
	req := make([]byte, requestLen)
	req[0] = msgRequest
	binary.BigEndian.PutUint32(req[1:5], id)
	copy(req[5:], digest[:])
	if err := ch.send(ctx, req); err != nil {
		forget()
		return nil, err
	}
	select {
	case <-cl.done:
	case <-c.closed:
		forget()
		return nil, c.closeErr()
	case <-ctx.Done():
		forget()
		return nil, fmt.Errorf("fetch chunk %x from peer %s: %w", digest, peer, ctx.Err())
	}
	if cl.err != nil {
		return nil, cl.err
	}
	switch cl.status {
	case statusOK:
	case statusNotFound:
		return nil, fmt.Errorf("peer %s has no chunk %x: %w", peer, digest, fs.ErrNotExist)
	case statusTooLarge:
		return nil, &PeerError{Peer: peer, Err: fmt.Errorf("%w: chunk %x is over the limit", ErrTooLarge, digest)}
	case statusError:
		return nil, &PeerError{Peer: peer, Err: fmt.Errorf("the peer cannot read chunk %x now", digest)}
	default:
		c.close(c.fail(fmt.Errorf("%w: unknown status %d", ErrProtocol, cl.status)))
		return nil, &PeerError{Peer: peer, Err: fmt.Errorf("%w: unknown status %d", ErrProtocol, cl.status)}
	}
	if sha256.Sum256(cl.buf) != digest {
		return nil, &PeerError{Peer: peer, Err: fmt.Errorf("%w: asked for %x, got %d bytes of %x", ErrWrongChunk, digest, len(cl.buf), sha256.Sum256(cl.buf))}
	}
	return cl.buf, nil
}
