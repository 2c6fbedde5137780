package agent_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"idlepool/agent"
	"idlepool/idle"
	"idlepool/offers"
	"idlepool/worker"
)

// recordingExec is fakeExec that keeps the requests it was given.
type recordingExec struct {
	fakeExec
	mu   sync.Mutex
	reqs []worker.Request
}

func (r *recordingExec) Run(ctx context.Context, req worker.Request) (worker.Result, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, req)
	r.mu.Unlock()
	return r.fakeExec.Run(ctx, req)
}

// oneGPU is a Signaller whose machine has one GPU of 10000 MiB.
type oneGPU struct{}

func (oneGPU) Sample(context.Context) idle.Signals {
	return idle.Signals{GPUs: idle.Reading[[]idle.GPU]{Known: true, Source: "test", Value: []idle.GPU{
		{Index: 0, UUID: "GPU-test", Name: "Test GPU", MemoryTotalMiB: 10000, ComputeCapability: "8.9"},
	}}}
}

// TestGPUMemoryCapReachesTask: a task given a GPU carries the donor's
// memory share of it as its device-memory cap.
func TestGPUMemoryCapReachesTask(t *testing.T) {
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	settings := idle.Defaults()
	settings.GPUs = map[string]idle.GPUSettings{"GPU-test": {Use: true, MemoryShare: 0.3}}
	dev := newDevice(t, nil)
	exec := &recordingExec{}
	a, err := agent.New(agent.Config{
		PoolURL: co.url, Home: dev.dirs, DeviceKey: dev.key, OwnerKey: dev.owner, Slots: 1,
		Executor: exec, Store: dev.local, HTTP: httpClient(t),
		MaxBackoff: 200 * time.Millisecond, IdlePoll: 50 * time.Millisecond, ReceiptPoll: 50 * time.Millisecond,
		Offer:   testOffers{settings: settings, prefs: offers.Preferences{Global: offers.PoolPreferences{Weight: 1, GPUPrograms: true}}},
		Signals: oneGPU{},
		Decide: func(idle.Signals, time.Time) idle.Decision {
			return idle.Decision{State: idle.StateComputing, Cores: 1, GPUs: []string{"GPU-test"}, Reason: "computing (test)"}
		},
		GPUMemoryMiB: func(uuids []string) (int64, bool) {
			return idle.GPUMemoryMiB(settings, oneGPU{}.Sample(context.Background()).GPUs, uuids)
		},
		Logger: quietLogger(t).With("side", "agent"),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ra := &runningAgent{Agent: a, dev: dev, stop: cancel, done: make(chan error, 1)}
	go func() { ra.done <- a.Serve(ctx) }()
	t.Cleanup(func() { ra.Stop(t) })

	sub := newSubmitter(t, co.url, nil)
	j := planJob(t, "gpu-cap", 2, "redundancy = 1\nquorum = 1\n[requirements]\ngpu = true")
	fctx, stop := context.WithTimeout(context.Background(), 2*time.Minute)
	defer stop()
	if out, err := sub.run(t, fctx, j); err != nil || out.OK != 2 {
		t.Fatalf("job: %+v, %v", out, err)
	}
	exec.mu.Lock()
	defer exec.mu.Unlock()
	if len(exec.reqs) == 0 {
		t.Fatal("no task ran")
	}
	for _, r := range exec.reqs {
		if !slices.Equal(r.GPUs, []string{"GPU-test"}) || r.GPUMemoryLimitMiB != 3000 {
			t.Errorf("task given GPUs %v with a cap of %d MiB, want [GPU-test] and 3000 MiB (30%% of 10000)", r.GPUs, r.GPUMemoryLimitMiB)
		}
	}
}
