package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"idlepool/pool"
)

var _ pool.ReplicaArchive = (*DB)(nil)

// Replica returns the committed replica with lease ID lease (by its
// primary key), or an error wrapping pool.ErrUnknownLease. The Scheduler
// reads settled replicas from here instead of keeping them in memory.
func (d *DB) Replica(ctx context.Context, lease string) (pool.ReplicaRecord, error) {
	x, err := scanReplica(d.db.QueryRowContext(ctx, `SELECT `+replicaColumns+` FROM replicas WHERE lease = ?`, lease).Scan)
	if errors.Is(err, sql.ErrNoRows) {
		return pool.ReplicaRecord{}, fmt.Errorf("replica %q: %w", lease, pool.ErrUnknownLease)
	}
	if err != nil {
		return pool.ReplicaRecord{}, fmt.Errorf("read replica %q: %w", lease, classify(err))
	}
	return x, nil
}
