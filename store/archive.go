package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"idlepool/pool"
)

var _ pool.ReplicaArchive = (*DB)(nil)

// Replica returns the committed replica with lease ID lease (by its
// primary key), or an error wrapping pool.ErrUnknownLease. The Scheduler
// reads settled replicas from here instead of keeping them in memory.
func (d *DB) Replica(ctx context.Context, lease string) (pool.ReplicaRecord, error) {
	var (
		x                 pool.ReplicaRecord
		id, dig           []byte
		created, deadline int64
	)
	err := d.db.QueryRowContext(ctx, `SELECT lease, job, task, peer, owner, state, created, deadline, digest, failed, reason, result, version
		FROM replicas WHERE lease = ?`, lease).Scan(&x.Lease, &id, &x.Task, &x.Peer, &x.Owner, &x.State, &created, &deadline, &dig,
		&x.Failed, &x.Reason, &x.Result, &x.Version)
	if errors.Is(err, sql.ErrNoRows) {
		return x, fmt.Errorf("replica %q: %w", lease, pool.ErrUnknownLease)
	}
	if err != nil {
		return x, fmt.Errorf("read replica %q: %w", lease, classify(err))
	}
	copy(x.Job[:], id)
	copy(x.Digest[:], dig)
	x.Created, x.Deadline = time.UnixMilli(created), time.UnixMilli(deadline)
	return x, nil
}
