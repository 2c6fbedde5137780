//go:build cgo && linux

package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"idlepool/agent"
	"idlepool/coord"
	"idlepool/identity"
	"idlepool/idle"
	"idlepool/job"
	"idlepool/offers"
	"idlepool/pool"
	"idlepool/worker"
)

// mockNVML is the go-nvml mock of a machine with one RTX 4090.
func mockNVML() *mock.Interface {
	dev := &mock.Device{
		GetUUIDFunc: func() (string, nvml.Return) { return "GPU-4090", nvml.SUCCESS },
		GetNameFunc: func() (string, nvml.Return) { return "NVIDIA GeForce RTX 4090", nvml.SUCCESS },
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
			return nvml.Memory{Total: 24564 << 20, Free: 24000 << 20, Used: 564 << 20}, nvml.SUCCESS
		},
		GetUtilizationRatesFunc:         func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{Gpu: 2}, nvml.SUCCESS },
		GetTemperatureFunc:              func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 40, nvml.SUCCESS },
		GetPowerUsageFunc:               func() (uint32, nvml.Return) { return 30000, nvml.SUCCESS },
		GetCudaComputeCapabilityFunc:    func() (int, int, nvml.Return) { return 8, 9, nvml.SUCCESS },
		GetComputeRunningProcessesFunc:  func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS },
		GetGraphicsRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS },
	}
	return &mock.Interface{
		InitFunc:                   func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:               func() nvml.Return { return nvml.SUCCESS },
		DeviceGetCountFunc:         func() (int, nvml.Return) { return 1, nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(int) (nvml.Device, nvml.Return) { return dev, nvml.SUCCESS },
	}
}

// listerGPUs is the idle.GPUSource over a worker.GPULister, as `idlepool
// join` has it.
type listerGPUs struct{ l *worker.GPULister }

func (s listerGPUs) GPUs(context.Context) ([]idle.GPU, error) {
	gs, err := s.l.List(nil)
	if err != nil {
		return nil, err
	}
	out := make([]idle.GPU, 0, len(gs))
	for _, g := range gs {
		out = append(out, idle.GPU{Index: g.Index, UUID: g.UUID, Name: g.Name, MemoryTotalMiB: g.MemoryTotalMiB,
			MemoryFreeMiB: g.MemoryFreeMiB, TemperatureC: g.TemperatureC, ComputeCapability: g.ComputeCapability})
	}
	return out, nil
}

// TestOffersEndToEnd runs an invite-only coordinator on 127.0.0.1 with a
// CPU-only agent and an agent whose NVML is the go-nvml mock of one GPU.
// Both publish signed offers; a GPU job is leased only to the second, a
// CPU job at quorum 2 to both; a stranger without the invite is refused
// with a clear message; and an agent that vanishes drops out of the offer
// listing within its offer's lifetime.
func TestOffersEndToEnd(t *testing.T) {
	const token = "a-long-enough-invite-token"
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := coord.New(ctx, coord.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Pool: "lab", InviteToken: token,
		Logger: quietLogger(t).With("side", "coordinator")})
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
	url := srv.URL()

	// A stranger without the invite token is refused with a clear message.
	stranger := newDevice(t, nil)
	a, err := agent.New(agent.Config{PoolURL: url, Home: stranger.dirs, DeviceKey: stranger.key, OwnerKey: stranger.owner,
		Executor: &fakeExec{}, Store: stranger.local, HTTP: httpClient(t), Offer: testOffers{settings: idle.Defaults()},
		Logger: quietLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithTimeout(ctx, 10*time.Second)
	err = a.Serve(sctx)
	stop()
	if !errors.Is(err, agent.ErrForbidden) || !strings.Contains(err.Error(), "invite-only") {
		t.Fatalf("stranger's Serve = %v, want ErrForbidden saying the pool is invite-only", err)
	}

	const ttl = 1500 * time.Millisecond
	start := func(dev *device, src agent.OfferSource, sig agent.Signaller, gpus []string) *runningAgent {
		t.Helper()
		cfg := agent.Config{
			PoolURL: url, Home: dev.dirs, DeviceKey: dev.key, OwnerKey: dev.owner, Invite: token, Slots: 1,
			Executor: &fakeExec{Delay: 5 * time.Millisecond}, Store: dev.local, HTTP: httpClient(t),
			MaxBackoff: 200 * time.Millisecond, IdlePoll: 50 * time.Millisecond, ReceiptPoll: 50 * time.Millisecond,
			Offer: src, OfferTTL: ttl, Logger: quietLogger(t).With("side", "agent", "peer", dev.key.ID()),
		}
		if sig != nil {
			cfg.Signals = sig
			cfg.Decide = func(idle.Signals, time.Time) idle.Decision {
				return idle.Decision{State: idle.StateComputing, Cores: 1, GPUs: gpus, Reason: "computing (test)"}
			}
		}
		a, err := agent.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		actx, cancel := context.WithCancel(ctx)
		ra := &runningAgent{Agent: a, dev: dev, stop: cancel, done: make(chan error, 1)}
		go func() { ra.done <- a.Serve(actx) }()
		t.Cleanup(func() { ra.Stop(t) })
		return ra
	}

	lister := worker.NewGPUListerWith(mockNVML())
	defer lister.Close()
	sampler := idle.NewSampler(idle.SamplerConfig{Sources: idle.Sources{GPU: listerGPUs{lister}}})
	defer sampler.Close()
	gpuSettings := idle.Defaults()
	gpuSettings.GPUs = map[string]idle.GPUSettings{"GPU-4090": {Use: true}}
	cpuDev, gpuDev := newDevice(t, nil), newDevice(t, nil)
	cpuAgent := start(cpuDev, testOffers{settings: idle.Defaults()}, nil, nil)
	start(gpuDev, testOffers{settings: gpuSettings,
		prefs: offers.Preferences{Global: offers.PoolPreferences{Weight: 1, GPUPrograms: true}}}, sampler, []string{"GPU-4090"})

	// The submitter, a member by the token.
	subDev := newDevice(t, nil)
	c, err := agent.NewClient(url, subDev.key, httpClient(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := agent.PoolKey(ctx, c, subDev.dirs.Config); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Register(ctx, subDev.owner, "submitter", token); err != nil {
		t.Fatal(err)
	}

	// Both offers are listed, signed, with what each machine has.
	live := waitOffers(t, c, 2*time.Second, func(os []offers.Offer) bool { return len(os) == 2 })
	for _, o := range live {
		ks := map[string][]byte{cpuDev.key.ID(): cpuDev.key.Public(), gpuDev.key.ID(): gpuDev.key.Public()}
		if err := o.Verify(ks[o.Peer], time.Now()); err != nil {
			t.Errorf("listed offer: %v", err)
		}
		wantGPUs := 0
		if o.Peer == gpuDev.key.ID() {
			wantGPUs = 1
		}
		if len(o.Capacity.GPUs) != wantGPUs || o.Pool != "lab" || o.State != idle.StateComputing {
			t.Errorf("offer of %s: %d GPUs, pool %q, state %q; want %d GPUs in pool lab, computing",
				o.Peer, len(o.Capacity.GPUs), o.Pool, o.State, wantGPUs)
		}
	}
	if g := live[0].Capacity.GPUs; len(live) == 2 && live[0].Peer == gpuDev.key.ID() && (len(g) != 1 || g[0].Name != "NVIDIA GeForce RTX 4090" || g[0].ComputeCapability != "8.9") {
		t.Errorf("GPU offered: %+v", g)
	}

	gpuJob := planJob(t, "gpu-squares", 6, "redundancy = 1\nquorum = 1\n[requirements]\ngpu = true\ngpu_memory_mib = 8000")
	cpuJob := planJob(t, "cpu-squares", 4, "redundancy = 2\nquorum = 2")
	listings, err := func() ([]offers.Listing, error) {
		for _, j := range []*job.Job{gpuJob, cpuJob} {
			if err := c.Submit(ctx, j); err != nil {
				return nil, err
			}
		}
		return c.Listings(ctx)
	}()
	if err != nil {
		t.Fatal(err)
	}
	if len(listings) != 2 || !listings[0].Requirements.GPU.Required() || listings[1].Requirements.GPU.Uses() || listings[1].Quorum != 2 {
		t.Errorf("listings %+v: want the GPU job, then the CPU job at quorum 2", listings)
	}
	for _, j := range []*job.Job{gpuJob, cpuJob} {
		fctx, stop := context.WithTimeout(ctx, 30*time.Second)
		out, err := agent.Follow(fctx, c, j, agent.FollowConfig{
			Dir: filepath.Join(subDev.dirs.Data, "merges", j.ID.String()), Poll: 20 * time.Millisecond,
			MaxBackoff: 200 * time.Millisecond, Logger: quietLogger(t).With("side", "merger"),
		})
		stop()
		if err != nil {
			t.Fatalf("follow %s: %v", j.Manifest.Name, err)
		}
		if out.OK != j.NumTasks() {
			t.Errorf("%s: %d tasks ok of %d", j.Manifest.Name, out.OK, j.NumTasks())
		}
	}
	byJob := map[job.ID]map[string]int{}
	for _, e := range ledger(t, c) {
		if e.Kind != pool.KindReceipt {
			continue
		}
		if byJob[e.Job] == nil {
			byJob[e.Job] = map[string]int{}
		}
		byJob[e.Job][e.Peer]++
	}
	if got := byJob[gpuJob.ID]; got[gpuDev.key.ID()] != 6 || len(got) != 1 {
		t.Errorf("GPU job receipts by peer %v: want all 6 by the GPU agent %s", got, gpuDev.key.ID())
	}
	if got := byJob[cpuJob.ID]; got[gpuDev.key.ID()] != 4 || got[cpuDev.key.ID()] != 4 {
		t.Errorf("CPU job receipts by peer %v: want 4 each by both agents", got)
	}

	// An agent that vanishes drops out of the listing once its offer
	// expires (the polling allows its lifetime and a second). (Stop does not withdraw the offer, so this is what a kill
	// -9 leaves; cmd/idlepool tests a real one.)
	cpuAgent.Stop(t)
	live = waitOffers(t, c, ttl+time.Second, func(os []offers.Offer) bool { return len(os) == 1 })
	if live[0].Peer != gpuDev.key.ID() {
		t.Errorf("left in the listing: %s, want the GPU agent %s", live[0].Peer, gpuDev.key.ID())
	}
}

// TestOfferSaysCPUTime: the owner's cpu_time is in the offer's capacity
// for a pool of API version 5 and signed with it; a pool of version 4,
// which refuses the field, gets the offer without it.
func TestOfferSaysCPUTime(t *testing.T) {
	ctx := context.Background()
	dev := newDevice(t, nil)
	s := idle.Defaults()
	s.CPUTimeShare = 0.5
	a, err := agent.New(agent.Config{PoolURL: "http://127.0.0.1:1", Home: dev.dirs, DeviceKey: dev.key, OwnerKey: dev.owner,
		Executor: &fakeExec{}, Store: dev.local, HTTP: httpClient(t), Offer: testOffers{settings: s}, Logger: quietLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		version int
		want    float64
	}{{coord.APIVersion, 0.5}, {4, 0}} {
		o := agent.OfferFor(ctx, a, tc.version)
		if o.Capacity.CPUTimeShare != tc.want {
			t.Errorf("offer to a pool of version %d: cpu_time_share %g, want %g", tc.version, o.Capacity.CPUTimeShare, tc.want)
		}
		b, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(string(b), `"cpu_time_share":0.5`); got != (tc.want != 0) {
			t.Errorf("offer to a pool of version %d says cpu_time_share: %v\n%s", tc.version, got, b)
		}
		if err := identity.Verify(dev.key.Public(), o.Canonical(), o.Sig); err != nil {
			t.Errorf("offer to a pool of version %d: signature: %v", tc.version, err)
		}
	}
}
