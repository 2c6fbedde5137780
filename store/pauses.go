package store

import (
	"context"
	"fmt"
	"time"
)

// This file keeps the owner's pauses by hour of day (schema
// migrations/local/0008_owner_pauses.sql), from which the donor predicts
// how long a pause for the owner lasts (agent.OwnerPattern).

// HourPauses is what was seen of the owner's pauses that began in one
// local hour of the day: how many, and their running mean.
type HourPauses struct {
	Hour  int // 0..23
	Count int
	Mean  time.Duration
}

// OwnerPauses returns the hours with pauses seen, by hour; none is an
// empty slice.
func (l *Local) OwnerPauses(ctx context.Context) ([]HourPauses, error) {
	rows, err := l.db.QueryContext(ctx, `SELECT hour, count, mean_ms FROM owner_pauses ORDER BY hour`)
	if err != nil {
		return nil, fmt.Errorf("read owner pauses: %w", classify(err))
	}
	defer rows.Close()
	out := []HourPauses{}
	for rows.Next() {
		var h HourPauses
		var ms int64
		if err := rows.Scan(&h.Hour, &h.Count, &ms); err != nil {
			return nil, fmt.Errorf("read owner pauses: %w", classify(err))
		}
		h.Mean = time.Duration(ms) * time.Millisecond
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read owner pauses: %w", classify(err))
	}
	return out, nil
}

// SaveOwnerPauses replaces what is kept of the hour h.Hour with h. An
// hour outside 0..23, or a negative count or mean, is an error and
// nothing is saved.
func (l *Local) SaveOwnerPauses(ctx context.Context, h HourPauses) error {
	if h.Hour < 0 || h.Hour > 23 || h.Count < 0 || h.Mean < 0 {
		return fmt.Errorf("save owner pauses: hour %d, count %d, mean %s: the hour must be 0..23 and the rest not negative", h.Hour, h.Count, h.Mean)
	}
	if _, err := l.db.ExecContext(ctx, `INSERT INTO owner_pauses(hour, count, mean_ms) VALUES (?, ?, ?)
		ON CONFLICT(hour) DO UPDATE SET count = excluded.count, mean_ms = excluded.mean_ms`,
		h.Hour, h.Count, h.Mean.Milliseconds()); err != nil {
		return fmt.Errorf("save owner pauses: %w", classify(err))
	}
	return nil
}
