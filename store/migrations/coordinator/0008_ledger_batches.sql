-- One row per batch of ledger entries signed together (pool.SignBatch)
-- and stored as one: entries first..last, whose one signature sig signs
-- the head of the Merkle tree of their leaf hashes (ledger.hash, in seq
-- order). Their ledger rows hold an empty sig and a NULL tree: each
-- entry's inclusion proof is rebuilt from its batch's hashes
-- (pool.TreeProofs) when it is read. Rows written before this table, or
-- entries whose proofs are not their batch's own, keep sig and tree in
-- the row.
CREATE TABLE ledger_batches (
	last  INTEGER PRIMARY KEY,
	first INTEGER NOT NULL,
	sig   BLOB NOT NULL
) STRICT;
