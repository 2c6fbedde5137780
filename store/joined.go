package store

import (
	"context"
	"fmt"
)

// This file keeps which known pools the donor joined (schema
// migrations/local/0004_joined.sql): the donor engine (agent.Donor) runs
// one agent for each of them, and the tray app's settings window lists,
// joins and leaves them.

// JoinedPool is a pool this machine computes for: its URL as the donor
// gave it, the name the pool reported (may be ""), and the invite token it
// was joined with ("" for open pools).
type JoinedPool struct {
	URL    string `json:"url"`
	Name   string `json:"name,omitempty"`
	Invite string `json:"invite,omitempty"`
}

// JoinPool records that the donor joined the pool at url with the invite
// token (may be ""), making the pool known if it was not; joining again
// replaces the token when a new one is given. It does not contact the
// pool: check it first (agent.CheckPool).
func (l *Local) JoinPool(ctx context.Context, url, invite string) error {
	if url == "" {
		return fmt.Errorf("join pool: empty URL")
	}
	if _, err := l.db.ExecContext(ctx, `INSERT INTO offer_pools(url, added, joined, invite) VALUES (?, ?, 1, ?)
		ON CONFLICT(url) DO UPDATE SET joined = 1,
			invite = CASE WHEN excluded.invite = '' THEN invite ELSE excluded.invite END`,
		url, l.now().UnixMilli(), invite); err != nil {
		return fmt.Errorf("join pool %s: %w", url, classify(err))
	}
	return nil
}

// LeavePool records that the donor left the pool at url: it stays known
// (its choices and history are kept) but is no longer joined. A pool not
// joined is nil.
func (l *Local) LeavePool(ctx context.Context, url string) error {
	if _, err := l.db.ExecContext(ctx, `UPDATE offer_pools SET joined = 0 WHERE url = ?`, url); err != nil {
		return fmt.Errorf("leave pool %s: %w", url, classify(err))
	}
	return nil
}

// JoinedPools returns the pools joined, sorted by URL; none is an empty
// slice.
func (l *Local) JoinedPools(ctx context.Context) ([]JoinedPool, error) {
	rows, err := l.db.QueryContext(ctx, `SELECT url, name, invite FROM offer_pools WHERE joined = 1 AND url != '' ORDER BY url`)
	if err != nil {
		return nil, fmt.Errorf("read joined pools: %w", classify(err))
	}
	out := []JoinedPool{}
	for rows.Next() {
		var p JoinedPool
		if err := rows.Scan(&p.URL, &p.Name, &p.Invite); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read joined pools: %w", classify(err))
		}
		out = append(out, p)
	}
	if err := errorsOf(rows); err != nil {
		return nil, fmt.Errorf("read joined pools: %w", classify(err))
	}
	return out, nil
}
