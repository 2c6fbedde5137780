package store

import (
	"context"
	"encoding/json"
	"fmt"

	"idlepool/identity"
)

// This file keeps the owners' signed profiles a coordinator was given
// (schema migrations/coordinator/0003_owner_profiles.sql).

// PutOwnerProfile stores p, which must verify (identity.Profile.Verify),
// as its owner's profile unless the one stored was issued at the same
// time or later (an older profile sent again is ignored). It reports
// whether p was stored.
func (d *DB) PutOwnerProfile(ctx context.Context, p identity.Profile) (bool, error) {
	if err := p.Verify(); err != nil {
		return false, fmt.Errorf("store owner profile: %w", err)
	}
	b, err := json.Marshal(p)
	if err != nil {
		return false, fmt.Errorf("store owner profile: %w", err)
	}
	res, err := d.db.ExecContext(ctx, `INSERT INTO owner_profiles(owner, issued, profile) VALUES (?, ?, ?)
		ON CONFLICT(owner) DO UPDATE SET issued = excluded.issued, profile = excluded.profile
		WHERE excluded.issued > owner_profiles.issued`, p.Owner, p.Issued.UnixMilli(), b)
	if err != nil {
		return false, fmt.Errorf("store owner profile: %w", classify(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("store owner profile: %w", classify(err))
	}
	return n == 1, nil
}

// OwnerProfiles returns every owner's stored profile, by owner ID. A row
// that no longer verifies is left out.
func (d *DB) OwnerProfiles(ctx context.Context) (map[string]identity.Profile, error) {
	rows, err := d.db.QueryContext(ctx, `SELECT profile FROM owner_profiles`)
	if err != nil {
		return nil, fmt.Errorf("read owner profiles: %w", classify(err))
	}
	defer rows.Close()
	out := map[string]identity.Profile{}
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			return nil, fmt.Errorf("read owner profiles: %w", classify(err))
		}
		var p identity.Profile
		if json.Unmarshal(b, &p) != nil || p.Verify() != nil {
			continue
		}
		out[p.Owner] = p
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read owner profiles: %w", classify(err))
	}
	return out, nil
}
