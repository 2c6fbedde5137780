package store

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"net/url"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

//go:embed migrations
var migrations embed.FS

// DefaultBusyTimeout is how long a write waits for another connection's
// (or process's) write lock before it fails with ErrBusy.
const DefaultBusyTimeout = 10 * time.Second

// Option changes how Open, OpenLocal and OpenLocalRepairing open a
// database.
type Option func(*options)

type options struct {
	busyTimeout time.Duration
	maxPages    int64
}

// WithBusyTimeout sets how long a write waits for the write lock held by
// another connection before it fails with ErrBusy; DefaultBusyTimeout
// when d <= 0.
func WithBusyTimeout(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.busyTimeout = d
		}
	}
}

// WithMaxPages caps the database file at n pages (PRAGMA max_page_count;
// a page is 4096 bytes): a write that would grow it further fails with
// ErrFull, as on a full disk. 0 leaves SQLite's own limit.
func WithMaxPages(n int64) Option { return func(o *options) { o.maxPages = n } }

// openSQLite opens the SQLite file at p with the pragmas of the package
// doc and applies the migrations under migrations/<set>.
func openSQLite(ctx context.Context, p, set string, opts ...Option) (*sql.DB, error) {
	o := options{busyTimeout: DefaultBusyTimeout}
	for _, f := range opts {
		f(&o)
	}
	q := url.Values{}
	pragmas := []string{
		"journal_mode(WAL)",
		"synchronous(FULL)",
		fmt.Sprintf("busy_timeout(%d)", o.busyTimeout.Milliseconds()),
		"foreign_keys(ON)",
	}
	if o.maxPages > 0 {
		pragmas = append(pragmas, fmt.Sprintf("max_page_count(%d)", o.maxPages))
	}
	for _, pragma := range pragmas {
		q.Add("_pragma", pragma)
	}
	q.Set("_txlock", "immediate") // writers take the lock at BEGIN: no deadlock on upgrade
	db, err := sql.Open("sqlite", "file:"+p+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", p, classify(err))
	}
	// Keep connections open: a new one runs the pragmas and parses the
	// schema at its first statement (milliseconds in pure-Go SQLite), and
	// database/sql keeps only two idle ones by default, so a process whose
	// goroutines query now and then (an agent at rest) kept opening them.
	db.SetMaxIdleConns(8)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open %s: %w", p, classify(err))
	}
	if err := migrate(ctx, db, set); err != nil {
		db.Close()
		return nil, fmt.Errorf("open %s: %w", p, classify(err))
	}
	return db, nil
}

// migrate applies, in order, the files NNNN_name.sql of migrations/<set>
// whose number is above the recorded schema version, each in one
// transaction together with its schema_version row.
func migrate(ctx context.Context, db *sql.DB, set string) error {
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_version (
		version INTEGER PRIMARY KEY,
		name    TEXT NOT NULL,
		applied INTEGER NOT NULL DEFAULT (unixepoch())
	)`); err != nil {
		return fmt.Errorf("create schema_version: %w", classify(err))
	}
	dir := path.Join("migrations", set)
	files, err := fs.ReadDir(migrations, dir)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrSchema, err)
	}
	type step struct {
		n    int
		name string
	}
	var steps []step
	for _, f := range files {
		num, _, ok := strings.Cut(f.Name(), "_")
		n, err := strconv.Atoi(num)
		if !ok || err != nil || !strings.HasSuffix(f.Name(), ".sql") {
			return fmt.Errorf("%w: migration file %s is not named NNNN_name.sql", ErrSchema, f.Name())
		}
		steps = append(steps, step{n, f.Name()})
	}
	sort.Slice(steps, func(i, k int) bool { return steps[i].n < steps[k].n })
	for i := 1; i < len(steps); i++ {
		if steps[i].n == steps[i-1].n { // one of them would never be applied
			return fmt.Errorf("%w: migrations %s and %s share the number %d", ErrSchema, steps[i-1].name, steps[i].name, steps[i].n)
		}
	}
	var have int
	if err := db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_version`).Scan(&have); err != nil {
		return fmt.Errorf("read schema version: %w", classify(err))
	}
	if len(steps) > 0 && have > steps[len(steps)-1].n {
		return fmt.Errorf("%w: schema version %d is newer than this program knows (%d)", ErrSchema, have, steps[len(steps)-1].n)
	}
	for _, s := range steps {
		if s.n <= have {
			continue
		}
		body, err := fs.ReadFile(migrations, path.Join(dir, s.name))
		if err != nil {
			return fmt.Errorf("%w: %v", ErrSchema, err)
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("migrate %s: %w", s.name, classify(err))
		}
		// Another process may have migrated since we looked: check again
		// under the write lock (BEGIN IMMEDIATE).
		if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_version`).Scan(&have); err != nil {
			tx.Rollback()
			return fmt.Errorf("read schema version: %w", classify(err))
		}
		if s.n <= have {
			tx.Rollback()
			continue
		}
		if _, err := tx.ExecContext(ctx, string(body)); err != nil {
			tx.Rollback()
			return fmt.Errorf("%w: migration %s: %v", ErrSchema, s.name, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_version(version, name) VALUES (?, ?)`, s.n, s.name); err != nil {
			tx.Rollback()
			return fmt.Errorf("%w: migration %s: %v", ErrSchema, s.name, err)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("migrate %s: %w", s.name, classify(err))
		}
	}
	return nil
}
