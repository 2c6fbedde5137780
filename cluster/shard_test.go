package cluster

import (
	"context"
	"crypto/sha256"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"

	"idlepool/job"
	"idlepool/pool"
)

// shardNames is what a Shard names, for comparison.
type shardNames struct {
	Stream, Subject, Snapshots, Archive, Ledger, LeaderKey string
}

func namesOf(sh Shard) shardNames {
	return shardNames{sh.Stream(), sh.Subject(), sh.Snapshots(), sh.Archive(), sh.Ledger(), sh.LeaderKey()}
}

// Shard 0 has exactly the names a pool had before shards (spelled out
// here, not through the constants, so that a change of either shows);
// shard s > 0 appends "_s"; no two shards share a name.
func TestShardNames(t *testing.T) {
	today := shardNames{"IDLEPOOL_STATE", "idlepool.state", "idlepool_snapshots", "idlepool_replicas", "idlepool_ledger", "scheduler"}
	for _, tc := range []struct {
		name string
		sh   Shard
		want shardNames
	}{
		{"zero", Shard{}, today},
		{"0 of 1", Shard{Index: 0, Count: 1}, today},
		{"0 of 64", Shard{Index: 0, Count: 64}, today},
		{"1 of 2", Shard{Index: 1, Count: 2}, shardNames{"IDLEPOOL_STATE_1", "idlepool.state_1", "idlepool_snapshots_1", "idlepool_replicas_1", "idlepool_ledger_1", "scheduler_1"}},
		{"63 of 64", Shard{Index: 63, Count: 64}, shardNames{"IDLEPOOL_STATE_63", "idlepool.state_63", "idlepool_snapshots_63", "idlepool_replicas_63", "idlepool_ledger_63", "scheduler_63"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.sh.Validate(); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, namesOf(tc.sh)); d != "" {
				t.Errorf("names (-want +got):\n%s", d)
			}
		})
	}
	all, err := Shards(MaxShards)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, sh := range all {
		n := namesOf(sh)
		for _, name := range []string{n.Stream, n.Subject, n.Snapshots, n.Archive, n.Ledger, n.LeaderKey} {
			if prev, ok := seen[name]; ok {
				t.Errorf("shards %d and %d both name %s", prev, sh.Index, name)
			}
			seen[name] = sh.Index
		}
	}
	if got := (Shard{Index: 2, Count: 5}).String(); got != "shard 2 of 5" {
		t.Errorf("String = %q", got)
	}
}

// A shard count outside 1..64 and a shard outside 0..K-1 are refused
// with ErrShard and the numbers named, by every entry point.
func TestShardOutOfRange(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"no shards", ValidateShardCount(0), "0 shards: want 1 to 64"},
		{"too many shards", ValidateShardCount(65), "65 shards: want 1 to 64"},
		{"Shards(-1)", func() error { _, err := Shards(-1); return err }(), "-1 shards"},
		{"negative shard", func() error { _, err := NewShard(-1, 4); return err }(), "shard -1 of 4: want 0 to 3"},
		{"shard past the count", func() error { _, err := NewShard(4, 4); return err }(), "shard 4 of 4: want 0 to 3"},
		{"count past 64", func() error { _, err := NewShard(0, 65); return err }(), "65 shards"},
		{"zero count reads as 1", Shard{Index: 1}.Validate(), "shard 1 of 1: want 0 to 0"},
		{"store", func() error {
			_, err := OpenStore(context.Background(), nil, StoreConfig{Shard: Shard{Index: 3, Count: 2}})
			return err
		}(), "shard 3 of 2"},
		{"lease", func() error {
			_, err := (&Leadership{}).TryLeadShard(context.Background(), 64, LeaderInfo{})
			return err
		}(), "shard 64: want 0 to 63"},
		{"leader", func() error { _, _, err := (&Leadership{}).ShardLeader(context.Background(), -1); return err }(), "shard -1"},
		{"leaders", func() error { _, err := (&Leadership{}).Leaders(context.Background(), 0); return err }(), "0 shards"},
		{"campaign", (&Leadership{}).Campaign(context.Background(), CampaignConfig{Shards: 65, Info: LeaderInfo{Node: "n"}}), "65 shards"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !errors.Is(tc.err, ErrShard) || !strings.Contains(tc.err.Error(), tc.want) {
				t.Errorf("got %v, want ErrShard saying %q", tc.err, tc.want)
			}
		})
	}
	sh, err := NewShard(3, 4)
	if err != nil || sh != (Shard{Index: 3, Count: 4}) {
		t.Errorf("NewShard(3, 4) = %v, %v", sh, err)
	}
	defer func() {
		if r := recover(); r == nil {
			t.Error("ShardOf(id, 0) did not panic")
		}
	}()
	ShardOf(job.ID{}, 0)
}

// ShardOf is the first eight bytes of the ID, big-endian, modulo K.
func TestShardOf(t *testing.T) {
	idOf := func(first8 uint64) job.ID {
		var id job.ID
		for i := range 8 {
			id[i] = byte(first8 >> (56 - 8*i))
		}
		id[8], id[31] = 0xff, 0xff // the rest does not count
		return id
	}
	empty := job.ID(sha256.Sum256(nil))         // e3b0c44298fc1c14… = 16406829232824261652
	abc := job.ID(sha256.Sum256([]byte("abc"))) // ba7816bf8f01cfea… = 13436514500253700074
	for _, tc := range []struct {
		name string
		id   job.ID
		k    int
		want int
	}{
		{"one shard", empty, 1, 0},
		{"sha256('') of 2", empty, 2, 0},
		{"sha256('') of 3", empty, 3, 1},
		{"sha256('') of 6", empty, 6, 4},
		{"sha256('') of 7", empty, 7, 1},
		{"sha256('') of 64", empty, 64, 20},
		{"sha256(abc) of 6", abc, 6, 0},
		{"sha256(abc) of 7", abc, 7, 2},
		{"sha256(abc) of 64", abc, 64, 42},
		{"7 of 4", idOf(7), 4, 3},
		{"big-endian, not little", idOf(256), 7, 4}, // little-endian: 2^48 mod 7 = 1
		{"all ones of 64", idOf(1<<64 - 1), 64, 63},
		{"all ones of 3", idOf(1<<64 - 1), 3, 0},
		{"all ones of 6", idOf(1<<64 - 1), 6, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ShardOf(tc.id, tc.k); got != tc.want {
				t.Errorf("ShardOf(%x…, %d) = %d, want %d", tc.id[:8], tc.k, got, tc.want)
			}
		})
	}
}

// Two shards' stores on one node share nothing: what is committed to
// shard 1 is not in shard 0's Load, its snapshots, replica archive and
// ledger archive are its own, and each shard's cold store loads exactly
// its own state.
func TestShardStoresIndependent(t *testing.T) {
	t.Parallel()
	node := startNodes(t, testConfigs(t, t.TempDir(), 1))[0]
	ctx := context.Background()
	js := node.JetStream()
	one := Shard{Index: 1, Count: 2}
	s1 := openShardStore(t, node, 1, one)
	if _, err := s1.Load(ctx); err != nil {
		t.Fatal(err)
	}
	h := newHistory()
	h.write(t, s1, 600, 50) // 1,200 entries: one whole ledger range
	st, err := s1.WriteSnapshot(ctx)
	if err != nil || st.Archived == 0 || st.Entries != LedgerRange {
		t.Fatalf("shard 1's snapshot: %+v, %v; want replicas and %d entries archived", st, err, LedgerRange)
	}

	s0 := openShardStore(t, node, 1, Shard{Index: 0, Count: 2})
	snap, err := s0.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Jobs) != 0 || len(snap.Replicas) != 0 || snap.LedgerSeq != 0 {
		t.Fatalf("shard 0 loaded %d jobs, %d replicas, %d ledger entries of shard 1's", len(snap.Jobs), len(snap.Replicas), snap.LedgerSeq)
	}
	if _, err := s0.Replica(ctx, firstLease); !errors.Is(err, pool.ErrUnknownLease) {
		t.Fatalf("shard 0 answers shard 1's archived replica: %v", err)
	}
	if es, err := s0.Entries(ctx, pool.EntryQuery{Max: 10}); err != nil || len(es) != 0 {
		t.Fatalf("shard 0 answers %d of shard 1's entries: %v", len(es), err)
	}
	// Shard 0 goes on with a history of its own (the same records: the
	// shards must not collide even so).
	h0 := newHistory()
	h0.write(t, s0, 20, 10)

	// In JetStream, each shard's things are under its own names.
	msgs := func(stream string) uint64 {
		t.Helper()
		s, err := js.Stream(ctx, stream)
		if err != nil {
			t.Fatalf("stream %s: %v", stream, err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.LastSeq
	}
	if n0, n1 := msgs(StateStream), msgs("IDLEPOOL_STATE_1"); n0 != s0.LastSeq() || n1 != s1.LastSeq() {
		t.Fatalf("streams end at %d and %d, the stores at %d and %d", n0, n1, s0.LastSeq(), s1.LastSeq())
	}
	if seqs, err := s0.snaps.list(ctx); err != nil || len(seqs) != 0 {
		t.Fatalf("shard 0's snapshots: %v, %v; want none", seqs, err)
	}
	if seqs, err := s1.snaps.list(ctx); err != nil || len(seqs) != 1 {
		t.Fatalf("shard 1's snapshots: %v, %v; want one", seqs, err)
	}
	for _, tc := range []struct {
		bucket, key string
		want        bool
	}{
		{ArchiveBucket, windowPrefix(firstLease) + "*", false},
		{"idlepool_replicas_1", windowPrefix(firstLease) + "*", true},
		{LedgerBucket, rangeKey(0), false},
		{"idlepool_ledger_1", rangeKey(0), true},
	} {
		kv, err := js.KeyValue(ctx, tc.bucket)
		if err != nil {
			t.Fatalf("bucket %s: %v", tc.bucket, err)
		}
		kl, err := kv.ListKeysFiltered(ctx, tc.key)
		if err != nil {
			t.Fatalf("list %s in %s: %v", tc.key, tc.bucket, err)
		}
		got := false
		for range kl.Keys() {
			got = true
		}
		if got != tc.want {
			t.Errorf("%s holds %s: %v, want %v", tc.bucket, tc.key, got, tc.want)
		}
	}

	for _, tc := range []struct {
		sh Shard
		w  *Store
	}{{Shard{Index: 0, Count: 2}, s0}, {one, s1}} {
		cold := openShardStore(t, node, 1, tc.sh)
		if _, err := cold.Load(ctx); err != nil {
			t.Fatalf("%s from nothing: %v", tc.sh, err)
		}
		sameState(t, tc.sh.String(), tc.w, cold)
		if cold.Shard() != tc.sh {
			t.Errorf("Shard() = %v, want %v", cold.Shard(), tc.sh)
		}
	}
	cold1 := openShardStore(t, node, 1, one)
	if _, err := cold1.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if r, err := cold1.Replica(ctx, firstLease); err != nil || r.State != pool.ReplicaAgreed {
		t.Fatalf("shard 1's archived replica: %+v, %v", r, err)
	}
	if base, _ := ledgerBase(cold1); cold1.loads != 1 || base != LedgerRange {
		t.Fatalf("shard 1 cold: %d snapshots loaded, ledger base %d; want 1 and %d", cold1.loads, base, LedgerRange)
	}
}

// A stream written before shards, under the names spelled out as they
// were, is shard 0's (whatever the count): its store loads it whole,
// and shard 1's sees none of it.
func TestShardZeroReadsTheStreamBefore(t *testing.T) {
	t.Parallel()
	node := startNodes(t, testConfigs(t, t.TempDir(), 1))[0]
	ctx := context.Background()
	js := node.JetStream()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "IDLEPOOL_STATE", Subjects: []string{"idlepool.state"},
		Storage: jetstream.FileStorage, Replicas: 1, Discard: jetstream.DiscardNew, MaxMsgSize: maxPart + 64<<10}); err != nil {
		t.Fatal(err)
	}
	h := newHistory()
	var seq uint64
	for range 4 {
		format, data, err := encodeBatch(h.batch(8))
		if err != nil {
			t.Fatal(err)
		}
		seq = publishBatch(t, js, seq, format, data)
	}
	for _, sh := range []Shard{{}, {Index: 0, Count: 4}} {
		s := openShardStore(t, node, 1, sh)
		snap, err := s.Load(ctx)
		if err != nil {
			t.Fatalf("%s: %v", sh, err)
		}
		// Each batch after the first settles the 8 tasks of the one
		// before: an outcome and two receipts each.
		if len(snap.Jobs) != 1 || snap.LedgerSeq != 3*8*2 || s.LastSeq() != seq {
			t.Fatalf("%s loaded %d jobs and %d ledger entries up to %d, want 1, %d, %d", sh, len(snap.Jobs), snap.LedgerSeq, s.LastSeq(), 3*8*2, seq)
		}
	}
	s1 := openShardStore(t, node, 1, Shard{Index: 1, Count: 4})
	snap, err := s1.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Jobs) != 0 || s1.LastSeq() != 0 {
		t.Fatalf("shard 1 loaded %d jobs up to %d of shard 0's stream", len(snap.Jobs), s1.LastSeq())
	}
}
