package main

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

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
