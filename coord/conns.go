package coord

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// connLimiter is a listener that holds at most max client connections, so
// that the coordinator stays under its file limit. A connection accepted
// at the bound makes room by closing another: of the connections waiting
// for a request (idle, or still sending headers) or whose handler waits
// for body bytes, the one that has waited longest (since its request
// began, or since it became idle or was accepted); a request being handled
// is never cut. When every connection is handling a request, the newcomer
// is answered 503 and closed. So a flood of slow or idle connections
// cannot keep /healthz and well-behaved peers out: each newcomer
// displaces the oldest of them, and is itself the last to go.
type connLimiter struct {
	net.Listener
	max int
	log *slog.Logger

	mu    sync.Mutex
	conns map[*trackedConn]struct{}

	shed    atomic.Int64 // connections closed to make room
	refused atomic.Int64 // newcomers refused because all were busy
}

func newConnLimiter(ln net.Listener, max int, log *slog.Logger) *connLimiter {
	return &connLimiter{Listener: ln, max: max, log: log, conns: make(map[*trackedConn]struct{}, max)}
}

// States of a tracked connection.
const (
	connWaiting int32 = iota // waiting for a request's headers (new or idle)
	connBusy                 // a request is being handled
	connGone                 // closed or hijacked
)

// trackedConn is a connection connLimiter counts.
type trackedConn struct {
	net.Conn
	l       *connLimiter
	state   atomic.Int32
	reading atomic.Bool  // the handler waits for body bytes
	since   atomic.Int64 // unix nanoseconds when the state began
	once    sync.Once
}

// Accept returns the next connection, making room for it first when the
// limiter is full.
func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		var victim *trackedConn
		if len(l.conns) >= l.max {
			victim = l.victim()
			if victim == nil {
				l.mu.Unlock()
				l.refused.Add(1)
				go refuse(c)
				continue
			}
			delete(l.conns, victim)
		}
		tc := &trackedConn{Conn: c, l: l}
		tc.since.Store(time.Now().UnixNano())
		l.conns[tc] = struct{}{}
		l.mu.Unlock()
		if victim != nil {
			l.shed.Add(1)
			l.log.Debug("Connection closed to make room", "remote", victim.RemoteAddr().String(), "limit", l.max)
			victim.state.Store(connGone)
			victim.Conn.Close()
		}
		return tc, nil
	}
}

// victim picks the connection to close for a newcomer: of those waiting
// for a request (idle, or still sending headers) or waiting for a body,
// the one that has waited longest; nil when every connection is handling
// a request. A newcomer is thus the last to go. l.mu is held.
func (l *connLimiter) victim() *trackedConn {
	var v *trackedConn
	for c := range l.conns {
		st := c.state.Load()
		if st == connWaiting || st == connBusy && c.reading.Load() {
			if v == nil || c.since.Load() < v.since.Load() {
				v = c
			}
		}
	}
	return v
}

// refuse answers a connection that found no room 503 and closes it.
func refuse(c net.Conn) {
	const body = `{"error":"the coordinator is at its connection limit and every connection is busy: retry later","code":"busy"}` + "\n"
	c.SetDeadline(time.Now().Add(time.Second))
	fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	c.Close()
}

// count returns how many connections are open.
func (l *connLimiter) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

// forget stops counting c.
func (c *trackedConn) forget() {
	c.once.Do(func() {
		c.state.Store(connGone)
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
	})
}

// Close closes the connection and stops counting it.
func (c *trackedConn) Close() error {
	c.forget()
	return c.Conn.Close()
}

// setReading marks whether the handler waits for body bytes.
func (c *trackedConn) setReading(on bool) { c.reading.Store(on) }

// connState follows the server's view of each connection
// (http.Server.ConnState).
func (l *connLimiter) connState(nc net.Conn, st http.ConnState) {
	c, ok := nc.(*trackedConn)
	if !ok {
		return
	}
	switch st {
	case http.StateNew, http.StateIdle:
		c.setState(connWaiting)
	case http.StateActive:
		c.setState(connBusy)
	case http.StateHijacked, http.StateClosed:
		c.forget()
	}
}

func (c *trackedConn) setState(st int32) {
	for {
		old := c.state.Load()
		if old == connGone {
			return
		}
		if c.state.CompareAndSwap(old, st) {
			c.since.Store(time.Now().UnixNano())
			return
		}
	}
}

// connKey is the context key of a request's *trackedConn.
type connKey struct{}

// connContext records the connection in its requests' contexts
// (http.Server.ConnContext).
func connContext(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*trackedConn); ok {
		return context.WithValue(ctx, connKey{}, tc)
	}
	return ctx
}

// connOf returns the request's tracked connection, or nil.
func connOf(ctx context.Context) *trackedConn {
	tc, _ := ctx.Value(connKey{}).(*trackedConn)
	return tc
}
