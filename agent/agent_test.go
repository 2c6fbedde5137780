package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"idlepool/agent"
	"idlepool/coord"
	"idlepool/pool"
	"idlepool/store"
	"idlepool/worker"
)

// workerEnv, set to "1", makes the test binary a worker process
// (worker.Serve) for tests that run real tasks (govern_linux_test.go).
const workerEnv = "IDLEPOOL_AGENT_TEST_WORKER"

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) == "1" {
		if err := worker.Serve(context.Background(), os.Stdin, os.Stdout, os.Getenv(worker.CacheDirEnv)); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m,
		// database/sql's connection opener lives as long as a DB; each
		// test closes its DBs, but the goroutine ends asynchronously.
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
	)
}

// same fails unless two outcomes are the same bytes where it matters:
// the merged result, derived values and failures.
func same(t *testing.T, got, want *pool.Outcome) {
	t.Helper()
	g, _ := json.Marshal(got.Result)
	w, _ := json.Marshal(want.Result)
	if string(g) != string(w) {
		t.Errorf("pooled result differs from the solo one:\n got %s\nwant %s", g, w)
	}
	if diff := cmp.Diff(want.Derived, got.Derived); diff != "" {
		t.Errorf("derived values differ (-solo +pool):\n%s", diff)
	}
	if diff := cmp.Diff(want.Failures, got.Failures); diff != "" {
		t.Errorf("failures differ (-solo +pool):\n%s", diff)
	}
	if got.OK != want.OK || got.Failed != want.Failed || got.Total != want.Total {
		t.Errorf("counts: got %d ok %d failed of %d, want %d ok %d failed of %d", got.OK, got.Failed, got.Total, want.OK, want.Failed, want.Total)
	}
}

func TestPoolMatchesSolo(t *testing.T) {
	tests := []struct {
		name   string
		tasks  int
		fail   map[int64]bool
		policy string
	}{
		{"all ok", 30, nil, ""},
		{"verified failures", 20, map[int64]bool{3: true, 11: true}, ""},
		{"quorum 3", 12, nil, "redundancy = 3\nquorum = 3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			exec := &fakeExec{Fail: tc.fail, Delay: time.Millisecond}
			j := planJob(t, "squares-"+tc.name, tc.tasks, tc.policy)
			want := solo(t, j, exec)

			co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
			var devs []*device
			for range 3 {
				d := newDevice(t, nil)
				devs = append(devs, d)
				startAgent(t, co.url, d, exec, 2, nil)
			}
			sub := newSubmitter(t, co.url, nil)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			got, err := sub.run(t, ctx, j)
			if err != nil {
				t.Fatalf("follow: %v", err)
			}
			same(t, got, want)

			settle(t, devs...)
			entries := ledger(t, sub.c)
			if err := pool.VerifyLedger(entries, co.key); err != nil {
				t.Fatalf("ledger: %v", err)
			}
			checkNoDuplicates(t, entries)
			receipts := map[int64]int{}
			for _, e := range entries {
				if e.Kind == pool.KindReceipt {
					receipts[e.Task]++
				}
			}
			for task := range int64(tc.tasks) {
				if receipts[task] < j.Manifest.Policy.Quorum {
					t.Errorf("task %d: %d receipts, want at least the quorum %d", task, receipts[task], j.Manifest.Policy.Quorum)
				}
			}
			for _, d := range devs {
				checkHistory(t, d, entries)
			}
		})
	}
}

// TestAgentCreditsWork: an agent sends the work each task counted with its
// result, and the receipts credit that work, not what the job declared:
// a job declaring 1,000 units for tasks that count 5,000,000 instructions
// pays 0.05 a receipt. Each device's history keeps both.
func TestAgentCreditsWork(t *testing.T) {
	exec := &fakeExec{Work: 5_000_000}
	j := planJob(t, "declared-1000", 4, "task_cost = 1000")
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	var devs []*device
	for range 2 {
		d := newDevice(t, nil)
		devs = append(devs, d)
		startAgent(t, co.url, d, exec, 2, nil)
	}
	sub := newSubmitter(t, co.url, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := sub.run(t, ctx, j); err != nil {
		t.Fatalf("follow: %v", err)
	}
	settle(t, devs...)
	entries := ledger(t, sub.c)
	var receipts int
	for _, e := range entries {
		if e.Kind != pool.KindReceipt {
			continue
		}
		receipts++
		if e.Cost != 0.05 || e.Work != 5_000_000 {
			t.Errorf("receipt %d: cost %v for work %d, want 0.05 for 5000000", e.Seq, e.Cost, e.Work)
		}
	}
	if receipts != 8 {
		t.Errorf("%d receipts, want 2 for each of 4 tasks", receipts)
	}
	for _, d := range devs {
		checkHistory(t, d, entries)
		cs, err := d.local.Contributions(context.Background(), store.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			if c.Declared != 1000 || c.Work == nil || c.Work.Count != 5_000_000 || c.Work.Rule != worker.MeterRule {
				t.Errorf("contribution %s: declared %v, work %+v; want 1000 and 5000000 by rule %d", c.Lease, c.Declared, c.Work, worker.MeterRule)
			}
		}
		days, err := d.local.History(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var sum store.DaySummary // the tasks may straddle midnight
		for _, x := range days {
			sum.Confirmed, sum.DeclaredCost, sum.Work, sum.ConfirmedCost = sum.Confirmed+x.Confirmed, sum.DeclaredCost+x.DeclaredCost, sum.Work+x.Work, sum.ConfirmedCost+x.ConfirmedCost
		}
		if sum.Confirmed != 4 || sum.DeclaredCost != 4000 || sum.Work != 20_000_000 || math.Abs(sum.ConfirmedCost-0.2) > 1e-12 {
			t.Errorf("history %+v: want 4 confirmed, 4000 declared, 0.2 credited, 20000000 instructions", days)
		}
	}
}

func TestLyingAgentIsOutvoted(t *testing.T) {
	honest := &fakeExec{Delay: 3 * time.Millisecond}
	j := planJob(t, "squares-liar", 30, "")
	want := solo(t, j, honest)

	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	var devs []*device
	for range 3 {
		d := newDevice(t, nil)
		devs = append(devs, d)
		startAgent(t, co.url, d, honest, 1, nil)
	}
	liar := newDevice(t, nil)
	lies := func(l pool.Lease, out pool.TaskOutcome) pool.TaskOutcome {
		if l.Task%3 == 0 {
			out.Body = []byte(`{"index":0,"square":-1}`)
		}
		return out
	}
	startAgent(t, co.url, liar, &fakeExec{}, 2, lies)

	sub := newSubmitter(t, co.url, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got, err := sub.run(t, ctx, j)
	if err != nil {
		t.Fatalf("follow: %v", err)
	}
	same(t, got, want) // nothing wrong was folded

	settle(t, append(devs, liar)...)
	entries := ledger(t, sub.c)
	if err := pool.VerifyLedger(entries, co.key); err != nil {
		t.Fatalf("ledger: %v", err)
	}
	checkNoDuplicates(t, entries)
	deviations := 0
	for _, e := range entries {
		if e.Peer != liar.key.ID() {
			continue
		}
		if e.Kind == pool.KindReceipt && e.Task%3 == 0 {
			t.Errorf("the liar earned receipt %d for task %d, where it lied", e.Seq, e.Task)
		}
		if e.Kind == pool.KindDeviation {
			deviations++
			if e.Cost != 0 {
				t.Errorf("deviation %d has cost %v", e.Seq, e.Cost)
			}
		}
	}
	lied, err := liar.local.Contributions(context.Background(), store.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var liedTasks int
	for _, c := range lied {
		if c.Task%3 == 0 {
			liedTasks++
			if c.State != store.StateRejected {
				t.Errorf("the liar's contribution for task %d is %s, want rejected", c.Task, c.State)
			}
		}
	}
	if liedTasks == 0 {
		t.Fatal("the liar computed no task it lies about; the test proves nothing")
	}
	if deviations == 0 {
		t.Errorf("the liar returned %d wrong results and none is marked as a deviation in the ledger", liedTasks)
	}
	for _, d := range append(devs, liar) {
		checkHistory(t, d, entries)
	}
}

func TestOwnDevicesEarnNoReceipt(t *testing.T) {
	exec := &fakeExec{Delay: time.Millisecond}
	j := planJob(t, "squares-own", 10, `participants = "owner"`)
	want := solo(t, j, exec)

	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	owner := mustKey(t)
	a, b := newDevice(t, owner), newDevice(t, owner)
	startAgent(t, co.url, a, exec, 1, nil)
	startAgent(t, co.url, b, exec, 1, nil)
	sub := newSubmitter(t, co.url, owner)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got, err := sub.run(t, ctx, j)
	if err != nil {
		t.Fatalf("follow: %v", err)
	}
	same(t, got, want)
	settle(t, a, b)
	if entries := ledger(t, sub.c); len(entries) != 0 {
		t.Errorf("the ledger has %d entries for a job computed by its owner's devices, want none: %+v", len(entries), entries[0])
	}
	// A device records the coordinator's answer in two writes (rejected,
	// then acknowledged), and settle waits for the first: wait, with
	// patience, for the second as well.
	var contributions []store.Contribution
	eventually(t, 2*time.Minute, "every contribution acknowledged", func() bool {
		contributions = contributions[:0]
		for _, d := range []*device{a, b} {
			all, err := d.local.Contributions(context.Background(), store.Filter{})
			if err != nil {
				t.Fatal(err)
			}
			contributions = append(contributions, all...)
		}
		return !slices.ContainsFunc(contributions, func(c store.Contribution) bool { return !c.Acknowledged })
	})
	computed := len(contributions)
	for _, c := range contributions {
		if c.State != store.StateRejected || !c.Acknowledged {
			t.Errorf("own-job contribution for task %d: state %s, acknowledged %v; want rejected and acknowledged", c.Task, c.State, c.Acknowledged)
		}
	}
	if computed < j.Manifest.Policy.Quorum*int(j.NumTasks()) {
		t.Errorf("the owner's devices computed %d replicas, want at least %d", computed, j.Manifest.Policy.Quorum*int(j.NumTasks()))
	}
}

func TestStopReleasesLeases(t *testing.T) {
	block := &fakeExec{Block: make(chan struct{})}
	j := planJob(t, "squares-stop", 4, "")
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	sub := newSubmitter(t, co.url, nil)
	ctx := context.Background()
	if err := sub.c.Submit(ctx, j); err != nil {
		t.Fatal(err)
	}
	ra := startAgent(t, co.url, newDevice(t, nil), block, 2, nil)
	deadline := time.Now().Add(10 * time.Second)
	for len(ra.Running()) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the agent runs %d tasks, want 2", len(ra.Running()))
		}
		time.Sleep(10 * time.Millisecond)
	}
	st, err := sub.c.Status(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st.Leased != 2 {
		t.Fatalf("leased = %d while the agent runs two tasks", st.Leased)
	}
	ra.Stop(t)
	if st, err = sub.c.Status(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	if st.Leased != 0 {
		t.Errorf("leased = %d after the agent stopped, want 0: it must hand its leases back", st.Leased)
	}
}

// TestDecidedTaskStopsAtOnce: a device still computing a task that other
// devices' results decided (here the third of three replicas; in a job's
// tail, the replica a backup beat) hears it at its next heartbeat and
// stops the task, instead of computing on until it ends.
func TestDecidedTaskStopsAtOnce(t *testing.T) {
	block := &fakeExec{Block: make(chan struct{})}
	defer close(block.Block)
	j := planJob(t, "squares-decided", 1, "redundancy = 3\nquorum = 2\n")
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	sub := newSubmitter(t, co.url, nil)
	ctx := context.Background()
	if err := sub.c.Submit(ctx, j); err != nil {
		t.Fatal(err)
	}
	slow := startAgent(t, co.url, newDevice(t, nil), block, 1, nil)
	deadline := time.Now().Add(2 * time.Minute) // patience, not a verdict
	for len(slow.Running()) < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the slow agent never started the task")
		}
		time.Sleep(10 * time.Millisecond)
	}
	startAgent(t, co.url, newDevice(t, nil), &fakeExec{}, 1, nil)
	startAgent(t, co.url, newDevice(t, nil), &fakeExec{}, 1, nil)
	// Patience, not a verdict: heartbeats come every 2s/3 here, and a
	// busy machine may take far longer.
	deadline = time.Now().Add(2 * time.Minute)
	for {
		st, err := sub.c.Status(ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if st.Complete && len(slow.Running()) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status %+v; the slow agent still runs %d tasks: it must stop a task decided without it", st, len(slow.Running()))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestAgentOutlivesCoordinatorRestart(t *testing.T) {
	exec := &fakeExec{Delay: 20 * time.Millisecond}
	j := planJob(t, "squares-restart", 40, "")
	want := solo(t, j, &fakeExec{})

	data := t.TempDir()
	co := startCoordinator(t, data, "127.0.0.1:0")
	var devs []*device
	for range 3 {
		d := newDevice(t, nil)
		devs = append(devs, d)
		startAgent(t, co.url, d, exec, 2, nil)
	}
	sub := newSubmitter(t, co.url, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	type result struct {
		out *pool.Outcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := sub.run(t, ctx, j)
		done <- result{out, err}
	}()
	// Stop the coordinator once some tasks are decided, keep it away a
	// while, and start it again on the same data and address.
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := sub.c.Status(ctx, j.ID)
		if err == nil && st.Accepted >= 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no progress before the restart: %+v, %v", st, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	co.Stop()
	time.Sleep(300 * time.Millisecond)
	co2 := startCoordinator(t, data, co.listen)
	if co2.url != co.url {
		t.Fatalf("restarted at %s, not %s", co2.url, co.url)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("follow: %v", r.err)
	}
	same(t, r.out, want)
	settle(t, devs...)
	entries := ledger(t, sub.c)
	if err := pool.VerifyLedger(entries, co.key); err != nil {
		t.Fatalf("ledger: %v", err)
	}
	checkNoDuplicates(t, entries)
	for _, d := range devs {
		checkHistory(t, d, entries)
	}
}

func TestAgentResendsAfterRestart(t *testing.T) {
	// An agent that stops with results the coordinator never acknowledged
	// sends them at its next start.
	exec := &fakeExec{}
	j := planJob(t, "squares-resend", 6, "redundancy = 1\nquorum = 1")
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	sub := newSubmitter(t, co.url, nil)
	ctx := context.Background()
	if err := sub.c.Submit(ctx, j); err != nil {
		t.Fatal(err)
	}
	dev := newDevice(t, nil)
	// A contribution recorded but never sent, as after kill -9 between the
	// two: lease a task by hand, record its result, do not send it.
	c := agentClient(t, co.url, dev)
	publishOffer(t, c, dev)
	leases, err := c.Lease(ctx, 1)
	if err != nil || len(leases) != 1 {
		t.Fatalf("lease: %v %v", leases, err)
	}
	l := leases[0]
	body := []byte(`{"index":` + itoa(l.Task) + `,"square":` + itoa(l.Task*l.Task) + `}`)
	if err := dev.local.AddPending(ctx, store.Contribution{Pool: co.url, Job: l.Job, Task: l.Task, Lease: l.ID,
		Digest: pool.ReplicaDigest(body, false, ""), Result: body, Cost: 1}); err != nil {
		t.Fatal(err)
	}
	startAgent(t, co.url, dev, exec, 1, nil)
	out, err := sub.run(t, ctx, j)
	if err != nil {
		t.Fatal(err)
	}
	if out.OK != 6 {
		t.Fatalf("ok = %d, want 6", out.OK)
	}
	settle(t, dev)
	all, err := dev.local.Contributions(ctx, store.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(all, func(c store.Contribution) bool { return c.Lease == l.ID })
	if i < 0 || all[i].State != store.StateConfirmed || !all[i].Acknowledged {
		t.Fatalf("the contribution recorded before the restart: %+v, want confirmed and acknowledged", all[i])
	}
}

func TestInviteOnlyPool(t *testing.T) {
	const token = "a-long-enough-invite-token"
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := coord.New(ctx, coord.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Pool: "lab", InviteToken: token, Logger: quietLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Error(err)
		}
	}()
	tests := []struct {
		name, invite string
		admitted     bool
	}{
		{"no token", "", false},
		{"wrong token", "not-the-invite-token-at-all", false},
		{"token", token, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dev := newDevice(t, nil)
			a, err := agent.New(agent.Config{PoolURL: srv.URL(), Home: dev.dirs, DeviceKey: dev.key, OwnerKey: dev.owner,
				Executor: &fakeExec{}, Store: dev.local, HTTP: httpClient(t), Invite: tc.invite, Logger: quietLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			actx, stop := context.WithTimeout(context.Background(), 2*time.Second)
			defer stop()
			err = a.Serve(actx)
			if tc.admitted {
				if err != nil || actx.Err() == nil {
					t.Fatalf("Serve = %v before its context ended, want it to run until then", err)
				}
				return
			}
			if !errors.Is(err, agent.ErrForbidden) {
				t.Fatalf("Serve = %v, want ErrForbidden at once", err)
			}
		})
	}
}

// A task that times out on two starved devices is no verified failure: it
// is leased to a third device and accepted from it, and the timeouts earn
// nothing and leave nothing pending.
func TestTimeoutsAreLeasedElsewhere(t *testing.T) {
	honest := &fakeExec{}
	j := planJob(t, "squares-starved", 4, "redundancy = 1\nquorum = 1")
	want := solo(t, j, honest)

	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	starved := []*device{newDevice(t, nil), newDevice(t, nil)}
	for _, d := range starved {
		startAgent(t, co.url, d, &fakeExec{TimeOut: map[int64]bool{2: true}}, 1, nil)
	}
	sub := newSubmitter(t, co.url, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := sub.c.Submit(ctx, j); err != nil {
		t.Fatal(err)
	}
	// Once task 2 has timed out on both starved devices, a third device
	// joins.
	for {
		st, err := sub.c.Status(ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if st.Failed != 0 {
			t.Fatalf("a timeout ended a task: %+v", st)
		}
		if strings.HasPrefix(st.Trouble, "task 2 timed out") && strings.Contains(st.Trouble, " on 2 devices") {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("task 2 did not time out on both starved devices: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	third := newDevice(t, nil)
	startAgent(t, co.url, third, honest, 1, nil)
	got, err := sub.run(t, ctx, j)
	if err != nil {
		t.Fatalf("follow: %v", err)
	}
	same(t, got, want)

	settle(t, append(starved, third)...)
	entries := ledger(t, sub.c)
	for _, e := range entries {
		if e.Task == 2 && (e.Kind != pool.KindReceipt || e.Peer != third.key.ID()) {
			t.Errorf("task 2 has ledger entry %d: %s for %s; want only the third device's receipt", e.Seq, e.Kind, e.Peer)
		}
	}
	for _, d := range append(starved, third) {
		checkHistory(t, d, entries)
	}
	for _, d := range starved {
		cs, err := d.local.Contributions(context.Background(), store.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			if c.Task == 2 {
				t.Errorf("a starved device recorded its timeout of task 2 as a contribution: %+v", c)
			}
		}
	}
}
