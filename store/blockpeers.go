package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
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
//
// ledger_block_kinds, the blocks' entries counted by kind, is written in
// the same bursts (migration 0013): its one row a kind was a page of its
// own in every commit. The memory counts the blocks after its upto, and
// CountEntries, asked once when the scheduler starts, decodes them.

// blockPeersFlush is how many peer-block pairs the memory lists before a
// commit writes them to ledger_block_peers.
var blockPeersFlush = 4096

// peerTail lists the peers of the ledger blocks after upto, which
// ledger_block_peers does not list yet, and counts by kind the entries
// of those after kindsUpto, which ledger_block_kinds does not count yet.
// Its mu guards its fields; only Commit changes them, holding
// DB.commitMu.
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
	// kindsUpto is ledger_block_kinds_upto's: kinds counts the entries
	// of the blocks listed after it. It is upto once a burst has
	// written both (a database older than migration 0013 starts with
	// kindsUpto above upto).
	kindsUpto int64
	kinds     map[string]int64
}

// blockPeers are a block's last seq, the peers its entries name and its
// entries counted by kind (nil for a block that does not decode).
type blockPeers struct {
	last  int64
	peers []string
	kinds []kindCount
}

// kindCount is how many entries of a kind a block holds.
type kindCount struct {
	kind string
	n    int64
}

// blockOf returns the block of entries, whose last seq is last: its
// peers, sorted and each once, and its entries counted by kind.
func blockOf(last int64, entries []pool.Entry) blockPeers {
	peers := make([]string, len(entries))
	var kinds []kindCount // a batch holds one to three kinds
	for i := range entries {
		peers[i] = entries[i].Peer
		k := 0
		for k < len(kinds) && kinds[k].kind != entries[i].Kind {
			k++
		}
		if k == len(kinds) {
			kinds = append(kinds, kindCount{kind: entries[i].Kind})
		}
		kinds[k].n++
	}
	slices.Sort(peers)
	return blockPeers{last: last, peers: slices.Compact(peers), kinds: kinds}
}

// anyPeer stands for every peer in ledger_block_peers and the memory's
// list: a block whose bytes did not decode when its peers were read
// (peerTail.load) is listed under it, and every peer's read that reaches
// it decodes it, and fails with ErrCorrupt, since its peers cannot be
// known. A block that names the empty peer is listed under it too; such
// a block is decoded and filtered like any other.
const anyPeer = ""

// add lists the peers of blocks bs after those listed.
func (t *peerTail) add(bs []blockPeers) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, b := range bs {
		for _, p := range b.peers {
			t.lasts[p] = append(t.lasts[p], b.last)
			t.pairs++
		}
		t.newest = max(t.newest, b.last)
		if b.last > t.kindsUpto {
			for _, c := range b.kinds {
				t.kinds[c.kind] += c.n
			}
		}
	}
}

// flushed records that ledger_block_peers lists every block up to upto,
// and that ledger_block_kinds counts every block up to kindsUpto.
func (t *peerTail) flushed(upto, kindsUpto int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.upto, t.lasts, t.pairs, t.newest, t.stale = upto, map[string][]int64{}, 0, upto, false
	t.kindsUpto, t.kinds = kindsUpto, map[string]int64{}
}

// kindsAfter returns kindsUpto, the newest block listed, whether the
// list is stale, and a copy of the counts by kind of the blocks listed
// after kindsUpto.
func (t *peerTail) kindsAfter() (kindsUpto, newest int64, stale bool, kinds map[string]int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.kindsUpto, t.newest, t.stale, maps.Clone(t.kinds)
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
	above := func(ls []int64) []int64 {
		i, _ := slices.BinarySearch(ls, after+1)
		return ls[i:]
	}
	lasts = slices.Clone(above(t.lasts[peer]))
	if peer != anyPeer {
		lasts = append(lasts, above(t.lasts[anyPeer])...)
		slices.Sort(lasts)
		lasts = slices.Compact(lasts)
	}
	return t.upto, t.newest, t.stale, lasts
}

// due reports whether a commit adding n pairs writes the list; never
// while it is stale.
func (t *peerTail) due(n int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.stale && t.pairs+n >= blockPeersFlush
}

// listed returns, for a burst, the blocks listed and then bs (a batch's,
// not listed), as one entry per peer and block, and their entries
// counted by kind where ledger_block_kinds does not count them yet,
// sorted by kind. The caller writes them without holding t.mu.
func (t *peerTail) listed(bs []blockPeers) ([]blockPeers, []kindCount) {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]blockPeers, 0, t.pairs+len(bs))
	for p, ls := range t.lasts {
		for _, l := range ls {
			out = append(out, blockPeers{last: l, peers: []string{p}})
		}
	}
	sum := maps.Clone(t.kinds)
	for _, b := range bs {
		out = append(out, b)
		for _, c := range b.kinds {
			sum[c.kind] += c.n
		}
	}
	kinds := make([]kindCount, 0, len(sum))
	for k, n := range sum {
		kinds = append(kinds, kindCount{kind: k, n: n})
	}
	slices.SortFunc(kinds, func(a, b kindCount) int { return strings.Compare(a.kind, b.kind) })
	return out, kinds
}

// load reads the list of the peers of the blocks after
// ledger_block_peers_upto, and the counts by kind of those after
// ledger_block_kinds_upto, from the blocks themselves within tx
// (decodeBlocksAfter): a block that does not decode is listed under
// anyPeer, and not counted. It replaces what t listed.
func (t *peerTail) load(ctx context.Context, tx *sql.Tx) error {
	var upto, kindsUpto int64
	if err := tx.QueryRowContext(ctx, `SELECT p.upto, k.upto FROM ledger_block_peers_upto p, ledger_block_kinds_upto k
		WHERE p.id = 1 AND k.id = 1`).Scan(&upto, &kindsUpto); err != nil {
		return err
	}
	var bs []blockPeers
	if err := decodeBlocksAfter(ctx, tx, upto, func(b blockPeers) { bs = append(bs, b) }); err != nil {
		return err
	}
	t.flushed(upto, kindsUpto)
	t.add(bs)
	return nil
}

// decodeBlocksAfter calls f with each ledger block with last > after, in
// order, read within tx and decoded whole (its hash chain checked): its
// peers and counts by kind, or, for a block whose bytes do not decode
// (ErrCorrupt), anyPeer alone and no counts.
func decodeBlocksAfter(ctx context.Context, tx *sql.Tx, after int64, f func(blockPeers)) error {
	rows, err := tx.QueryContext(ctx, `SELECT first, last, prev, hash, sig, entries FROM ledger_blocks WHERE last > ? ORDER BY last`, after)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		k, err := scanBlock(rows.Scan)
		if err != nil {
			return err
		}
		entries, err := k.decode()
		switch {
		case err == nil:
			f(blockOf(int64(k.last), entries))
		case errors.Is(err, ErrCorrupt):
			f(blockPeers{last: int64(k.last), peers: []string{anyPeer}})
		default:
			return err
		}
	}
	return rows.Err()
}

// openPeerTail sets d.tail from the blocks after ledger_block_peers_upto
// (peerTail.load).
func (d *DB) openPeerTail(ctx context.Context) error {
	d.tail = &peerTail{}
	if err := d.read(ctx, func(tx *sql.Tx) error { return d.tail.load(ctx, tx) }); err != nil {
		return fmt.Errorf("read the peers of the newest ledger blocks: %w", classify(err))
	}
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
	const columns = `SELECT first, last, prev, hash, sig, entries FROM ledger_blocks `
	out, err = appendBlockEntries(ctx, tx, nil, q, columns+`WHERE last IN
		(SELECT last FROM ledger_block_peers WHERE peer IN (?, ?) AND last > ? AND last <= ?) ORDER BY last`,
		q.Peer, anyPeer, int64(q.After), upto)
	if err != nil {
		return nil, false, err
	}
	if scan {
		out, err = appendBlockEntries(ctx, tx, out, q, columns+`WHERE last > ? ORDER BY last`, max(int64(q.After), upto))
		return out, err == nil, err
	}
	// A block listed before its commit is not tx's to read: it is none
	// of the rows selected.
	for _, last := range lasts {
		if len(out) >= q.Max {
			break
		}
		if out, err = appendBlockEntries(ctx, tx, out, q, columns+`WHERE last = ?`, last); err != nil {
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
// ledger_blocks with scan (a Rows' Scan).
func scanBlock(scan func(dest ...any) error) (block, error) {
	var (
		k           block
		first, last int64
	)
	if err := scan(&first, &last, &k.prev, &k.hash, &k.sig, &k.entries); err != nil {
		return k, fmt.Errorf("read ledger blocks: %w", classify(err))
	}
	k.first, k.last = uint64(first), uint64(last)
	return k, nil
}
