package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Streams returns the names of the JetStream streams that hold the
// shard's state: its state stream, and the streams under its snapshots
// (an object store, "OBJ_" and the bucket's name), its replica archive
// and its ledger archive (key-value buckets, "KV_" and the bucket's
// name), in that order.
func (sh Shard) Streams() []string {
	return []string{sh.Stream(), "OBJ_" + sh.Snapshots(), "KV_" + sh.Archive(), "KV_" + sh.Ledger()}
}

// LeadStreams moves the leadership of the Store's shard's streams
// (Shard.Streams) to the node whose server name is server, the node in
// charge of the shard: its appends then go from it to the other
// replicas at once, instead of to another node that leads the stream
// and, replicated, back (RATIONALE.md, "Dividing the work among the
// nodes"). It asks JetStream's stream leader stepdown, with server as
// the preferred placement, of each stream that server replicates and
// another node leads, then waits up to wait for each of those to name
// server its leader. It returns how many of those server leads on
// return.
//
// It is a placement, not a guarantee: a stream server does not
// replicate, one whose leader is unknown (an election under way), or
// one that elects another (JetStream elects no peer behind the others)
// is left as it is and not counted. The error is the first failed
// request, wrapping pool.ErrStoreUnavailable for an unavailable
// JetStream (a look at a stream's leader unanswered within 200 ms ends
// the moves: the stream is electing one), or ctx's.
func (s *Store) LeadStreams(ctx context.Context, server string, wait time.Duration) (moved int, err error) {
	prefix := s.js.Options().APIPrefix
	if prefix == "" {
		prefix = jetstream.DefaultAPIPrefix
	}
	var asked []string
	for _, name := range s.shard.Streams() {
		// A stream without a leader leaves its info unanswered: right
		// after a node died, the first look ends the moves in leadLook.
		lctx, cancel := context.WithTimeout(ctx, leadLook)
		leader, replicated, err := streamLeader(lctx, s.js, name, server)
		cancel()
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return moved, err
		}
		if !replicated || leader == "" || leader == server {
			continue
		}
		body, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": server}})
		rctx, cancel := context.WithTimeout(ctx, 2*leadLook)
		msg, err := s.js.Conn().RequestWithContext(rctx, prefix+"STREAM.LEADER.STEPDOWN."+name, body)
		cancel()
		if err != nil {
			return moved, fmt.Errorf("cluster: move the leader of %s to %s: %w", name, server, unavailable(err))
		}
		var resp struct {
			Success bool `json:"success"`
			Error   *struct {
				Description string `json:"description"`
			} `json:"error"`
		}
		if err := json.Unmarshal(msg.Data, &resp); err != nil {
			return moved, fmt.Errorf("cluster: move the leader of %s to %s: answer %q: %w", name, server, msg.Data, err)
		}
		if !resp.Success {
			// Refused (the preferred peer is not current, or leads it
			// already since the stream's info was read): left as it is.
			continue
		}
		asked = append(asked, name)
	}
	// A stream's info goes unanswered while it has no leader, so each
	// look is short: the election takes tens of milliseconds.
	deadline := time.Now().Add(wait)
	for _, name := range asked {
		for {
			lctx, cancel := context.WithTimeout(ctx, leadLook)
			leader, _, err := streamLeader(lctx, s.js, name, server)
			cancel()
			if err == nil && leader == server {
				moved++
				break
			}
			if time.Now().After(deadline) {
				break
			}
			if ctx.Err() != nil {
				return moved, ctx.Err()
			}
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return moved, nil
}

// leadLook bounds one look at a stream's leader in LeadStreams.
const leadLook = 200 * time.Millisecond

// streamLeader returns the server name of the leader of stream name (""
// while none is elected) and whether server holds one of its replicas.
func streamLeader(ctx context.Context, js jetstream.JetStream, name, server string) (leader string, replicated bool, err error) {
	st, err := js.Stream(ctx, name)
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return "", false, err
		}
		return "", false, fmt.Errorf("cluster: stream %s: %w", name, unavailable(err))
	}
	ci := st.CachedInfo().Cluster
	if ci == nil {
		return "", false, nil // not clustered: one server holds it
	}
	replicated = ci.Leader == server || slices.ContainsFunc(ci.Replicas, func(p *jetstream.PeerInfo) bool { return p.Name == server })
	return ci.Leader, replicated, nil
}
