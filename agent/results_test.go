package agent_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"idlepool/agent"
	"idlepool/p2p"
	"idlepool/pool"
)

// TestKeptResultsFetchedThenDeleted: two agents of two owners compute a
// job whose results are 4 KB each and keep them; the coordinator gets
// their references only (its metrics), the merger fetches the results
// from the agents over the data plane (a Seeder that offers nothing) and
// merges what a solo run gives (one agent restarted before: it keeps
// and serves its results again); once the merger acknowledged them, the
// agents' sweep deletes every kept result, and not before.
func TestKeptResultsFetchedThenDeleted(t *testing.T) {
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	j := planJob(t, "kept", 3, "redundancy = 2\nquorum = 2\n")
	exec := &fakeExec{Pad: 4000}
	want := solo(t, j, exec)
	start := func(dev *device) *runningAgent { return startPeerAgentExec(t, co.url, dev, false, p2p.Config{}, exec) }
	devs := []*device{newDevice(t, nil), newDevice(t, nil)}
	agents := []*runningAgent{start(devs[0]), start(devs[1])}

	sub := newSubmitter(t, co.url, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // bounds a hang only
	defer cancel()
	// An agent whose data plane is not up yet sends its results inline,
	// as it should: wait for both planes, so that every result goes by
	// reference.
	for i, a := range agents {
		for !agent.DataPlaneUp(a.Agent) {
			if ctx.Err() != nil {
				t.Fatalf("agent %d's data plane never came up", i)
			}
			time.Sleep(20 * time.Millisecond) // polling a condition
		}
	}
	// The merger runs its data plane before it submits: the pool knows
	// from the submission that it fetches kept results.
	seeder, err := agent.Seed(ctx, sub.c, j, agent.SeedConfig{NoOffer: true, Logger: quietLogger(t).With("side", "merger")})
	if err != nil || seeder == nil {
		t.Fatalf("Seed: %v, %v", seeder, err)
	}
	if err := sub.c.Submit(ctx, j); err != nil {
		t.Fatal(err)
	}
	// Followed up to the last outcome but not acknowledged yet: the
	// agents keep everything.
	for {
		st, err := sub.c.Status(ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if st.Complete {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the job never completed")
		}
		time.Sleep(20 * time.Millisecond) // polling a condition
	}
	// Read before the restart: an agent stopped while the answer to its
	// last submission was on its way sends that result again when it
	// starts, inline, since it has not fetched the job again yet.
	if inline := coordMetric(t, co.url, `idlepool_coord_result_bytes_total{how="inline"}`); inline != 0 {
		t.Errorf("the coordinator received %v result bytes, want none", inline)
	}
	// A restarted agent keeps and serves what it kept.
	agents[0].Stop(t)
	agents[0] = start(devs[0])
	for i, a := range agents {
		agent.SweepKept(ctx, a.Agent)
		if n := agent.KeptCount(a.Agent); n != 3 {
			t.Errorf("agent %d keeps %d results before the merger acknowledged them, want 3", i, n)
		}
	}
	got, err := agent.Follow(ctx, sub.c, j, agent.FollowConfig{
		Dir: filepath.Join(sub.dev.dirs.Data, "merges", j.ID.String()), Poll: 20 * time.Millisecond,
		MaxBackoff: 200 * time.Millisecond, Logger: quietLogger(t).With("side", "merger"),
		FetchResult: func(ctx context.Context, v pool.Verified) ([]byte, error) { return seeder.FetchResult(ctx, sub.c, v) },
	})
	if err != nil {
		t.Fatalf("follow: %v", err)
	}
	same(t, got, want)
	if kept := coordMetric(t, co.url, `idlepool_coord_result_bytes_total{how="kept"}`); kept < 6*4000 {
		t.Errorf("the devices kept %v result bytes, want the six results' (over 24000)", kept)
	}
	for i, a := range agents {
		agent.SweepKept(ctx, a.Agent)
		if n := agent.KeptCount(a.Agent); n != 0 {
			t.Errorf("agent %d keeps %d results after the merger acknowledged them, want none", i, n)
		}
	}

	// A merger without a data plane gets the results inline: the
	// devices' references are refused (409 send_inline) and they send
	// the bytes.
	seeder.Stop()
	other := planJob(t, "kept-2", 2, "redundancy = 2\nquorum = 2\n")
	inlineBefore := coordMetric(t, co.url, `idlepool_coord_result_bytes_total{how="inline"}`)
	if err := sub.c.Submit(ctx, other); err != nil {
		t.Fatal(err)
	}
	got, err = agent.Follow(ctx, sub.c, other, agent.FollowConfig{
		Dir: filepath.Join(sub.dev.dirs.Data, "merges", other.ID.String()), Poll: 20 * time.Millisecond,
		MaxBackoff: 200 * time.Millisecond, Logger: quietLogger(t).With("side", "merger"),
	})
	if err != nil {
		t.Fatalf("follow without a data plane: %v", err)
	}
	same(t, got, solo(t, other, exec))
	if inline := coordMetric(t, co.url, `idlepool_coord_result_bytes_total{how="inline"}`) - inlineBefore; inline < 4*4000 {
		t.Errorf("the coordinator received %v result bytes of the job whose merger has no data plane, want the four results' (over 16000)", inline)
	}
}
