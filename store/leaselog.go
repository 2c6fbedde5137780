package store

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"idlepool/job"
	"idlepool/pool"
)

// The lease log (migration 0012) keeps a plain lease out of the replicas
// table until its first change. A group commit writes the leases it
// grants as one row of lease_log instead of one row of replicas each;
// the replica gets its row when it changes (returned, expired, released,
// withdrawn, or a heartbeat's new deadline), and that row is inserted,
// not updated. So a replica that is leased and returned in different
// commits costs one insert instead of an insert and an update, which
// made about a fifth of the statements of a group commit
// (docs/benchmarks.md, "A lease's row written at its first change").
//
// What a restart restores is unchanged: Open reads the log from its mark
// and keeps the replicas still only in it in memory (leaseLog), and Load
// hands them over with the table's. The compare-and-set on Version and
// the refusal of a lease inserted twice are checked against that memory.
// Compact writes the replicas still only in the log into one new row,
// moves the mark to it and deletes the rows below it, which hold nothing
// else (relogLeases): so a restart reads the leases in play and those
// granted since the last compaction, however old the oldest lease in
// play.

// leaseLogFormat is the first byte of a lease_log.body value.
const leaseLogFormat = 1

// errLeaseLog is what a lease_log row whose bytes do not decode wraps
// (with ErrCorrupt).
var errLeaseLog = errors.New("lease log row does not decode")

// loggedLease is a replica whose only committed change is its lease:
// what a plain lease's record holds (plainLease), times in unix
// milliseconds as the replicas table keeps them.
type loggedLease struct {
	job               job.ID
	task              int64
	peer, owner       string
	created, deadline int64
	digest            job.Digest
	version           int64
}

// plainLease reports whether r, a record inserted with Prev 0, is a
// plain lease that the log may hold: state leased and nothing returned,
// failed or counted.
func plainLease(r *pool.ReplicaRecord) bool {
	return r.Lease != "" && r.State == pool.ReplicaLeased && !r.Failed && r.Reason == "" && r.Result == nil && r.Ref == nil && r.Work == nil
}

// record returns l as the replica record Load and Replica hand over, the
// same as its row in replicas would give.
func (l *loggedLease) record(lease string) pool.ReplicaRecord {
	return pool.ReplicaRecord{Lease: lease, Job: l.job, Task: l.task, Peer: l.peer, Owner: l.owner,
		State: pool.ReplicaLeased, Created: time.UnixMilli(l.created), Deadline: time.UnixMilli(l.deadline),
		Digest: l.digest, Version: l.version}
}

// leaseLog is the DB's memory of the replicas that are only in
// lease_log: the leases committed and not yet changed. Its mu guards
// its fields; Commit changes them only after its transaction committed,
// and holds DB.commitMu meanwhile, so that no other commit reads them
// between the two.
type leaseLog struct {
	mu   sync.Mutex
	open map[string]*loggedLease
	// maxLease is the greatest lease below "g" (every ID of 32 hex
	// digits that pool.NewLeaseID mints is) that the database has
	// accepted, in the table or the log: a lease ID below "g" and above
	// it cannot be in the table, so inserting it needs no lookup.
	maxLease string
	// last is the seq of the newest row of lease_log known, 0 if none;
	// mark is the log's mark (lease_log_mark.seq).
	last, mark int64
	// maxRowid is the greatest rowid of replicas committed.
	maxRowid int64
}

// leaseChanges are one Commit's changes to the lease log, applied to
// leaseLog once its transaction committed.
type leaseChanges struct {
	adds     []pool.ReplicaRecord // plain leases to log, in the batch's order
	added    map[string]int       // lease → index in adds, -1 once it left them
	moved    map[string]bool      // leases of leaseLog.open given a row in this batch
	inserted map[string]bool      // leases inserted into replicas in this batch
	maxLease string               // the greatest lease below "g" accepted in this batch
	maxRowid int64                // the greatest rowid inserted into replicas in this batch
}

func (c *leaseChanges) accept(lease string) {
	if lease < "g" && lease > c.maxLease {
		c.maxLease = lease
	}
}

// logged returns the replica of lease that is only in the log as of
// this point of the batch: one the batch added, or one committed before
// that the batch has not moved to the table yet.
func (d *DB) logged(c *leaseChanges, lease string) (*loggedLease, bool) {
	if i, ok := c.added[lease]; ok {
		if i < 0 {
			return nil, false
		}
		r := &c.adds[i]
		return &loggedLease{job: r.Job, task: r.Task, peer: r.Peer, owner: r.Owner,
			created: ms(r.Created), deadline: ms(r.Deadline), digest: r.Digest, version: r.Version}, true
	}
	if c.moved[lease] {
		return nil, false
	}
	d.leases.mu.Lock()
	l, ok := d.leases.open[lease]
	d.leases.mu.Unlock()
	return l, ok
}

// leaseTaken reports whether lease is already in the database or in this
// batch, for an insert: in the log, or in replicas (looked up only when
// maxLease cannot rule it out).
func (d *DB) leaseTaken(ctx context.Context, c *leaseChanges, exists *sql.Stmt, lease string) (bool, error) {
	if _, ok := c.added[lease]; ok || c.inserted[lease] {
		return true, nil
	}
	d.leases.mu.Lock()
	_, open := d.leases.open[lease]
	max := d.leases.maxLease
	d.leases.mu.Unlock()
	if open {
		return true, nil
	}
	if lease < "g" && lease > max {
		return false, nil
	}
	var one int
	err := exists.QueryRowContext(ctx, lease).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// apply records c, committed in lease_log row seq (0 when c added no
// lease).
func (g *leaseLog) apply(c *leaseChanges, seq int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for lease := range c.moved {
		delete(g.open, lease)
	}
	for _, r := range c.adds {
		if c.added[r.Lease] < 0 {
			continue
		}
		g.open[r.Lease] = &loggedLease{job: r.Job, task: r.Task, peer: r.Peer, owner: r.Owner,
			created: ms(r.Created), deadline: ms(r.Deadline), digest: r.Digest, version: r.Version}
	}
	if c.maxLease > g.maxLease {
		g.maxLease = c.maxLease
	}
	g.last = max(g.last, seq)
	g.maxRowid = max(g.maxRowid, c.maxRowid)
}

// records returns the replicas only in the log.
func (g *leaseLog) records() []pool.ReplicaRecord {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]pool.ReplicaRecord, 0, len(g.open))
	for lease, l := range g.open {
		out = append(out, l.record(lease))
	}
	return out
}

// lookup returns the replica of lease if it is only in the log.
func (g *leaseLog) lookup(lease string) (pool.ReplicaRecord, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	l, ok := g.open[lease]
	if !ok {
		return pool.ReplicaRecord{}, false
	}
	return l.record(lease), true
}

// appendLeaseLog appends a lease_log body holding the plain leases rs to
// b: leaseLogFormat, then per replica its lease, job (32 bytes), task
// (varint), peer, owner, created and deadline (unix milliseconds,
// varints), digest (32 bytes) and version (varint), each string as a
// uvarint length and its bytes.
func appendLeaseLog(b []byte, rs []pool.ReplicaRecord, skip map[string]int) []byte {
	b = append(b, leaseLogFormat)
	for i := range rs {
		r := &rs[i]
		if skip[r.Lease] < 0 {
			continue
		}
		b = appendString(b, r.Lease)
		b = append(b, r.Job[:]...)
		b = binary.AppendVarint(b, r.Task)
		b = appendString(b, r.Peer)
		b = appendString(b, r.Owner)
		b = binary.AppendVarint(b, ms(r.Created))
		b = binary.AppendVarint(b, ms(r.Deadline))
		b = append(b, r.Digest[:]...)
		b = binary.AppendVarint(b, r.Version)
	}
	return b
}

// decodeLeaseLog returns the leases of lease_log row seq, whose body is
// b; bytes that do not decode are an error naming the row, wrapping
// ErrCorrupt.
func decodeLeaseLog(seq int64, b []byte) (map[string]*loggedLease, []string, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("lease log row %d: %s: %w: %w", seq, fmt.Sprintf(format, args...), errLeaseLog, ErrCorrupt)
	}
	if len(b) == 0 || b[0] != leaseLogFormat {
		return nil, nil, bad("unknown format")
	}
	r := blockReader{b: b[1:]}
	out := map[string]*loggedLease{}
	var order []string
	for len(r.b) > 0 {
		lease := r.string()
		l := &loggedLease{}
		l.job = job.ID(r.digest())
		l.task = r.varint()
		l.peer = r.string()
		l.owner = r.string()
		l.created = r.varint()
		l.deadline = r.varint()
		l.digest = r.digest()
		l.version = r.varint()
		if r.err != nil {
			return nil, nil, bad("replica %d: %v", len(order)+1, r.err)
		}
		if lease == "" || out[lease] != nil {
			return nil, nil, bad("lease %q empty or twice", lease)
		}
		out[lease] = l
		order = append(order, lease)
	}
	return out, order, nil
}

// openLeaseLog reads the lease log from its mark into d.leases: every
// logged replica that has no row in replicas yet. Those that have one
// got it after the mark was set, so only the rows of replicas after the
// mark's replicas_rowid are read to find them. A row that does not
// decode is an error wrapping ErrCorrupt.
func (d *DB) openLeaseLog(ctx context.Context) error {
	g := &leaseLog{open: map[string]*loggedLease{}}
	err := d.read(ctx, func(tx *sql.Tx) error {
		var max sql.NullString
		if err := tx.QueryRowContext(ctx, `SELECT max(lease) FROM replicas WHERE lease < 'g'`).Scan(&max); err != nil {
			return err
		}
		g.maxLease = max.String
		if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(rowid), 0) FROM replicas`).Scan(&g.maxRowid); err != nil {
			return err
		}
		var after int64 // replicas_rowid
		err := tx.QueryRowContext(ctx, `SELECT seq, replicas_rowid FROM lease_log_mark WHERE id = 1`).Scan(&g.mark, &after)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(seq), 0) FROM lease_log`).Scan(&g.last); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `SELECT seq, body FROM lease_log WHERE seq >= ? ORDER BY seq`, g.mark)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				seq  int64
				body []byte
			)
			if err := rows.Scan(&seq, &body); err != nil {
				return err
			}
			ls, order, err := decodeLeaseLog(seq, body)
			if err != nil {
				return err
			}
			for _, lease := range order {
				// A replica logged again (a compaction's new row) is
				// taken from its newest row.
				g.open[lease] = ls[lease]
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(g.open) == 0 {
			return nil
		}
		moved, err := tx.QueryContext(ctx, `SELECT lease FROM replicas WHERE rowid > ?`, after)
		if err != nil {
			return err
		}
		defer moved.Close()
		for moved.Next() {
			var lease string
			if err := moved.Scan(&lease); err != nil {
				return err
			}
			delete(g.open, lease)
		}
		if err := moved.Err(); err != nil {
			return err
		}
		for lease := range g.open {
			if lease < "g" && lease > g.maxLease {
				g.maxLease = lease
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read lease log: %w", classify(err))
	}
	d.leases = g
	return nil
}

// trimLeaseLog moves the lease log's mark past every row but one
// (relogLeases) and deletes the rows below it, at most leaseLogTrim a
// transaction. It returns the rows deleted.
func (d *DB) trimLeaseLog(ctx context.Context) (int, error) {
	low, err := d.relogLeases(ctx)
	if err != nil {
		return 0, err
	}
	deleted := 0
	for ctx.Err() == nil {
		var n int64
		err := d.write(ctx, func(tx *sql.Tx) error {
			res, err := tx.ExecContext(ctx, `DELETE FROM lease_log WHERE seq IN
				(SELECT seq FROM lease_log WHERE seq < ? ORDER BY seq LIMIT ?)`, low, leaseLogTrim)
			if err != nil {
				return err
			}
			n, err = res.RowsAffected()
			return err
		})
		deleted += int(n)
		if err != nil || n < int64(leaseLogTrim) {
			return deleted, err
		}
	}
	return deleted, ctx.Err()
}

// relogLeases writes every replica still only in the lease log into one
// new row and sets the mark to it, with the greatest rowid of replicas
// (past the log's end, when no replica is only in it), unless no row
// was written after the mark's; it returns the mark. Every row below
// it is then superseded, however old the oldest lease still unchanged:
// a restart reads the replicas in play and the leases since the last
// compaction, not every lease since the oldest one in play. It holds
// commitMu, so that no commit comes between what it reads of the log's
// memory and its row (a few milliseconds: one insert).
func (d *DB) relogLeases(ctx context.Context) (int64, error) {
	d.commitMu.Lock()
	defer d.commitMu.Unlock()
	g := d.leases
	g.mu.Lock()
	if g.last < g.mark || g.last == g.mark && len(g.open) > 0 {
		// No row since the mark's, whose replicas are the ones in play
		// (or past the log's end already): nothing to supersede.
		g.mu.Unlock()
		return g.mark, nil
	}
	var recs []pool.ReplicaRecord
	for lease, l := range g.open {
		recs = append(recs, l.record(lease))
	}
	mark, after := g.last+1, g.maxRowid
	g.mu.Unlock()
	sortReplicas(recs)
	err := d.write(ctx, func(tx *sql.Tx) error {
		if len(recs) > 0 {
			res, err := tx.ExecContext(ctx, `INSERT INTO lease_log(body) VALUES (?)`,
				appendLeaseLog(make([]byte, 0, 160*len(recs)), recs, nil))
			if err != nil {
				return err
			}
			if mark, err = res.LastInsertId(); err != nil {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO lease_log_mark(id, seq, replicas_rowid) VALUES (1, ?, ?)
			ON CONFLICT(id) DO UPDATE SET seq = excluded.seq, replicas_rowid = excluded.replicas_rowid`, mark, after)
		return err
	})
	if err != nil {
		return 0, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.mark = mark
	if len(recs) > 0 {
		g.last = mark
	}
	return mark, nil
}

// leaseLogTrim bounds the lease_log rows one transaction of
// trimLeaseLog deletes.
var leaseLogTrim = 256

// replicaOrder is the order Load hands replicas over in: by creation,
// then lease.
func replicaOrder(a, b pool.ReplicaRecord) int {
	if c := a.Created.Compare(b.Created); c != 0 {
		return c
	}
	return strings.Compare(a.Lease, b.Lease)
}

// sortReplicas sorts rs by replicaOrder.
func sortReplicas(rs []pool.ReplicaRecord) { slices.SortFunc(rs, replicaOrder) }

// mergeReplicas merges a and b, each sorted by replicaOrder, into one
// slice so sorted.
func mergeReplicas(a, b []pool.ReplicaRecord) []pool.ReplicaRecord {
	out := make([]pool.ReplicaRecord, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if replicaOrder(a[0], b[0]) <= 0 {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	return append(append(out, a...), b...)
}
