package coord

import (
	"context"
	"errors"
	"time"

	"idlepool/pool"
)

// HeadBoard is where the shards of a divided pool publish the heads of
// their ledgers and read one another's, to anchor them
// (ClusterHooks.LedgerHeads; cluster.LedgerHeads, on a replicated
// JetStream bucket).
type HeadBoard interface {
	// Publish stores h as its shard's head unless a head as new or
	// newer is stored. An error matching pool.ErrStoreUnavailable means
	// the board did not answer: publish again later.
	Publish(ctx context.Context, h pool.ChainHead) error
	// Heads returns the heads the shards published, one per shard that
	// published one.
	Heads(ctx context.Context) ([]pool.ChainHead, error)
}

// DefaultAnchorEvery is how often a shard's coordinator publishes its
// ledger's head and anchors the other shards' (ClusterHooks.AnchorEvery):
// entries newer than the last anchors the other shards hold of them are
// guarded by their own chain alone, for about this long.
const DefaultAnchorEvery = 5 * time.Second

// anchorLoop ties this shard's ledger to the others' until ctx ends (the
// Server stops): every period it publishes the scheduler's head
// (pool.Scheduler.AnchorHead) when it moved, then anchors the heads the
// other shards published (pool.Scheduler.Anchor: one entry for each head
// that moved since it anchored that shard last). A round the board does
// not answer is logged (its first failure and every tenth) and tried
// again at the next period; nothing is lost meanwhile, since a head
// published late is anchored late.
func (s *Server) anchorLoop(ctx context.Context, board HeadBoard, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	var published uint64
	fails := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := func() error {
			if h := s.sched.AnchorHead(); h.Seq > published {
				if err := board.Publish(ctx, h); err != nil {
					return err
				}
				published = h.Seq
			}
			heads, err := board.Heads(ctx)
			if err != nil {
				return err
			}
			_, err = s.sched.Anchor(ctx, heads)
			return err
		}()
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
			if fails > 0 {
				s.log.Info("Ledger heads anchored again", "after", fails)
			}
			fails = 0
		case errors.Is(err, pool.ErrStopped):
			return // the scheduler stopped: Serve is ending
		default:
			if fails++; fails == 1 || fails%10 == 0 {
				s.log.Warn("Ledger heads not anchored; trying again", "err", err, "tries", fails, "every", period)
			}
		}
	}
}
