package store

import (
	"context"
	"fmt"
	"time"

	"idlepool/job"
	"idlepool/pool"
)

// This file keeps what a donor device learnt about the jobs it computed
// or browsed (schema migrations/local/0005_job_notes.sql), so that its
// history names them as the job boards do.

// JobNote is what a device knows of a job for people: Name, Description
// and Link from its manifest; Owner its owner's ID, OwnerName and
// OwnerLink from the owner's signed profile (identity.Profile, checked by
// whoever noted it; "" when the owner gave none). Seen is when it was
// last noted. Transfer sums the bytes of the job's files this device
// fetched, by path (NoteTransfer; zero when it fetched none).
type JobNote struct {
	Job         job.ID
	Pool        string // the URL of the pool it was seen in
	Name        string
	Description string
	Link        string
	Owner       string
	OwnerName   string
	OwnerLink   string
	Seen        time.Time
	Transfer    pool.Transfer
}

// NoteJob records n about job n.Job. A field of n that is "" leaves what
// was noted before, except that a new owner name or link replaces both of
// the old ones (the owner's latest profile holds); Seen is set to now.
func (l *Local) NoteJob(ctx context.Context, n JobNote) error {
	_, err := l.db.ExecContext(ctx, `INSERT INTO job_notes(job, pool, name, description, link, owner, owner_name, owner_link, seen)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT(job) DO UPDATE SET
			pool = COALESCE(NULLIF(excluded.pool, ''), pool),
			name = COALESCE(NULLIF(excluded.name, ''), name),
			description = COALESCE(NULLIF(excluded.description, ''), description),
			link = COALESCE(NULLIF(excluded.link, ''), link),
			owner = COALESCE(NULLIF(excluded.owner, ''), owner),
			owner_link = CASE WHEN excluded.owner_name != '' THEN excluded.owner_link ELSE owner_link END,
			owner_name = COALESCE(NULLIF(excluded.owner_name, ''), owner_name),
			seen = excluded.seen`,
		n.Job[:], n.Pool, n.Name, n.Description, n.Link, n.Owner, n.OwnerName, n.OwnerLink, l.now().UnixMilli())
	if err != nil {
		return fmt.Errorf("note job %s: %w", n.Job, classify(err))
	}
	return nil
}

// NoteTransfer adds t, bytes of job id's files this device fetched from
// pool poolURL, to what was noted of the job (JobNote.Transfer), noting
// the job when nothing was yet. A negative count is refused; a zero t
// changes nothing.
func (l *Local) NoteTransfer(ctx context.Context, id job.ID, poolURL string, t pool.Transfer) error {
	if t.Direct < 0 || t.Relayed < 0 || t.Coordinator < 0 {
		return fmt.Errorf("note the transfer of job %s: negative byte count %+v", id, t)
	}
	if t.Zero() {
		return nil
	}
	_, err := l.db.ExecContext(ctx, `INSERT INTO job_notes(job, pool, seen, direct, relayed, coordinator)
		VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT(job) DO UPDATE SET
			pool = COALESCE(NULLIF(excluded.pool, ''), pool),
			direct = direct + excluded.direct,
			relayed = relayed + excluded.relayed,
			coordinator = coordinator + excluded.coordinator`,
		id[:], poolURL, l.now().UnixMilli(), t.Direct, t.Relayed, t.Coordinator)
	if err != nil {
		return fmt.Errorf("note the transfer of job %s: %w", id, classify(err))
	}
	return nil
}

// JobNotes returns what was noted of every job, by job ID.
func (l *Local) JobNotes(ctx context.Context) (map[job.ID]JobNote, error) {
	rows, err := l.db.QueryContext(ctx, `SELECT job, pool, name, description, link, owner, owner_name, owner_link, seen, direct, relayed, coordinator FROM job_notes`)
	if err != nil {
		return nil, fmt.Errorf("read job notes: %w", classify(err))
	}
	defer rows.Close()
	out := map[job.ID]JobNote{}
	for rows.Next() {
		var n JobNote
		var id []byte
		var seen int64
		if err := rows.Scan(&id, &n.Pool, &n.Name, &n.Description, &n.Link, &n.Owner, &n.OwnerName, &n.OwnerLink, &seen,
			&n.Transfer.Direct, &n.Transfer.Relayed, &n.Transfer.Coordinator); err != nil {
			return nil, fmt.Errorf("read job notes: %w", classify(err))
		}
		if len(id) != len(n.Job) {
			continue
		}
		copy(n.Job[:], id)
		n.Seen = time.UnixMilli(seen)
		out[n.Job] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read job notes: %w", classify(err))
	}
	return out, nil
}
