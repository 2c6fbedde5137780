package splitmix

import (
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var _ rand.Source = (*Source)(nil)

// TestKnownAnswer checks the first draws of seed 1234567 against Vigna's
// reference splitmix64.c.
func TestKnownAnswer(t *testing.T) {
	want := []uint64{6457827717110365317, 3203168211198807973, 9817491932198370423, 4593380528125082431, 16408922859458223821}
	s := New(1234567)
	var got []uint64
	for range want {
		got = append(got, s.Uint64())
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("draws of seed 1234567 (-want +got):\n%s", d)
	}
}

// TestBitBalance is a coarse sanity check: over 2^16 draws every output
// bit is set about half the time (within 5 standard deviations).
func TestBitBalance(t *testing.T) {
	const n = 1 << 16
	var ones [64]int
	s := New(42)
	for range n {
		x := s.Uint64()
		for b := range 64 {
			ones[b] += int(x >> b & 1)
		}
	}
	for b, c := range ones {
		if d := c - n/2; d > 640 || d < -640 { // sd = sqrt(n)/2 = 128
			t.Errorf("bit %d set %d times in %d draws", b, c, n)
		}
	}
}
