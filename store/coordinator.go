package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"idlepool/castore"
	"idlepool/job"
	"idlepool/pool"
)

// DB is a coordinator's pool state in one SQLite file (schema
// migrations/coordinator). It implements pool.Store; it is safe for
// concurrent use (Commit serialises on SQLite's write lock, reads run in
// parallel under WAL).
type DB struct {
	db    *sql.DB
	stmts map[string]*sql.Stmt // prepared once, by name
	// summariesChecked is set once Compact has checked every outcome
	// summary since the database opened (compact.go).
	summariesChecked atomic.Bool
	// commitMu serialises Commit (SQLite's write lock would anyway) with
	// its update of tail after the transaction.
	commitMu sync.Mutex
	// tail lists the peers of the ledger blocks that
	// ledger_block_peers does not list yet (blockpeers.go).
	tail *peerTail
}

var (
	_ pool.Store        = (*DB)(nil)
	_ pool.EntryCounter = (*DB)(nil)
)

// statements Commit uses, prepared once when the database opens.
var statements = map[string]string{
	"peer": `INSERT INTO peers(id, owner, key, owner_key, endorsement, name, joined)
		VALUES (?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT(id) DO UPDATE SET name = excluded.name
		WHERE peers.key = excluded.key AND peers.owner_key = excluded.owner_key`,
	"job": `INSERT INTO jobs(id, canonical, owner, merger, ord, added, acked, known_answers)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
	"replicaInsert": `INSERT INTO replicas
		(lease, job, task, peer, owner, state, created, deadline, digest, failed, reason, result, ref, work_rule, work, version)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
	"replicaUpdate": `UPDATE replicas SET state = ?, deadline = ?, digest = ?, failed = ?,
		reason = ?, result = ?, ref = ?, work_rule = ?, work = ?, version = ? WHERE lease = ? AND version = ?`,
	"outcome": `INSERT INTO outcomes(job, seq, task, status, digest, reason, result, ref, holders, work)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
	"ack": `UPDATE jobs SET acked = ? WHERE id = ? AND acked = ?`,
	"ackResults": `UPDATE outcomes SET result = NULL, ref = NULL, holders = NULL
		WHERE job = ? AND seq > ? AND seq <= ?`,
	"cancel":     `UPDATE jobs SET cancelled = ? WHERE id = ? AND cancelled = 0`,
	"ledgerHead": ledgerHead,
	"entry": `INSERT INTO ledger
		(seq, prev, hash, kind, pool, job, task, peer, owner, lease, digest, cost, work, time, reason, sig, tree)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
	"block":          `INSERT INTO ledger_blocks(last, first, prev, hash, sig, entries) VALUES (?, ?, ?, ?, ?, ?)`,
	"blockPeer":      `INSERT INTO ledger_block_peers(peer, last) VALUES (?, ?)`,
	"blockPeersUpto": `UPDATE ledger_block_peers_upto SET upto = ? WHERE id = 1`,
	"blockKind": `INSERT INTO ledger_block_kinds(kind, count) VALUES (?, ?)
		ON CONFLICT(kind) DO UPDATE SET count = count + excluded.count`,
	"blockKindsUpto": `UPDATE ledger_block_kinds_upto SET upto = ? WHERE id = 1`,

	"trustInsert": `INSERT INTO trust(kind, id, record, version) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING`,
	"trustUpdate": `UPDATE trust SET record = ?, version = ? WHERE kind = ? AND id = ? AND version = ?`,
}

// Open opens (creating it if needed) the coordinator database at path and
// brings its schema up to date. A damaged file fails with an error
// wrapping ErrCorrupt: the pool's state exists nowhere else, so it is
// never replaced here.
func Open(path string, opts ...Option) (*DB, error) {
	ctx := context.Background()
	db, err := openSQLite(ctx, path, "coordinator", opts...)
	if err != nil {
		return nil, err
	}
	d := &DB{db: db, stmts: map[string]*sql.Stmt{}}
	for name, q := range statements {
		st, err := db.PrepareContext(ctx, q)
		if err != nil {
			db.Close()
			return nil, fmt.Errorf("open %s: prepare %s: %w", path, name, classify(err))
		}
		d.stmts[name] = st
	}
	if err := d.openPeerTail(ctx); err != nil {
		d.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return d, nil
}

// Close closes the database. Committed batches are durable already.
func (d *DB) Close() error {
	for _, st := range d.stmts {
		st.Close()
	}
	return d.db.Close()
}

func ms(t time.Time) int64 { return t.UnixMilli() }

func conflict(format string, args ...any) error {
	return fmt.Errorf("%w: %w: %s", ErrConflict, pool.ErrConflict, fmt.Sprintf(format, args...))
}

// Commit applies b in one transaction (see pool.Store for the contract):
// inserts and compare-and-set updates whose zero affected rows are a
// conflict that rolls everything back.
func (d *DB) Commit(ctx context.Context, b *pool.Batch) (err error) {
	d.commitMu.Lock()
	defer d.commitMu.Unlock()
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("commit: %w", classify(err))
	}
	defer func() {
		if err != nil {
			tx.Rollback()
			err = fmt.Errorf("commit: %w", classify(err))
		}
	}()
	txStmts := map[string]*sql.Stmt{}
	stmt := func(name string) *sql.Stmt {
		st := txStmts[name]
		if st == nil {
			st = tx.StmtContext(ctx, d.stmts[name])
			txStmts[name] = st
		}
		return st
	}
	exec := func(name string, args ...any) (int64, error) {
		res, err := stmt(name).ExecContext(ctx, args...)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", name, classify(err))
		}
		return res.RowsAffected()
	}
	for _, p := range b.Peers {
		n, err := exec("peer", p.ID, p.Owner, []byte(p.Key), []byte(p.OwnerKey), nonNil(p.Endorsement), p.Name, ms(p.Joined))
		if err != nil {
			return err
		}
		if n == 0 {
			return conflict("peer %s is registered with other keys", p.ID)
		}
	}
	for _, j := range b.Jobs {
		var known []byte // NULL when the job has none
		if j.KnownAnswers != (job.Digest{}) {
			known = j.KnownAnswers[:]
		}
		n, err := exec("job", j.ID[:], j.Canonical, j.Owner, j.Merger, j.Order, ms(j.Added), j.Acked, known)
		if err != nil {
			return err
		}
		if n == 0 {
			return conflict("job %s or order %d exists", j.ID, j.Order)
		}
	}
	for _, r := range b.Replicas {
		ref, err := refJSON(r.Ref)
		if err != nil {
			return fmt.Errorf("replica %s: %w", r.Lease, err)
		}
		rule, work, err := workColumns(r.Work)
		if err != nil {
			return fmt.Errorf("replica %s: %w", r.Lease, err)
		}
		var n int64
		if r.Prev == 0 {
			n, err = exec("replicaInsert", r.Lease, r.Job[:], r.Task, r.Peer, r.Owner, r.State,
				ms(r.Created), ms(r.Deadline), r.Digest[:], r.Failed, r.Reason, r.Result, ref, rule, work, r.Version)
		} else {
			n, err = exec("replicaUpdate", r.State, ms(r.Deadline), r.Digest[:], r.Failed, r.Reason,
				r.Result, ref, rule, work, r.Version, r.Lease, r.Prev)
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return conflict("replica %s is not at version %d", r.Lease, r.Prev)
		}
	}
	for _, o := range b.Outcomes {
		ref, err := refJSON(o.Ref)
		if err != nil {
			return fmt.Errorf("outcome %d of job %s: %w", o.Seq, o.Job, err)
		}
		holders, err := holdersJSON(o.Holders)
		if err != nil {
			return fmt.Errorf("outcome %d of job %s: %w", o.Seq, o.Job, err)
		}
		if o.Work > pool.MaxWorkCount {
			return fmt.Errorf("outcome %d of job %s: work %d over %d", o.Seq, o.Job, o.Work, uint64(pool.MaxWorkCount))
		}
		n, err := exec("outcome", o.Job[:], o.Seq, o.Task, o.Status, o.Digest[:], o.Reason, o.Result, ref, holders, int64(o.Work))
		if err != nil {
			return err
		}
		if n == 0 {
			return conflict("job %s already has outcome %d or an outcome for task %d", o.Job, o.Seq, o.Task)
		}
	}
	for _, a := range b.Acks {
		n, err := exec("ack", a.Upto, a.Job[:], a.Prev)
		if err != nil {
			return err
		}
		if n == 0 {
			return conflict("job %s is not acknowledged up to %d", a.Job, a.Prev)
		}
		if _, err := exec("ackResults", a.Job[:], a.Prev, a.Upto); err != nil {
			return err
		}
	}
	for _, c := range b.Cancels {
		if c.At.IsZero() {
			return conflict("cancel of job %s has no time", c.Job)
		}
		n, err := exec("cancel", ms(c.At), c.Job[:])
		if err != nil {
			return err
		}
		if n == 0 {
			return conflict("job %s is unknown or cancelled already", c.Job)
		}
	}
	for _, t := range b.Trust {
		var n int64
		if t.Prev == 0 {
			n, err = exec("trustInsert", t.Kind, t.ID, t.Record, t.Version)
		} else {
			n, err = exec("trustUpdate", t.Record, t.Version, t.Kind, t.ID, t.Prev)
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return conflict("trust record %s %s is not at version %d", t.Kind, t.ID, t.Prev)
		}
	}
	var (
		blocks []blockPeers // the blocks this batch adds
		pairs  int          // and their peers, counted
	)
	if len(b.Entries) > 0 {
		var (
			last     int64
			lastHash []byte
		)
		err := stmt("ledgerHead").QueryRowContext(ctx).Scan(&last, &lastHash)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		var prev job.Digest
		copy(prev[:], lastHash)
		hashes, whole := b.Hashes() // whole: the Scheduler's batch, its hashes known
		for i, e := range b.Entries {
			if e.Seq != uint64(last)+1 || e.Prev != prev {
				return conflict("ledger entry %d does not follow entry %d", e.Seq, last)
			}
			if e.Work > pool.MaxWorkCount {
				return fmt.Errorf("ledger entry %d: work %d over %d", e.Seq, e.Work, uint64(pool.MaxWorkCount))
			}
			last, prev = int64(e.Seq), hashes[i]
		}
		for i := 0; i < len(b.Entries); {
			var n int
			if whole && i == 0 {
				n = len(b.Entries)
			} else {
				n = pool.WholeBatch(b.Entries[i:], hashes[i:])
			}
			if n > 0 && n <= maxBlock {
				// One row for the batch (migrations/coordinator/0010).
				bp, err := insertBlock(exec, b.Entries[i:i+n], hashes[i+n-1])
				if err != nil {
					return err
				}
				blocks = append(blocks, bp)
				pairs += len(bp.peers)
				i += n
				continue
			}
			e := &b.Entries[i]
			var tree []byte // NULL for an entry signed alone
			if e.Tree != nil {
				tree, _ = e.Tree.MarshalBinary()
			}
			if err := insertEntry(exec, e, hashes[i], e.Sig, tree); err != nil {
				return err
			}
			i++
		}
	}
	if d.tail.isStale() {
		// A commit whose outcome was unknown left the memory's list
		// unsure: read it again from what is committed.
		if err := d.tail.load(ctx, tx); err != nil {
			return fmt.Errorf("read the peers of the newest ledger blocks: %w", classify(err))
		}
	}
	// The memory's list changes before the commit, so that no read sees
	// a committed block it does not list (a read that finds a listed
	// block not committed yet stops there).
	if len(blocks) > 0 && d.tail.due(pairs) {
		// The peers and the counts by kind of the blocks listed in
		// memory and of this batch's, in one burst (blockpeers.go).
		listed, kinds := d.tail.listed(blocks)
		for _, bp := range listed {
			for _, p := range bp.peers {
				if _, err := exec("blockPeer", p, bp.last); err != nil {
					return err
				}
			}
		}
		for _, c := range kinds {
			if _, err := exec("blockKind", c.kind, c.n); err != nil {
				return err
			}
		}
		upto := blocks[len(blocks)-1].last
		if _, err := exec("blockPeersUpto", upto); err != nil {
			return err
		}
		if _, err := exec("blockKindsUpto", upto); err != nil {
			return err
		}
		d.tail.flushed(upto, upto)
	} else if len(blocks) > 0 {
		d.tail.add(blocks)
	}
	if commitSeam != nil {
		commitSeam(false)
	}
	if err := tx.Commit(); err != nil {
		if len(blocks) > 0 {
			// Whether it landed is not known for every error: reads
			// decode the blocks after the table's upto until the next
			// commit reads the list again.
			d.tail.markStale()
		}
		return err
	}
	if commitSeam != nil {
		commitSeam(true)
	}
	return nil
}

// commitSeam, when not nil, is called by Commit just before its
// transaction commits (false) and just after (true), its changes to the
// memory's list of the newest blocks' peers made (tests: reads there).
var commitSeam func(committed bool)

// ledgerHead selects the seq and hash of the ledger's last entry: the
// last row of ledger or the last block of ledger_blocks, whichever comes
// later; no row for an empty ledger.
const ledgerHead = `SELECT seq, hash FROM (
		SELECT seq, hash FROM (SELECT seq, hash FROM ledger ORDER BY seq DESC LIMIT 1)
		UNION ALL
		SELECT last, hash FROM (SELECT last, hash FROM ledger_blocks ORDER BY last DESC LIMIT 1)
	) ORDER BY seq DESC LIMIT 1`

// insertBlock inserts entries, one batch signed whole whose last entry's
// Hash is h, as one row of ledger_blocks, and returns its last seq, the
// peers it names and its entries counted by kind (for ledger_block_peers
// and ledger_block_kinds, written in bursts: blockpeers.go).
func insertBlock(exec func(string, ...any) (int64, error), entries []pool.Entry, h job.Digest) (blockPeers, error) {
	first, last := entries[0].Seq, entries[len(entries)-1].Seq
	if _, err := exec("block", int64(last), int64(first), entries[0].Prev[:], h[:], entries[0].Sig,
		appendBlock(make([]byte, 0, 200*len(entries)), entries)); err != nil {
		return blockPeers{}, err
	}
	return blockOf(int64(last), entries), nil
}

// insertEntry inserts e's ledger row, its hash h, with sig and tree as
// given.
func insertEntry(exec func(string, ...any) (int64, error), e *pool.Entry, h job.Digest, sig, tree []byte) error {
	_, err := exec("entry", int64(e.Seq), e.Prev[:], h[:], e.Kind, e.Pool, e.Job[:], e.Task,
		e.Peer, e.Owner, e.Lease, e.Digest[:], e.Cost, int64(e.Work), e.Time, e.Reason, sig, tree)
	return err
}

// Load reads everything committed (see pool.Snapshot).
func (d *DB) Load(ctx context.Context) (*pool.Snapshot, error) {
	tx, err := d.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("load: %w", classify(err))
	}
	defer tx.Rollback()
	s := &pool.Snapshot{}
	scan := func(query string, row func(*sql.Rows) error) error {
		rows, err := tx.QueryContext(ctx, query)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			if err := row(rows); err != nil {
				return err
			}
		}
		return rows.Err()
	}
	err = scan(`SELECT id, owner, key, owner_key, endorsement, name, joined FROM peers ORDER BY joined, id`, func(r *sql.Rows) error {
		var (
			p             pool.Peer
			key, ownerKey []byte
			joined        int64
		)
		if err := r.Scan(&p.ID, &p.Owner, &key, &ownerKey, &p.Endorsement, &p.Name, &joined); err != nil {
			return err
		}
		p.Key, p.OwnerKey, p.Joined = key, ownerKey, time.UnixMilli(joined)
		s.Peers = append(s.Peers, p)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load peers: %w", classify(err))
	}
	err = scan(`SELECT id, canonical, owner, merger, ord, added, acked, cancelled, known_answers FROM jobs ORDER BY ord`, func(r *sql.Rows) error {
		var (
			j                pool.JobRecord
			id, known        []byte
			added, cancelled int64
		)
		if err := r.Scan(&id, &j.Canonical, &j.Owner, &j.Merger, &j.Order, &added, &j.Acked, &cancelled, &known); err != nil {
			return err
		}
		copy(j.ID[:], id)
		copy(j.KnownAnswers[:], known)
		j.Added = time.UnixMilli(added)
		if cancelled != 0 {
			j.Cancelled = time.UnixMilli(cancelled)
		}
		s.Jobs = append(s.Jobs, j)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load jobs: %w", classify(err))
	}
	// The replicas from the mark on, and those below it that were not
	// done when it passed them (compact.go); all of them when the rows
	// below the mark are not the ones it passed.
	mark, holds, err := d.markHolds(ctx, tx)
	if err != nil {
		return nil, fmt.Errorf("load replica mark: %w", classify(err))
	}
	if !holds {
		mark = 0
	}
	err = scan(fmt.Sprintf(`SELECT %[1]s FROM replicas WHERE rowid >= %[2]d
		UNION ALL SELECT %[1]s FROM replicas WHERE rowid < %[2]d AND lease IN (SELECT lease FROM replicas_open)
		ORDER BY created, lease`, replicaColumns, mark), func(r *sql.Rows) error {
		x, err := scanReplica(r.Scan)
		if err != nil {
			return err
		}
		s.Replicas = append(s.Replicas, x)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load replicas: %w", classify(err))
	}
	if s.Summaries, err = loadSummaries(ctx, tx); err != nil {
		return nil, fmt.Errorf("load outcome summaries: %w", classify(err))
	}
	// The outcomes after each job's summary; every outcome, and no
	// summary, when one does not add up (a damaged database: the
	// outcomes are all still stored, and the next compaction folds that
	// job again).
	after := `coalesce(s.upto, 0)`
	for i := range s.Summaries {
		if s.Summaries[i].Check() != nil {
			s.Summaries, after = nil, `0`
			break
		}
	}
	err = scan(`SELECT o.job, o.seq, o.task, o.status, o.digest, o.reason, o.result, o.ref, o.holders, o.work
		FROM jobs j LEFT JOIN outcome_summaries s ON s.job = j.id
		JOIN outcomes o ON o.job = j.id AND o.seq > `+after+` ORDER BY j.ord, o.seq`, func(r *sql.Rows) error {
		var (
			o                     pool.OutcomeRecord
			id, dig, ref, holders []byte
			work                  int64
		)
		if err := r.Scan(&id, &o.Seq, &o.Task, &o.Status, &dig, &o.Reason, &o.Result, &ref, &holders, &work); err != nil {
			return err
		}
		o.Work = uint64(work)
		copy(o.Job[:], id)
		copy(o.Digest[:], dig)
		var err error
		if o.Ref, err = parseRef(ref); err != nil {
			return fmt.Errorf("outcome %d of job %s: %w", o.Seq, o.Job, err)
		}
		if o.Holders, err = parseHolders(holders); err != nil {
			return fmt.Errorf("outcome %d of job %s: %w", o.Seq, o.Job, err)
		}
		s.Outcomes = append(s.Outcomes, o)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load outcomes: %w", classify(err))
	}
	err = scan(`SELECT kind, id, record, version FROM trust ORDER BY rowid`, func(r *sql.Rows) error {
		var t pool.TrustRecord
		if err := r.Scan(&t.Kind, &t.ID, &t.Record, &t.Version); err != nil {
			return err
		}
		s.Trust = append(s.Trust, t)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load trust records: %w", classify(err))
	}
	var (
		last int64
		hash []byte
	)
	err = tx.QueryRowContext(ctx, ledgerHead).Scan(&last, &hash)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("load ledger head: %w", classify(err))
	}
	s.LedgerSeq = uint64(last)
	copy(s.LedgerHash[:], hash)
	return s, nil
}

// replicaColumns are the columns of replicas that scanReplica reads, in
// its order.
const replicaColumns = `lease, job, task, peer, owner, state, created, deadline, digest, failed, reason, result, ref, work_rule, work, version`

// scanReplica reads one row of replicaColumns with scan (a Rows' or Row's
// Scan). A ref that does not decode or is not a valid manifest is an
// error naming the replica, wrapping castore.ErrBadManifest.
func scanReplica(scan func(dest ...any) error) (pool.ReplicaRecord, error) {
	var (
		x                 pool.ReplicaRecord
		id, dig, ref      []byte
		created, deadline int64
		rule              int
		work              int64
	)
	if err := scan(&x.Lease, &id, &x.Task, &x.Peer, &x.Owner, &x.State, &created, &deadline, &dig,
		&x.Failed, &x.Reason, &x.Result, &ref, &rule, &work, &x.Version); err != nil {
		return x, err
	}
	if rule != 0 {
		x.Work = &pool.Work{Rule: rule, Count: uint64(work)}
	}
	copy(x.Job[:], id)
	copy(x.Digest[:], dig)
	x.Created, x.Deadline = time.UnixMilli(created), time.UnixMilli(deadline)
	var err error
	if x.Ref, err = parseRef(ref); err != nil {
		return x, fmt.Errorf("replica %s: %w", x.Lease, err)
	}
	return x, nil
}

// refJSON encodes a result's chunk manifest for a ref column: nil (NULL)
// for none. A manifest that does not Validate is refused (an error
// wrapping castore.ErrBadManifest) rather than stored, since Load would
// refuse it.
func refJSON(m *castore.Manifest) ([]byte, error) {
	if m == nil {
		return nil, nil
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("ref: %w", err)
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("ref: %w", err)
	}
	return b, nil
}

// parseRef decodes a ref column: nil for NULL, else a manifest that
// Validates; errors wrap castore.ErrBadManifest.
func parseRef(b []byte) (*castore.Manifest, error) {
	if b == nil {
		return nil, nil
	}
	var m castore.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		if !errors.Is(err, castore.ErrBadManifest) {
			err = fmt.Errorf("%w: %w", castore.ErrBadManifest, err)
		}
		return nil, fmt.Errorf("stored ref: %w", err)
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("stored ref: %w", err)
	}
	return &m, nil
}

// holdersJSON encodes an outcome's holders for the holders column: a JSON
// array of peer IDs, nil (NULL) when there are none.
func holdersJSON(h []string) ([]byte, error) {
	if len(h) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("holders: %w", err)
	}
	return b, nil
}

// parseHolders decodes a holders column: nil for NULL or an empty array.
func parseHolders(b []byte) ([]string, error) {
	if b == nil {
		return nil, nil
	}
	var h []string
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("stored holders: %w", err)
	}
	if len(h) == 0 {
		return nil, nil
	}
	return h, nil
}

// CountEntries counts the ledger's entries by kind (pool.EntryCounter),
// in one read transaction: its rows by kind, the blocks' counts in
// ledger_block_kinds (every block up to its upto) and those of the
// blocks after upto, which the memory counts (blockpeers.go), or, when
// the memory does not stand for what the transaction sees (another
// handle's commits, a commit between), decoded (at most a burst's
// worth). A block after upto whose bytes do not decode is not counted:
// reading its entries fails with ErrCorrupt, and so does ledger verify.
func (d *DB) CountEntries(ctx context.Context) (map[string]uint64, error) {
	n := map[string]uint64{}
	err := d.read(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT kind, COUNT(*) FROM ledger GROUP BY kind
			UNION ALL SELECT kind, count FROM ledger_block_kinds`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				kind  string
				count int64
			)
			if err := rows.Scan(&kind, &count); err != nil {
				return err
			}
			n[kind] += uint64(count)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		var upto, newest int64
		if err := tx.QueryRowContext(ctx, `SELECT upto, (SELECT coalesce(max(last), 0) FROM ledger_blocks)
			FROM ledger_block_kinds_upto WHERE id = 1`).Scan(&upto, &newest); err != nil {
			return err
		}
		// The memory counts the same blocks when it stands for what tx
		// sees (Open decoded them already); else they are decoded here.
		if tailUpto, tailNewest, stale, kinds := d.tail.kindsAfter(); !stale && tailUpto == upto && tailNewest == newest {
			for k, c := range kinds {
				n[k] += uint64(c)
			}
			return nil
		}
		return decodeBlocksAfter(ctx, tx, upto, func(b blockPeers) {
			for _, c := range b.kinds {
				n[c.kind] += uint64(c.n)
			}
		})
	})
	if err != nil {
		return nil, fmt.Errorf("count ledger: %w", classify(err))
	}
	return n, nil
}

// Entries returns committed ledger entries (see pool.Store): those that
// are rows of ledger and those of blocks (ledger_blocks), read in one
// transaction and merged in Seq order.
func (d *DB) Entries(ctx context.Context, q pool.EntryQuery) ([]pool.Entry, error) {
	if q.Max <= 0 {
		return nil, nil
	}
	// A read whose table and memory do not agree (a burst came between
	// them) reads again, and the third time decodes the blocks after the
	// table's upto instead of the memory's list.
	for try := 0; ; try++ {
		es, ok, err := d.entries(ctx, q, try >= 2)
		if err != nil || ok {
			return es, err
		}
	}
}

// entries is Entries in one read transaction; ok is false when the
// memory's list of the newest blocks did not agree with the table
// (peerEntries): the caller reads again. scan reads a peer's newest
// blocks by decoding them, whatever the memory lists.
func (d *DB) entries(ctx context.Context, q pool.EntryQuery, scan bool) (_ []pool.Entry, ok bool, _ error) {
	tx, err := d.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, false, fmt.Errorf("read ledger: %w", classify(err))
	}
	defer tx.Rollback()
	rows, err := rowEntries(ctx, tx, q)
	if err != nil {
		return nil, false, err
	}
	var blocks []pool.Entry
	if q.Peer != "" {
		if blocks, ok, err = d.peerEntries(ctx, tx, q, scan); err != nil || !ok {
			return nil, false, err
		}
	} else if blocks, err = blockEntries(ctx, tx, q); err != nil {
		return nil, false, err
	}
	return mergeEntries(rows, blocks, q.Max), true, nil
}

// mergeEntries merges rows and blocks, each in Seq order, into at most
// max entries in Seq order.
func mergeEntries(rows, blocks []pool.Entry, max int) []pool.Entry {
	if len(blocks) == 0 {
		return rows
	}
	if len(rows) == 0 {
		return blocks
	}
	out := make([]pool.Entry, 0, min(max, len(rows)+len(blocks)))
	for len(out) < max && (len(rows) > 0 || len(blocks) > 0) {
		if len(blocks) == 0 || len(rows) > 0 && rows[0].Seq < blocks[0].Seq {
			out, rows = append(out, rows[0]), rows[1:]
		} else {
			out, blocks = append(out, blocks[0]), blocks[1:]
		}
	}
	return out
}

// blockEntries returns the entries of ledger blocks with Seq > q.After,
// in Seq order, at most q.Max (q.Peer empty: peerEntries reads a peer's).
func blockEntries(ctx context.Context, tx *sql.Tx, q pool.EntryQuery) ([]pool.Entry, error) {
	return appendBlockEntries(ctx, tx, nil, q, `SELECT first, last, prev, hash, sig, entries FROM ledger_blocks
		WHERE last > ? ORDER BY last`, int64(q.After))
}

// appendBlockEntries appends to out the entries with Seq > q.After (and
// naming q.Peer, when it is set) of the ledger_blocks rows that query
// selects (first, last, prev, hash, sig, entries), in its order, until
// out holds q.Max.
func appendBlockEntries(ctx context.Context, tx *sql.Tx, out []pool.Entry, q pool.EntryQuery, query string, args ...any) ([]pool.Entry, error) {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("read ledger blocks: %w", classify(err))
	}
	defer rows.Close()
	for len(out) < q.Max && rows.Next() {
		k, err := scanBlock(rows.Scan)
		if err != nil {
			return nil, err
		}
		entries, err := k.decode()
		if err != nil {
			return nil, fmt.Errorf("read ledger: %w", err)
		}
		for _, e := range entries {
			if e.Seq > q.After && (q.Peer == "" || e.Peer == q.Peer) && len(out) < q.Max {
				out = append(out, e)
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read ledger blocks: %w", classify(err))
	}
	return out, nil
}

// rowEntries returns the entries that are rows of ledger that q selects,
// in Seq order, at most q.Max.
func rowEntries(ctx context.Context, tx *sql.Tx, q pool.EntryQuery) ([]pool.Entry, error) {
	query := `SELECT seq, prev, kind, pool, job, task, peer, owner, lease, digest, cost, work, time, reason, sig, tree
		FROM ledger WHERE seq > ?`
	args := []any{int64(q.After)}
	if q.Peer != "" {
		query += ` AND peer = ?`
		args = append(args, q.Peer)
	}
	query += ` ORDER BY seq LIMIT ?`
	args = append(args, q.Max)
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("read ledger: %w", classify(err))
	}
	defer rows.Close()
	var out []pool.Entry
	for rows.Next() {
		var (
			e             pool.Entry
			seq, work     int64
			prev, id, dig []byte
			tree          []byte
		)
		if err := rows.Scan(&seq, &prev, &e.Kind, &e.Pool, &id, &e.Task, &e.Peer, &e.Owner, &e.Lease, &dig,
			&e.Cost, &work, &e.Time, &e.Reason, &e.Sig, &tree); err != nil {
			return nil, fmt.Errorf("read ledger: %w", classify(err))
		}
		if tree != nil {
			e.Tree = &pool.TreeProof{}
			if err := e.Tree.UnmarshalBinary(tree); err != nil {
				return nil, fmt.Errorf("read ledger: entry %d: %w", seq, err)
			}
		}
		e.Seq, e.Work = uint64(seq), uint64(work)
		copy(e.Prev[:], prev)
		copy(e.Job[:], id)
		copy(e.Digest[:], dig)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read ledger: %w", classify(err))
	}
	rows.Close()
	if err := batchProofs(ctx, tx, out); err != nil {
		return nil, fmt.Errorf("read ledger: %w", err)
	}
	return out, nil
}

// ledgerBatch is one row of ledger_batches with its entries' proofs.
type ledgerBatch struct {
	first, last uint64
	sig         []byte
	proofs      []pool.TreeProof
}

// batchProofs gives each of entries stored with its batch (an empty sig
// and no tree in its row) its batch's signature and its inclusion proof,
// rebuilt from the hashes of the batch's rows. An entry with an empty
// sig that no batch covers was stored so (unsigned) and is left as it
// is.
func batchProofs(ctx context.Context, tx *sql.Tx, entries []pool.Entry) error {
	var b *ledgerBatch // the batch of the entry before, entries being in seq order
	for i := range entries {
		e := &entries[i]
		if len(e.Sig) != 0 || e.Tree != nil {
			continue
		}
		if b == nil || e.Seq < b.first || e.Seq > b.last {
			var err error
			if b, err = readLedgerBatch(ctx, tx, e.Seq); err != nil {
				return err
			}
		}
		if b == nil || e.Seq < b.first {
			b = nil
			continue
		}
		e.Sig = b.sig
		p := b.proofs[e.Seq-b.first]
		e.Tree = &p
	}
	return nil
}

// readLedgerBatch reads the first batch ending at or after seq and rebuilds
// its proofs; nil when there is none. Its first entry may come after
// seq, when seq is in no batch.
func readLedgerBatch(ctx context.Context, tx *sql.Tx, seq uint64) (*ledgerBatch, error) {
	var (
		b           ledgerBatch
		first, last int64
	)
	err := tx.QueryRowContext(ctx, `SELECT first, last, sig FROM ledger_batches WHERE last >= ? ORDER BY last LIMIT 1`,
		int64(seq)).Scan(&first, &last, &b.sig)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("batch of entry %d: %w", seq, classify(err))
	}
	b.first, b.last = uint64(first), uint64(last)
	if seq < b.first {
		return &b, nil
	}
	rows, err := tx.QueryContext(ctx, `SELECT seq, hash FROM ledger WHERE seq BETWEEN ? AND ? ORDER BY seq`, first, last)
	if err != nil {
		return nil, fmt.Errorf("batch %d-%d: %w", first, last, classify(err))
	}
	defer rows.Close()
	leaves := make([]job.Digest, 0, last-first+1)
	for rows.Next() {
		var (
			s int64
			h []byte
		)
		if err := rows.Scan(&s, &h); err != nil {
			return nil, fmt.Errorf("batch %d-%d: %w", first, last, classify(err))
		}
		if s != first+int64(len(leaves)) || len(h) != len(job.Digest{}) {
			return nil, fmt.Errorf("batch %d-%d: entry %d: %w", first, last, s, ErrCorrupt)
		}
		leaves = append(leaves, job.Digest(h))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("batch %d-%d: %w", first, last, classify(err))
	}
	if len(leaves) != int(last-first+1) {
		return nil, fmt.Errorf("batch %d-%d: %d entries: %w", first, last, len(leaves), ErrCorrupt)
	}
	b.proofs = pool.TreeProofs(leaves)
	return &b, nil
}

// workColumns returns a replica's work as its work_rule and work columns:
// 0 and 0 for none. A count over pool.MaxWorkCount is refused (the
// Scheduler refuses such a submission before).
func workColumns(w *pool.Work) (int, int64, error) {
	switch {
	case w == nil:
		return 0, 0, nil
	case w.Rule < 1 || w.Count > pool.MaxWorkCount:
		return 0, 0, fmt.Errorf("work %d by rule %d out of range", w.Count, w.Rule)
	}
	return w.Rule, int64(w.Count), nil
}
