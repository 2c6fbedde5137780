package store

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"time"

	"idlepool/job"
	"idlepool/offers"
)

// This file keeps the donor's preferences about pools and jobs (schema
// migrations/local/0003_offers.sql): the agent turns them into the Accept
// part of its capacity offers (offers.Preferences.Accept), and 'idlepool
// jobs' shows and changes them. A pool is named by its URL; the pool ""
// means every pool.

// Choices about a job or an owner.
const (
	ChoiceAccept = "accept" // take its tasks; a job accepted is ranked first, an owner preferred
	ChoiceRefuse = "refuse" // never take its tasks
)

// Preferences returns the donor's preferences: the global ones (pool "")
// and those of every known pool, sorted by URL, with the choices sorted.
// An empty store gives the defaults: no known pools, weight 1, no GPU
// programs, no ceilings, no choices.
func (l *Local) Preferences(ctx context.Context) (offers.Preferences, error) {
	p := offers.Preferences{Global: offers.PoolPreferences{Weight: 1}}
	byURL := map[string]*offers.PoolPreferences{}
	rows, err := l.db.QueryContext(ctx, `SELECT url, name, weight, gpu_programs, max_memory_mib, max_task_time_ms
		FROM offer_pools ORDER BY url`)
	if err != nil {
		return p, fmt.Errorf("read preferences: %w", classify(err))
	}
	for rows.Next() {
		var pp offers.PoolPreferences
		var ms int64
		if err := rows.Scan(&pp.URL, &pp.Name, &pp.Weight, &pp.GPUPrograms, &pp.MaxMemoryMiB, &ms); err != nil {
			rows.Close()
			return p, fmt.Errorf("read preferences: %w", classify(err))
		}
		pp.MaxTaskTime = time.Duration(ms) * time.Millisecond
		if pp.URL == "" {
			p.Global = pp
		} else {
			p.Pools = append(p.Pools, pp)
		}
	}
	if err := errorsOf(rows); err != nil {
		return p, fmt.Errorf("read preferences: %w", classify(err))
	}
	byURL[""] = &p.Global
	for i := range p.Pools {
		byURL[p.Pools[i].URL] = &p.Pools[i]
	}
	rows, err = l.db.QueryContext(ctx, `SELECT pool, kind, subject, choice FROM offer_choices ORDER BY pool, kind, subject`)
	if err != nil {
		return p, fmt.Errorf("read preferences: %w", classify(err))
	}
	for rows.Next() {
		var pool, kind, subject, choice string
		if err := rows.Scan(&pool, &kind, &subject, &choice); err != nil {
			rows.Close()
			return p, fmt.Errorf("read preferences: %w", classify(err))
		}
		pp := byURL[pool]
		if pp == nil { // every choice's pool has a row (see choose); be safe
			continue
		}
		switch kind + "/" + choice {
		case "owner/accept":
			pp.AcceptOwners = append(pp.AcceptOwners, subject)
		case "owner/refuse":
			pp.RefuseOwners = append(pp.RefuseOwners, subject)
		case "job/accept", "job/refuse":
			id, err := job.ParseDigest(subject)
			if err != nil {
				rows.Close()
				return p, fmt.Errorf("read preferences: job choice: %w", classify(err))
			}
			if choice == ChoiceAccept {
				pp.AcceptJobs = append(pp.AcceptJobs, id)
			} else {
				pp.RefuseJobs = append(pp.RefuseJobs, id)
			}
		}
	}
	if err := errorsOf(rows); err != nil {
		return p, fmt.Errorf("read preferences: %w", classify(err))
	}
	return p, nil
}

func errorsOf(rows *sql.Rows) error {
	if err := rows.Err(); err != nil {
		rows.Close()
		return err
	}
	return rows.Close()
}

// AddPool records the pool at url as known (with its name when not
// empty), keeping its settings when it is known already. url must not be
// empty.
func (l *Local) AddPool(ctx context.Context, url, name string) error {
	if url == "" {
		return fmt.Errorf("add pool: empty URL")
	}
	if _, err := l.db.ExecContext(ctx, `INSERT INTO offer_pools(url, name, added) VALUES (?, ?, ?)
		ON CONFLICT(url) DO UPDATE SET name = CASE WHEN excluded.name = '' THEN name ELSE excluded.name END`,
		url, name, l.now().UnixMilli()); err != nil {
		return fmt.Errorf("add pool %s: %w", url, classify(err))
	}
	return nil
}

// ForgetPool removes the pool at url and the choices made for it. A pool
// not known is nil.
func (l *Local) ForgetPool(ctx context.Context, url string) error {
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("forget pool %s: %w", url, classify(err))
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `DELETE FROM offer_choices WHERE pool = ?`, url); err != nil {
		return fmt.Errorf("forget pool %s: %w", url, classify(err))
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM offer_pools WHERE url = ?`, url); err != nil {
		return fmt.Errorf("forget pool %s: %w", url, classify(err))
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("forget pool %s: %w", url, classify(err))
	}
	return nil
}

// AcceptJob records that the donor accepts job id in the pool at url (""
// for every pool), replacing an earlier choice about it there; a pool not
// known yet becomes known.
func (l *Local) AcceptJob(ctx context.Context, url string, id job.ID) error {
	return l.choose(ctx, url, "job", id.String(), ChoiceAccept)
}

// RefuseJob records that the donor refuses job id in the pool at url (""
// for every pool); see AcceptJob.
func (l *Local) RefuseJob(ctx context.Context, url string, id job.ID) error {
	return l.choose(ctx, url, "job", id.String(), ChoiceRefuse)
}

// AcceptOwner records that the donor prefers the jobs of owner (an owner
// ID) in the pool at url ("" for every pool); see AcceptJob.
func (l *Local) AcceptOwner(ctx context.Context, url, owner string) error {
	return l.choose(ctx, url, "owner", owner, ChoiceAccept)
}

// RefuseOwner records that the donor refuses the jobs of owner in the pool
// at url ("" for every pool); see AcceptJob.
func (l *Local) RefuseOwner(ctx context.Context, url, owner string) error {
	return l.choose(ctx, url, "owner", owner, ChoiceRefuse)
}

// ClearJob forgets the donor's choice about job id in the pool at url.
// No choice is nil.
func (l *Local) ClearJob(ctx context.Context, url string, id job.ID) error {
	return l.clear(ctx, url, "job", id.String())
}

// ClearOwner forgets the donor's choice about owner in the pool at url.
// No choice is nil.
func (l *Local) ClearOwner(ctx context.Context, url, owner string) error {
	return l.clear(ctx, url, "owner", owner)
}

func (l *Local) choose(ctx context.Context, url, kind, subject, choice string) error {
	if subject == "" {
		return fmt.Errorf("%s %s: empty ID", choice, kind)
	}
	now := l.now().UnixMilli()
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("%s %s %s: %w", choice, kind, subject, classify(err))
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO offer_pools(url, added) VALUES (?, ?) ON CONFLICT(url) DO NOTHING`, url, now); err != nil {
		return fmt.Errorf("%s %s %s: %w", choice, kind, subject, classify(err))
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO offer_choices(pool, kind, subject, choice, updated) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT(pool, kind, subject) DO UPDATE SET choice = excluded.choice, updated = excluded.updated`,
		url, kind, subject, choice, now); err != nil {
		return fmt.Errorf("%s %s %s: %w", choice, kind, subject, classify(err))
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("%s %s %s: %w", choice, kind, subject, classify(err))
	}
	return nil
}

func (l *Local) clear(ctx context.Context, url, kind, subject string) error {
	if _, err := l.db.ExecContext(ctx, `DELETE FROM offer_choices WHERE pool = ? AND kind = ? AND subject = ?`, url, kind, subject); err != nil {
		return fmt.Errorf("clear %s %s: %w", kind, subject, classify(err))
	}
	return nil
}

// SetPoolWeight sets the relative weight of the pool at url among this
// machine's pools (default 1; 0 offers it nothing; offers.Preferences.Accept
// normalises the weights to shares). A negative, infinite or NaN weight is
// an error and changes nothing. url "" is not a pool: it is an error.
func (l *Local) SetPoolWeight(ctx context.Context, url string, weight float64) error {
	if url == "" {
		return fmt.Errorf("set pool weight: empty URL")
	}
	if math.IsNaN(weight) || math.IsInf(weight, 0) || weight < 0 {
		return fmt.Errorf("set pool weight: %v is not a finite number of 0 or more", weight)
	}
	return l.upsertPool(ctx, url, "weight", weight)
}

// SetGPUPrograms sets whether the donor allows GPU programs in the pool at
// url ("" for every pool).
func (l *Local) SetGPUPrograms(ctx context.Context, url string, allow bool) error {
	return l.upsertPool(ctx, url, "gpu_programs", allow)
}

// SetTaskLimits sets the per-task ceilings in the pool at url ("" for
// every pool): memory in MiB and time, 0 for none. Negative values are an
// error.
func (l *Local) SetTaskLimits(ctx context.Context, url string, maxMemoryMiB int64, maxTaskTime time.Duration) error {
	if maxMemoryMiB < 0 || maxTaskTime < 0 {
		return fmt.Errorf("set task limits: negative ceiling")
	}
	if _, err := l.db.ExecContext(ctx, `INSERT INTO offer_pools(url, max_memory_mib, max_task_time_ms, added) VALUES (?, ?, ?, ?)
		ON CONFLICT(url) DO UPDATE SET max_memory_mib = excluded.max_memory_mib, max_task_time_ms = excluded.max_task_time_ms`,
		url, maxMemoryMiB, maxTaskTime.Milliseconds(), l.now().UnixMilli()); err != nil {
		return fmt.Errorf("set task limits: %w", classify(err))
	}
	return nil
}

// upsertPool sets one column of the pool's row, creating the row.
// column is one of a fixed set, never outside input.
func (l *Local) upsertPool(ctx context.Context, url, column string, v any) error {
	q := fmt.Sprintf(`INSERT INTO offer_pools(url, %[1]s, added) VALUES (?, ?, ?)
		ON CONFLICT(url) DO UPDATE SET %[1]s = excluded.%[1]s`, column)
	if _, err := l.db.ExecContext(ctx, q, url, v, l.now().UnixMilli()); err != nil {
		return fmt.Errorf("set %s of pool %q: %w", column, url, classify(err))
	}
	return nil
}
