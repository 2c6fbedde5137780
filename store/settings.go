package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"idlepool/idle"
)

// Settings returns the owner's saved settings, or idle.Defaults() when
// none were saved. Fields missing from the saved document keep their
// defaults. A saved document that no longer validates is an error naming
// the field.
func (l *Local) Settings(ctx context.Context) (idle.Settings, error) {
	return settings(ctx, l.db)
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func settings(ctx context.Context, q querier) (idle.Settings, error) {
	s := idle.Defaults()
	var body string
	err := q.QueryRowContext(ctx, `SELECT body FROM settings WHERE id = 1`).Scan(&body)
	if errors.Is(err, sql.ErrNoRows) {
		return s, nil
	}
	if err != nil {
		return s, fmt.Errorf("read settings: %w", classify(err))
	}
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		return idle.Defaults(), fmt.Errorf("read settings: %w", classify(err))
	}
	if err := s.Validate(); err != nil {
		return idle.Defaults(), fmt.Errorf("read settings: %w", classify(err))
	}
	return s, nil
}

// SaveSettings validates s and saves it in place of the settings saved
// before; an invalid s is an error naming the field, and nothing is
// saved.
func (l *Local) SaveSettings(ctx context.Context, s idle.Settings) error {
	if err := s.Validate(); err != nil {
		return fmt.Errorf("save settings: %w", classify(err))
	}
	body, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("save settings: %w", classify(err))
	}
	if _, err := l.db.ExecContext(ctx, `INSERT INTO settings(id, body, updated) VALUES (1, ?, ?)
		ON CONFLICT(id) DO UPDATE SET body = excluded.body, updated = excluded.updated`,
		string(body), l.now().UnixMilli()); err != nil {
		return fmt.Errorf("save settings: %w", classify(err))
	}
	return nil
}

// UpdateSettings reads the settings, lets change edit them and saves the
// result, all in one transaction, so that two writers (the CLI and the
// agent clearing an expired pause) never lose each other's change. An
// error from change, or an invalid result, saves nothing and is returned.
func (l *Local) UpdateSettings(ctx context.Context, change func(*idle.Settings) error) (idle.Settings, error) {
	tx, err := l.db.BeginTx(ctx, nil) // BEGIN IMMEDIATE: see openSQLite
	if err != nil {
		return idle.Settings{}, fmt.Errorf("update settings: %w", classify(err))
	}
	defer tx.Rollback()
	s, err := settings(ctx, tx)
	if err != nil {
		return s, fmt.Errorf("update settings: %w", classify(err))
	}
	if err := change(&s); err != nil {
		return s, err
	}
	if err := s.Validate(); err != nil {
		return s, fmt.Errorf("update settings: %w", classify(err))
	}
	body, err := json.Marshal(s)
	if err != nil {
		return s, fmt.Errorf("update settings: %w", classify(err))
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO settings(id, body, updated) VALUES (1, ?, ?)
		ON CONFLICT(id) DO UPDATE SET body = excluded.body, updated = excluded.updated`,
		string(body), l.now().UnixMilli()); err != nil {
		return s, fmt.Errorf("update settings: %w", classify(err))
	}
	if err := tx.Commit(); err != nil {
		return s, fmt.Errorf("update settings: %w", classify(err))
	}
	return s, nil
}
