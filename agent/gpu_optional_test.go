//go:build cgo && linux

package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"idlepool/agent"
	"idlepool/idle"
	"idlepool/job"
	"idlepool/offers"
	"idlepool/pool"
	"idlepool/worker"
)

// recordExec is fakeExec that records the GPUs each task was given, by
// job.
type recordExec struct {
	fakeExec
	mu   sync.Mutex
	gpus map[string][][]string // job ID -> Request.GPUs of each run
}

func (e *recordExec) Run(ctx context.Context, req worker.Request) (worker.Result, error) {
	var task struct {
		Job string `json:"job"`
	}
	if err := json.Unmarshal(req.Stdin, &task); err != nil {
		return worker.Result{}, fmt.Errorf("%w: stdin: %v", worker.ErrInvalidRequest, err)
	}
	e.mu.Lock()
	if e.gpus == nil {
		e.gpus = map[string][][]string{}
	}
	e.gpus[task.Job] = append(e.gpus[task.Job], slices.Clone(req.GPUs))
	e.mu.Unlock()
	return e.fakeExec.Run(ctx, req)
}

// given returns the GPUs given to each run of a task of j.
func (e *recordExec) given(j *job.Job) [][]string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.gpus[j.ID.String()])
}

// TestOptionalGPUJobInPool runs a coordinator on 127.0.0.1 with three
// agents: a CPU-only one, one with the mock NVML's GPU whose donor allows
// GPU programs, and one with the same GPU whose donor does not. A job
// with gpu = "optional" is leased to all three (quorum 3) and verifies;
// only the task computed where GPU programs are allowed is given the GPU.
// A CPU job computed by the same agent is given none.
func TestOptionalGPUJobInPool(t *testing.T) {
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	lister := worker.NewGPUListerWith(mockNVML())
	t.Cleanup(func() { lister.Close() })
	gpuSettings := idle.Defaults()
	gpuSettings.GPUs = map[string]idle.GPUSettings{"GPU-4090": {Use: true}}

	start := func(dev *device, ex pool.Executor, src agent.OfferSource, gpus []string) {
		t.Helper()
		cfg := agent.Config{
			PoolURL: co.url, Home: dev.dirs, DeviceKey: dev.key, OwnerKey: dev.owner, Slots: 1,
			Executor: ex, Store: dev.local, HTTP: httpClient(t),
			MaxBackoff: 200 * time.Millisecond, IdlePoll: 50 * time.Millisecond, ReceiptPoll: 50 * time.Millisecond,
			Offer: src, Logger: quietLogger(t).With("side", "agent", "peer", dev.key.ID()),
		}
		if gpus != nil {
			cfg.Signals = gpuSignals{agent.NVMLGPUs{Lister: lister}}
			cfg.Decide = func(idle.Signals, time.Time) idle.Decision {
				return idle.Decision{State: idle.StateComputing, Cores: 1, GPUs: gpus, Reason: "computing (test)"}
			}
		}
		a, err := agent.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		ra := &runningAgent{Agent: a, dev: dev, stop: cancel, done: make(chan error, 1)}
		go func() { ra.done <- a.Serve(ctx) }()
		t.Cleanup(func() { ra.Stop(t) })
	}
	cpuEx, gpuEx, noOptInEx := &recordExec{}, &recordExec{}, &recordExec{}
	start(newDevice(t, nil), cpuEx, testOffers{settings: idle.Defaults()}, nil)
	start(newDevice(t, nil), gpuEx, testOffers{settings: gpuSettings,
		prefs: offers.Preferences{Global: offers.PoolPreferences{Weight: 1, GPUPrograms: true}}}, []string{"GPU-4090"})
	start(newDevice(t, nil), noOptInEx, testOffers{settings: gpuSettings}, []string{"GPU-4090"})

	optional := planJob(t, "squares-optional-gpu", 4, "redundancy = 3\nquorum = 3\n[requirements]\ngpu = \"optional\"")
	cpu := planJob(t, "squares-cpu", 2, "redundancy = 3\nquorum = 3")
	sub := newSubmitter(t, co.url, nil)
	for _, j := range []*job.Job{optional, cpu} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		got, err := sub.run(t, ctx, j)
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", j.Manifest.Name, err)
		}
		if got.OK != j.NumTasks() {
			t.Errorf("%s: %d of %d tasks verified", j.Manifest.Name, got.OK, j.NumTasks())
		}
	}
	check := func(who string, ex *recordExec, j *job.Job, want []string) {
		t.Helper()
		runs := ex.given(j)
		if len(runs) == 0 {
			t.Errorf("%s computed no task of %s", who, j.Manifest.Name)
		}
		for _, g := range runs {
			if !slices.Equal(g, want) {
				t.Errorf("%s: a task of %s was given GPUs %v, want %v", who, j.Manifest.Name, g, want)
			}
		}
	}
	check("the CPU-only agent", cpuEx, optional, nil)
	check("the GPU agent", gpuEx, optional, []string{"GPU-4090"})
	check("the GPU agent without GPU programs allowed", noOptInEx, optional, nil)
	check("the GPU agent", gpuEx, cpu, nil)
}
