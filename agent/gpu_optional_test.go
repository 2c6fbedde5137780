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

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

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
		startAgentWith(t, co.url, dev, ex, func(c *agent.Config) {
			c.Offer = src
			if gpus != nil {
				c.Signals = gpuSignals{agent.NVMLGPUs{Lister: lister}}
				c.Decide = computeOn(1, gpus)
			}
		})
	}
	cpuEx, gpuEx, noOptInEx := &recordExec{}, &recordExec{}, &recordExec{}
	start(newDevice(t, nil), cpuEx, testOffers{settings: idle.Defaults()}, nil)
	start(newDevice(t, nil), gpuEx, testOffers{settings: gpuSettings,
		prefs: offers.Preferences{Global: offers.PoolPreferences{Weight: 1, GPUPrograms: true}}}, []string{"GPU-4090"})
	start(newDevice(t, nil), noOptInEx, testOffers{settings: gpuSettings}, []string{"GPU-4090"})

	optional := planJob(t, "squares-optional-gpu", 4, "redundancy = 3\nquorum = 3\n[requirements]\ngpu = \"optional\"")
	cpu := planJob(t, "squares-cpu", 2, "redundancy = 3\nquorum = 3")
	runJobs(t, co.url, optional, cpu)
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

// gpuShareExec is fakeExec that records, for each GPU, the most tasks
// that held it at once, and how many runs got a GPU and how many none.
type gpuShareExec struct {
	fakeExec
	mu                sync.Mutex
	holding, most     map[string]int
	withGPU, withNone int
	wrong             []string
}

func (e *gpuShareExec) Run(ctx context.Context, req worker.Request) (worker.Result, error) {
	e.mu.Lock()
	if e.holding == nil {
		e.holding, e.most = map[string]int{}, map[string]int{}
	}
	if len(req.GPUs) > 1 {
		e.wrong = append(e.wrong, fmt.Sprintf("a task was given %d GPUs %v, want one", len(req.GPUs), req.GPUs))
	}
	if len(req.GPUs) == 0 {
		e.withNone++
	} else {
		e.withGPU++
	}
	for _, g := range req.GPUs {
		e.holding[g]++
		e.most[g] = max(e.most[g], e.holding[g])
	}
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		for _, g := range req.GPUs {
			e.holding[g]--
		}
		e.mu.Unlock()
	}()
	return e.fakeExec.Run(ctx, req)
}

// TestGPUTasksShareNoGPU runs an agent of two slots on a device with one
// GPU: tasks of a gpu = "optional" job and of a gpu = true job never hold
// the GPU two at a time (each would have the donor's whole memory share of
// it); an optional task that finds it held computes on the CPU, a task
// that needs it waits for it.
func TestGPUTasksShareNoGPU(t *testing.T) {
	ex := &gpuShareExec{fakeExec: fakeExec{Delay: 100 * time.Millisecond}}
	runGPUAgent(t, mockNVML(), ex, 2, []string{"GPU-4090"},
		planJob(t, "squares-optional-gpu", 12, "redundancy = 1\nquorum = 1\n[requirements]\ngpu = \"optional\""),
		planJob(t, "squares-gpu", 6, "redundancy = 1\nquorum = 1\n[requirements]\ngpu = true"))
	ex.mu.Lock()
	defer ex.mu.Unlock()
	for _, w := range ex.wrong {
		t.Error(w)
	}
	if ex.most["GPU-4090"] != 1 {
		t.Errorf("at most %d tasks held GPU-4090 at once, want 1", ex.most["GPU-4090"])
	}
	if ex.withGPU < 6 {
		t.Errorf("%d runs had the GPU, want at least the 6 of the job that needs it", ex.withGPU)
	}
	t.Logf("%d runs on the GPU, %d on the CPU (the optional job's tasks that found the GPU held)", ex.withGPU, ex.withNone)
}

// twoGPUNVML is mockNVML with two GPUs: a small, old one first and the
// RTX 4090 second.
func twoGPUNVML() *mock.Interface {
	m := mockNVML()
	big, _ := m.DeviceGetHandleByIndex(0)
	small := &mock.Device{
		GetUUIDFunc: func() (string, nvml.Return) { return "GPU-1050", nvml.SUCCESS },
		GetNameFunc: func() (string, nvml.Return) { return "NVIDIA GeForce GTX 1050", nvml.SUCCESS },
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
			return nvml.Memory{Total: 4096 << 20, Free: 4000 << 20, Used: 96 << 20}, nvml.SUCCESS
		},
		GetUtilizationRatesFunc:         func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{Gpu: 1}, nvml.SUCCESS },
		GetTemperatureFunc:              func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 40, nvml.SUCCESS },
		GetPowerUsageFunc:               func() (uint32, nvml.Return) { return 10000, nvml.SUCCESS },
		GetCudaComputeCapabilityFunc:    func() (int, int, nvml.Return) { return 6, 1, nvml.SUCCESS },
		GetComputeRunningProcessesFunc:  func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS },
		GetGraphicsRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS },
	}
	m.DeviceGetCountFunc = func() (int, nvml.Return) { return 2, nvml.SUCCESS }
	m.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i == 0 {
			return small, nvml.SUCCESS
		}
		return big, nvml.SUCCESS
	}
	return m
}

// TestGPUTasksGetAGPUThatFits runs an agent on a device with a 4 GiB GPU
// of compute capability 6.1 listed first and a 24 GiB one of 8.9: tasks
// of jobs that need 8000 MiB of GPU memory or compute capability 8.0 are
// only ever given the GPU that has them.
func TestGPUTasksGetAGPUThatFits(t *testing.T) {
	ex := &recordExec{}
	memory := planJob(t, "squares-gpu-memory", 4, "redundancy = 1\nquorum = 1\n[requirements]\ngpu = true\ngpu_memory_mib = 8000")
	capability := planJob(t, "squares-gpu-capability", 4, "redundancy = 1\nquorum = 1\n[requirements]\ngpu = \"optional\"\ngpu_compute_capability = \"8.0\"")
	anyGPU := planJob(t, "squares-any-gpu", 2, "redundancy = 1\nquorum = 1\n[requirements]\ngpu = true")
	runGPUAgent(t, twoGPUNVML(), ex, 1, []string{"GPU-1050", "GPU-4090"}, memory, capability, anyGPU)
	for _, j := range []*job.Job{memory, capability} {
		for _, g := range ex.given(j) {
			if !slices.Equal(g, []string{"GPU-4090"}) {
				t.Errorf("a task of %s was given GPUs %v, want only GPU-4090", j.Manifest.Name, g)
			}
		}
	}
	for _, g := range ex.given(anyGPU) {
		if !slices.Equal(g, []string{"GPU-1050"}) {
			t.Errorf("a task of %s was given GPUs %v, want the first allowed GPU, GPU-1050", anyGPU.Manifest.Name, g)
		}
	}
}

// runGPUAgent runs a coordinator on 127.0.0.1 and one agent of slots
// slots on the mock NVML nv, whose policy allows gpus (all switched on,
// GPU programs allowed) and computes on ex, and runs the jobs there one
// after the other; each must verify every task.
func runGPUAgent(t *testing.T, nv *mock.Interface, ex pool.Executor, slots int, gpus []string, jobs ...*job.Job) {
	t.Helper()
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	lister := worker.NewGPUListerWith(nv)
	t.Cleanup(func() { lister.Close() })
	settings := idle.Defaults()
	settings.GPUs = map[string]idle.GPUSettings{}
	for _, g := range gpus {
		settings.GPUs[g] = idle.GPUSettings{Use: true}
	}
	dev := newDevice(t, nil)
	startAgentWith(t, co.url, dev, ex, func(c *agent.Config) {
		c.Slots = slots
		c.Offer = testOffers{settings: settings, prefs: offers.Preferences{Global: offers.PoolPreferences{Weight: 1, GPUPrograms: true}}}
		c.Signals = gpuSignals{agent.NVMLGPUs{Lister: lister}}
		c.Decide = computeOn(slots, gpus)
	})
	runJobs(t, co.url, jobs...)
}

// computeOn is a policy that always computes on cores cores with gpus.
func computeOn(cores int, gpus []string) func(idle.Signals, time.Time) idle.Decision {
	return func(idle.Signals, time.Time) idle.Decision {
		return idle.Decision{State: idle.StateComputing, Cores: cores, GPUs: gpus, Reason: "computing (test)"}
	}
}

// runJobs submits the jobs to the pool at url one after the other and
// follows each to its end; each must verify every task.
func runJobs(t *testing.T, url string, jobs ...*job.Job) {
	t.Helper()
	sub := newSubmitter(t, url, nil)
	for _, j := range jobs {
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
}
