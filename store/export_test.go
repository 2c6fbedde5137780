package store

import "testing"

// SetCompactChunks sets DB.Compact's chunks (outcomes folded, replica
// rows passed per transaction) until the test ends.
func SetCompactChunks(t testing.TB, outcomes, replicas int64) {
	o, r := compactOutcomes, compactReplicas
	compactOutcomes, compactReplicas = outcomes, replicas
	t.Cleanup(func() { compactOutcomes, compactReplicas = o, r })
}
