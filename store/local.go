package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"idlepool/job"
	"idlepool/pool"
)

// Contribution states.
const (
	StatePending   = "pending"   // the result was returned; no signed receipt yet
	StateConfirmed = "confirmed" // the coordinator's signed receipt arrived and was checked
	StateRejected  = "rejected"  // no receipt will come: Reason says why
)

// Contribution is one result this device returned to a pool: a pending
// receipt until the coordinator's signed receipt confirms it, or a
// rejection. Lease identifies it (a lease is returned once). Failed,
// Failure and Work repeat the submission (with Digest and Result) so that
// it can be sent again; Result is nil once Acknowledged. Work is what the
// worker counted of the work the task took (nil in rows from before
// metering). Cost is in the planner's cost units: the agent's own
// estimate (job.Job.WorkCost of Work; 0 for a failure) while pending,
// the receipt's Cost once confirmed. Declared is what the job declared
// the task would cost (job.Job.Cost), the most a receipt credits; 0 in
// rows from before metering. Day is Created's date in the local time
// zone, "YYYY-MM-DD". Receipt is the confirming ledger entry (Seq 0 when
// none); its Work is the count the pool credited.
type Contribution struct {
	Pool         string     `json:"pool"` // the pool's URL
	Job          job.ID     `json:"job"`
	Task         int64      `json:"task"`
	Lease        string     `json:"lease"`
	Digest       job.Digest `json:"digest"`
	Failed       bool       `json:"failed,omitempty"`
	Failure      string     `json:"failure,omitempty"`
	Cost         float64    `json:"cost"`
	Declared     float64    `json:"declared"`
	Work         *pool.Work `json:"work,omitempty"`
	State        string     `json:"state"`
	Reason       string     `json:"reason,omitempty"`
	Created      time.Time  `json:"created"`
	Day          string     `json:"day"`
	Acknowledged bool       `json:"acknowledged"`
	Result       []byte     `json:"result,omitempty"`
	Receipt      pool.Entry `json:"receipt"`
}

// Submission returns what was sent to the coordinator for this lease.
func (c Contribution) Submission() pool.Submission {
	return pool.Submission{Digest: c.Digest, Result: c.Result, Failed: c.Failed, Reason: c.Failure, Work: c.Work}
}

// DaySummary is one pool's contributions created on one local day.
// ConfirmedCost is the total cost units of the confirmed ones, what their
// receipts credited; DeclaredCost what their jobs declared those tasks
// would cost (the most they credit; 0 for contributions from before
// metering); Work the instructions their receipts say the tasks took.
type DaySummary struct {
	Pool          string  `json:"pool"`
	Day           string  `json:"day"` // YYYY-MM-DD, local time
	Pending       int64   `json:"pending"`
	Confirmed     int64   `json:"confirmed"`
	Rejected      int64   `json:"rejected"`
	ConfirmedCost float64 `json:"confirmed_cost"`
	DeclaredCost  float64 `json:"declared_cost"`
	Work          uint64  `json:"work"`
}

// Filter selects contributions: every field that is set must match.
// Limit caps the count (0: no cap). Results are newest first.
type Filter struct {
	Pool  string
	State string
	Job   *job.ID
	Day   string
	Limit int
}

// Local is a donor device's contribution store, in its own SQLite file
// (schema migrations/local). It is safe for concurrent use.
type Local struct {
	db       *sql.DB
	now      func() time.Time
	recovery *Recovery // set by OpenLocalRepairing
}

// OpenLocal opens (creating it if needed) the contribution store at path
// and brings its schema up to date. A damaged file fails with an error
// wrapping ErrCorrupt (see OpenLocalRepairing).
func OpenLocal(path string, opts ...Option) (*Local, error) {
	db, err := openSQLite(context.Background(), path, "local", opts...)
	if err != nil {
		return nil, err
	}
	return &Local{db: db, now: time.Now}, nil
}

// Close closes the database.
func (l *Local) Close() error { return l.db.Close() }

// AddPending records a returned result as a pending receipt. It is
// idempotent by lease: adding the same lease again changes nothing and
// returns nil, so an agent may call it before every (re)send. A zero
// Created means now.
func (l *Local) AddPending(ctx context.Context, r Contribution) error {
	if r.Lease == "" || r.Pool == "" {
		return fmt.Errorf("add contribution: empty lease or pool")
	}
	if r.Created.IsZero() {
		r.Created = l.now()
	}
	day := r.Created.In(time.Local).Format(time.DateOnly)
	var rule int
	var work int64
	if w := r.Work; w != nil {
		if w.Rule < 1 || w.Count > pool.MaxWorkCount {
			return fmt.Errorf("add contribution %s: work %d by rule %d out of range", r.Lease, w.Count, w.Rule)
		}
		rule, work = w.Rule, int64(w.Count)
	}
	_, err := l.db.ExecContext(ctx, `INSERT INTO contributions
		(lease, pool, job, task, digest, failed, failure, cost, declared, work_rule, work, state, created, day, result)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?)
		ON CONFLICT(lease) DO NOTHING`,
		r.Lease, r.Pool, r.Job[:], r.Task, r.Digest[:], r.Failed, r.Failure, r.Cost, r.Declared, rule, work,
		r.Created.UnixMilli(), day, nonNil(r.Result))
	if err != nil {
		return fmt.Errorf("add contribution %s: %w", r.Lease, classify(err))
	}
	return nil
}

// nonNil keeps an empty result distinct from "no result kept" (NULL).
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// Unacknowledged returns the contributions to pool whose submission the
// coordinator has not acknowledged yet, oldest first, with their result
// bytes: what the agent sends again after a restart.
func (l *Local) Unacknowledged(ctx context.Context, pool string) ([]Contribution, error) {
	return l.query(ctx, `WHERE pool = ? AND acked = 0 ORDER BY created, lease`, pool)
}

// MarkAcknowledged records that the coordinator has the submission of
// lease and drops its kept result bytes. Marking twice is nil; an unknown
// lease is ErrNotFound.
func (l *Local) MarkAcknowledged(ctx context.Context, lease string) error {
	res, err := l.db.ExecContext(ctx, `UPDATE contributions SET acked = 1, result = NULL WHERE lease = ?`, lease)
	if err != nil {
		return fmt.Errorf("acknowledge %s: %w", lease, classify(err))
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("acknowledge %s: %w", lease, ErrNotFound)
	}
	return nil
}

// Confirm records the signed receipt e for lease; the caller has checked
// it with pool.VerifyEntry against the pool's key. The receipt must be a
// KindReceipt entry for this lease, job, task and digest (else
// ErrConflict). The state moves pending → confirmed; a rejected
// contribution is confirmed too, because the signed ledger is the
// authority. Confirming again with the same entry is nil; an unknown lease
// is ErrNotFound.
func (l *Local) Confirm(ctx context.Context, lease string, e pool.Entry) error {
	c, err := l.get(ctx, lease)
	if err != nil {
		return fmt.Errorf("confirm %s: %w", lease, classify(err))
	}
	if e.Kind != pool.KindReceipt || e.Lease != lease || e.Job != c.Job || e.Task != c.Task || e.Digest != c.Digest {
		return fmt.Errorf("confirm %s: %w: entry %d (%s for lease %q, task %d) does not match this contribution", lease, ErrConflict, e.Seq, e.Kind, e.Lease, e.Task)
	}
	entry, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("confirm %s: %w", lease, classify(err))
	}
	res, err := l.db.ExecContext(ctx, `UPDATE contributions
		SET state = 'confirmed', cost = ?, receipt = ?, entry = ?, reason = ''
		WHERE lease = ? AND (state IN ('pending', 'rejected') OR (state = 'confirmed' AND receipt = ?))`,
		e.Cost, int64(e.Seq), string(entry), lease, int64(e.Seq))
	if err != nil {
		return fmt.Errorf("confirm %s: %w", lease, classify(err))
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("confirm %s: %w: already confirmed by another entry", lease, ErrConflict)
	}
	return nil
}

// Reject moves lease from pending to rejected with reason (a deviation
// entry, an unverified task, the coordinator refusing the submission).
// Rejecting a rejected contribution again is nil; a confirmed one is
// ErrConflict; an unknown lease is ErrNotFound.
func (l *Local) Reject(ctx context.Context, lease, reason string) error {
	res, err := l.db.ExecContext(ctx, `UPDATE contributions SET state = 'rejected', reason = ?
		WHERE lease = ? AND state = 'pending'`, reason, lease)
	if err != nil {
		return fmt.Errorf("reject %s: %w", lease, classify(err))
	}
	if n, _ := res.RowsAffected(); n == 1 {
		return nil
	}
	c, err := l.get(ctx, lease)
	if err != nil {
		return fmt.Errorf("reject %s: %w", lease, classify(err))
	}
	if c.State == StateRejected {
		return nil
	}
	return fmt.Errorf("reject %s: %w: it is %s", lease, ErrConflict, c.State)
}

// Revoke records that the pool revoked the receipt of lease (a
// pool.KindRevocation entry: the task, computed alone, was computed again
// and others agreed on other bytes): a confirmed or pending contribution
// becomes rejected with reason, and no longer counts in History. Revoking
// a rejected one is nil. Errors: ErrNotFound.
func (l *Local) Revoke(ctx context.Context, lease, reason string) error {
	res, err := l.db.ExecContext(ctx, `UPDATE contributions SET state = 'rejected', reason = ?
		WHERE lease = ? AND state IN ('pending', 'confirmed')`, reason, lease)
	if err != nil {
		return fmt.Errorf("revoke %s: %w", lease, classify(err))
	}
	if n, _ := res.RowsAffected(); n == 1 {
		return nil
	}
	if _, err := l.get(ctx, lease); err != nil {
		return fmt.Errorf("revoke %s: %w", lease, classify(err))
	}
	return nil
}

// Recover records a contribution this device has no row of (a lost or
// damaged store, see OpenLocalRepairing) from ledger entry e of the pool
// at poolURL, which the caller has checked with pool.VerifyEntry against
// the pool's key and found to name this device: a KindReceipt entry as
// confirmed with its cost, a KindDeviation or KindUnverified one as
// rejected with reason. The result bytes are gone (the pool acknowledged
// them: it decided the task), so the row is acknowledged. Created is the
// entry's time. It returns true when it added a row, false (and nil) when
// the lease was known already, which it leaves as it is.
func (l *Local) Recover(ctx context.Context, poolURL string, e pool.Entry, reason string) (bool, error) {
	if e.Lease == "" || poolURL == "" {
		return false, fmt.Errorf("recover contribution: empty lease or pool")
	}
	state, seq, entry := StateRejected, int64(0), sql.NullString{}
	if e.Kind == pool.KindReceipt {
		b, err := json.Marshal(e)
		if err != nil {
			return false, fmt.Errorf("recover %s: %w", e.Lease, err)
		}
		state, seq, entry, reason = StateConfirmed, int64(e.Seq), sql.NullString{String: string(b), Valid: true}, ""
	}
	created := time.UnixMilli(e.Time)
	if e.Time == 0 {
		created = l.now()
	}
	res, err := l.db.ExecContext(ctx, `INSERT INTO contributions
		(lease, pool, job, task, digest, cost, state, reason, created, day, acked, result, receipt, entry)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, NULL, ?, ?)
		ON CONFLICT(lease) DO NOTHING`,
		e.Lease, poolURL, e.Job[:], e.Task, e.Digest[:], e.Cost, state, reason,
		created.UnixMilli(), created.In(time.Local).Format(time.DateOnly), seq, entry)
	if err != nil {
		return false, fmt.Errorf("recover %s: %w", e.Lease, classify(err))
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

// History returns, per pool and local day (pool, then day ascending), the
// counts of pending, confirmed and rejected contributions and, of the
// confirmed ones, the total cost units credited and declared and the work
// their receipts counted.
func (l *Local) History(ctx context.Context) ([]DaySummary, error) {
	rows, err := l.db.QueryContext(ctx, `SELECT pool, day,
		SUM(state = 'pending'), SUM(state = 'confirmed'), SUM(state = 'rejected'),
		TOTAL(CASE WHEN state = 'confirmed' THEN cost ELSE 0 END),
		TOTAL(CASE WHEN state = 'confirmed' THEN declared ELSE 0 END),
		TOTAL(CASE WHEN state = 'confirmed' THEN json_extract(entry, '$.work') ELSE 0 END)
		FROM contributions GROUP BY pool, day ORDER BY pool, day`)
	if err != nil {
		return nil, fmt.Errorf("history: %w", classify(err))
	}
	defer rows.Close()
	var out []DaySummary
	for rows.Next() {
		var d DaySummary
		var work float64 // SQLite's TOTAL is a float
		if err := rows.Scan(&d.Pool, &d.Day, &d.Pending, &d.Confirmed, &d.Rejected, &d.ConfirmedCost, &d.DeclaredCost, &work); err != nil {
			return nil, fmt.Errorf("history: %w", classify(err))
		}
		d.Work = uint64(work)
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("history: %w", classify(err))
	}
	return out, nil
}

// Contributions returns the contributions matching f, newest first.
func (l *Local) Contributions(ctx context.Context, f Filter) ([]Contribution, error) {
	var where []string
	var args []any
	if f.Pool != "" {
		where, args = append(where, "pool = ?"), append(args, f.Pool)
	}
	if f.State != "" {
		where, args = append(where, "state = ?"), append(args, f.State)
	}
	if f.Job != nil {
		where, args = append(where, "job = ?"), append(args, f.Job[:])
	}
	if f.Day != "" {
		where, args = append(where, "day = ?"), append(args, f.Day)
	}
	q := ""
	if len(where) > 0 {
		q = "WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY created DESC, lease DESC"
	if f.Limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", f.Limit)
	}
	return l.query(ctx, q, args...)
}

// LedgerCursor returns the last ledger Seq this device has read from
// pool (0 when none).
func (l *Local) LedgerCursor(ctx context.Context, pool string) (uint64, error) {
	var seq int64
	err := l.db.QueryRowContext(ctx, `SELECT seq FROM ledger_cursors WHERE pool = ?`, pool).Scan(&seq)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("ledger cursor of %s: %w", pool, classify(err))
	}
	return uint64(seq), nil
}

// SetLedgerCursor records seq as the last ledger Seq read from pool. The
// cursor never moves back: a lower seq is ignored.
func (l *Local) SetLedgerCursor(ctx context.Context, pool string, seq uint64) error {
	_, err := l.db.ExecContext(ctx, `INSERT INTO ledger_cursors(pool, seq) VALUES (?, ?)
		ON CONFLICT(pool) DO UPDATE SET seq = MAX(seq, excluded.seq)`, pool, int64(seq))
	if err != nil {
		return fmt.Errorf("set ledger cursor of %s: %w", pool, classify(err))
	}
	return nil
}

func (l *Local) get(ctx context.Context, lease string) (Contribution, error) {
	cs, err := l.query(ctx, `WHERE lease = ?`, lease)
	if err != nil {
		return Contribution{}, err
	}
	if len(cs) == 0 {
		return Contribution{}, ErrNotFound
	}
	return cs[0], nil
}

func (l *Local) query(ctx context.Context, rest string, args ...any) ([]Contribution, error) {
	rows, err := l.db.QueryContext(ctx, `SELECT lease, pool, job, task, digest, failed, failure, cost,
		declared, work_rule, work, state, reason, created, day, acked, result, entry FROM contributions `+rest, args...)
	if err != nil {
		return nil, fmt.Errorf("read contributions: %w", classify(err))
	}
	defer rows.Close()
	var out []Contribution
	for rows.Next() {
		var (
			c           Contribution
			jobB, dig   []byte
			created     int64
			entry       sql.NullString
			result      []byte
			failed, ack bool
			rule        int
			work        int64
		)
		if err := rows.Scan(&c.Lease, &c.Pool, &jobB, &c.Task, &dig, &failed, &c.Failure, &c.Cost,
			&c.Declared, &rule, &work, &c.State, &c.Reason, &created, &c.Day, &ack, &result, &entry); err != nil {
			return nil, fmt.Errorf("read contributions: %w", classify(err))
		}
		if rule != 0 {
			c.Work = &pool.Work{Rule: rule, Count: uint64(work)}
		}
		copy(c.Job[:], jobB)
		copy(c.Digest[:], dig)
		c.Failed, c.Acknowledged, c.Result = failed, ack, result
		c.Created = time.UnixMilli(created)
		if entry.Valid {
			if err := json.Unmarshal([]byte(entry.String), &c.Receipt); err != nil {
				return nil, fmt.Errorf("read contribution %s: receipt: %w", c.Lease, classify(err))
			}
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read contributions: %w", classify(err))
	}
	return out, nil
}

// AddAbandoned records a task this device stopped without a result (its
// lease ran out while the pool could not be reached): a rejected
// contribution with reason, acknowledged and holding no result, so that
// nothing is sent and no receipt is expected. It is idempotent by lease;
// a lease already recorded keeps its record. A zero Created means now.
func (l *Local) AddAbandoned(ctx context.Context, r Contribution, reason string) error {
	if r.Lease == "" || r.Pool == "" {
		return fmt.Errorf("add abandoned task: empty lease or pool")
	}
	if r.Created.IsZero() {
		r.Created = l.now()
	}
	day := r.Created.In(time.Local).Format(time.DateOnly)
	_, err := l.db.ExecContext(ctx, `INSERT INTO contributions
		(lease, pool, job, task, digest, cost, state, reason, created, day, acked)
		VALUES (?, ?, ?, ?, ?, 0, 'rejected', ?, ?, ?, 1)
		ON CONFLICT(lease) DO NOTHING`,
		r.Lease, r.Pool, r.Job[:], r.Task, r.Digest[:], reason, r.Created.UnixMilli(), day)
	if err != nil {
		return fmt.Errorf("add abandoned task %s: %w", r.Lease, err)
	}
	return nil
}
