package cluster

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/pool"
)

// Fair-share figures published on a one-node JetStream: the newest of a
// shard replaces the one before, Read lists each shard that published in
// shard order, figures that cannot be a shard's are refused, and a value
// that does not parse is left out.
func TestUsagePublishRead(t *testing.T) {
	nodes := startNodes(t, testConfigs(t, t.TempDir(), 1))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	x, err := OpenUsage(ctx, nodes[0].JetStream(), 3, 1)
	if err != nil {
		t.Fatalf("OpenUsage: %v", err)
	}
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	old := pool.ShardUsage{Shard: 2, At: at, Owners: map[string]pool.OwnerUse{"idalice": {Usage: 60}}}
	now := pool.ShardUsage{Shard: 2, At: at.Add(time.Minute), Owners: map[string]pool.OwnerUse{"idalice": {Usage: 58.5, Contributed: 3}}}
	zero := pool.ShardUsage{Shard: 0, At: at, Owners: map[string]pool.OwnerUse{}}
	for _, u := range []pool.ShardUsage{old, now, zero} {
		if err := x.Publish(ctx, u); err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}
	got, err := x.Read(ctx)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	if diff := cmp.Diff([]pool.ShardUsage{zero, now}, got); diff != "" {
		t.Fatalf("Read (-want +got):\n%s", diff)
	}
	for name, u := range map[string]pool.ShardUsage{
		"shard out of range": {Shard: 3, At: at},
		"negative":           {Shard: 1, At: at, Owners: map[string]pool.OwnerUse{"x": {Usage: -1}}},
		"NaN":                {Shard: 1, At: at, Owners: map[string]pool.OwnerUse{"x": {Contributed: math.NaN()}}},
	} {
		if err := x.Publish(ctx, u); !errors.Is(err, pool.ErrBadRequest) {
			t.Errorf("%s: Publish: %v, want ErrBadRequest", name, err)
		}
	}
	if _, err := x.kv.Put(ctx, shardKey(1), []byte(`{"at":1,"owners":{"x":[-5,0]}}`)); err != nil {
		t.Fatal(err)
	}
	if got, err := x.Read(ctx); err != nil || len(got) != 2 {
		t.Fatalf("Read with shard 1's value broken: %d figures, %v; want shards 0 and 2", len(got), err)
	}
	if _, err := OpenUsage(ctx, nodes[0].JetStream(), 65, 1); !errors.Is(err, pool.ErrBadRequest) {
		t.Errorf("OpenUsage of 65 shards: %v, want ErrBadRequest", err)
	}
}
