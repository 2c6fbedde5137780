package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"idlepool/job"
	"idlepool/offers"
	"idlepool/pool"
	"idlepool/store"
)

// ownJobReason is why a contribution to a job of this device's own owner
// earns nothing (DESIGN.md, invariant 14).
const ownJobReason = "own job: a device of the job's owner computes without a receipt"

// deliver sends a contribution (recorded in the store when stored, else
// held in memory) and records the answer: once the coordinator accepted
// it, it is acknowledged (its bytes are dropped); if the coordinator
// refused it for good (the task was decided without it, the lease
// expired, ...), it is rejected with the reason, since no receipt will
// come. A store that takes no writes makes the answer wait in memory
// (settle). The error is Retryable when the coordinator could not be
// reached (the contribution stays unacknowledged, to be sent again),
// ctx's when ctx ended, and otherwise the coordinator's refusal to
// register the device again.
func (a *Agent) deliver(ctx context.Context, c store.Contribution, stored bool) error {
	_, err := a.deliverAndLease(ctx, c, stored, 0)
	return err
}

// deliverAndLease is deliver, asking in the same request for up to want
// new leases for the task loop that computed c (Client.SendResultAndLease);
// it returns those granted whatever became of c.
func (a *Agent) deliverAndLease(ctx context.Context, c store.Contribution, stored bool, want int) ([]pool.Lease, error) {
	sub := a.submission(ctx, c)
	// A coordinator that does not know this device (anymore) is sent
	// its registration again by the client (Register).
	leases, err := a.c.SendResultAndLease(ctx, c.Lease, sub, want)
	if ae, ok := errors.AsType[*APIError](err); ok && sub.Ref != nil && ae.Code == "send_inline" {
		// Its merger does not fetch kept results now: the bytes go to
		// the coordinator, this one's and the job's next ones for a while.
		a.dropKept(c)
		a.sendInline(c.Job)
		sub = c.Submission()
		err = a.c.SendResult(ctx, c.Lease, sub)
	}
	if err != nil && (Retryable(err) || ctx.Err() != nil) {
		return leases, err
	}
	bg := context.WithoutCancel(ctx) // record what the coordinator said, even while stopping
	reason := ""
	if err != nil {
		if sub.Ref != nil {
			a.dropKept(c) // nobody will fetch it
		}
		reason = "refused by the coordinator: " + refusal(err)
		a.log.Warn("Result refused", "jobID", c.Job.String(), "taskIndex", c.Task, "lease", c.Lease, "reason", reason)
		a.event("result of task %d of job %s rejected by pool %s: %s", c.Task, a.jobWords(c.Job), a.label(), reason)
	} else if a.ownJob(ctx, c.Job) {
		reason = ownJobReason
	}
	a.settle(bg, c, stored, reason)
	return leases, nil
}

// refusal says in words why the coordinator refused a submission.
func refusal(err error) string {
	var ae *APIError
	if !errors.As(err, &ae) {
		return err.Error()
	}
	switch {
	case ae.Status == 409:
		return "the task was decided before this result arrived"
	case ae.Status == 410:
		return "the lease expired before this result arrived"
	case ae.Message != "":
		return ae.Message
	}
	return ae.Error()
}

// ownJob reports whether job id belongs to this device's owner, asking the
// coordinator once per job. When it cannot tell, it says no.
func (a *Agent) ownJob(ctx context.Context, id job.ID) bool {
	owner := a.jobOwner(ctx, id)
	return owner != "" && owner == a.owner
}

// jobOwner returns the owner ID of job id, asking the coordinator once per
// job; "" when it cannot tell.
func (a *Agent) jobOwner(ctx context.Context, id job.ID) string {
	a.mu.Lock()
	owner, ok := a.owners[id]
	a.mu.Unlock()
	if !ok {
		st, err := a.c.JobInfo(ctx, id)
		if err != nil {
			return ""
		}
		owner = st.Owner
		a.mu.Lock()
		a.owners[id] = owner
		a.noteOwnerName(id, offers.OwnerName(owner, st.OwnerProfile), offers.OwnerLink(owner, st.OwnerProfile))
		a.mu.Unlock()
	}
	return owner
}

func (a *Agent) kickOutbox() {
	select {
	case a.resend <- struct{}{}:
	default:
	}
}

// serveOutbox sends the contributions the coordinator has not
// acknowledged: at start (results finished before a crash or a stop), when
// a task loop could not send one, and every minute as a safety net. While
// the coordinator is away it retries with backoff. It returns when ctx
// ends, or with a Store error.
func (a *Agent) serveOutbox(ctx context.Context) error {
	a.kickOutbox()
	tick := time.NewTicker(time.Minute)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-a.resend:
		case <-tick.C:
		}
		if err := a.flush(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

// flush sends every unacknowledged contribution, oldest first, and those
// held in memory, until none is left or ctx ends. A store that cannot be
// read is noted (storeHealth) and tried again at the next flush.
func (a *Agent) flush(ctx context.Context) error {
	b := backoff{Base: 100 * time.Millisecond, Max: a.cfg.MaxBackoff}
	for {
		pending, err := a.cfg.Store.Unacknowledged(ctx, a.c.URL())
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			a.health.failed(fmt.Errorf("read unacknowledged results: %w", err))
			pending = nil
		}
		stored := len(pending)
		pending = append(pending, a.unsent()...)
		var away error
		for i, c := range pending {
			if err := a.deliver(ctx, c, i < stored); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if !Retryable(err) {
					return err
				}
				away = err
				break
			}
		}
		if away == nil {
			if len(pending) > 0 {
				a.log.Info("Results sent again", "count", len(pending))
			}
			return nil
		}
		d := b.after(away)
		a.log.Debug("Coordinator unavailable, keeping results to send later", "count", len(pending), "wait", d, "err", away)
		if err := sleep(ctx, d); err != nil {
			return err
		}
	}
}

// serveReceipts follows this device's entries in the pool's ledger, every
// ReceiptPoll: it checks each with the pool's pinned key and confirms or
// rejects the matching contribution. A store that takes no writes is
// noted (storeHealth) and the same entries are read again at the next
// poll. It returns when ctx ends.
func (a *Agent) serveReceipts(ctx context.Context) error {
	for {
		if err := a.pollReceipts(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			switch {
			case errors.Is(err, errLocalStore):
				a.health.failed(err)
				a.log.Debug("Cannot read receipts now", "err", err)
			case errors.Is(err, pool.ErrEntriesCBOR):
				a.log.Warn("The coordinator's receipts answer is malformed; nothing of it recorded", "err", err)
			default:
				a.log.Debug("Cannot read receipts now", "err", err)
			}
		}
		if err := sleep(ctx, a.cfg.ReceiptPoll); err != nil {
			return nil
		}
	}
}

// receiptPage is how many ledger entries one receipts request asks for.
const receiptPage = 500

// pollReceipts reads the entries naming this device past the stored
// cursor and applies them: in a pool divided into shards
// (api.PoolInfo.Shards), each shard's ledger past its own cursor.
func (a *Agent) pollReceipts(ctx context.Context) error {
	shards := a.shards
	if shards <= 1 {
		return a.pollShardReceipts(ctx, -1)
	}
	var first error
	for s := range shards {
		if err := a.pollShardReceipts(ctx, s); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// receiptCursorKey is the key of the stored ledger cursor of shard's
// ledger of the pool at url: the URL for an undivided pool and shard 0
// (the cursor such a pool always had), the URL and "#shard=S" for
// shard S > 0.
func receiptCursorKey(url string, shard int) string {
	if shard <= 0 {
		return url
	}
	return url + "#shard=" + strconv.Itoa(shard)
}

// pollShardReceipts is pollReceipts of one shard's ledger (shard < 0:
// an undivided pool's).
func (a *Agent) pollShardReceipts(ctx context.Context, shard int) error {
	key := receiptCursorKey(a.c.URL(), shard)
	cursor, err := a.cfg.Store.LedgerCursor(ctx, key)
	if err != nil {
		return fmt.Errorf("%w: %w", errLocalStore, err)
	}
	for {
		entries, err := a.c.ReceiptsOf(ctx, shard, cursor, receiptPage)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if err := a.applyEntry(ctx, e); err != nil {
				return err
			}
			cursor = max(cursor, e.Seq)
		}
		if len(entries) > 0 {
			if err := a.cfg.Store.SetLedgerCursor(ctx, key, cursor); err != nil {
				return fmt.Errorf("%w: %w", errLocalStore, err)
			}
		}
		if len(entries) < receiptPage {
			return nil
		}
	}
}

// errLocalStore marks errors of the agent's Store (as opposed to the
// coordinator's) in the receipt follower.
var errLocalStore = errors.New("agent: local store")

// recoverer is a Store that can record a contribution it has no row of
// from a checked ledger entry (*store.Local: Recover): after the local
// store was lost or damaged, the pool's ledger gives this device's
// receipts back.
// revoker is a Store that can withdraw a confirmed contribution whose
// receipt the pool revoked (pool.KindRevocation).
type revoker interface {
	Revoke(ctx context.Context, lease, reason string) error
}

type recoverer interface {
	Recover(ctx context.Context, poolURL string, e pool.Entry, reason string) (bool, error)
}

// applyEntry checks one ledger entry naming this device and records it:
// a receipt confirms the contribution of its lease; a deviation or an
// unverified task rejects it with the reason, and a revocation withdraws
// its receipt. An entry for a lease the
// store has no record of (a lost or damaged store) is recovered from the
// entry when the Store can (recoverer). An entry that does not verify, or
// names another peer or pool, is logged and ignored. The error is a Store
// failure, wrapping errLocalStore.
func (a *Agent) applyEntry(ctx context.Context, e pool.Entry) error {
	// The entry's logger is built only to log: a device records an entry
	// per replica it returned, and building it for each was 1% of an
	// agent's CPU with tasks of milliseconds.
	log := func() *slog.Logger {
		return a.log.With("seq", e.Seq, "kind", e.Kind, "jobID", e.Job.String(), "taskIndex", e.Task, "lease", e.Lease)
	}
	if err := a.verifier.Verify(e); err != nil {
		log().Error("Ledger entry does not verify against the pool's key; ignored", "err", err)
		return nil
	}
	if e.Peer != a.c.PeerID() || e.Pool != a.poolName {
		log().Error("Ledger entry names another peer or pool; ignored", "peer", e.Peer, "entryPool", e.Pool)
		return nil
	}
	var reason string
	switch e.Kind {
	case pool.KindDeviation:
		reason = "deviation: " + orDefault(e.Reason, "a majority of owners agreed on other bytes")
	case pool.KindUnverified:
		reason = "unverified: " + orDefault(e.Reason, "no majority agreed within the replica limit")
	case pool.KindRevocation:
		reason = "receipt revoked: " + orDefault(e.Reason, "the task was computed again and others agreed on other bytes")
	}
	if reason != "" {
		a.event("result of task %d of job %s rejected by pool %s: %s", e.Task, a.jobWords(e.Job), a.label(), reason)
	}
	apply := func() error {
		switch e.Kind {
		case pool.KindReceipt:
			return a.cfg.Store.Confirm(ctx, e.Lease, e)
		case pool.KindDeviation, pool.KindUnverified:
			return a.cfg.Store.Reject(ctx, e.Lease, reason)
		case pool.KindRevocation:
			if r, ok := a.cfg.Store.(revoker); ok {
				return r.Revoke(ctx, e.Lease, reason)
			}
		}
		return nil
	}
	err := apply()
	if r, ok := a.cfg.Store.(recoverer); ok && errors.Is(err, store.ErrNotFound) {
		var added bool
		switch added, err = r.Recover(ctx, a.c.URL(), e, reason); {
		case err == nil && added:
			log().Info("Contribution recovered from the pool's ledger")
			return nil
		case err == nil:
			err = apply() // recorded meanwhile (a result held in memory)
		}
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		log().Warn("Ledger entry for a lease this device has no record of")
	case errors.Is(err, store.ErrConflict):
		log().Warn("Ledger entry does not match the recorded contribution", "err", err)
	case err != nil:
		return fmt.Errorf("%w: %w", errLocalStore, err)
	case a.log.Enabled(ctx, slog.LevelDebug):
		log().Debug("Ledger entry recorded")
	}
	return nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
