package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"

	"idlepool/pool"
)

// ledger_block_peers lists, per peer, the ledger blocks that hold its
// entries, for its receipts (Entries by peer). Its rows are ordered by
// peer, so a group commit that inserted one row per peer of its block
// dirtied one page per peer: a fifth of the pages a commit wrote
// (docs/benchmarks.md, "Where a group commit's pages go"). The rows are
// written in bursts instead: the peers of the newest blocks are listed in
// memory (peerTail), and a commit writes them all once they reach
// blockPeersFlush, with the newest block's last as the table's upto
// (migration 0012). A burst's rows fall on each peer's page once.
// Entries by peer reads the table up to upto and the blocks the memory
// lists after it; Open rebuilds that list from the blocks after upto.

// blockPeersFlush is how many peer-block pairs the memory lists before a
// commit writes them to ledger_block_peers.
var blockPeersFlush = 4096

// peerTail lists the peers of the ledger blocks after upto, which
// ledger_block_peers does not list yet. Its mu guards its fields; only
// Commit changes them, holding DB.commitMu.
type peerTail struct {
	mu    sync.Mutex
	upto  int64              // ledger_block_peers lists every block with last <= upto
	lasts map[string][]int64 // peer → the lasts of its blocks after upto, ascending
	pairs int                // the pairs listed: the sum of len(lasts[p])
	// newest is the last of the newest block listed (upto when none): a
	// read that sees a newer block committed does not trust the list.
	newest int64
	// stale is set when a commit failed in a way that may have
	// committed it: the list may lack its blocks until read again.
	stale bool
}

// blockPeers are a block's last seq and the peers its entries name.
type blockPeers struct {
	last  int64
	peers []string
}

// anyPeer stands for every peer in ledger_block_peers and the memory's
// list: a block whose bytes did not decode when its peers were read
// (loadPeerTail) is listed under it, and every peer's read that reaches
// it decodes it, and fails with ErrCorrupt, since its peers cannot be
// known. A block that names the empty peer is listed under it too; such
// a block is decoded and filtered like any other.
const anyPeer = ""

// add lists the peers of blocks bs after those listed, and returns a
// function that takes them out again.
func (t *peerTail) add(bs []blockPeers) (undo func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	newest, pairs := t.newest, t.pairs
	lens := map[string]int{}
	for _, b := range bs {
		for _, p := range b.peers {
			if _, ok := lens[p]; !ok {
				lens[p] = len(t.lasts[p])
			}
			t.lasts[p] = append(t.lasts[p], b.last)
			t.pairs++
		}
		t.newest = max(t.newest, b.last)
	}
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		for p, n := range lens {
			t.lasts[p] = t.lasts[p][:n]
		}
		t.newest, t.pairs = newest, pairs
	}
}

// flushed records that ledger_block_peers lists every block up to upto,
// and returns a function that restores the list as it was.
func (t *peerTail) flushed(upto int64) (undo func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	oldUpto, oldLasts, oldPairs, oldNewest := t.upto, t.lasts, t.pairs, t.newest
	t.upto, t.lasts, t.pairs, t.newest = upto, map[string][]int64{}, 0, upto
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		t.upto, t.lasts, t.pairs, t.newest = oldUpto, oldLasts, oldPairs, oldNewest
	}
}

// markStale records that the list may lack committed blocks.
func (t *peerTail) markStale() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stale = true
}

// isStale reports whether markStale was called.
func (t *peerTail) isStale() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stale
}

// peerAfter returns upto, newest, whether the list is stale, and the
// lasts of peer's blocks listed that are above after (with those listed
// for anyPeer), ascending.
func (t *peerTail) peerAfter(peer string, after int64) (upto, newest int64, stale bool, lasts []int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range []string{peer, anyPeer} {
		ls := t.lasts[p]
		i, _ := slices.BinarySearch(ls, after+1)
		lasts = append(lasts, ls[i:]...)
		if peer == anyPeer {
			break
		}
	}
	slices.Sort(lasts)
	return t.upto, t.newest, t.stale, slices.Compact(lasts)
}

// due reports whether a commit adding n pairs writes the list; never
// while it is stale.
func (t *peerTail) due(n int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.stale && t.pairs+n >= blockPeersFlush
}

// each calls f with every pair listed, by peer.
func (t *peerTail) each(f func(peer string, last int64) error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for p, ls := range t.lasts {
		for _, l := range ls {
			if err := f(p, l); err != nil {
				return err
			}
		}
	}
	return nil
}

// loadPeerTail reads the list of the peers of the blocks after
// ledger_block_peers_upto from the blocks themselves, decoding each
// whole (its hash chain checked): a block that does not decode is
// listed under anyPeer.
func loadPeerTail(ctx context.Context, q *sql.Tx) (*peerTail, error) {
	t := &peerTail{lasts: map[string][]int64{}}
	if err := q.QueryRowContext(ctx, `SELECT upto FROM ledger_block_peers_upto WHERE id = 1`).Scan(&t.upto); err != nil {
		return nil, err
	}
	t.newest = t.upto
	rows, err := q.QueryContext(ctx, `SELECT first, last, prev, hash, sig, entries FROM ledger_blocks WHERE last > ? ORDER BY last`, t.upto)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var bs []blockPeers
	for rows.Next() {
		k, err := scanBlock(rows.Scan)
		if err != nil {
			return nil, err
		}
		peers := []string{anyPeer}
		if entries, err := k.decode(); err == nil {
			peers = peers[:0]
			for _, e := range entries {
				peers = append(peers, e.Peer)
			}
			slices.Sort(peers)
			peers = slices.Compact(peers)
		} else if !errors.Is(err, ErrCorrupt) {
			return nil, err
		}
		bs = append(bs, blockPeers{last: int64(k.last), peers: peers})
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	t.add(bs)
	return t, nil
}

// openPeerTail sets d.tail from the blocks after ledger_block_peers_upto
// (loadPeerTail).
func (d *DB) openPeerTail(ctx context.Context) error {
	err := d.read(ctx, func(tx *sql.Tx) (err error) {
		d.tail, err = loadPeerTail(ctx, tx)
		return err
	})
	if err != nil {
		return fmt.Errorf("read the peers of the newest ledger blocks: %w", classify(err))
	}
	return nil
}

// resyncTail reads d.tail again within Commit's transaction tx, after a
// commit whose outcome was not known.
func (d *DB) resyncTail(ctx context.Context, tx *sql.Tx) error {
	t, err := loadPeerTail(ctx, tx)
	if err != nil {
		return fmt.Errorf("read the peers of the newest ledger blocks: %w", classify(err))
	}
	g := d.tail // in place: reads hold d.tail
	g.mu.Lock()
	defer g.mu.Unlock()
	g.upto, g.lasts, g.pairs, g.newest, g.stale = t.upto, t.lasts, t.pairs, t.newest, false
	return nil
}

// peerEntries returns the entries of ledger blocks naming q.Peer, in Seq
// order, at most q.Max: those of the blocks ledger_block_peers lists (up
// to its upto, as tx reads it) and those of the blocks after upto, which
// the memory lists (or, with scan, which it decodes all of). ok is false
// when the memory's list does not stand for what tx sees (a commit
// wrote the list between them, or tx sees a block it does not list):
// the caller reads again.
func (d *DB) peerEntries(ctx context.Context, tx *sql.Tx, q pool.EntryQuery, scan bool) (out []pool.Entry, ok bool, err error) {
	var upto, newest int64
	if err := tx.QueryRowContext(ctx, `SELECT upto, (SELECT coalesce(max(last), 0) FROM ledger_blocks)
		FROM ledger_block_peers_upto WHERE id = 1`).Scan(&upto, &newest); err != nil {
		return nil, false, fmt.Errorf("read ledger blocks: %w", classify(err))
	}
	if beforePeerTail != nil {
		beforePeerTail()
	}
	tailUpto, tailNewest, stale, lasts := d.tail.peerAfter(q.Peer, max(int64(q.After), upto))
	if !scan && (stale || tailUpto != upto || newest > tailNewest) {
		return nil, false, nil
	}
	add := func(k *block) error {
		entries, err := k.decode()
		if err != nil {
			return fmt.Errorf("read ledger: %w", err)
		}
		for _, e := range entries {
			if e.Seq > q.After && e.Peer == q.Peer && len(out) < q.Max {
				out = append(out, e)
			}
		}
		return nil
	}
	each := func(query string, args ...any) error {
		rows, err := tx.QueryContext(ctx, query, args...)
		if err != nil {
			return fmt.Errorf("read ledger blocks: %w", classify(err))
		}
		defer rows.Close()
		for len(out) < q.Max && rows.Next() {
			k, err := scanBlock(rows.Scan)
			if err != nil {
				return err
			}
			if err := add(&k); err != nil {
				return err
			}
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read ledger blocks: %w", classify(err))
		}
		return nil
	}
	if err := each(`SELECT first, last, prev, hash, sig, entries FROM ledger_blocks WHERE last IN
		(SELECT last FROM ledger_block_peers WHERE peer IN (?, ?) AND last > ? AND last <= ?) ORDER BY last`,
		q.Peer, anyPeer, int64(q.After), upto); err != nil {
		return nil, false, err
	}
	if scan {
		if err := each(`SELECT first, last, prev, hash, sig, entries FROM ledger_blocks WHERE last > ? ORDER BY last`,
			max(int64(q.After), upto)); err != nil {
			return nil, false, err
		}
		return out, true, nil
	}
	for _, last := range lasts {
		if len(out) >= q.Max {
			break
		}
		k, err := scanBlock(tx.QueryRowContext(ctx, `SELECT first, last, prev, hash, sig, entries FROM ledger_blocks WHERE last = ?`, last).Scan)
		if errors.Is(err, sql.ErrNoRows) {
			break // listed before its commit: neither it nor later ones are tx's to read
		}
		if err != nil {
			return nil, false, err
		}
		if err := add(&k); err != nil {
			return nil, false, err
		}
	}
	return out, true, nil
}

// beforePeerTail, when not nil, is called by peerEntries between its
// read of ledger_block_peers_upto and of the memory's list (tests: a
// commit that writes the list there).
var beforePeerTail func()

// scanBlock reads one row of first, last, prev, hash, sig, entries of
// ledger_blocks with scan (a Rows' or Row's Scan).
func scanBlock(scan func(dest ...any) error) (block, error) {
	var (
		k           block
		first, last int64
	)
	if err := scan(&first, &last, &k.prev, &k.hash, &k.sig, &k.entries); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return k, err
		}
		return k, fmt.Errorf("read ledger blocks: %w", classify(err))
	}
	k.first, k.last = uint64(first), uint64(last)
	return k, nil
}
