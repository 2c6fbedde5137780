package agent_test

import (
	"context"
	"sync"

	"idlepool/agent"
	"idlepool/pool"
	"idlepool/store"
)

// memStore is an agent.Store in memory, so that the benchmark's agents
// spend nothing on their own disks: the figures are the coordinator's.
type memStore struct {
	mu     sync.Mutex
	byID   map[string]store.Contribution
	cursor map[string]uint64
}

func newMemStore() *memStore {
	return &memStore{byID: map[string]store.Contribution{}, cursor: map[string]uint64{}}
}

func (m *memStore) AddPending(_ context.Context, c store.Contribution) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.byID[c.Lease]; !ok {
		c.State = store.StatePending
		m.byID[c.Lease] = c
	}
	return nil
}

func (m *memStore) AddAbandoned(_ context.Context, c store.Contribution, reason string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.byID[c.Lease]; !ok {
		c.State, c.Reason, c.Acknowledged = store.StateRejected, reason, true
		m.byID[c.Lease] = c
	}
	return nil
}

func (m *memStore) Unacknowledged(_ context.Context, pool string) ([]store.Contribution, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.Contribution
	for _, c := range m.byID {
		if c.Pool == pool && !c.Acknowledged {
			out = append(out, c)
		}
	}
	return out, nil
}

func (m *memStore) update(lease string, f func(*store.Contribution)) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.byID[lease]
	if !ok {
		return store.ErrNotFound
	}
	f(&c)
	m.byID[lease] = c
	return nil
}

func (m *memStore) MarkAcknowledged(_ context.Context, lease string) error {
	return m.update(lease, func(c *store.Contribution) { c.Acknowledged, c.Result = true, nil })
}

func (m *memStore) Confirm(_ context.Context, lease string, e pool.Entry) error {
	return m.update(lease, func(c *store.Contribution) { c.State, c.Cost, c.Receipt = store.StateConfirmed, e.Cost, e })
}

func (m *memStore) Reject(_ context.Context, lease, reason string) error {
	return m.update(lease, func(c *store.Contribution) { c.State, c.Reason = store.StateRejected, reason })
}

func (m *memStore) LedgerCursor(_ context.Context, pool string) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cursor[pool], nil
}

func (m *memStore) SetLedgerCursor(_ context.Context, pool string, seq uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cursor[pool] = max(m.cursor[pool], seq)
	return nil
}

var _ agent.Store = (*memStore)(nil)
