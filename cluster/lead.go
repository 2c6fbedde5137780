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
// (an object store, "OBJ_" and the bucket's name), its replica archive,
// its ledger archive and its leader lease (key-value buckets, "KV_" and
// the bucket's name; the lease's exists only in a pool begun with
// ShardLeases), in that order.
func (sh Shard) Streams() []string {
	return []string{sh.Stream(), "OBJ_" + sh.Snapshots(), "KV_" + sh.Archive(), "KV_" + sh.Ledger(), "KV_" + sh.LeaseBucket()}
}

// LeadStreams moves the leadership of the Store's shard's streams
// (Shard.Streams) to the node whose server name is server, the node in
// charge of the shard: its appends then go from it to the other
// replicas at once, instead of to another node that leads the stream
// and, replicated, back (RATIONALE.md, "Dividing the work among the
// nodes"). It asks JetStream's stream leader stepdown, with server as
// the preferred placement, of each stream that server replicates and
// another node leads, then waits up to wait for each of those to name
// server its leader. It returns how many of the shard's streams exist
// (all), how many of those server replicates (of) and how many of
// those it leads on return (led): with fewer nodes holding a stream
// than the cluster has (replicas = 3 on five nodes), the node in charge
// may hold no copy of some, which other nodes lead.
//
// It is a placement, not a guarantee: a stream whose leader is unknown
// (an election under way: a look at it unanswered within 200 ms), or
// that elects another node (JetStream elects no peer behind the
// others), is left as it is, and the others are moved all the same;
// the first look left unanswered ends the looking (the streams after
// it are not counted), so that a node taking over after a node died
// waits 200 ms at most on elections before it loads.
// The error says why the first stream not led by server is not: a
// failed request or look (wrapping pool.ErrStoreUnavailable for an
// unavailable JetStream), no leader yet, a refusal, another elected;
// or it is ctx's. It is nil when led == of.
func (s *Store) LeadStreams(ctx context.Context, server string, wait time.Duration) (led, of, all int, err error) {
	prefix := s.js.Options().APIPrefix
	if prefix == "" {
		prefix = jetstream.DefaultAPIPrefix
	}
	fail := func(e error) {
		if err == nil {
			err = e
		}
	}
	var asked []string
streams:
	for _, name := range s.shard.Streams() {
		if ctx.Err() != nil {
			return led, of, all, ctx.Err()
		}
		lctx, cancel := context.WithTimeout(ctx, leadLook)
		leader, replicated, lerr := streamLeader(lctx, s.js, name, server)
		cancel()
		if !errors.Is(lerr, jetstream.ErrStreamNotFound) {
			all++
		}
		switch {
		case errors.Is(lerr, jetstream.ErrStreamNotFound):
			continue
		case lerr != nil:
			// No answer within leadLook: an election is under way (a
			// node just died), and the streams after it are likely
			// electing too; rather than wait on each, the caller asks
			// again later. Counted as replicated and not led.
			of++
			fail(lerr)
			break streams
		case !replicated:
			continue
		}
		of++
		if leader == server {
			led++
			continue
		}
		if leader == "" {
			fail(fmt.Errorf("cluster: stream %s has no leader yet (an election under way)", name))
			continue
		}
		body, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": server}})
		rctx, cancel := context.WithTimeout(ctx, 2*leadLook)
		msg, rerr := s.js.Conn().RequestWithContext(rctx, prefix+"STREAM.LEADER.STEPDOWN."+name, body)
		cancel()
		if rerr != nil {
			fail(fmt.Errorf("cluster: move the leader of %s to %s: %w", name, server, unavailable(rerr)))
			continue
		}
		var resp struct {
			Success bool `json:"success"`
		}
		if jerr := json.Unmarshal(msg.Data, &resp); jerr != nil {
			fail(fmt.Errorf("cluster: move the leader of %s to %s: answer %q: %w", name, server, msg.Data, jerr))
			continue
		}
		if resp.Success {
			asked = append(asked, name)
			continue
		}
		// Refused: the preferred peer is not current, or leads it
		// already since the stream's info was read; left as it is.
		fail(fmt.Errorf("cluster: JetStream refused to move the leader of %s to %s: %s", name, server, msg.Data))
	}
	// A stream's info goes unanswered while it has no leader, so each
	// look is short: the election takes tens of milliseconds.
	deadline := time.Now().Add(wait)
	for _, name := range asked {
		for {
			lctx, cancel := context.WithTimeout(ctx, leadLook)
			leader, _, lerr := streamLeader(lctx, s.js, name, server)
			cancel()
			if lerr == nil && leader == server {
				led++
				break
			}
			if ctx.Err() != nil {
				return led, of, all, ctx.Err()
			}
			if time.Now().After(deadline) {
				fail(fmt.Errorf("cluster: stream %s elected %q, not %s, within %s", name, leader, server, wait))
				break
			}
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return led, of, all, err
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
