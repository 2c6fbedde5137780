package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"idlepool/home"
	"idlepool/pool"
	"idlepool/store"
)

// StoreStatus is the local store's state in AgentStatus: whether results
// can be recorded, and what was done with a damaged store at start.
type StoreStatus struct {
	// Problem is "" while the store takes writes; otherwise "disk full",
	// "locked" (another process holds its write lock), "damaged" or
	// "failing". While there is one the agent leases no new task.
	Problem string `json:"problem,omitempty"`
	// Message says so for people, e.g. "paused: disk full, 0 B free on
	// /home/ann/.local/share/idlepool"; "" without a Problem.
	Message string `json:"message,omitempty"`
	// Since is when the problem began.
	Since time.Time `json:"since,omitzero"`
	// Held counts the results computed and kept in memory until the
	// store takes them (they are sent to the pool meanwhile).
	Held int `json:"held,omitempty"`
	// Recovered says what was done at start with a damaged store (it was
	// moved aside and a new one started); "" when nothing was.
	Recovered string `json:"recovered,omitempty"`
}

// storeHealth is whether the local store takes writes, as the agents of
// one donor see it (they share one). Its methods are safe for concurrent
// use.
type storeHealth struct {
	dir  string // the store's directory, for its free space; "" unknown
	free func(dir string) (uint64, error)
	log  *slog.Logger
	// events is the event log the store's faults go to; nil: none. Set
	// once, before the agents start.
	events *EventLog

	mu        sync.Mutex
	err       error     // the last write's failure; nil while writes work
	since     time.Time // when err began
	recovered string
	ok        chan struct{} // closed when err becomes nil; replaced at each new fault
}

func newStoreHealth(path string, free func(string) (uint64, error), log *slog.Logger) *storeHealth {
	if free == nil {
		free = home.FreeBytes
	}
	h := &storeHealth{free: free, log: log, ok: make(chan struct{})}
	if path != "" {
		h.dir = filepath.Dir(path)
	}
	close(h.ok)
	return h
}

// failed records that a write failed with err.
func (h *storeHealth) failed(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err == nil {
		h.since = time.Now()
		h.ok = make(chan struct{})
		h.log.Warn("The local store takes no writes; no new tasks until it does, results kept in memory",
			"problem", problem(err), "err", err)
		if eerr := h.events.Addf("local store takes no writes (%s): no new tasks until it does", problem(err)); eerr != nil {
			h.log.Warn("Cannot write the event log", "err", eerr)
		}
	}
	h.err = err
}

// worked records that a write worked.
func (h *storeHealth) worked() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		h.log.Info("The local store takes writes again; leasing resumes", "after", time.Since(h.since).Round(time.Millisecond))
		if eerr := h.events.Addf("local store takes writes again (after %s): leasing resumes", time.Since(h.since).Round(time.Second)); eerr != nil {
			h.log.Warn("Cannot write the event log", "err", eerr)
		}
		h.err, h.since = nil, time.Time{}
		close(h.ok)
	}
}

// faulty reports whether the last write failed.
func (h *storeHealth) faulty() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err != nil
}

// waitWritable returns at once while writes work, else when they work
// again (nil) or ctx ends (its error).
func (h *storeHealth) waitWritable(ctx context.Context) error {
	h.mu.Lock()
	ok := h.ok
	h.mu.Unlock()
	select {
	case <-ok:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// status is the store's state for AgentStatus, with held results.
func (h *storeHealth) status(held int) StoreStatus {
	h.mu.Lock()
	err, since, rec := h.err, h.since, h.recovered
	h.mu.Unlock()
	st := StoreStatus{Held: held, Recovered: rec}
	if err == nil {
		return st
	}
	st.Problem, st.Since = problem(err), since
	where := h.dir
	if where == "" {
		where = "this machine"
	}
	switch st.Problem {
	case "disk full":
		if free, ferr := h.free(h.dir); ferr == nil && h.dir != "" {
			st.Message = fmt.Sprintf("paused: disk full, %s free on %s", ByteSize(int64(free)), where)
		} else {
			st.Message = "paused: disk full on " + where
		}
	case "locked":
		st.Message = "paused: the local store in " + where + " is locked by another process"
	case "damaged":
		st.Message = "paused: the local store in " + where + " is damaged; quit and start idlepool again to move it aside and start a new one"
	default:
		st.Message = fmt.Sprintf("paused: the local store in %s cannot be written (%v)", where, err)
	}
	if held > 0 {
		st.Message += fmt.Sprintf("; %s kept in memory", plural(int64(held), "result"))
	}
	return st
}

// problem names the kind of a store failure in StoreStatus.Problem.
func problem(err error) string {
	switch {
	case errors.Is(err, store.ErrFull):
		return "disk full"
	case errors.Is(err, store.ErrBusy):
		return "locked"
	case errors.Is(err, store.ErrCorrupt):
		return "damaged"
	}
	return "failing"
}

// heldResult is a computed result the store has not fully recorded yet:
// not added (stored false), or added but the coordinator's answer not
// recorded (sent true). The agent keeps it in memory, sends it from
// there, and records it when the store takes writes again.
type heldResult struct {
	c      store.Contribution
	stored bool   // AddPending has succeeded
	sent   bool   // the coordinator has it (accepted, or refused for good)
	reason string // why it is rejected when sent; "" when it is not
}

// hold keeps r in memory for serveStore to record, and notes the fault.
func (a *Agent) hold(r heldResult, err error) {
	a.health.failed(err)
	a.mu.Lock()
	if old, ok := a.held[r.c.Lease]; ok {
		r.stored = r.stored || old.stored
		r.sent = r.sent || old.sent
		if r.reason == "" {
			r.reason = old.reason
		}
	}
	a.held[r.c.Lease] = &r
	a.mu.Unlock()
	select {
	case a.heldKick <- struct{}{}:
	default:
	}
}

// heldCount is how many results wait in memory.
func (a *Agent) heldCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.held)
}

// unsent returns the held results the coordinator does not have yet.
func (a *Agent) unsent() []store.Contribution {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []store.Contribution
	for _, r := range a.held {
		if !r.sent {
			out = append(out, r.c)
		}
	}
	return out
}

// record writes r to the store: the pending receipt unless stored, then,
// once sent, the coordinator's answer. It returns the first failure, with
// r updated as far as it got.
func (a *Agent) record(ctx context.Context, r *heldResult) error {
	if !r.stored {
		if err := a.cfg.Store.AddPending(ctx, r.c); err != nil {
			return err
		}
		r.stored = true
	}
	if !r.sent {
		return nil
	}
	if r.reason != "" {
		if err := a.cfg.Store.Reject(ctx, r.c.Lease, r.reason); err != nil && !errors.Is(err, store.ErrConflict) {
			return err
		}
	}
	if err := a.cfg.Store.MarkAcknowledged(ctx, r.c.Lease); err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	return nil
}

// keep records the result c of a task just computed and hands it to the
// pool. The result is recorded before it is sent, so that a crash loses
// nothing; when the store takes no writes (a full disk, another process
// holding its lock, a damaged file) it is kept in memory instead and sent
// all the same, and serveStore records it later. No store failure ends
// the agent or drops a result. want asks for up to that many new leases
// in the same request; keep returns those granted (the caller computes
// or releases them).
func (a *Agent) keep(ctx context.Context, c store.Contribution, want int, log *slog.Logger) []pool.Lease {
	stored := true
	if err := a.cfg.Store.AddPending(context.WithoutCancel(ctx), c); err != nil {
		log.Warn("Cannot record the result locally; keeping it in memory", "err", err)
		a.hold(heldResult{c: c}, err)
		stored = false
		want = 0 // no new task while results cannot be recorded
	}
	leases, err := a.deliverAndLease(ctx, c, stored, want)
	if err != nil {
		// Kept in the store, or in memory: the outbox sends it when it
		// can.
		log.Debug("Result not sent yet", "err", err)
		a.kickOutbox()
	}
	return leases
}

// settle records that the coordinator has c (reason: why it is rejected,
// "" when it is not); when the store fails, c is held in memory until
// serveStore can record it.
func (a *Agent) settle(ctx context.Context, c store.Contribution, stored bool, reason string) {
	r := heldResult{c: c, stored: stored, sent: true, reason: reason}
	a.mu.Lock()
	if old, ok := a.held[c.Lease]; ok {
		r.stored = r.stored || old.stored
	}
	a.mu.Unlock()
	if err := a.record(ctx, &r); err != nil {
		a.hold(r, err)
		return
	}
	a.mu.Lock()
	delete(a.held, c.Lease)
	a.mu.Unlock()
	a.health.worked()
}

// storeFinalTry bounds the last attempt to record held results when the
// agent stops.
const storeFinalTry = 5 * time.Second

// serveStore records the held results whenever the store may take them,
// retrying with bounded backoff, and while the store has a fault and
// nothing is held it probes it with a write that changes nothing (the
// ledger cursor), so that leasing resumes once space returns or the lock
// is gone. When ctx ends it tries once more, for a few seconds, and logs
// the results it could not record (those sent reach the pool's ledger,
// whose receipts bring them back: Recover). It returns nil.
func (a *Agent) serveStore(ctx context.Context) error {
	b := backoff{Base: 100 * time.Millisecond, Max: a.cfg.MaxBackoff}
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		var wait <-chan time.Time
		if a.heldCount() > 0 || a.health.faulty() {
			t.Reset(b.next())
			wait = t.C
		} else {
			b.reset()
		}
		select {
		case <-ctx.Done():
			a.finalStore(context.WithoutCancel(ctx))
			return nil
		case <-a.heldKick:
			t.Stop()
			continue // a new held result: try it after the backoff
		case <-wait:
		}
		if err := a.storeHeld(ctx); err != nil {
			a.health.failed(err)
			a.log.Debug("The local store still takes no writes", "err", err, "held", a.heldCount())
			continue
		}
		a.health.worked()
		b.reset()
	}
}

// storeHeld records every held result, or, with none, probes the store
// with a write that changes nothing. It returns the first failure.
func (a *Agent) storeHeld(ctx context.Context) error {
	a.mu.Lock()
	rs := make([]*heldResult, 0, len(a.held))
	for _, r := range a.held {
		cp := *r
		rs = append(rs, &cp)
	}
	a.mu.Unlock()
	if len(rs) == 0 {
		cur, err := a.cfg.Store.LedgerCursor(ctx, a.c.URL())
		if err != nil {
			return err
		}
		return a.cfg.Store.SetLedgerCursor(ctx, a.c.URL(), cur)
	}
	for _, r := range rs {
		err := a.record(ctx, r)
		a.mu.Lock()
		if cur, ok := a.held[r.c.Lease]; ok {
			if err == nil && r.sent == cur.sent {
				delete(a.held, r.c.Lease) // recorded as far as it goes
				if !r.sent {
					a.kickOutbox() // stored, not sent: the outbox sends it from the store
				}
			} else {
				// Failed, or sent meanwhile (its answer is recorded next
				// time): keep what was recorded.
				cur.stored = cur.stored || r.stored
			}
		}
		a.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// finalStore is serveStore's last attempt when the agent stops.
func (a *Agent) finalStore(ctx context.Context) {
	if a.heldCount() == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, storeFinalTry)
	defer cancel()
	b := backoff{Base: 100 * time.Millisecond, Max: time.Second}
	for a.heldCount() > 0 {
		if err := a.storeHeld(ctx); err == nil {
			return
		}
		if sleep(ctx, b.next()) != nil {
			break
		}
	}
	a.mu.Lock()
	sent := 0
	for _, r := range a.held {
		if r.sent {
			sent++
		}
	}
	n := len(a.held)
	a.mu.Unlock()
	a.log.Error("Stopping with results the local store did not take; those the pool has come back with its receipts",
		"results", n, "sentToPool", sent)
}
