package store_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"idlepool/store"
)

func TestJoinedPools(t *testing.T) {
	ctx := context.Background()
	l, path := openLocal(t)
	a, b := "http://a:7420", "http://b:7420"
	if got, err := l.JoinedPools(ctx); err != nil || len(got) != 0 {
		t.Fatalf("empty store: %v, %v", got, err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(l.AddPool(ctx, a, "lab")) // known, not joined
	must(l.JoinPool(ctx, b, "tok"))
	must(l.JoinPool(ctx, b, "")) // joining again keeps the token
	must(l.JoinPool(ctx, a, ""))
	want := []store.JoinedPool{{URL: a, Name: "lab"}, {URL: b, Invite: "tok"}}
	got, err := l.JoinedPools(ctx)
	must(err)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("joined (-want +got):\n%s", diff)
	}
	must(l.LeavePool(ctx, a))
	must(l.LeavePool(ctx, "http://never:1"))
	must(l.Close())

	l2, err := store.OpenLocal(path)
	must(err)
	defer l2.Close()
	got, err = l2.JoinedPools(ctx)
	must(err)
	if diff := cmp.Diff(want[1:], got); diff != "" {
		t.Errorf("after leaving a and reopening (-want +got):\n%s", diff)
	}
	p, err := l2.Preferences(ctx)
	must(err)
	if len(p.Pools) != 2 {
		t.Errorf("a pool left stays known: %+v", p.Pools)
	}
	if err := l2.JoinPool(ctx, "", ""); err == nil {
		t.Error("joining an empty URL succeeded")
	}
}
