package agent_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/agent"
	"idlepool/coord"
	"idlepool/idle"
	"idlepool/store"
	"idlepool/worker"
)

func TestShareSlots(t *testing.T) {
	for _, tc := range []struct {
		name    string
		workers int
		weights []float64
		want    []int
		fails   bool
	}{
		{"one pool", 4, []float64{1}, []int{4}, false},
		{"equal", 4, []float64{1, 1}, []int{2, 2}, false},
		{"odd", 5, []float64{1, 1}, []int{3, 2}, false},
		{"weighted", 8, []float64{3, 1}, []int{6, 2}, false},
		{"at least one each", 3, []float64{100, 1, 1}, []int{1, 1, 1}, false},
		{"largest remainder", 10, []float64{1, 1, 1}, []int{4, 3, 3}, false},
		{"weight 0 gets none", 4, []float64{1, 0}, []int{4, 0}, false},
		{"negative counts as 0", 2, []float64{-1, 1}, []int{0, 2}, false},
		{"all 0", 4, []float64{0, 0}, nil, true},
		{"too few workers", 1, []float64{1, 1}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := agent.ShareSlots(tc.workers, tc.weights)
			if (err != nil) != tc.fails {
				t.Fatalf("ShareSlots = %v, %v; want failure %v", got, err, tc.fails)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("slots (-want +got):\n%s", diff)
			}
			sum := 0
			for _, n := range got {
				sum += n
			}
			if err == nil && sum != tc.workers {
				t.Errorf("slots %v add up to %d, want all %d workers", got, sum, tc.workers)
			}
		})
	}
}

// startDonor runs a donor of dev that follows dev's joined pools (pools
// nil) or computes for the pools given, until the test ends; the returned
// channel has Serve's result.
func startDonor(t *testing.T, dev *device, exec *fakeExec, pools []store.JoinedPool) (*agent.Donor, <-chan error, context.CancelFunc) {
	t.Helper()
	d, err := agent.NewDonor(agent.DonorConfig{
		Home: dev.dirs, DeviceKey: dev.key, OwnerKey: dev.owner, Name: "donor", Workers: 2,
		Executor: exec, Store: dev.local, Always: true, HTTP: httpClient(t), Pools: pools,
		PoolReload: 50 * time.Millisecond, RetryAfter: 100 * time.Millisecond,
		Logger: quietLogger(t).With("side", "donor"),
		Adjust: func(c *agent.Config) {
			c.MaxBackoff, c.IdlePoll, c.ReceiptPoll = 200*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done, stopped := make(chan error, 1), make(chan struct{})
	go func() { done <- d.Serve(ctx); close(stopped) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-stopped:
		case <-time.After(patience(t)):
			t.Error("donor did not stop")
		}
	})
	return d, done, cancel
}

// waitFor polls cond until it holds, or fails the test once patience(t)
// has passed: a bound on a hang, not a verdict on speed.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience(t))
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestDonorFollowsJoinedPools(t *testing.T) {
	ctx := context.Background()
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	dev := newDevice(t, nil)
	exec := &fakeExec{Delay: time.Millisecond}
	d, _, _ := startDonor(t, dev, exec, nil)
	if st := d.Status(); len(st.Pools) != 0 || st.Slots != 2 {
		t.Fatalf("status with no pool joined: %+v", st)
	}

	// Joining in the store (as the tray's settings window does) starts
	// an agent without a restart.
	if err := dev.local.JoinPool(ctx, co.url, ""); err != nil {
		t.Fatal(err)
	}
	d.Reload()
	waitFor(t, "the donor computes for the joined pool", func() bool {
		st := d.Status()
		return len(st.Pools) == 1 && st.Pools[0].URL == co.url && st.Pools[0].Name == "test" && st.Pools[0].Slots == 2 && st.Pools[0].Error == ""
	})
	boards, err := d.Board(ctx)
	if err != nil || len(boards) != 1 || boards[0].URL != co.url || boards[0].Name != "test" || boards[0].Error != "" || boards[0].Offer == nil {
		t.Fatalf("Board = %+v, %v; want the joined pool's empty board with this machine's offer", boards, err)
	}
	j := planJob(t, "squares-donor", 12, "redundancy = 1\nquorum = 1")
	sub := newSubmitter(t, co.url, nil)
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	got, err := sub.run(t, rctx, j)
	if err != nil {
		t.Fatalf("follow: %v", err)
	}
	same(t, got, solo(t, j, exec))
	settle(t, dev)
	all, err := dev.local.Contributions(ctx, store.Filter{State: store.StateConfirmed})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 12 {
		t.Errorf("%d confirmed contributions, want 12", len(all))
	}

	// Leaving stops the agent.
	if err := dev.local.LeavePool(ctx, co.url); err != nil {
		t.Fatal(err)
	}
	d.Reload()
	waitFor(t, "the donor stops computing for the pool left", func() bool { return len(d.Status().Pools) == 0 })
}

func TestDonorFixedPoolFailure(t *testing.T) {
	// A pool whose key changed is not worth retrying: with fixed pools
	// (`idlepool join URL`) Serve ends with a PoolError naming it.
	first := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	dev := newDevice(t, nil)
	cfg := agent.DonorConfig{Home: dev.dirs, DeviceKey: dev.key, OwnerKey: dev.owner, HTTP: httpClient(t)}
	ctx := context.Background()
	name, err := agent.CheckPool(ctx, cfg, first.url, "")
	if err != nil || name != "test" {
		t.Fatalf("CheckPool of a running pool = %q, %v; want test, nil", name, err)
	}
	first.Stop()
	second := startCoordinator(t, t.TempDir(), first.listen) // same address, new key
	_, done, _ := startDonor(t, dev, &fakeExec{}, []store.JoinedPool{{URL: second.url}})
	select {
	case err := <-done:
		pe, ok := errors.AsType[*agent.PoolError](err)
		if !ok || pe.URL != second.url || !errors.Is(err, agent.ErrPoolKeyChanged) {
			t.Fatalf("Serve = %v; want a PoolError for %s wrapping ErrPoolKeyChanged", err, second.url)
		}
	case <-time.After(patience(t)):
		t.Fatal("Serve did not end")
	}
}

func TestCheckPool(t *testing.T) {
	dev := newDevice(t, nil)
	cfg := agent.DonorConfig{Home: dev.dirs, DeviceKey: dev.key, OwnerKey: dev.owner, HTTP: httpClient(t)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct{ url, want string }{
		{"not a url", "is not a pool address"},
		{"ftp://127.0.0.1:1", "is not a pool address"},
		{"http://127.0.0.1:1", "cannot reach the pool at http://127.0.0.1:1: connection refused"},
	} {
		_, err := agent.CheckPool(ctx, cfg, tc.url, "")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckPool(%q) = %v; want an error saying %q", tc.url, err, tc.want)
		}
	}
}

func TestCheckPoolInviteOnly(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := coord.New(ctx, coord.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Pool: "club",
		InviteToken: "the-right-token-0123", Logger: quietLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	defer func() { cancel(); <-done }()
	dev := newDevice(t, nil)
	cfg := agent.DonorConfig{Home: dev.dirs, DeviceKey: dev.key, OwnerKey: dev.owner, HTTP: httpClient(t)}
	for _, tc := range []struct{ invite, want string }{
		{"", "is invite-only: ask its operator for an invite token"},
		{"a-wrong-token-0123456", "refused the invite token: check it with the pool's operator"},
	} {
		_, err := agent.CheckPool(ctx, cfg, srv.URL(), tc.invite)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, agent.ErrForbidden) || strings.Contains(err.Error(), "/v1/") {
			t.Errorf("CheckPool with invite %q = %v; want ErrForbidden saying %q, without the protocol's details", tc.invite, err, tc.want)
		}
	}
	if name, err := agent.CheckPool(ctx, cfg, srv.URL(), "the-right-token-0123"); err != nil || name != "club" {
		t.Errorf("CheckPool with the right token = %q, %v", name, err)
	}
}

func TestDonorKeepsBusyAgentWhenSharesChange(t *testing.T) {
	// Joining a second pool changes the first pool's share of the
	// workers; its agent holds a task, so it is not made again (which
	// would hand the task back) until it is idle.
	ctx := context.Background()
	coA := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	coB := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	dev := newDevice(t, nil)
	exec := &fakeExec{Block: make(chan struct{})}
	d, _, _ := startDonor(t, dev, exec, nil)
	if err := dev.local.JoinPool(ctx, coA.url, ""); err != nil {
		t.Fatal(err)
	}
	d.Reload()
	sub := newSubmitter(t, coA.url, nil)
	if err := sub.c.Submit(ctx, planJob(t, "squares-busy", 1, "redundancy = 1\nquorum = 1")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the task runs", func() bool { return len(d.Status().Running) == 1 })
	lease := d.Status().Running[0].Lease
	if err := dev.local.JoinPool(ctx, coB.url, ""); err != nil {
		t.Fatal(err)
	}
	d.Reload()
	waitFor(t, "the second pool's agent starts", func() bool {
		st := d.Status()
		return len(st.Pools) == 2 && st.Pools[0].Slots == 1 && st.Pools[1].Slots == 1
	})
	time.Sleep(300 * time.Millisecond) // several syncs
	if st := d.Status(); len(st.Running) != 1 || st.Running[0].Lease != lease {
		t.Fatalf("the busy agent's task was handed back when the shares changed: running %+v", st.Running)
	}
	close(exec.Block)
	waitFor(t, "the task's receipt confirms it under its first lease", func() bool {
		got, _ := dev.local.Contributions(ctx, store.Filter{State: store.StateConfirmed})
		return len(got) == 1 && got[0].Lease == lease
	})
}

// TestDonorUploadCap: with no share_upload set the data plane of the
// donor's agents runs under the default cap of 1 MiB/s (it was
// unlimited); the owner's share_upload reaches it, and a change applies
// without a restart. (p2p's TestUploadLimit measures that cap on a real
// transfer.)
func TestDonorUploadCap(t *testing.T) {
	ctx := context.Background()
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	dev := newDevice(t, nil)
	set := func(v string) {
		t.Helper()
		if _, err := dev.local.UpdateSettings(ctx, func(s *idle.Settings) error {
			return s.Set("share_upload", v, time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
		}); err != nil {
			t.Fatal(err)
		}
	}
	d, _, _ := startDonor(t, dev, &fakeExec{}, []store.JoinedPool{{URL: co.url}})
	capIs := func(want int64) func() bool {
		return func() bool {
			st := d.Status()
			return len(st.Pools) == 1 && st.Pools[0].Peers != nil && st.Pools[0].Peers.UploadCap == want
		}
	}
	waitFor(t, "the data plane runs under the default cap of 1 MiB/s", capIs(1<<20))
	if w := d.Status().Pools[0].Peers.Words(); !strings.HasSuffix(w, "(at most 1.0 MiB/s)") {
		t.Errorf("Words() = %q, want it to end with the cap", w)
	}
	set("256KiB/s")
	d.Reload()
	waitFor(t, "the new cap of 256 KiB/s applies", capIs(256<<10))
	set("unlimited")
	d.Reload()
	waitFor(t, "the cap is lifted", capIs(0))
}

// TestDonorAppliesCPUTimeAndPriority: the owner's cpu_time and
// idle_priority, set in the local store, reach the donor's worker pool,
// and a change reaches it on Reload.
func TestDonorAppliesCPUTimeAndPriority(t *testing.T) {
	if idle.MinCPUTimeShare != worker.MinCPUShare {
		t.Fatalf("the settings' least CPU time %g is not the workers' %g", idle.MinCPUTimeShare, worker.MinCPUShare)
	}
	ctx := context.Background()
	dev := newDevice(t, nil)
	// cpu_time and idle_priority read no clock: any instant will do.
	setAt := time.Date(2026, 12, 3, 23, 30, 0, 0, time.UTC)
	set := func(kv ...string) {
		t.Helper()
		if _, err := dev.local.UpdateSettings(ctx, func(s *idle.Settings) error {
			for i := 0; i < len(kv); i += 2 {
				if err := s.Set(kv[i], kv[i+1], setAt); err != nil {
					return err
				}
			}
			return s.Validate()
		}); err != nil {
			t.Fatal(err)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	wp, err := worker.NewPool(worker.Config{Command: []string{exe}, Env: append(os.Environ(), workerEnv+"=1"), Slots: 1,
		CacheDir: filepath.Join(t.TempDir(), "wazero")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wp.Close() })
	set("cpu_time", "50%", "idle_priority", "false")
	d, err := agent.NewDonor(agent.DonorConfig{
		Home: dev.dirs, DeviceKey: dev.key, OwnerKey: dev.owner, Workers: 1, Executor: wp, Store: dev.local,
		HTTP: httpClient(t), PoolReload: time.Hour, Logger: quietLogger(t).With("side", "donor"),
	})
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Serve(sctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, "the workers at half the CPU time and low priority", func() bool {
		return wp.CPUShare() == 0.5 && wp.Priority() == worker.PriorityLow
	})
	set("cpu_time", "full", "idle_priority", "true")
	d.Reload()
	waitFor(t, "the workers at full CPU time and idle priority", func() bool {
		return wp.CPUShare() == 1 && wp.Priority() == worker.PriorityIdle
	})
}
