package pool_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"idlepool/pool"
	"idlepool/pool/pooltest"
)

// commitCountingStore counts the batches its store committed, and what
// they held, after refusing the first fail commits as unavailable.
type commitCountingStore struct {
	pool.Store
	mu      sync.Mutex
	fail    int
	refused int
	n       pool.CommitCounts
}

func (c *commitCountingStore) Commit(ctx context.Context, b *pool.Batch) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fail > 0 {
		c.fail--
		c.refused++
		return fmt.Errorf("test store: %w", pool.ErrStoreUnavailable)
	}
	if err := c.Store.Commit(ctx, b); err != nil {
		return err
	}
	c.n.Commits++
	c.n.Replicas += uint64(len(b.Replicas))
	c.n.Outcomes += uint64(len(b.Outcomes))
	c.n.Entries += uint64(len(b.Entries))
	return nil
}

func (c *commitCountingStore) counts() (pool.CommitCounts, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n, c.refused
}

// CommitCounts counts each batch the store committed once, and what it
// held, whatever tries the store refused first; its time takes in those
// tries and their backoff (at least 50 ms, then 100 ms).
func TestCommitCounts(t *testing.T) {
	st := &commitCountingStore{Store: pool.NewMemStore(), fail: 2}
	h := pooltest.NewHarness(t, st, nil)
	h.Decide("counted", 3)
	got := h.S.CommitCounts()
	want, refused := st.counts()
	if refused != 2 {
		t.Fatalf("the store refused %d commits, want 2", refused)
	}
	if want.Commits == 0 || want.Replicas == 0 || want.Outcomes == 0 || want.Entries == 0 {
		t.Fatalf("the store committed %+v: want every kind of record", want)
	}
	if got.Time < 150*time.Millisecond {
		t.Errorf("commits took %s, want at least the 150 ms of two tries' backoff", got.Time)
	}
	got.Time = 0
	if got != want {
		t.Errorf("CommitCounts %+v, the store committed %+v", got, want)
	}
	if n := h.Ledger(); uint64(len(n)) != got.Entries {
		t.Errorf("%d ledger entries committed, the ledger holds %d", got.Entries, len(n))
	}
}
