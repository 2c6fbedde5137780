//go:build cgo && linux

package agent_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"idlepool/agent"
	"idlepool/idle"
	"idlepool/store"
	"idlepool/worker"
)

// TestAlwaysDonorComputesOnItsGPUs: a donor started with Always (join
// --always) on a device whose owner enabled its GPU and allowed GPU
// programs leases a gpu = true job's tasks and gives them the GPU, as a
// donor with an idle policy does; its status says it computes on the
// GPU with no idle policy. Before, its decision named no GPU, so it
// offered the GPU to the pool and never leased a GPU task.
func TestAlwaysDonorComputesOnItsGPUs(t *testing.T) {
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	lister := worker.NewGPUListerWith(mockNVML())
	t.Cleanup(func() { lister.Close() })
	dev := newDevice(t, mustKey(t))
	ctx := context.Background()
	s, err := dev.local.Settings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.GPUs = map[string]idle.GPUSettings{"GPU-4090": {Use: true}}
	if err := dev.local.SaveSettings(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := dev.local.SetGPUPrograms(ctx, "", true); err != nil {
		t.Fatal(err)
	}
	ex := &recordExec{}
	d, err := agent.NewDonor(agent.DonorConfig{
		Home: dev.dirs, DeviceKey: dev.key, OwnerKey: dev.owner, Name: "donor", Workers: 1,
		Executor: ex, Store: dev.local, Always: true, HTTP: httpClient(t), Pools: []store.JoinedPool{{URL: co.url}},
		GPUs: agent.NVMLGPUs{Lister: lister}, PoolReload: 50 * time.Millisecond, RetryAfter: 100 * time.Millisecond,
		Logger: quietLogger(t).With("side", "donor"),
		Adjust: func(c *agent.Config) {
			c.MaxBackoff, c.IdlePoll, c.ReceiptPoll = 200*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Serve(sctx) }()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(patience(t)):
			t.Error("donor did not stop")
		}
	}()

	gpu := planJob(t, "squares-gpu", 3, "redundancy = 1\nquorum = 1\n[requirements]\ngpu = true")
	runJobs(t, co.url, gpu)
	runs := ex.given(gpu)
	if len(runs) < 3 {
		t.Errorf("%d runs of the GPU job's 3 tasks", len(runs))
	}
	for _, g := range runs {
		if !slices.Equal(g, []string{"GPU-4090"}) {
			t.Errorf("a task of the GPU job was given GPUs %v, want GPU-4090", g)
		}
	}
	st := d.Status()
	if !st.Always || !strings.HasPrefix(st.Decision.Reason, "computing on 1 slot and GPU 0 (no idle policy)") {
		t.Errorf("status: always %v, decision %q; want always, computing on 1 slot and GPU 0", st.Always, st.Decision.Reason)
	}
}
