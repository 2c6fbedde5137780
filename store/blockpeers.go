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
// ledger_block_peers does not list yet. Its mu guards its fields; Commit
// changes them only after its transaction committed, holding
// DB.commitMu, so that no other commit reads them between the two.
type peerTail struct {
	mu    sync.Mutex
	upto  int64              // ledger_block_peers lists every block with last <= upto
	lasts map[string][]int64 // peer → the lasts of its blocks after upto, ascending
	pairs int                // the pairs listed: the sum of len(lasts[p])
}

// blockPeers are a block's last seq and the peers its entries name.
type blockPeers struct {
	last  int64
	peers []string
}

// add lists the peers of blocks bs, committed after those listed.
func (t *peerTail) add(bs []blockPeers) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, b := range bs {
		for _, p := range b.peers {
			t.lasts[p] = append(t.lasts[p], b.last)
			t.pairs++
		}
	}
}

// flushed records that ledger_block_peers lists every block up to upto.
func (t *peerTail) flushed(upto int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.upto, t.lasts, t.pairs = upto, map[string][]int64{}, 0
}

// anyPeer stands for every peer in ledger_block_peers and the memory's
// list: a block whose bytes did not decode when its peers were read
// (openPeerTail) is listed under it, and read for every peer.
const anyPeer = ""

// peerAfter returns upto and the lasts of peer's blocks listed after it
// that are above after (with those listed for anyPeer), ascending.
func (t *peerTail) peerAfter(peer string, after int64) (upto int64, lasts []int64) {
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
	return t.upto, slices.Compact(lasts)
}

// due reports whether a commit adding n pairs writes the list.
func (t *peerTail) due(n int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.pairs+n >= blockPeersFlush
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

// openPeerTail lists the peers of the blocks after
// ledger_block_peers_upto, reading their entries' peers. A block that
// does not decode is an error wrapping ErrCorrupt.
func (d *DB) openPeerTail(ctx context.Context) error {
	t := &peerTail{lasts: map[string][]int64{}}
	var bs []blockPeers
	err := d.read(ctx, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, `SELECT upto FROM ledger_block_peers_upto WHERE id = 1`).Scan(&t.upto); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `SELECT first, last, entries FROM ledger_blocks WHERE last > ? ORDER BY last`, t.upto)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				first, last int64
				entries     []byte
			)
			if err := rows.Scan(&first, &last, &entries); err != nil {
				return err
			}
			peers, err := blockPeersOf(first, last, entries)
			if errors.Is(err, ErrCorrupt) {
				// Listed for every peer (anyPeer), so that reading it
				// fails with ErrCorrupt as it did before it was
				// damaged, rather than leaving its entries out.
				peers = []string{anyPeer}
			} else if err != nil {
				return err
			}
			bs = append(bs, blockPeers{last: last, peers: peers})
		}
		return rows.Err()
	})
	if err != nil {
		return fmt.Errorf("read the peers of the newest ledger blocks: %w", classify(err))
	}
	t.add(bs)
	d.tail = t
	return nil
}

// blockPeersOf returns the peers that the entries of block first..last
// name (appendBlock's encoding), sorted, each once. Bytes that do not
// decode into exactly last-first+1 entries are an error wrapping
// ErrCorrupt.
func blockPeersOf(first, last int64, entries []byte) ([]string, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("ledger block %d-%d: %s: %w: %w", first, last, fmt.Sprintf(format, args...), errBlock, ErrCorrupt)
	}
	if last < first || last-first >= maxBlock {
		return nil, bad("bad row")
	}
	if len(entries) == 0 || entries[0] != blockFormat {
		return nil, bad("unknown format")
	}
	r := blockReader{b: entries[1:]}
	var peers []string
	for i := range last - first + 1 {
		r.string() // kind
		r.string() // pool
		r.digest() // job
		r.varint() // task
		peers = append(peers, r.string())
		r.string() // owner
		r.string() // lease
		r.digest() // digest
		r.uint64() // cost
		r.uvarint()
		r.varint()
		r.string() // reason
		if r.err != nil {
			return nil, bad("entry %d: %v", first+i, r.err)
		}
	}
	if len(r.b) != 0 {
		return nil, bad("%d bytes after its entries", len(r.b))
	}
	slices.Sort(peers)
	return slices.Compact(peers), nil
}

// peerEntries returns the entries of ledger blocks naming q.Peer, in Seq
// order, at most q.Max: those of the blocks ledger_block_peers lists (up
// to its upto, as tx reads it) and those of the blocks the memory lists
// after it. ok is false when the memory's upto is not tx's (a commit
// wrote the list between them): the caller reads again in a new
// transaction.
func (d *DB) peerEntries(ctx context.Context, tx *sql.Tx, q pool.EntryQuery) (out []pool.Entry, ok bool, err error) {
	var upto int64
	if err := tx.QueryRowContext(ctx, `SELECT upto FROM ledger_block_peers_upto WHERE id = 1`).Scan(&upto); err != nil {
		return nil, false, fmt.Errorf("read ledger blocks: %w", classify(err))
	}
	if beforePeerTail != nil {
		beforePeerTail()
	}
	tailUpto, lasts := d.tail.peerAfter(q.Peer, max(int64(q.After), upto))
	if tailUpto != upto {
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
	rows, err := tx.QueryContext(ctx, `SELECT b.first, b.last, b.prev, b.hash, b.sig, b.entries FROM ledger_block_peers p
		JOIN ledger_blocks b ON b.last = p.last WHERE p.peer IN (?, ?) AND p.last > ? AND p.last <= ? ORDER BY p.last`,
		q.Peer, anyPeer, int64(q.After), upto)
	if err != nil {
		return nil, false, fmt.Errorf("read ledger blocks: %w", classify(err))
	}
	defer rows.Close()
	for len(out) < q.Max && rows.Next() {
		k, err := scanBlock(rows.Scan)
		if err != nil {
			return nil, false, err
		}
		if err := add(&k); err != nil {
			return nil, false, err
		}
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("read ledger blocks: %w", classify(err))
	}
	for _, last := range lasts {
		if len(out) >= q.Max {
			break
		}
		k, err := scanBlock(tx.QueryRowContext(ctx, `SELECT first, last, prev, hash, sig, entries FROM ledger_blocks WHERE last = ?`, last).Scan)
		if errors.Is(err, sql.ErrNoRows) {
			break // committed after tx began: neither it nor later ones are tx's to read
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
