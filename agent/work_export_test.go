package agent

import (
	"context"
	"time"
)

// QueuedWork returns how many calls of c wait for the next POST /v1/work.
func QueuedWork(c *Client) int {
	c.work.mu.Lock()
	defer c.work.mu.Unlock()
	return len(c.work.ops)
}

// SweepKept asks the pool once which kept results a to keep and deletes
// the others (what serveKept does every keptSweep).
func SweepKept(ctx context.Context, a *Agent) { a.sweepKept(ctx) }

// KeptCount returns how many results a keeps for mergers.
func KeptCount(a *Agent) int {
	k := a.cache.keeper()
	if k == nil {
		return 0
	}
	return len(k.of(a.c.URL()))
}

// DataPlaneUp reports whether a's data plane is up and keeps results, so
// that a result over pool.InlineResultBytes goes by reference.
func DataPlaneUp(a *Agent) bool { return a.peers.Load() != nil && a.cache.keeper() != nil }

// LeaseAhead returns how many leases a slot of a asks for at once after
// a task that took took (negative: none yet).
func LeaseAhead(a *Agent, took time.Duration) int { return a.leaseAhead(took) }
