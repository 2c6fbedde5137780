package main

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"idlepool/agent"
	"idlepool/coord/api"
	"idlepool/home"
)

// A clustered pool that still has no node in charge of part of its work
// once a command's wait is over is said so, with what to do: not that
// the pool cannot be reached (it answered), nor to check its URL.
func TestPoolErrorDuringATakeOver(t *testing.T) {
	noLeader := &agent.APIError{Method: "GET", Path: "/v1/listings", Status: http.StatusServiceUnavailable, Code: api.CodeNoLeader,
		Message: "the coordinator of shard 1 of the pool did not answer; try again shortly"}
	err := poolError(noLeader, "http://127.0.0.1:7420", home.Dirs{})
	var ue *userError
	if !errors.As(err, &ue) || !errors.Is(err, noLeader) {
		t.Fatalf("got %v, want a userError wrapping the answer", err)
	}
	if !strings.Contains(ue.Msg, "has no node in charge of part of its work") || !strings.Contains(ue.Msg, "shard 1") ||
		strings.Contains(ue.Msg, "cannot reach") || strings.Contains(ue.Hint, "check the URL") || !strings.Contains(ue.Hint, "When a node dies") {
		t.Errorf("said %q, hint %q", ue.Msg, ue.Hint)
	}
	// Any other 503 is still a pool not answering.
	busy := &agent.APIError{Method: "GET", Path: "/v1/listings", Status: http.StatusServiceUnavailable, Code: "store_unavailable", Message: "busy"}
	if err := poolError(busy, "http://127.0.0.1:7420", home.Dirs{}); !errors.As(err, &ue) || !strings.Contains(ue.Msg, "cannot reach the pool") {
		t.Errorf("another 503: %v", err)
	}
}
