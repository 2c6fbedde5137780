package agent

import (
	"context"
	"crypto/ed25519"
	"fmt"

	"idlepool/pool"
)

// DownloadLedger reads a pool's ledger from the entry after after to its
// end, page by page (Client.LedgerOf): shard's in a pool divided into
// shards, the pool's (or shard 0's) when shard is negative. A page that
// does not move past the one before is an error matching pool.ErrLedger;
// other errors are the client's.
func DownloadLedger(ctx context.Context, c *Client, shard int, after uint64) ([]pool.Entry, error) {
	var all []pool.Entry
	for {
		page, err := c.LedgerOf(ctx, shard, after, 0)
		if err != nil {
			return nil, err
		}
		if len(page) == 0 {
			return all, nil
		}
		if last := page[len(page)-1].Seq; last <= after {
			return nil, fmt.Errorf("%w: GET /v1/ledger?after=%d answered entries up to %d", pool.ErrLedger, after, last)
		}
		all = append(all, page...)
		after = page[len(page)-1].Seq
	}
}

// ShardLedgers are the ledgers of a pool divided into shards as
// VerifyShardLedgers read and checked them: Chains[s] is shard s's
// whole ledger, Anchors[s] how many anchors (pool.KindAnchor) it holds.
type ShardLedgers struct {
	Chains  [][]pool.Entry
	Anchors []int
}

// maxAheadReads bounds how many times VerifyShardLedgers reads on in a
// shard's ledger for an anchor naming an entry past what it read.
const maxAheadReads = 8

// VerifyShardLedgers downloads the ledgers of the pool c talks to,
// divided into shards shards (api.PoolInfo.Shards, at least 2), and
// checks each one end to end with key (pool.VerifyLedger) and the
// anchors that tie them (pool.VerifyAnchors). An anchor naming an entry
// added to its shard's ledger after that ledger was read is no fault:
// the ledger is read on from its end (up to eight times) and checked
// again. Errors: "shard S: " and a *pool.LedgerError, or a
// *pool.AnchorError, both matching pool.ErrLedger, when a ledger or an
// anchor does not verify; "shard S: " and the client's error when a
// download failed.
func VerifyShardLedgers(ctx context.Context, c *Client, shards int, key ed25519.PublicKey) (*ShardLedgers, error) {
	if shards < 2 {
		return nil, fmt.Errorf("verify the ledgers of %d shards: %w: a pool divided into shards has at least 2", shards, pool.ErrBadRequest)
	}
	chains := make([][]pool.Entry, shards)
	for s := range chains {
		es, err := DownloadLedger(ctx, c, s, 0)
		if err != nil {
			return nil, fmt.Errorf("shard %d: %w", s, err)
		}
		chains[s] = es
	}
	var (
		anchors []int
		err     error
	)
	for tries := 0; ; tries++ {
		anchors, err = pool.VerifyAnchors(chains)
		ae, ahead := pool.IsAnchorAhead(err)
		if !ahead || tries == maxAheadReads {
			break
		}
		more, derr := DownloadLedger(ctx, c, ae.Of, uint64(len(chains[ae.Of])))
		if derr != nil {
			return nil, fmt.Errorf("shard %d: %w", ae.Of, derr)
		}
		if len(more) == 0 {
			break // the anchor names what is not there
		}
		chains[ae.Of] = append(chains[ae.Of], more...)
	}
	// Each chain is checked on its own first: a broken chain is named
	// as such, not as the anchors it breaks.
	for s, es := range chains {
		if verr := pool.VerifyLedger(es, key); verr != nil {
			return nil, fmt.Errorf("shard %d: %w", s, verr)
		}
	}
	if err != nil {
		return nil, err
	}
	return &ShardLedgers{Chains: chains, Anchors: anchors}, nil
}
