-- ledger_block_kinds is written in bursts, with ledger_block_peers
-- (store/blockpeers.go): it counts the entries of every block with
-- last <= upto, and the blocks after it are counted in the
-- coordinator's memory, rebuilt at Open by decoding them. Its row of
-- one upsert a kind in every group commit was a page of its own in
-- every commit (docs/benchmarks.md, "Where a group commit's pages go").
CREATE TABLE ledger_block_kinds_upto (
	id   INTEGER PRIMARY KEY CHECK (id = 1),
	upto INTEGER NOT NULL
) STRICT;
INSERT INTO ledger_block_kinds_upto(id, upto) SELECT 1, coalesce(max(last), 0) FROM ledger_blocks;
