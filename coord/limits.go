package coord

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
)

// What a client may hold: body bytes in memory and in temporary files
// (budget), the time a body may take (slowBody), and connections
// (connLimiter, in conns.go). docs/api.md, "Limits", describes them for
// clients; Config describes the settings.

// errBusy marks a request refused because the coordinator holds as many
// body bytes as its limits allow (answered 503, retry later).
var errBusy = errors.New("coord: too many request bodies in flight")

// spoolDir is the directory under Config.DataDir where bodies not yet
// authenticated are kept while they arrive.
const spoolDir = "spool"

// budget is a bound on bytes held at once (in memory or on disk), shared
// by all requests. Safe for concurrent use.
type budget struct {
	what string // for messages: "memory", "temporary files"
	sem  *semaphore.Weighted
	max  int64
	used atomic.Int64 // what is taken now, for metrics and tests
}

func newBudget(what string, max int64) *budget {
	return &budget{what: what, sem: semaphore.NewWeighted(max), max: max}
}

// take takes n bytes without waiting; it fails with errBusy when they are
// not free. n is at most b.max (the caller bounds bodies by it).
func (b *budget) take(n int64) error {
	if n <= 0 {
		return nil
	}
	if !b.sem.TryAcquire(n) {
		return fmt.Errorf("%w: %d bytes of %s wanted, %d of %d in use", errBusy, n, b.what, b.used.Load(), b.max)
	}
	b.used.Add(n)
	return nil
}

// wait takes n bytes, waiting for them until ctx ends (errBusy then).
func (b *budget) wait(ctx context.Context, n int64) error {
	if n <= 0 {
		return nil
	}
	if err := b.sem.Acquire(ctx, n); err != nil {
		return fmt.Errorf("%w: %d bytes of %s wanted, %d of %d in use: %w", errBusy, n, b.what, b.used.Load(), b.max, err)
	}
	b.used.Add(n)
	return nil
}

// give returns n bytes taken with take or wait.
func (b *budget) give(n int64) {
	if n <= 0 {
		return
	}
	b.used.Add(-n)
	b.sem.Release(n)
}

// reqBody is a request body read in full: its bytes (in memory once
// authenticated) and its SHA-256, which the request's signature covers.
// release returns what the body holds to the budgets; call it once, after
// the handler is done with data.
type reqBody struct {
	data []byte
	sum  [32]byte

	spool      *os.File // the body's bytes past memBytes, until loaded
	spoolBytes int64    // taken from the spool budget
	memBytes   int64    // taken from the memory budget
	s          *Server
}

func (b *reqBody) release() {
	if b.spool != nil {
		b.spool.Close()
		os.Remove(b.spool.Name())
		b.spool = nil
	}
	b.s.spool.give(b.spoolBytes)
	b.s.bodyMem.give(b.memBytes)
	b.spoolBytes, b.memBytes, b.data = 0, 0, nil
}

// routeLimit is the largest body a route takes, bounded by what memory
// may hold at once (a handler needs the whole body).
func (s *Server) routeLimit(limit int64) int64 { return min(limit, s.cfg.MaxBodyMemory) }

// receiveBody reads r's body (at most limit bytes: else a 413) while
// hashing it, keeping up to Config.BodyInMemory bytes in memory and the
// rest in a temporary file, so that a body whose signature has not been
// checked holds little memory however large it is. The caller checks the
// signature over the returned sum, then calls load for the bytes. A body
// that would pass the budgets is errBusy (503); one that arrives too
// slowly is cut off by slowBody. On error nothing is held.
func (s *Server) receiveBody(w http.ResponseWriter, r *http.Request, limit int64) (_ *reqBody, err error) {
	limit = s.routeLimit(limit)
	if r.ContentLength > limit {
		return nil, &http.MaxBytesError{Limit: limit}
	}
	expect := limit // the most this body may be
	if r.ContentLength >= 0 {
		expect = r.ContentLength
	}
	b := &reqBody{s: s}
	defer func() {
		if err != nil {
			b.release()
		}
	}()
	inMem := min(expect, s.cfg.BodyInMemory)
	if err := s.bodyMem.take(inMem); err != nil {
		return nil, err
	}
	b.memBytes = inMem
	h := sha256.New()
	src := io.TeeReader(http.MaxBytesReader(w, r.Body, limit), h)
	var buf bytes.Buffer
	buf.Grow(int(min(inMem, 64<<10)))
	n, err := io.Copy(&buf, io.LimitReader(src, inMem))
	if err != nil {
		return nil, bodyErr(err)
	}
	if n == inMem && expect > inMem {
		if err := s.spoolRest(b, &buf, src, expect); err != nil {
			return nil, err
		}
	} else if n == inMem {
		// A body of exactly the length declared (or of the limit): check
		// that nothing follows.
		var one [1]byte
		if m, err := io.ReadFull(src, one[:]); m > 0 || err != nil && !errors.Is(err, io.EOF) {
			if err == nil {
				err = &http.MaxBytesError{Limit: limit}
			}
			return nil, bodyErr(err)
		}
	}
	if b.spool == nil {
		b.data = buf.Bytes()
	}
	copy(b.sum[:], h.Sum(nil))
	return b, nil
}

// spoolRest writes what is in buf, then the rest of src, to a temporary
// file, taking expect bytes less what memory holds from the spool budget.
func (s *Server) spoolRest(b *reqBody, buf *bytes.Buffer, src io.Reader, expect int64) error {
	if err := s.spool.take(expect - b.memBytes); err != nil {
		return err
	}
	b.spoolBytes = expect - b.memBytes
	f, err := os.CreateTemp(s.spoolDir, "body-*")
	if err != nil {
		return fmt.Errorf("spool request body: %w", err)
	}
	b.spool = f
	if _, err := f.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("spool request body: %w", err)
	}
	// The memory kept for the first bytes is free again until load.
	buf.Reset()
	s.bodyMem.give(b.memBytes)
	b.memBytes = 0
	if _, err := io.Copy(f, src); err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return fmt.Errorf("spool request body: %w", err)
		}
		return bodyErr(err)
	}
	return nil
}

// load returns the body's bytes, reading a spooled body into memory once
// the request is authenticated. Memory for it is waited for while ctx
// lasts (errBusy after).
func (b *reqBody) load(ctx context.Context) ([]byte, error) {
	if b.spool == nil {
		return b.data, nil
	}
	st, err := b.spool.Stat()
	if err != nil {
		return nil, fmt.Errorf("read spooled body: %w", err)
	}
	if err := b.s.bodyMem.wait(ctx, st.Size()); err != nil {
		return nil, err
	}
	b.memBytes = st.Size()
	data := make([]byte, st.Size())
	if _, err := b.spool.ReadAt(data, 0); err != nil {
		return nil, fmt.Errorf("read spooled body: %w", err)
	}
	b.spool.Close()
	os.Remove(b.spool.Name())
	b.spool = nil
	b.s.spool.give(b.spoolBytes)
	b.spoolBytes = 0
	b.data = data
	return data, nil
}

// bodyErr classifies a failure to read a body: over the limit stays a
// *http.MaxBytesError (413); one cut off for arriving too slowly is a 408
// (slowBody); anything else (a client that went away) is a 400.
func bodyErr(err error) error {
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return err
	case errors.Is(err, os.ErrDeadlineExceeded):
		return &apiError{http.StatusRequestTimeout, "too_slow",
			"the request body arrived too slowly (see docs/api.md, \"Limits\"): the connection is closed", nil}
	}
	return badRequest("read request body: %v", err)
}

// cleanSpool creates the spool directory and removes what a crash left in
// it.
func cleanSpool(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create spool directory: %w", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("clean spool directory: %w", err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "body-") {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return fmt.Errorf("clean spool directory: %w", err)
			}
		}
	}
	return nil
}

// pace is the deadline of a transfer that must go at rate bytes per
// second on average after a grace, and never pause for longer than the
// grace (Config.MinBodyRate, BodyTimeout): the earlier of start + grace +
// n/rate and the last progress + grace. It only moves forward, in steps
// of a second, or a quarter of the grace if less (fewer deadline calls).
type pace struct {
	start    time.Time
	grace    time.Duration
	rate     int64
	n        int64     // bytes moved so far
	deadline time.Time // the deadline set last
}

// next counts more bytes moved, the transfer of pending bytes being about
// to start, and returns the deadline to set and whether it moved.
func (p *pace) next(more, pending int64) (time.Time, bool) {
	p.n += more
	d := p.start.Add(p.grace + p.time(p.n+pending))
	if stall := time.Now().Add(p.grace + p.time(pending)); stall.Before(d) {
		d = stall
	}
	if p.deadline.IsZero() || d.Sub(p.deadline) >= min(time.Second, p.grace/4) {
		p.deadline = d
		return d, true
	}
	return p.deadline, false
}

// time is how long n bytes take at the rate.
func (p *pace) time(n int64) time.Duration {
	return time.Duration(float64(n) / float64(p.rate) * float64(time.Second))
}

// slowBody wraps a request body so that it arrives at the pace of
// Config.MinBodyRate and BodyTimeout: the connection's read deadline
// follows the pace as bytes arrive. A client that trickles a body, or
// sends a burst and stalls, is cut off at the deadline (its reads fail,
// the connection closes). While a read waits, the connection counts as
// slow, so that connLimiter may close it for a newcomer.
type slowBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	conn *trackedConn // nil for a listener that is not a connLimiter
	pace pace
	done bool
}

func (b *slowBody) Read(p []byte) (int, error) {
	if b.conn != nil {
		b.conn.setReading(true)
		defer b.conn.setReading(false)
	}
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		// At the body's end the server clears the deadline itself for
		// its background read; leave it so.
		b.done = true
		return n, err
	}
	if !b.done {
		b.extend(int64(n))
	}
	return n, err
}

// extend counts n bytes received and moves the read deadline.
func (b *slowBody) extend(n int64) {
	if d, ok := b.pace.next(n, 0); ok {
		b.rc.SetReadDeadline(d)
	}
}

// slowWriter wraps a response so that a client reads it at the pace of
// Config.MinBodyRate and BodyTimeout, from the first byte written: the
// connection's write deadline follows the pace before each write, so a
// client that stops reading a large answer (a blob, the ledger) is cut
// off instead of holding its connection.
type slowWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	pace    pace
	started bool
	last    int64
}

func (w *slowWriter) Write(p []byte) (int, error) {
	if !w.started {
		w.started = true
		w.pace.start = time.Now()
	}
	if d, ok := w.pace.next(w.last, int64(len(p))); ok {
		w.rc.SetWriteDeadline(d)
	}
	n, err := w.ResponseWriter.Write(p)
	w.last = int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *slowWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
