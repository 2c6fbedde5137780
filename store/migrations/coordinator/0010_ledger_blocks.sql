-- A batch of ledger entries signed together (pool.SignBatch) and
-- committed whole, stored as one row instead of one row per entry
-- (docs/benchmarks.md): first..last are its entries' seqs, prev the
-- first entry's Prev, hash the last entry's Hash (the chain's head after
-- it), sig the one signature over the head of the Merkle tree of their
-- leaf hashes, entries their fields (store/ledgerblock.go). Each entry's
-- Prev, leaf hash and inclusion proof are rebuilt when it is read. Rows
-- of ledger (and ledger_batches) written before stay as they are; an
-- entry that is not part of a batch committed whole is still a row of
-- ledger.
CREATE TABLE ledger_blocks (
	last    INTEGER PRIMARY KEY,
	first   INTEGER NOT NULL,
	prev    BLOB NOT NULL,
	hash    BLOB NOT NULL,
	sig     BLOB NOT NULL,
	entries BLOB NOT NULL
) STRICT;

-- The blocks that hold entries of a peer, for its receipts (Entries by
-- peer): one row per peer and block.
CREATE TABLE ledger_block_peers (
	peer TEXT NOT NULL,
	last INTEGER NOT NULL,
	PRIMARY KEY (peer, last)
) STRICT, WITHOUT ROWID;

-- How many entries of each kind the blocks hold (CountEntries), kept
-- as blocks are added.
CREATE TABLE ledger_block_kinds (
	kind  TEXT PRIMARY KEY,
	count INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
