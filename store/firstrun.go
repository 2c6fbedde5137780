package store

import (
	"context"
	"fmt"
)

// SettingsSaved reports whether the owner ever saved settings (the
// settings table has its one row); false means Settings returns the
// defaults. The tray app shows its first-run window while this is false
// and no pool is joined.
func (l *Local) SettingsSaved(ctx context.Context) (bool, error) {
	var saved bool
	if err := l.db.QueryRowContext(ctx, `SELECT EXISTS(SELECT 1 FROM settings WHERE id = 1)`).Scan(&saved); err != nil {
		return false, fmt.Errorf("read whether settings were saved: %w", classify(err))
	}
	return saved, nil
}
