package pool

import (
	"context"
	"fmt"
)

var _ ReplicaArchive = (*MemStore)(nil)

// Replica returns the committed replica with lease ID lease (a copy), or
// an error wrapping ErrUnknownLease.
func (m *MemStore) Replica(ctx context.Context, lease string) (ReplicaRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.replicas[lease]
	if !ok {
		return ReplicaRecord{}, fmt.Errorf("replica %q: %w", lease, ErrUnknownLease)
	}
	out := cloneReplica(*r)
	out.Prev = 0
	return out, nil
}
