package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/store"
)

// TestOwnerPauses: the owner's pauses by hour are kept across a reopen,
// saving an hour again replaces it, and a bad hour is refused.
func TestOwnerPauses(t *testing.T) {
	ctx := context.Background()
	l, path := openLocal(t)
	if got, err := l.OwnerPauses(ctx); err != nil || len(got) != 0 {
		t.Fatalf("empty store: %v, %v", got, err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(l.SaveOwnerPauses(ctx, store.HourPauses{Hour: 20, Count: 1, Mean: 3 * time.Minute}))
	must(l.SaveOwnerPauses(ctx, store.HourPauses{Hour: 9, Count: 4, Mean: 90 * time.Second}))
	must(l.SaveOwnerPauses(ctx, store.HourPauses{Hour: 20, Count: 2, Mean: 4 * time.Minute}))
	for _, bad := range []store.HourPauses{{Hour: 24, Count: 1}, {Hour: -1}, {Hour: 3, Count: -1}, {Hour: 3, Mean: -time.Second}} {
		if err := l.SaveOwnerPauses(ctx, bad); err == nil {
			t.Errorf("SaveOwnerPauses(%+v) took it", bad)
		}
	}
	must(l.Close())
	l2, err := store.OpenLocal(path)
	must(err)
	defer l2.Close()
	got, err := l2.OwnerPauses(ctx)
	must(err)
	want := []store.HourPauses{{Hour: 9, Count: 4, Mean: 90 * time.Second}, {Hour: 20, Count: 2, Mean: 4 * time.Minute}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("after reopening (-want +got):\n%s", diff)
	}
}
