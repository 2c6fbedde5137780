package agent

import (
	"bytes"
	"testing"

	"idlepool/pool"
)

// A page is full, and the merger asks again at once, when it holds as
// many outcomes as were asked for, or results of half a coordinator's
// answer's bytes or more (a backlog of large results, cut by bytes);
// otherwise it waits FollowConfig.Gather.
func TestPageFull(t *testing.T) {
	small := pool.Verified{Result: []byte("r")}
	big := pool.Verified{Result: bytes.Repeat([]byte("b"), fullPageBytes/2)}
	for _, tc := range []struct {
		name string
		page []pool.Verified
		max  int
		want bool
	}{
		{"empty", nil, 4, false},
		{"fewer than asked", []pool.Verified{small, small}, 4, false},
		{"as many as asked", []pool.Verified{small, small, small, small}, 4, true},
		{"one of one", []pool.Verified{small}, 1, true},
		{"just under the bytes", []pool.Verified{big, {Result: big.Result[1:]}}, 256, false},
		{"cut by bytes", []pool.Verified{big, big}, 256, true},
		{"kept results carry no bytes", []pool.Verified{{Result: nil}, {Result: nil}}, 256, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := pageFull(tc.page, tc.max); got != tc.want {
				t.Errorf("pageFull(%d outcomes, max %d) = %v, want %v", len(tc.page), tc.max, got, tc.want)
			}
		})
	}
}
