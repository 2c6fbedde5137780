package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// RulesBucket is the JetStream key-value bucket of the pool-wide rules
// every node of a cluster applies, whichever is in charge: the versions
// of idlepool it accepts (key "versions", a VersionRules in JSON).
const RulesBucket = "idlepool_rules"

const versionsKey = "versions"

// VersionRules are the versions a clustered pool accepts and knows, as
// the operator gave them to a node (serve --min-agent-version,
// --min-api-version, --latest-agent-version): MinAgent the oldest
// idlepool ("X.Y.Z", "" for any), MinAPI the oldest API version (0 for
// any), LatestAgent the newest release ("" for unknown). Set names the
// node that stored them.
type VersionRules struct {
	MinAgent    string `json:"min_agent,omitempty"`
	MinAPI      int    `json:"min_api,omitempty"`
	LatestAgent string `json:"latest_agent,omitempty"`
	Set         string `json:"set_by,omitempty"`
}

// Rules keeps a clustered pool's VersionRules in a replicated key-value
// bucket, so that every node refuses the same devices as too old and
// states the same versions, whichever node is in charge and whichever
// was started with them. It is safe for concurrent use.
type Rules struct {
	kv jetstream.KeyValue
}

// OpenRules creates (or opens) the bucket with replicas replicas. An
// error that JetStream did not answer matches pool.ErrStoreUnavailable.
func OpenRules(ctx context.Context, js jetstream.JetStream, replicas int) (*Rules, error) {
	kv, err := openKV(ctx, js, jetstream.KeyValueConfig{Bucket: RulesBucket, Description: "idlepool: the pool's rules, the same on every node",
		History: 1, Replicas: replicas, Storage: jetstream.FileStorage})
	if err != nil {
		return nil, fmt.Errorf("cluster: rules bucket: %w", unavailable(err))
	}
	return &Rules{kv: kv}, nil
}

// PutVersions stores v as the cluster's version rules, in place of any
// stored before (the operator's latest word, from whichever node).
func (r *Rules) PutVersions(ctx context.Context, v VersionRules) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("cluster: store version rules: %w", err)
	}
	if _, err := r.kv.Put(ctx, versionsKey, b); err != nil {
		return fmt.Errorf("cluster: store version rules: %w", unavailable(err))
	}
	return nil
}

// Versions returns the stored version rules; ok is false when none were
// ever stored (the pool accepts any version). A value that does not
// parse is an error.
func (r *Rules) Versions(ctx context.Context) (v VersionRules, ok bool, err error) {
	e, err := r.kv.Get(ctx, versionsKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return VersionRules{}, false, nil
	}
	if err != nil {
		return VersionRules{}, false, fmt.Errorf("cluster: read version rules: %w", unavailable(err))
	}
	if err := json.Unmarshal(e.Value(), &v); err != nil {
		return VersionRules{}, false, fmt.Errorf("cluster: read version rules: %w", err)
	}
	return v, true, nil
}
