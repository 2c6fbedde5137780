package pool

import (
	"slices"
	"testing"
)

// SettledStates, which stores read to tell what is done, names exactly
// the states settledState reports, and every state of a replica is
// either one of them or in play.
func TestSettledStates(t *testing.T) {
	inPlay := []string{ReplicaLeased, ReplicaReturned, ReplicaProvisional}
	all := append(slices.Clone(inPlay), ReplicaExpired, ReplicaReleased, ReplicaMachineFailed, ReplicaCancelled,
		ReplicaWithdrawn, ReplicaAgreed, ReplicaDeviated, ReplicaUnverified)
	settled := SettledStates()
	for _, st := range all {
		if in := slices.Contains(settled, st); in != settledState(st) || in == slices.Contains(inPlay, st) {
			t.Errorf("state %q: in SettledStates %v, settledState %v, in play %v", st, in, settledState(st), slices.Contains(inPlay, st))
		}
	}
	if len(settled) != len(all)-len(inPlay) {
		t.Errorf("SettledStates %v names states this test does not know", settled)
	}
	settled[0] = "changed"
	if SettledStates()[0] == "changed" {
		t.Errorf("SettledStates returned its own slice")
	}
}
