package coord

import (
	"net/http"
	"testing"
	"time"

	"idlepool/cluster"
)

// TestHealthWords: what GET /healthz says in each state of the lease. A
// node that took charge and is loading the pool's state is not "unable
// to reach a node in charge", which is what the node itself said of
// itself for the seconds of a take-over; and a node cut off from the
// majority does not call the nodes it last listed live.
func TestHealthWords(t *testing.T) {
	nodes := []cluster.NodeInfo{{Name: "a"}, {Name: "b"}, {Name: "c"}}
	stream := StreamHealth{Leader: "a", Replicas: []ReplicaHealth{{Node: "a", Current: true}, {Node: "b", Current: true}, {Node: "c"}}}
	for _, c := range []struct {
		st   ClusterState
		code int
		want string
	}{
		{ClusterState{Node: "b", LeaderKnown: true, Leader: cluster.LeaderInfo{Node: "a", Internal: "http://127.0.0.1:1", Term: 78}, Nodes: nodes, Routes: 2, State: stream},
			http.StatusOK, "ok: node b; a is in charge (term 78); 3 nodes live, 2 routes; state stream led by a, 2 of 3 replicas current\n"},
		{ClusterState{Node: "b", LeaderKnown: true, Leader: cluster.LeaderInfo{Node: "b", Term: 79}, Nodes: nodes, Routes: 2, State: stream},
			http.StatusServiceUnavailable, "no leader yet: node b; b took charge (term 79) and is loading the pool's state; 3 nodes live, 2 routes; state stream led by a, 2 of 3 replicas current\n"},
		{ClusterState{Node: "b", Nodes: nodes[:1], Routes: 2, State: StreamHealth{Error: "no majority"}},
			http.StatusServiceUnavailable, "no leader: node b cannot reach a node in charge; 1 node live, 2 routes; state stream: no majority\n"},
		{ClusterState{Node: "b", Nodes: nodes[:1], Routes: 1, State: StreamHealth{Error: "no majority"}},
			http.StatusServiceUnavailable, "no leader: node b cannot reach a node in charge; 1 node live, 1 route; state stream: no majority\n"},
		{ClusterState{Node: "b", LeaderKnown: true, Leader: cluster.LeaderInfo{Node: "a", Internal: "http://127.0.0.1:1", Term: 80}, Nodes: nodes, Routes: 2,
			State: StreamHealth{Replicas: []ReplicaHealth{{Node: "b"}, {Node: "c"}}}},
			http.StatusOK, "ok: node b; a is in charge (term 80); 3 nodes live, 2 routes; state stream without a leader (electing one), 0 of 2 replicas current\n"},
		{ClusterState{Node: "b", Nodes: nodes, NodesStale: true, NodesListed: time.Date(2026, 12, 6, 13, 4, 5, 0, time.UTC), Routes: 0, State: StreamHealth{Error: "no majority"}},
			http.StatusServiceUnavailable, "no leader: node b cannot reach a node in charge; live nodes unknown (the list was last read at 13:04:05, with 3 nodes), 0 routes; state stream: no majority\n"},
	} {
		code, got := health(c.st)
		if code != c.code || got != c.want {
			t.Errorf("health(%+v) = %d %q\nwant %d %q", c.st, code, got, c.code, c.want)
		}
	}
}
