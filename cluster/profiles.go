package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"idlepool/identity"
	"idlepool/pool"
)

// ProfilesBucket is the JetStream key-value bucket of the owners' signed
// profiles (identity.Profile), one key per owner ID.
const ProfilesBucket = "idlepool_profiles"

// Profiles keeps the owners' signed profiles of a clustered pool in a
// replicated key-value bucket, so that the node that takes over shows
// the names the devices gave to another node. It does for a cluster what
// the coordinator's SQLite store does for one node (store.DB's
// PutOwnerProfile and OwnerProfiles), and is safe for concurrent use.
type Profiles struct {
	kv jetstream.KeyValue
}

// OpenProfiles creates (or opens) the bucket with replicas replicas. An
// error that JetStream did not answer matches pool.ErrStoreUnavailable.
func OpenProfiles(ctx context.Context, js jetstream.JetStream, replicas int) (*Profiles, error) {
	kv, err := openKV(ctx, js, jetstream.KeyValueConfig{Bucket: ProfilesBucket, Description: "idlepool: owners' signed profiles",
		History: 1, Replicas: replicas, Storage: jetstream.FileStorage})
	if err != nil {
		return nil, fmt.Errorf("cluster: profiles bucket: %w", unavailable(err))
	}
	return &Profiles{kv: kv}, nil
}

// PutOwnerProfile stores p, which must verify (identity.Profile.Verify),
// as its owner's profile unless the one stored was issued at the same
// time or later; it reports whether p was stored. Two nodes storing
// profiles of one owner at once are ordered by the bucket's revisions
// (compare-and-set), so the newest issued wins.
func (p *Profiles) PutOwnerProfile(ctx context.Context, prof identity.Profile) (bool, error) {
	if err := prof.Verify(); err != nil {
		return false, fmt.Errorf("cluster: store owner profile: %w", err)
	}
	b, err := json.Marshal(prof)
	if err != nil {
		return false, fmt.Errorf("cluster: store owner profile: %w", err)
	}
	for range 8 {
		e, err := p.kv.Get(ctx, prof.Owner)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			_, err = p.kv.Create(ctx, prof.Owner, b)
		case err != nil:
			return false, fmt.Errorf("cluster: store owner profile: %w", unavailable(err))
		default:
			var old identity.Profile
			if json.Unmarshal(e.Value(), &old) == nil && old.Verify() == nil && !prof.Issued.After(old.Issued) {
				return false, nil
			}
			_, err = p.kv.Update(ctx, prof.Owner, b, e.Revision())
		}
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return false, fmt.Errorf("cluster: store owner profile: %w", unavailable(err))
		}
		// Another node wrote this owner's profile meanwhile: read again.
	}
	return false, fmt.Errorf("cluster: store owner profile of %s: the bucket kept changing", prof.Owner)
}

// OwnerProfiles returns every owner's stored profile, by owner ID, in one
// pass over the bucket (a watch that delivers each key's value), and
// reads what was stored before it was called, whichever node stored it:
// it asks the bucket's leader for its last revision first and reads
// until the watch has delivered it. (A watch's own "every value
// delivered" comes from the replica that serves it, which may not have
// applied the newest writes yet.) A value that does not verify, or is
// stored under another owner's key, is left out.
func (p *Profiles) OwnerProfiles(ctx context.Context) (map[string]identity.Profile, error) {
	st, err := p.kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("cluster: read owner profiles: %w", unavailable(err))
	}
	var last uint64
	if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok {
		last = bs.StreamInfo().State.LastSeq
	}
	// Deletes are delivered too: the last revision may be one.
	w, err := p.kv.WatchAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("cluster: read owner profiles: %w", unavailable(err))
	}
	defer w.Stop()
	out := map[string]identity.Profile{}
	var seen uint64
	initial := false
	for !initial || seen < last {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("cluster: read owner profiles: %w", unavailable(ctx.Err()))
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("cluster: read owner profiles: %w: the watch ended early", pool.ErrStoreUnavailable)
			}
			if e == nil { // every value the serving replica holds
				initial = true
				continue
			}
			seen = max(seen, e.Revision())
			if e.Operation() != jetstream.KeyValuePut {
				delete(out, e.Key())
				continue
			}
			var prof identity.Profile
			if json.Unmarshal(e.Value(), &prof) != nil || prof.Verify() != nil || prof.Owner != e.Key() {
				delete(out, e.Key())
				continue
			}
			out[e.Key()] = prof
		}
	}
	return out, nil
}
