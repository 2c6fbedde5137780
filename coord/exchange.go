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

// DefaultExchangeEvery is how often a shard's coordinator exchanges with
// the other shards what they share (ClusterHooks.ExchangeEvery): it
// publishes its ledger's head and anchors the others' (entries newer
// than the last anchors the other shards hold of them are guarded by
// their own chain alone, for about this long), and publishes its owners'
// fair-share figures and takes the others' (an owner's use of the other
// shards counts in this one's fair share about this late).
const DefaultExchangeEvery = 5 * time.Second

// UsageBoard is where the shards of a divided pool publish their owners'
// fair-share figures and read one another's (ClusterHooks.Usage;
// cluster.Usage, on a replicated JetStream bucket).
type UsageBoard interface {
	// Publish stores u as its shard's figures, replacing those before.
	// An error matching pool.ErrStoreUnavailable means the board did
	// not answer: publish again later.
	Publish(ctx context.Context, u pool.ShardUsage) error
	// Read returns the figures the shards published, one per shard
	// that published.
	Read(ctx context.Context) ([]pool.ShardUsage, error)
}

// exchangeRound is one exchange with the other shards, every period
// (exchangeLoop): what it exchanges, for the logs, and the round.
type exchangeRound struct {
	what  string // "Ledger heads", "Fair-share figures"
	round func(ctx context.Context) error
}

// exchangeLoop runs x every period until ctx ends (the Server stops). A
// round that fails is logged (its first failure and every tenth) and
// tried again at the next period: nothing is lost meanwhile, since each
// round publishes and reads the state of the moment. A round that finds
// the scheduler stopped (pool.ErrStopped) ends the loop: Serve is
// ending.
func (s *Server) exchangeLoop(ctx context.Context, period time.Duration, x exchangeRound) {
	t := time.NewTicker(period)
	defer t.Stop()
	fails := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := x.round(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
			if fails > 0 {
				s.log.Info(x.what+" exchanged with the other shards again", "after", fails)
			}
			fails = 0
		case errors.Is(err, pool.ErrStopped):
			return
		default:
			if fails++; fails == 1 || fails%10 == 0 {
				s.log.Warn(x.what+" not exchanged with the other shards; trying again", "err", err, "tries", fails, "every", period)
			}
		}
	}
}

// anchorRound ties this shard's ledger to the others' (exchangeLoop): it
// publishes the scheduler's head (pool.Scheduler.AnchorHead) when it
// moved since published, then anchors the heads the other shards
// published (pool.Scheduler.Anchor: one entry for each head that moved
// since it anchored that shard last). A head published late is anchored
// late.
func (s *Server) anchorRound(board HeadBoard) exchangeRound {
	var published uint64
	return exchangeRound{what: "Ledger heads", round: func(ctx context.Context) error {
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
	}}
}

// usageRound makes fair share pool-wide (exchangeLoop): it publishes the
// scheduler's owners' figures (pool.Scheduler.Usage) and hands the
// scheduler every shard's as read (pool.Scheduler.SetShardUsage, which
// skips its own). While the board does not answer, the scheduler keeps
// the figures it last had.
func (s *Server) usageRound(board UsageBoard) exchangeRound {
	return exchangeRound{what: "Fair-share figures", round: func(ctx context.Context) error {
		if err := board.Publish(ctx, s.sched.Usage()); err != nil {
			return err
		}
		all, err := board.Read(ctx)
		if err != nil {
			return err
		}
		return s.sched.SetShardUsage(all)
	}}
}
