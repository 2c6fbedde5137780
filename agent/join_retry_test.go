package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"idlepool/agent"
)

// syncBuffer is a log's output that a test reads while the log writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// records returns the JSON log records written so far with message msg.
func (l *syncBuffer) records(t *testing.T, msg string) []map[string]any {
	var out []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(l.String()), "\n") {
		if line == "" {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if r["msg"] == msg {
			out = append(out, r)
		}
	}
	return out
}

// TestJoinRetrySaysWhy: an agent that cannot join its pool (nothing
// listens at its URL) says so at once and at every retry, with the
// network's reason and the wait before the next try.
func TestJoinRetrySaysWhy(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String()
	l.Close() // nothing listens there now
	var logs syncBuffer
	dev := newDevice(t, nil)
	a, err := agent.New(agent.Config{PoolURL: url, Home: dev.dirs, DeviceKey: dev.key, OwnerKey: dev.owner, Slots: 1,
		Executor: &fakeExec{}, Store: dev.local, HTTP: httpClient(t), MaxBackoff: 200 * time.Millisecond,
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- a.Serve(ctx) }()
	// Patience, not a verdict: a busy machine only makes this slower.
	deadline := time.Now().Add(2 * time.Minute)
	for len(logs.records(t, "Cannot join the pool yet, retrying")) < 3 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve: %v", err)
	}
	recs := logs.records(t, "Cannot join the pool yet, retrying")
	if len(recs) < 3 {
		t.Fatalf("%d lines %q in the log, want 3 or more:\n%s", len(recs), "Cannot join the pool yet, retrying", logs.String())
	}
	if h, _ := recs[0]["hint"].(string); !strings.Contains(h, "idlepool serve") {
		t.Errorf("first log record %v, want a hint naming idlepool serve", recs[0])
	}
	if _, ok := recs[1]["hint"]; ok {
		t.Errorf("second log record %v repeats the hint", recs[1])
	}
	for _, r := range recs {
		if r["level"] != "WARN" || r["pool"] != url || r["reason"] != "connection refused" || r["retryIn"] == nil {
			t.Errorf("log record %v, want level WARN, pool %s, reason \"connection refused\" and retryIn", r, url)
		}
	}
}
