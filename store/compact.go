package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"idlepool/pool"
)

// Compaction counts what one DB.Compact did.
type Compaction struct {
	// Outcomes is how many acknowledged outcomes were folded into their
	// job's summary.
	Outcomes int
	// Replicas is how many replicas the mark passed; Opened of them were
	// not done and were named in replicas_open.
	Replicas, Opened int
	// Closed is how many replicas named in replicas_open were done and
	// left it.
	Closed int
}

// Chunks of Compact's work, each read in a read transaction and written
// in a short write transaction of its own, so that a commit of the
// Scheduler waits for one chunk's writes at most (milliseconds), never
// for a whole compaction.
var (
	compactOutcomes int64 = 8192 // acknowledged outcomes folded per transaction
	compactReplicas int64 = 2048 // replica rows the mark passes per transaction
)

// doneReplica is the SQL condition, on replicas r, that a replica is
// done, as pool.Snapshot.Replicas says: agreed or unverified (states the
// Scheduler gives replicas only as it decides their task, in the batch
// of its outcome); settled otherwise (pool.SettledStates) and of a task
// with an outcome; or settled, not failed on its machine, and of a
// cancelled job. Its row never changes again and the Scheduler loads
// nothing from it. Most replicas are agreed ones, which need no lookup
// of their outcome: with one, a compaction took 2.5 times as long.
var doneReplica = func() string {
	var in, cancelled []string
	for _, st := range pool.SettledStates() {
		if st != pool.ReplicaAgreed && st != pool.ReplicaUnverified {
			in = append(in, "'"+st+"'")
		}
		if st != pool.ReplicaMachineFailed {
			cancelled = append(cancelled, "'"+st+"'")
		}
	}
	return `(r.state IN ('` + pool.ReplicaAgreed + `', '` + pool.ReplicaUnverified + `')
		OR r.state IN (` + strings.Join(in, ", ") + `) AND EXISTS (SELECT 1 FROM outcomes o WHERE o.job = r.job AND o.task = r.task)
		OR r.state IN (` + strings.Join(cancelled, ", ") + `) AND EXISTS (SELECT 1 FROM jobs j WHERE j.id = r.job AND j.cancelled != 0))`
}()

// compactStatements are Compact's and Load's statements that run at every
// compaction, prepared once when the database opens (statements) rather
// than parsed at each chunk: the parse was half of the mark's time.
var compactStatements = map[string]string{
	"foldPick": `SELECT j.id, j.ord, j.acked, coalesce(s.upto, 0), coalesce(s.accepted, 0), coalesce(s.failed, 0)
		FROM jobs j LEFT JOIN outcome_summaries s ON s.job = j.id
		WHERE j.ord >= ? AND j.acked > coalesce(s.upto, 0) ORDER BY j.ord LIMIT 1`,
	"summaryUpto": `SELECT upto FROM outcome_summaries WHERE job = ?`,
	"summaryWrite": `INSERT INTO outcome_summaries(job, upto, accepted, failed) VALUES (?, ?, ?, ?)
		ON CONFLICT(job) DO UPDATE SET upto = excluded.upto, accepted = excluded.accepted, failed = excluded.failed`,
	"foldRead":       `SELECT task, status = ? FROM outcomes WHERE job = ? AND seq > ? AND seq <= ?`,
	"rangeBefore":    `SELECT task_from, task_to FROM outcome_ranges WHERE job = ? AND task_from < ? ORDER BY task_from DESC LIMIT 1`,
	"rangeTakeAfter": `DELETE FROM outcome_ranges WHERE job = ? AND task_from = ? RETURNING task_to`,
	"rangeExtend":    `UPDATE outcome_ranges SET task_to = ? WHERE job = ? AND task_from = ?`,
	"rangeInsert":    `INSERT INTO outcome_ranges(job, task_from, task_to) VALUES (?, ?, ?)`,
	"openDone": `SELECT x.lease FROM replicas_open x WHERE EXISTS (
		SELECT 1 FROM replicas r WHERE r.lease = x.lease AND ` + doneReplica + `)`,
	"openDelete": `DELETE FROM replicas_open WHERE lease = ?`,
	"leaseBelow": `SELECT lease FROM replicas WHERE rowid < ? ORDER BY rowid DESC LIMIT 1`,
	"markRead":   `SELECT below_rowid, below_lease FROM replica_mark WHERE id = 1`,
	"maxRowid":   `SELECT max(rowid) FROM replicas`,
	"chunkCount": `SELECT count(*), coalesce(max(r.created), 0), coalesce(sum(NOT ` + doneReplica + `), 0)
		FROM replicas r WHERE r.rowid >= ? AND r.rowid < ?`,
	"chunkOpen":  `SELECT r.lease FROM replicas r WHERE r.rowid >= ? AND r.rowid < ? AND NOT ` + doneReplica,
	"openInsert": `INSERT INTO replicas_open(lease) VALUES (?) ON CONFLICT DO NOTHING`,
	"markWrite": `INSERT INTO replica_mark(id, below_rowid, below_lease) VALUES (1, ?, ?)
		ON CONFLICT(id) DO UPDATE SET below_rowid = excluded.below_rowid, below_lease = excluded.below_lease`,
}

func init() {
	for name, q := range compactStatements {
		statements[name] = q
	}
}

// in returns statement name (statements), prepared once, for use in tx.
func (d *DB) in(ctx context.Context, tx *sql.Tx, name string) *sql.Stmt {
	return tx.StmtContext(ctx, d.stmts[name])
}

// Compact moves what a restart must read from the pool's history to the
// work in play, without deleting anything (migrations/coordinator/0011):
//
//   - each job's acknowledged outcomes are folded into its summary (how
//     many were accepted and failed, their tasks as ranges), which Load
//     hands over as a pool.OutcomeSummary instead of the outcomes, as
//     pool.MemStore.ForgetAcked does;
//   - a mark passes the replicas in the order they were inserted: Load
//     reads those at or after the mark and those below it named in
//     replicas_open, the ones that were not done (doneReplica) when the
//     mark passed them, and leaves out the done ones.
//     Replica still returns any of them by its lease.
//
// The mark stops at the work in play: at the first chunk of rows of
// which more than half are not done, unless that chunk's newest row was
// created before before (so a chunk held back by replicas that stay
// undecided, such as those of a cancelled job, is passed in time: its
// replicas are named in replicas_open). The replicas named there are
// checked again at each call and leave it once done.
//
// Compact works in chunks until nothing is left or ctx ends (then it
// returns what it did and ctx's error). Each chunk reads in a read
// transaction, which holds no commit back, then writes what it found in a
// short write transaction that first checks that the mark or the summary
// it read is still there: commits may come between them, since a done
// replica or an acknowledged outcome never changes. Call it from one
// goroutine: two compactions at once fail with an error wrapping
// pool.ErrConflict. Other errors are SQLite's, classified as Commit's
// are (ErrUnavailable while another writer holds the lock past the busy
// timeout), or ErrCorrupt when acknowledged outcomes are missing.
func (d *DB) Compact(ctx context.Context, before time.Time) (Compaction, error) {
	var c Compaction
	// A job whose outcomes cannot be folded holds back neither the
	// other jobs nor the replicas.
	var folding []error
	if !d.summariesChecked.Load() {
		if err := d.checkSummaries(ctx); err != nil {
			folding = append(folding, fmt.Errorf("check outcome summaries: %w", classify(err)))
		} else {
			d.summariesChecked.Store(true)
		}
	}
	for ord := int64(0); ctx.Err() == nil; {
		n, at, err := d.foldOutcomes(ctx, ord)
		c.Outcomes += n
		if err != nil {
			folding = append(folding, fmt.Errorf("compact outcomes: %w", classify(err)))
			if at == 0 {
				break
			}
			ord = at + 1
			continue
		}
		if n == 0 {
			break
		}
		ord = at
	}
	replicas := func() error {
		if err := d.checkMark(ctx); err != nil {
			return err
		}
		n, err := d.closeOpen(ctx)
		c.Closed = n
		if err != nil {
			return err
		}
		for {
			moved, passed, opened, err := d.advanceMark(ctx, before)
			c.Replicas += passed
			c.Opened += opened
			if err != nil || !moved {
				return err
			}
		}
	}
	if err := replicas(); err != nil {
		folding = append(folding, fmt.Errorf("compact replicas: %w", classify(err)))
	}
	if err := ctx.Err(); err != nil && len(folding) == 0 {
		folding = append(folding, err)
	}
	return c, errors.Join(folding...)
}

// write runs f in a write transaction, committing when it returns nil.
func (d *DB) write(ctx context.Context, f func(tx *sql.Tx) error) error {
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// compactRuns bounds the runs of consecutive tasks one fold writes in a
// transaction (up to three statements each): a job decided out of order
// folds fewer outcomes at a time, so that the write lock is held for
// milliseconds whatever the order.
var compactRuns = 256

// foldOutcomes folds up to compactOutcomes acknowledged outcomes of the
// first job from order fromOrd on that has some not yet in its summary.
// It returns how many outcomes it folded (0: no job from fromOrd on has
// any left) and the job's order. An error names the job; its order is
// returned with it, so that the caller goes on with the next job. (A
// summary damaged from outside is dropped by checkSummaries.)
func (d *DB) foldOutcomes(ctx context.Context, fromOrd int64) (folded int, ord int64, err error) {
	var (
		id                          []byte
		acked, upto, to, acc, fails int64
		runs                        []pool.TaskRange
	)
	// Read in a read transaction, which holds no commit back; the write
	// below checks that the summary is still the one read.
	err = d.read(ctx, func(tx *sql.Tx) error {
		err := d.in(ctx, tx, "foldPick").QueryRowContext(ctx, fromOrd).Scan(&id, &ord, &acked, &upto, &acc, &fails)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		for n := min(acked-upto, compactOutcomes); ; n = (n + 1) / 2 {
			to = upto + n
			var err error
			if runs, acc, fails, err = d.foldRead(ctx, tx, id, upto, to, acc, fails); err != nil {
				return err
			}
			if len(runs) <= compactRuns || n == 1 {
				return nil
			}
		}
	})
	if err != nil {
		return 0, ord, fmt.Errorf("job %x: %w", id, err)
	}
	if id == nil {
		return 0, 0, nil
	}
	err = d.write(ctx, func(tx *sql.Tx) error {
		var now int64
		err := d.in(ctx, tx, "summaryUpto").QueryRowContext(ctx, id).Scan(&now)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if now != upto {
			return fmt.Errorf("its outcome summary moved from %d to %d meanwhile: %w", upto, now, pool.ErrConflict)
		}
		for _, r := range runs {
			if err := d.addRange(ctx, tx, id, r.From, r.To); err != nil {
				return err
			}
		}
		_, err = d.in(ctx, tx, "summaryWrite").ExecContext(ctx, id, to, acc, fails)
		return err
	})
	if err != nil {
		return 0, ord, fmt.Errorf("job %x: %w", id, err)
	}
	return int(to - upto), ord, nil
}

// foldRead reads the outcomes upto+1 to to of job id and returns their
// tasks as runs of consecutive tasks, in order, and acc and fails with
// them counted. Outcomes missing among them (a damaged database) are an
// error wrapping ErrCorrupt: a summary with a gap would be refused when
// loaded (pool.OutcomeSummary.Check).
func (d *DB) foldRead(ctx context.Context, tx *sql.Tx, id []byte, upto, to, acc, fails int64) (runs []pool.TaskRange, _, _ int64, err error) {
	rows, err := d.in(ctx, tx, "foldRead").QueryContext(ctx, pool.OutcomeOK, id, upto, to)
	if err != nil {
		return nil, 0, 0, err
	}
	defer rows.Close()
	var tasks []int64
	for rows.Next() {
		var (
			task int64
			ok   bool
		)
		if err := rows.Scan(&task, &ok); err != nil {
			return nil, 0, 0, err
		}
		tasks = append(tasks, task)
		if ok {
			acc++
		} else {
			fails++
		}
	}
	if err := rows.Err(); err != nil {
		return nil, 0, 0, err
	}
	// (job, seq) is the outcomes' key: as many rows as seqs is every one.
	if int64(len(tasks)) != to-upto {
		return nil, 0, 0, fmt.Errorf("outcomes %d to %d are not all stored: %w", upto+1, to, ErrCorrupt)
	}
	slices.Sort(tasks)
	for i := 0; i < len(tasks); {
		j := i + 1
		for j < len(tasks) && tasks[j] == tasks[j-1]+1 {
			j++
		}
		runs = append(runs, pool.TaskRange{From: tasks[i], To: tasks[j-1] + 1})
		i = j
	}
	return runs, acc, fails, nil
}

// addRange adds the tasks from to to-1, none of them in the job's ranges
// yet (an outcome per task), to outcome_ranges, merged with the range
// that ends at from and the one that starts at to.
func (d *DB) addRange(ctx context.Context, tx *sql.Tx, id []byte, from, to int64) error {
	var prevFrom, prevTo int64
	err := d.in(ctx, tx, "rangeBefore").QueryRowContext(ctx, id, from).Scan(&prevFrom, &prevTo)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		prevTo = -1
	case err != nil:
		return err
	case prevTo > from:
		return fmt.Errorf("job %x: tasks %d to %d overlap the summary's %d to %d: %w", id, from, to-1, prevFrom, prevTo-1, ErrCorrupt)
	}
	var nextTo int64
	err = d.in(ctx, tx, "rangeTakeAfter").QueryRowContext(ctx, id, to).Scan(&nextTo)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return err
	default:
		to = nextTo
	}
	if prevTo == from {
		_, err = d.in(ctx, tx, "rangeExtend").ExecContext(ctx, to, id, prevFrom)
	} else {
		_, err = d.in(ctx, tx, "rangeInsert").ExecContext(ctx, id, from, to)
	}
	return err
}

// closeOpen drops the replicas named in replicas_open that are done now,
// and returns how many. It finds them in a read transaction and takes the
// write lock only to drop them (a done replica stays done).
func (d *DB) closeOpen(ctx context.Context) (closed int, err error) {
	var done []string
	err = d.read(ctx, func(tx *sql.Tx) error {
		// Each listed lease looked up in replicas, never the other way
		// round: the list is the work in play, replicas the history.
		done, err = leases(ctx, d.in(ctx, tx, "openDone"))
		return err
	})
	if err != nil || len(done) == 0 {
		return 0, err
	}
	for len(done) > 0 {
		part := done[:min(len(done), compactDeletes)]
		err = d.write(ctx, func(tx *sql.Tx) error {
			for _, l := range part {
				if _, err := d.in(ctx, tx, "openDelete").ExecContext(ctx, l); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return closed, err
		}
		closed += len(part)
		done = done[len(part):]
	}
	return closed, nil
}

// compactDeletes bounds the leases closeOpen drops in one transaction.
const compactDeletes = 512

// checkSummaries drops, to be folded again, every outcome summary that
// does not add up (pool.OutcomeSummary.Check: a page lost to a recovery),
// which Load would not hand over. Compact runs it once after the database
// opens, since such damage comes from outside.
func (d *DB) checkSummaries(ctx context.Context) error {
	var damaged []pool.OutcomeSummary
	err := d.read(ctx, func(tx *sql.Tx) error {
		sums, err := loadSummaries(ctx, tx)
		for _, s := range sums {
			if s.Check() != nil {
				damaged = append(damaged, s)
			}
		}
		return err
	})
	if err != nil || len(damaged) == 0 {
		return err
	}
	return d.write(ctx, func(tx *sql.Tx) error {
		for _, s := range damaged {
			res, err := tx.ExecContext(ctx, `DELETE FROM outcome_summaries WHERE job = ? AND upto = ?`, s.Job[:], s.Upto)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil || n == 0 {
				return errors.Join(err, fmt.Errorf("job %s: its outcome summary moved meanwhile: %w", s.Job, pool.ErrConflict))
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM outcome_ranges WHERE job = ?`, s.Job[:]); err != nil {
				return err
			}
		}
		return nil
	})
}

// checkMark starts the mark again from the first row, with no replica
// named in replicas_open, when the row below it is not the one it passed
// (rowids renumbered by a VACUUM or a recovery): Load reads every replica
// meanwhile.
func (d *DB) checkMark(ctx context.Context) error {
	return d.write(ctx, func(tx *sql.Tx) error {
		_, ok, err := d.markHolds(ctx, tx)
		if err != nil || ok {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM replica_mark`); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM replicas_open`)
		return err
	})
}

// markHolds returns the replica mark (0 when none was set) and whether it
// still has below it the row it passed last.
func (d *DB) markHolds(ctx context.Context, tx *sql.Tx) (mark int64, holds bool, err error) {
	mark, below, err := d.readMark(ctx, tx)
	if err != nil || mark == 0 {
		return mark, true, err
	}
	var lease string
	err = d.in(ctx, tx, "leaseBelow").QueryRowContext(ctx, mark).Scan(&lease)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return mark, false, err
	}
	return mark, lease == below, nil
}

// readMark returns the replica mark (0 when none was set) and the lease
// its row below should have.
func (d *DB) readMark(ctx context.Context, tx *sql.Tx) (rowid int64, lease string, err error) {
	err = d.in(ctx, tx, "markRead").QueryRowContext(ctx).Scan(&rowid, &lease)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, "", nil
	}
	return rowid, lease, err
}

// advanceMark passes the next chunk of replica rows after the mark, naming
// the ones not done in replicas_open, and returns whether it moved the
// mark, how many rows it passed and how many of them it named. It reads
// the chunk in a read transaction, which does not hold the Scheduler's
// commits back, and takes the write lock only to move the mark: a row
// read as not done that is done by then is named all the same (the next
// closeOpen drops it), and no row is added below the chunk's end (rowids
// grow).
func (d *DB) advanceMark(ctx context.Context, before time.Time) (moved bool, passed, opened int, err error) {
	var (
		mark, end int64
		lastLease string
		open      []string
	)
	err = d.read(ctx, func(tx *sql.Tx) error {
		var err error
		if mark, _, err = d.readMark(ctx, tx); err != nil {
			return err
		}
		var last sql.NullInt64
		if err := d.in(ctx, tx, "maxRowid").QueryRowContext(ctx).Scan(&last); err != nil {
			return err
		}
		from := max(mark, 1) // rowids start at 1
		end = min(from+compactReplicas, last.Int64+1)
		if end <= from {
			end = mark
			return nil
		}
		if err := d.in(ctx, tx, "leaseBelow").QueryRowContext(ctx, end).Scan(&lastLease); err != nil {
			return err
		}
		// One pass counts the chunk's rows, its newest and those not
		// done; a second reads the leases of those, only when the mark
		// passes them.
		var newest, notDone int64
		if err := d.in(ctx, tx, "chunkCount").QueryRowContext(ctx, from, end).Scan(&passed, &newest, &notDone); err != nil {
			return err
		}
		if 2*notDone > int64(passed) && newest >= ms(before) {
			end = mark // the work in play: pass it later
			return nil
		}
		if notDone > 0 {
			var err error
			open, err = leases(ctx, d.in(ctx, tx, "chunkOpen"), from, end)
			return err
		}
		return nil
	})
	if err != nil || end <= mark {
		return false, 0, 0, err
	}
	err = d.write(ctx, func(tx *sql.Tx) error {
		if now, _, err := d.readMark(ctx, tx); err != nil || now != mark {
			return errors.Join(err, fmt.Errorf("the replica mark moved from %d to %d meanwhile: %w", mark, now, pool.ErrConflict))
		}
		for _, l := range open {
			if _, err := d.in(ctx, tx, "openInsert").ExecContext(ctx, l); err != nil {
				return err
			}
		}
		_, err := d.in(ctx, tx, "markWrite").ExecContext(ctx, end, lastLease)
		return err
	})
	if err != nil {
		return false, 0, 0, err
	}
	return true, passed, len(open), nil
}

// read runs f in a read transaction, which sees one state of the
// database and holds no writer back (WAL).
func (d *DB) read(ctx context.Context, f func(tx *sql.Tx) error) error {
	tx, err := d.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return err
	}
	defer tx.Rollback()
	return f(tx)
}

// leases returns the first column, a lease, of each row of st.
func leases(ctx context.Context, st *sql.Stmt, args ...any) ([]string, error) {
	rows, err := st.QueryContext(ctx, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var l string
		if err := rows.Scan(&l); err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, rows.Err()
}

// loadSummaries reads every job's outcome summary, in the jobs' order.
func loadSummaries(ctx context.Context, tx *sql.Tx) ([]pool.OutcomeSummary, error) {
	ranges := map[string][]pool.TaskRange{}
	rows, err := tx.QueryContext(ctx, `SELECT job, task_from, task_to FROM outcome_ranges ORDER BY job, task_from`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var (
			id []byte
			r  pool.TaskRange
		)
		if err := rows.Scan(&id, &r.From, &r.To); err != nil {
			rows.Close()
			return nil, err
		}
		ranges[string(id)] = append(ranges[string(id)], r)
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	rows, err = tx.QueryContext(ctx, `SELECT s.job, s.upto, s.accepted, s.failed
		FROM outcome_summaries s JOIN jobs j ON j.id = s.job ORDER BY j.ord`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []pool.OutcomeSummary
	for rows.Next() {
		var (
			sum pool.OutcomeSummary
			id  []byte
		)
		if err := rows.Scan(&id, &sum.Upto, &sum.Accepted, &sum.Failed); err != nil {
			return nil, err
		}
		copy(sum.Job[:], id)
		sum.Decided = ranges[string(id)]
		out = append(out, sum)
	}
	return out, rows.Err()
}
