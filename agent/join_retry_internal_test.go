package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// closedPort returns the URL of a port on 127.0.0.1 where nothing
// listens (a listener's, closed).
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String()
	l.Close()
	return url
}

// lockedBuffer is a log's output that tests read while the log writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// records returns the JSON log records written so far with message msg.
func (l *lockedBuffer) records(t *testing.T, msg string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(l.b.String()), "\n") {
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

const joinRetryMsg = "Cannot join the pool yet, retrying"

// TestJoinRetryOncePerStep: the retries of a join back off, and each is
// said once, with the wait that follows it: no tight loop, no silence.
func TestJoinRetryOncePerStep(t *testing.T) {
	// A real failure to connect, taken outside the bubble.
	c, err := NewClient(closedPort(t), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, refused := c.Pool(t.Context())
	if !Retryable(refused) {
		t.Fatalf("Pool at a closed port: %v, want a retryable error", refused)
	}
	synctest.Test(t, func(t *testing.T) {
		var logs lockedBuffer
		a := &Agent{cfg: Config{MaxBackoff: 10 * time.Second},
			log: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		var tries []time.Time
		err := a.retry(ctx, "join", func(context.Context) error {
			tries = append(tries, time.Now())
			return refused
		})
		if err == nil {
			t.Fatal("retry returned nil for an op that always fails")
		}
		recs := logs.records(t, joinRetryMsg)
		// 100 ms doubling to 10 s, half to all of each: a minute holds
		// 8 to 20 tries.
		if len(tries) < 8 || len(tries) > 20 {
			t.Errorf("%d tries in a minute, want 8 to 20 (backing off from 100 ms to 10 s)", len(tries))
		}
		if len(recs) != len(tries) {
			t.Fatalf("%d log lines for %d failed tries, want one each", len(recs), len(tries))
		}
		for i, r := range recs {
			if r["reason"] != "connection refused" {
				t.Errorf("line %d: reason %v, want connection refused", i, r["reason"])
			}
			if i+1 == len(tries) {
				break // cut short by ctx
			}
			wait := time.Duration(r["retryIn"].(float64))
			gap := tries[i+1].Sub(tries[i])
			tol := 50 * time.Millisecond
			if gap >= time.Second {
				tol = 500 * time.Millisecond
			}
			if d := gap - wait; d < -tol || d > tol {
				t.Errorf("line %d says retrying in %v; the next try came %v later", i, wait, gap)
			}
		}
	})
}
