package main

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestShareSlots(t *testing.T) {
	for _, tc := range []struct {
		name    string
		workers int
		weights []float64
		want    []int
		fails   bool
	}{
		{"one pool", 4, []float64{1}, []int{4}, false},
		{"equal", 4, []float64{1, 1}, []int{2, 2}, false},
		{"odd", 5, []float64{1, 1}, []int{3, 2}, false},
		{"weighted", 8, []float64{3, 1}, []int{6, 2}, false},
		{"at least one each", 3, []float64{100, 1, 1}, []int{1, 1, 1}, false},
		{"largest remainder", 10, []float64{1, 1, 1}, []int{4, 3, 3}, false},
		{"weight 0 gets none", 4, []float64{1, 0}, []int{4, 0}, false},
		{"negative counts as 0", 2, []float64{-1, 1}, []int{0, 2}, false},
		{"all 0", 4, []float64{0, 0}, nil, true},
		{"too few workers", 1, []float64{1, 1}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := shareSlots(tc.workers, tc.weights)
			if (err != nil) != tc.fails {
				t.Fatalf("shareSlots = %v, %v; want failure %v", got, err, tc.fails)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("slots (-want +got):\n%s", diff)
			}
			sum := 0
			for _, n := range got {
				sum += n
			}
			if err == nil && sum != tc.workers {
				t.Errorf("slots %v add up to %d, want all %d workers", got, sum, tc.workers)
			}
		})
	}
}

func TestInviteTokens(t *testing.T) {
	a, b := "http://a:7420", "http://b:7420"
	for _, tc := range []struct {
		name    string
		pools   []string
		invites []string
		want    map[string]string
		fails   bool
	}{
		{"one pool, bare token", []string{a}, []string{"tok=en"}, map[string]string{a: "tok=en"}, false},
		{"one pool, named", []string{a}, []string{a + "=tok"}, map[string]string{a: "tok"}, false},
		{"two pools, named", []string{a, b}, []string{b + "=tok"}, map[string]string{b: "tok"}, false},
		{"two pools, bare token", []string{a, b}, []string{"tok"}, nil, true},
		{"none", []string{a, b}, nil, map[string]string{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := inviteTokens(tc.pools, tc.invites)
			if (err != nil) != tc.fails {
				t.Fatalf("inviteTokens = %v, %v; want failure %v", got, err, tc.fails)
			}
			if err != nil && !errors.Is(err, errUsage) {
				t.Errorf("error %v is not a usage error", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("tokens (-want +got):\n%s", diff)
			}
		})
	}
}
