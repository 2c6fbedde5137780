package cluster

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"idlepool/pool"
)

// The small replicated buckets a divided pool's shards share
// (Exclusions, Deviations, LedgerHeads, Usage) write, watch and read
// their keys alike: these are the ways.

// putUnlessKept stores b under key unless keep says the value stored
// there should stay (it is as new as b, or newer), with compare-and-set
// on the key's revision: a value another node stored meanwhile is read
// and judged again, up to eight times. Errors name the key: one matching
// pool.ErrStoreUnavailable when JetStream did not answer or the key kept
// changing (try again).
func putUnlessKept(ctx context.Context, kv jetstream.KeyValue, key string, b []byte, keep func(old []byte) bool) error {
	for range 8 {
		old, err := kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			_, err = kv.Create(ctx, key, b)
		case err != nil:
			return fmt.Errorf("key %s: %w", key, unavailable(err))
		default:
			if keep(old.Value()) {
				return nil
			}
			_, err = kv.Update(ctx, key, b, old.Revision())
		}
		if err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !isWrongLastSeq(err) {
			return fmt.Errorf("key %s: %w", key, unavailable(err))
		}
		// Another node stored a value under key meanwhile: read it.
	}
	return fmt.Errorf("key %s: %w: the bucket kept changing", key, pool.ErrStoreUnavailable)
}

// watchPuts calls f with the value parse makes of every key stored in kv,
// those stored before it was called first, then each one as it is
// stored, until ctx ends; it then returns nil. A value parse refuses
// (false) is skipped; deletes are. f is called on watchPuts' goroutine,
// one call at a time. Errors ("cluster: watch WHAT: ..."): one matching
// pool.ErrStoreUnavailable when the watch could not start or JetStream
// ended it (watch again).
func watchPuts[T any](ctx context.Context, kv jetstream.KeyValue, what string, parse func([]byte) (T, bool), f func(T)) error {
	w, err := kv.WatchAll(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("cluster: watch %s: %w", what, unavailable(err))
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("cluster: watch %s: %w: the watch ended", what, pool.ErrStoreUnavailable)
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue // the end of what was stored before, or a delete
			}
			if v, ok := parse(e.Value()); ok {
				f(v)
			}
		}
	}
}

// shardKey is the key of shard's value in a bucket that holds one per
// shard (LedgerHeads, Usage).
func shardKey(shard int) string { return fmt.Sprintf("shard.%d", shard) }

// readShards returns, in shard order, the value parse makes of each of
// shards shards' keys (shardKey) in kv; a shard with no value, or one
// parse refuses, is left out. Errors ("cluster: read WHAT of shard S:
// ..."): one matching pool.ErrStoreUnavailable when JetStream did not
// answer.
func readShards[T any](ctx context.Context, kv jetstream.KeyValue, shards int, what string, parse func(shard int, b []byte) (T, bool)) ([]T, error) {
	var out []T
	for s := range shards {
		e, err := kv.Get(ctx, shardKey(s))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("cluster: read %s of shard %d: %w", what, s, unavailable(err))
		}
		if v, ok := parse(s, e.Value()); ok {
			out = append(out, v)
		}
	}
	return out, nil
}
