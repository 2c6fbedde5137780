-- ledger_block_peers is written in bursts (store/blockpeers.go): it
-- lists the peers of every block with last <= upto, and the blocks after
-- it are listed in the coordinator's memory, rebuilt at Open by decoding
-- them. One row per peer and block in every group commit dirtied a page
-- per peer (the rows are ordered by peer), a fifth of a commit's pages.
CREATE TABLE ledger_block_peers_upto (
	id   INTEGER PRIMARY KEY CHECK (id = 1),
	upto INTEGER NOT NULL
) STRICT;
INSERT INTO ledger_block_peers_upto(id, upto) SELECT 1, coalesce(max(last), 0) FROM ledger_blocks;
