package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// Recovery is what OpenLocalRepairing did with a damaged local database.
type Recovery struct {
	// MovedTo is where the damaged file now is, kept for the person
	// (PATH.damaged-YYYYMMDDTHHMMSSZ beside the database).
	MovedTo string `json:"movedTo"`
	// At is when it was moved.
	At time.Time `json:"at"`
	// Cause is SQLite's complaint about the damaged file.
	Cause string `json:"cause"`
	// Salvaged counts the rows copied from the damaged file into the new
	// one, by table; Lost names the tables that could not be read (their
	// rows are gone, except what the pools give back: see below).
	Salvaged map[string]int64 `json:"salvaged,omitempty"`
	Lost     []string         `json:"lost,omitempty"`
}

// String says in one sentence what happened, for people.
func (r *Recovery) String() string {
	var rows int64
	for _, n := range r.Salvaged {
		rows += n
	}
	read := fmt.Sprintf("%d rows", rows)
	if rows == 1 {
		read = "1 row"
	}
	s := fmt.Sprintf("the local store was damaged (%s): it was moved to %s and a new one started with %s read back from it",
		r.Cause, r.MovedTo, read)
	if len(r.Lost) > 0 {
		s += "; unreadable: " + strings.Join(r.Lost, ", ")
	}
	return s + "; receipts are fetched again from the pools' ledgers"
}

// OpenLocalRepairing opens the local store at path like OpenLocal, and
// checks it (PRAGMA quick_check). When the file is damaged (ErrCorrupt:
// not a database, a malformed page, a failed check) it moves the file and
// its write-ahead log aside to PATH.damaged-TIMESTAMP (never deleting
// them), creates a fresh database at path, and copies into it every table
// of the damaged file that can still be read (settings, joined pools,
// preferences, contributions), table by table; the ledger cursors are not
// copied, so that the agent reads every receipt of this device from the
// pools' ledgers again and recovers the contributions that were lost
// (Recover). Local.Recovery then says what was done.
//
// Only the process that holds the agent's lock (home.AgentLockFile) may
// call it: another process (the tray app's windows, `idlepool status`)
// must not move the file from under the running agent, and opens with
// OpenLocal, which reports the damage as ErrCorrupt.
func OpenLocalRepairing(path string, opts ...Option) (*Local, error) {
	ctx := context.Background()
	l, err := OpenLocal(path, opts...)
	if err == nil {
		err = l.check(ctx)
		if err == nil {
			return l, nil
		}
		l.Close()
	}
	if !errors.Is(err, ErrCorrupt) {
		return nil, err
	}
	return repairLocal(ctx, path, err, time.Now, opts)
}

// check runs SQLite's quick integrity check.
func (l *Local) check(ctx context.Context) error {
	rows, err := l.db.QueryContext(ctx, `PRAGMA quick_check`)
	if err != nil {
		return fmt.Errorf("check: %w", classify(err))
	}
	defer rows.Close()
	var problems []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return fmt.Errorf("check: %w", classify(err))
		}
		if s != "ok" {
			problems = append(problems, s)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("check: %w", classify(err))
	}
	if len(problems) > 0 {
		if len(problems) > 3 {
			problems = append(problems[:3], "...")
		}
		return fmt.Errorf("check: %w: %s", ErrCorrupt, strings.Join(problems, "; "))
	}
	return nil
}

// Recovery returns what OpenLocalRepairing did, nil when the database
// opened as it was.
func (l *Local) Recovery() *Recovery { return l.recovery }

// notSalvaged are the tables a repair does not copy: the schema's own
// record, and the ledger cursors (reading the ledgers again from the start
// recovers the receipts of contributions lost with the damaged pages).
var notSalvaged = []string{"schema_version", "ledger_cursors"}

// repairLocal moves the damaged database at path aside, opens a fresh
// one and copies what it can into it.
func repairLocal(ctx context.Context, path string, cause error, now func() time.Time, opts []Option) (*Local, error) {
	at := now().UTC()
	aside := path + ".damaged-" + at.Format("20060102T150405Z")
	for i := 2; ; i++ {
		if _, err := os.Lstat(aside); errors.Is(err, os.ErrNotExist) {
			break
		}
		aside = fmt.Sprintf("%s.damaged-%s-%d", path, at.Format("20060102T150405Z"), i)
	}
	if err := os.Rename(path, aside); err != nil {
		return nil, fmt.Errorf("move the damaged database %s aside: %w", path, err)
	}
	for _, suffix := range []string{"-wal", "-shm"} {
		if err := os.Rename(path+suffix, aside+suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("move the damaged database's %s file aside: %w", suffix, err)
		}
	}
	l, err := OpenLocal(path, opts...)
	if err != nil {
		return nil, fmt.Errorf("start a new database after moving the damaged one to %s: %w", aside, err)
	}
	why := cause.Error()
	if f, ok := errors.AsType[*fault](cause); ok {
		why = f.err.Error() // SQLite's words, without the path
	}
	l.recovery = &Recovery{MovedTo: aside, At: at, Cause: why, Salvaged: map[string]int64{}}
	l.salvage(ctx, aside)
	return l, nil
}

// salvage copies every readable table of the database at from into l, by
// the columns both have; a table that cannot be read is listed as lost.
func (l *Local) salvage(ctx context.Context, from string) {
	r := l.recovery
	conn, err := l.db.Conn(ctx) // ATTACH is per connection
	if err != nil {
		r.Lost = append(r.Lost, "everything ("+err.Error()+")")
		return
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `ATTACH DATABASE ? AS damaged`, from); err != nil {
		r.Lost = append(r.Lost, "everything ("+err.Error()+")")
		return
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), `DETACH DATABASE damaged`)
	tables, err := tableNames(ctx, conn, "main")
	if err != nil {
		r.Lost = append(r.Lost, "everything ("+err.Error()+")")
		return
	}
	for _, t := range tables {
		if slices.Contains(notSalvaged, t) {
			continue
		}
		n, err := copyTable(ctx, conn, t)
		if err != nil {
			r.Lost = append(r.Lost, t)
			continue
		}
		r.Salvaged[t] = n
	}
}

// tableNames lists the tables of the attached schema db.
func tableNames(ctx context.Context, conn *sql.Conn, db string) ([]string, error) {
	rows, err := conn.QueryContext(ctx, `SELECT name FROM `+db+`.sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// columns lists table t's columns in schema db.
func columns(ctx context.Context, conn *sql.Conn, db, t string) ([]string, error) {
	rows, err := conn.QueryContext(ctx, `SELECT name FROM pragma_table_info(?, ?)`, t, db)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// copyTable copies the rows of damaged.t into main.t (rows already there
// win), in one transaction, and returns how many it copied.
func copyTable(ctx context.Context, conn *sql.Conn, t string) (int64, error) {
	have, err := columns(ctx, conn, "main", t)
	if err != nil {
		return 0, err
	}
	old, err := columns(ctx, conn, "damaged", t)
	if err != nil {
		return 0, err
	}
	var both []string
	for _, c := range have {
		if slices.Contains(old, c) {
			both = append(both, `"`+c+`"`)
		}
	}
	if len(both) == 0 {
		return 0, fmt.Errorf("table %s: no common columns", t)
	}
	cols := strings.Join(both, ", ")
	res, err := conn.ExecContext(ctx, fmt.Sprintf(`INSERT OR IGNORE INTO main."%s" (%s) SELECT %s FROM damaged."%s"`, t, cols, cols, t))
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
