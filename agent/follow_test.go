package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"idlepool/agent"
	"idlepool/idle"
	"idlepool/job"
)

// TestFollowSaysWhatThePoolDoes: while no result comes, Follow reports
// what the pool is doing (a donor that waits, and its coarse hold), and a job its
// owner cancels ends the follow with ErrJobCancelled.
func TestFollowSaysWhatThePoolDoes(t *testing.T) {
	j := planJob(t, "squares-stalled", 3, "redundancy = 1\nquorum = 1")
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	sub := newSubmitter(t, co.url, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := sub.c.Submit(ctx, j); err != nil {
		t.Fatal(err)
	}
	donor := newDevice(t, nil)
	// The reason in words, as an agent from before holds sends it: the
	// pool shows only the coarse hold it stands for.
	publishOfferState(t, agentClient(t, co.url, donor), donor, idle.StateWaiting, "waiting: idle time unknown (no input source works)")

	var seen []agent.Activity
	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		_, err = agent.Follow(ctx, sub.c, j, agent.FollowConfig{
			Dir: filepath.Join(sub.dev.dirs.Data, "merges", j.ID.String()), Poll: 10 * time.Millisecond,
			StatusPoll: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, Logger: quietLogger(t),
			Activity: func(a agent.Activity) {
				seen = append(seen, a)
				if len(seen) == 1 {
					if _, err := sub.c.Cancel(context.Background(), j.ID); err != nil {
						t.Errorf("Cancel: %v", err)
					}
				}
			},
		})
	}()
	select {
	case <-done:
	case <-time.After(patience(t)):
		cancel()
		<-done
		t.Fatal("Follow of a cancelled job did not end")
	}
	if !errors.Is(err, agent.ErrJobCancelled) {
		t.Errorf("Follow: %v, want ErrJobCancelled", err)
	}
	if len(seen) == 0 {
		t.Fatal("Follow reported no activity")
	}
	first := seen[0]
	if want := "0 of 1 donor computing: 1 waiting (for its owner)"; first.Donors != want {
		t.Errorf("donors %q, want %q", first.Donors, want)
	}
	if !strings.Contains(first.Stuck, "1 donor matches this job but not computing now") {
		t.Errorf("stuck %q, want it to say the matching donor does not compute", first.Stuck)
	}
}

// TestFollowSaysWhenThePoolIsAway: while the pool does not answer (a
// cluster's take-over: every node answers 503 no_leader) for three
// seconds, Follow says so once, and says when it answers again. Before,
// the progress line went silent for the seconds of a take-over with
// nothing said. The clock is the test's: each unanswered request moves
// it on a second.
func TestFollowSaysWhenThePoolIsAway(t *testing.T) {
	j := planJob(t, "squares-away", 3, "redundancy = 1\nquorum = 1")
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	var (
		mu    sync.Mutex
		now   = time.Date(2026, 12, 5, 23, 30, 0, 0, time.UTC)
		away  bool
		fwd   = co.proxy(t)
		clock = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		a := away
		if a {
			now = now.Add(time.Second)
		}
		mu.Unlock()
		if !a {
			fwd.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"error":"no node of this cluster is in charge of the pool right now","code":"no_leader"}`)
	}))
	defer front.Close()
	sub := newSubmitter(t, front.URL, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := sub.c.Submit(ctx, j); err != nil {
		t.Fatal(err)
	}
	notices := make(chan string, 16)
	done := followFast(ctx, t, sub, j, agent.FollowConfig{Now: clock, Notice: func(msg string) { notices <- msg }})
	wait := func(want string) {
		t.Helper()
		select {
		case msg := <-notices:
			if !strings.Contains(msg, want) {
				t.Fatalf("notice %q, want one with %q", msg, want)
			}
		case err := <-done:
			t.Fatalf("Follow ended before saying %q: %v", want, err)
		case <-time.After(patience(t)):
			t.Fatalf("Follow did not say %q", want)
		}
	}
	mu.Lock()
	away = true
	mu.Unlock()
	wait("is not answering (it answered 503: no node of this cluster is in charge of the pool right now); still trying")
	mu.Lock()
	away = false
	mu.Unlock()
	wait("the pool answers again, after ")
	if _, err := sub.c.Cancel(context.Background(), j.ID); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, agent.ErrJobCancelled) {
		t.Errorf("Follow: %v, want ErrJobCancelled", err)
	}
	select {
	case msg := <-notices:
		t.Errorf("a notice more: %q", msg)
	default:
	}
}

// Found by a fresh session on a divided pool: every job's follow said
// "… waiting for the agreeing results of other devices, and none is
// computing one now" for a moment while the donors computed other
// shards' jobs. A follow says it only when two looks in a row find
// nothing leased.
func TestFollowWaitsOutALull(t *testing.T) {
	j := planJob(t, "squares-lull", 3, "redundancy = 1\nquorum = 1")
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	fwd := co.proxy(t)
	// The job's status as a lull shows it: results waiting, none leased.
	fwd.ModifyResponse = func(resp *http.Response) error {
		if resp.Request.Method != http.MethodGet || resp.Request.URL.Path != "/v1/jobs/"+j.ID.String() || resp.StatusCode != http.StatusOK {
			return nil
		}
		var st map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			return err
		}
		resp.Body.Close()
		st["leased"], st["waiting"], st["quorum"] = 0, 2, 1
		delete(st, "trouble")
		b, _ := json.Marshal(st)
		resp.Body = io.NopCloser(bytes.NewReader(b))
		resp.ContentLength = int64(len(b))
		resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
		return nil
	}
	front := httptest.NewServer(fwd)
	defer front.Close()
	sub := newSubmitter(t, front.URL, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := sub.c.Submit(ctx, j); err != nil {
		t.Fatal(err)
	}
	acts := make(chan agent.Activity, 64)
	done := followFast(ctx, t, sub, j, agent.FollowConfig{Activity: func(a agent.Activity) {
		select {
		case acts <- a:
		default:
		}
	}})
	next := func() agent.Activity {
		t.Helper()
		select {
		case a := <-acts:
			return a
		case err := <-done:
			t.Fatalf("Follow ended: %v", err)
		case <-time.After(patience(t)):
			t.Fatal("Follow reported no activity")
		}
		return agent.Activity{}
	}
	if a := next(); !a.Idle || a.Quorum != "" {
		t.Errorf("first look at a lull: idle %v, quorum %q; want idle and nothing said", a.Idle, a.Quorum)
	}
	if a := next(); !a.Idle || !strings.Contains(a.Quorum, "none is computing one now") {
		t.Errorf("second look at a lull: idle %v, quorum %q; want it said", a.Idle, a.Quorum)
	}
	cancel()
	<-done
}

// followFast follows job j as sub in the background with cfg, polling
// every 10 ms and backing off at most 50 ms, into sub's merge directory
// of j; Follow's error comes on the channel it returns.
func followFast(ctx context.Context, t *testing.T, sub *submitter, j *job.Job, cfg agent.FollowConfig) <-chan error {
	cfg.Dir = filepath.Join(sub.dev.dirs.Data, "merges", j.ID.String())
	cfg.Poll, cfg.StatusPoll, cfg.MaxBackoff, cfg.Logger = 10*time.Millisecond, 10*time.Millisecond, 50*time.Millisecond, quietLogger(t)
	done := make(chan error, 1)
	go func() {
		_, err := agent.Follow(ctx, sub.c, j, cfg)
		done <- err
	}()
	return done
}

// TestFollowGathersTricklingOutcomes: after a page that was not full
// (outcomes trickling in), Follow waits Gather before it asks for the
// next, so that the next page carries the outcomes of that while; the
// merged result is the solo run's. The tasks run one at a time as the
// test lets them: the first alone, the other seven once the merger has
// acknowledged the first, so at least one request for results follows
// an acknowledgement whatever the machine's speed. The front counts
// what the merger asks of the pool and when: each request for results
// that follows an acknowledgement comes Gather or more after that
// acknowledgement was answered (a sleep never ends early, so a slow
// machine cannot fail this; without the wait the next request follows
// at once). Which pages count as full is TestPageFull's.
func TestFollowGathersTricklingOutcomes(t *testing.T) {
	const gather = 200 * time.Millisecond
	j := planJob(t, "squares-trickle", 8, "redundancy = 1\nquorum = 1")
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	type ask struct {
		ack      bool
		at, done time.Time // arrived, answered (the front's monotonic clock)
	}
	var (
		mu    sync.Mutex
		asks  []ask
		fwd   = co.proxy(t)
		acked = make(chan struct{}, 16)
	)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		isAck := r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/ack")
		isResults := r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/results")
		at := time.Now()
		fwd.ServeHTTP(w, r)
		if isAck || isResults {
			mu.Lock()
			asks = append(asks, ask{ack: isAck, at: at, done: time.Now()})
			mu.Unlock()
		}
		if isAck {
			select {
			case acked <- struct{}{}:
			default:
			}
		}
	}))
	defer front.Close()
	sub := newSubmitter(t, front.URL, nil)
	ctx, cancel := context.WithTimeout(context.Background(), patience(t))
	defer cancel()
	if err := sub.c.Submit(ctx, j); err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{}, 8)
	gate <- struct{}{} // the first task
	go func() {
		select {
		case <-acked:
			for range 7 {
				gate <- struct{}{}
			}
		case <-ctx.Done():
		}
	}()
	startAgent(t, co.url, newDevice(t, nil), &fakeExec{Block: gate}, 1, nil)
	got, err := agent.Follow(ctx, sub.c, j, agent.FollowConfig{
		Dir: filepath.Join(sub.dev.dirs.Data, "merges", j.ID.String()), Poll: 10 * time.Millisecond,
		MaxBackoff: 100 * time.Millisecond, Gather: gather, Logger: quietLogger(t),
	})
	if err != nil {
		t.Fatalf("Follow: %v", err)
	}
	same(t, got, solo(t, j, &fakeExec{}))
	mu.Lock()
	defer mu.Unlock()
	acks, checked := 0, 0
	for i, a := range asks {
		if !a.ack {
			continue
		}
		acks++
		if i+1 < len(asks) && !asks[i+1].ack {
			checked++
			if gap := asks[i+1].at.Sub(a.done); gap < gather {
				t.Errorf("a request for results %v after the acknowledgement before it, want %v or more", gap, gather)
			}
		}
	}
	if acks < 2 || acks > 8 {
		t.Fatalf("%d acknowledgements for 8 outcomes, the first alone, want 2 to 8", acks)
	}
	if checked != acks-1 {
		t.Errorf("%d of %d acknowledgements followed by a request for results, want all but the last", checked, acks)
	}
	t.Logf("8 outcomes in %d pages", acks)
}
