package cluster

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"idlepool/job"
	"idlepool/pool"
)

// Job placements on a one-node JetStream: the first placement of a job
// is its shard for good (a second, here or through another Placements,
// gets the first's answer, and two at once agree); another Placements
// reads it from the bucket; a job never placed is not found; a shard out
// of range, a pool of fewer than two shards and a recorded value that
// is not a shard are refused, naming what is wrong.
func TestPlacements(t *testing.T) {
	node := startNodes(t, testConfigs(t, t.TempDir(), 1))[0]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	js := node.JetStream()
	if _, err := OpenPlacements(ctx, js, 1, 1); !errors.Is(err, pool.ErrBadRequest) {
		t.Fatalf("OpenPlacements of 1 shard: %v, want ErrBadRequest", err)
	}
	a, err := OpenPlacements(ctx, js, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := OpenPlacements(ctx, js, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	first, second := job.ID{1}, job.ID{2}
	if s, ok, err := a.Shard(ctx, first); err != nil || ok {
		t.Fatalf("Shard of a job never placed: %d, %v, %v; want none", s, ok, err)
	}
	if s, err := a.Place(ctx, first, 2); err != nil || s != 2 {
		t.Fatalf("Place(2): %d, %v", s, err)
	}
	if s, err := a.Place(ctx, first, 0); err != nil || s != 2 {
		t.Fatalf("Place(0) after Place(2) on the same Placements: %d, %v; want 2", s, err)
	}
	if s, err := b.Place(ctx, first, 1); err != nil || s != 2 {
		t.Fatalf("Place(1) after Place(2) through another Placements: %d, %v; want 2", s, err)
	}
	c, err := OpenPlacements(ctx, js, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	if s, ok, err := c.Shard(ctx, first); err != nil || !ok || s != 2 {
		t.Fatalf("Shard read from the bucket: %d, %v, %v; want 2", s, ok, err)
	}
	// Two nodes' routers placing one job at once, in different shards.
	var wg sync.WaitGroup
	got := make([]int, 8)
	errs := make([]error, 8)
	for i := range got {
		p := a
		if i%2 == 1 {
			p = b
		}
		wg.Go(func() { got[i], errs[i] = p.Place(ctx, second, i%3) })
	}
	wg.Wait()
	for i := range got {
		if errs[i] != nil || got[i] != got[0] {
			t.Fatalf("eight placements at once: shards %v, errors %v; want one shard", got, errs)
		}
	}
	if _, err := a.Place(ctx, job.ID{3}, 3); !errors.Is(err, pool.ErrBadRequest) {
		t.Fatalf("Place in shard 3 of 3: %v, want ErrBadRequest", err)
	}
	if _, err := a.Place(ctx, job.ID{3}, -1); !errors.Is(err, pool.ErrBadRequest) {
		t.Fatalf("Place in shard -1: %v, want ErrBadRequest", err)
	}
	bad := job.ID{4}
	for _, v := range []string{"7", "one", ""} {
		if _, err := a.kv.Put(ctx, bad.String(), []byte(v)); err != nil {
			t.Fatal(err)
		}
		fresh, err := OpenPlacements(ctx, js, 3, 1)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := fresh.Shard(ctx, bad); !errors.Is(err, ErrPlacement) || !strings.Contains(err.Error(), strconv.Quote(v)) || !strings.Contains(err.Error(), bad.String()) {
			t.Fatalf("Shard of a job placed as %q: %v; want ErrPlacement naming the job and the value", v, err)
		}
		if _, err := fresh.Place(ctx, bad, 0); !errors.Is(err, ErrPlacement) || !strings.Contains(err.Error(), strconv.Quote(v)) {
			t.Fatalf("Place of a job placed as %q: %v; want ErrPlacement naming the value", v, err)
		}
	}
	// A placement forgotten (its job refused by its shard) is placed
	// anew. (b, another node's, still remembers the old: it sends the
	// job, which no shard adds, to the shard that refused it.)
	if err := a.Forget(ctx, first); err != nil {
		t.Fatal(err)
	}
	if s, ok := a.Known(first); ok {
		t.Fatalf("a forgotten placement is still known: shard %d", s)
	}
	if s, ok, err := c.Shard(ctx, job.ID{9}); err != nil || ok {
		t.Fatalf("Shard of a job never placed, read from the leader too: %d, %v, %v", s, ok, err)
	}
	fresh, err := OpenPlacements(ctx, js, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	if s, ok, err := fresh.Shard(ctx, first); err != nil || ok {
		t.Fatalf("Shard of a forgotten placement: %d, %v, %v; want none", s, ok, err)
	}
	if s, err := fresh.Place(ctx, first, 0); err != nil || s != 0 {
		t.Fatalf("Place(0) after the placement was forgotten: %d, %v; want 0", s, err)
	}
}
