package store

import "testing"

// SetCompactChunks sets DB.Compact's chunks (outcomes folded, replica
// rows passed per transaction) until the test ends.
func SetCompactChunks(t testing.TB, outcomes, replicas int64) {
	o, r := compactOutcomes, compactReplicas
	compactOutcomes, compactReplicas = outcomes, replicas
	t.Cleanup(func() { compactOutcomes, compactReplicas = o, r })
}

// SetBlockPeersFlush sets how many peer-block pairs the memory lists
// before a commit writes them to ledger_block_peers, until the test ends.
func SetBlockPeersFlush(t testing.TB, n int) {
	old := blockPeersFlush
	blockPeersFlush = n
	t.Cleanup(func() { blockPeersFlush = old })
}

// SetBeforePeerTail sets a function that reads of a peer's entries call
// between their read of ledger_block_peers' upto and of the memory's
// list, until the test ends.
func SetBeforePeerTail(t testing.TB, f func()) {
	beforePeerTail = f
	t.Cleanup(func() { beforePeerTail = nil })
}

// SetCommitSeam sets a function Commit calls just before its transaction
// commits (false) and just after (true), until the test ends.
func SetCommitSeam(t testing.TB, f func(committed bool)) {
	commitSeam = f
	t.Cleanup(func() { commitSeam = nil })
}
