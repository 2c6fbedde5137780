package energy

import (
	"context"
	"maps"
	"runtime"
	"slices"
	"sync"
	"time"
)

// Defaults of Config.
const (
	// DefaultPeriod is how often a Meter samples while tasks run: often
	// enough that a package counter (wrapping after about 262 kJ, some 45
	// minutes at 100 W) never wraps twice between samples, and that GPU
	// power readings follow a task's phases.
	DefaultPeriod = 10 * time.Second
	// DefaultRatedW is the processor's rated power (its TDP) assumed for
	// estimates when the donor set none: 65 W, the rating of most
	// desktop processors (laptops: 15 to 45 W; workstations: 125 W and
	// more).
	DefaultRatedW = 65
	// BaselineEvery is how often an idle Meter measures the idle
	// baseline again: two readings Period apart, once an hour.
	BaselineEvery = time.Hour
	// maxBaselineSpan: a longer interval may hide several wraps of a
	// package counter and never gives a baseline.
	maxBaselineSpan = 10 * time.Minute
)

// Config configures a Meter. Every field is optional.
type Config struct {
	// RAPL reads the CPU packages' energy: a *RAPL on Linux, an *EMI
	// on Windows; nil: CPU energy is estimated.
	RAPL CPUCounter
	// CPUProblem is why RAPL is nil (an *UnreadableError from
	// OpenRAPL; on Windows, the Energy Meter counters not exposed), for
	// CPUHow; nil when there is nothing to say.
	CPUProblem error
	// GPUs reads GPUs' energy; nil: a task's GPUs are not measured.
	GPUs GPUReader
	// PCIRoot is checked before GPUs are read (GPUsAsleep): PCIRoot, or
	// "" to skip the check.
	PCIRoot string
	// Proc is where processes' CPU times are read (ProcRoot), unless
	// Times is set; both unset: a task's CPU time is taken as its span
	// on one core, and its energy is estimated.
	Proc string
	// Times reads CPU times where there is no /proc (SystemCPUTimes on
	// Windows); nil: Proc.
	Times CPUTimes
	// PIDs returns this device's worker processes (worker.Pool.PIDs).
	PIDs func() []int
	// CPUs is the number of logical CPUs; 0: runtime.NumCPU.
	CPUs int
	// RatedW is the processor's rated power in watts, for estimates;
	// 0: DefaultRatedW.
	RatedW float64
	// Period is the sampling period while tasks run; 0: DefaultPeriod.
	Period time.Duration
	// Now is the clock; nil: time.Now.
	Now func() time.Time
	// Baselines keeps the idle baseline across restarts (see
	// BaselineStore); nil: it is measured afresh at each start.
	Baselines BaselineStore
}

// Figure is an amount of energy and how it was obtained.
type Figure struct {
	Joules float64 `json:"joules"`
	How    How     `json:"how"`
}

// GPUFigure is one GPU's share of a task's energy.
type GPUFigure struct {
	UUID string `json:"uuid"`
	Figure
}

// Usage is the energy one task added: its CPU share of the packages'
// energy above the idle baseline, and the energy of each GPU it was
// given above that GPU's idle draw, over Start..End.
type Usage struct {
	Start time.Time   `json:"start"`
	End   time.Time   `json:"end"`
	CPU   Figure      `json:"cpu"`
	GPUs  []GPUFigure `json:"gpus,omitempty"`
}

// Joules is the task's total.
func (u Usage) Joules() float64 {
	j := u.CPU.Joules
	for _, g := range u.GPUs {
		j += g.Joules
	}
	return j
}

// How is the least exact How of its parts.
func (u Usage) How() How {
	h := u.CPU.How
	for _, g := range u.GPUs {
		h = h.Worse(g.How)
	}
	return h
}

// acc is energy attributed so far, with how many intervals of each kind.
type acc struct {
	J               float64
	n, sampled, est int
}

func (a acc) since(b acc) (float64, How, bool) {
	n := a.n - b.n
	switch {
	case n <= 0:
		return 0, "", false
	case a.est > b.est:
		return a.J - b.J, Estimated, true
	case a.sampled > b.sampled:
		return a.J - b.J, Sampled, true
	}
	return a.J - b.J, Measured, true
}

type sample struct {
	at     time.Time
	pkg    []uint64 // nil: not read
	busy   time.Duration
	busyOK bool
	pids   map[int]time.Duration // nil: not read
	gpus   map[string]GPUReading
}

// Meter attributes energy to tasks (see the package doc). Create it with
// NewMeter; it is safe for concurrent use.
type Meter struct {
	cfg Config

	mu        sync.Mutex
	last      *sample
	cpuErr    error // the last failure to read the packages' counters
	idleW     float64
	idleKnown bool
	pid       map[int]*acc
	gpu       map[string]*acc
	gpuIdleW  map[string]float64
	gpuUse    map[string]int
	active    int
	powerW    float64 // what our tasks drew over the last interval
	powerHow  How
	wake      chan struct{}
	// baselineAt is when the baseline was last lowered; baselineDirty
	// says it changed since Config.Baselines last stored it.
	baselineAt    time.Time
	baselineDirty bool
}

// NewMeter returns a Meter; it samples on Start and Stop, and with Serve
// every Period while tasks run. It starts from the baseline
// cfg.Baselines stored, if one is younger than BaselineMaxAge.
func NewMeter(cfg Config) *Meter {
	switch r := cfg.RAPL.(type) { // a nil pointer is no counter
	case *RAPL:
		if r == nil {
			cfg.RAPL = nil
		}
	case *EMI:
		if r == nil {
			cfg.RAPL = nil
		}
	}
	if cfg.CPUs <= 0 {
		cfg.CPUs = runtime.NumCPU()
	}
	if cfg.RatedW <= 0 {
		cfg.RatedW = DefaultRatedW
	}
	if cfg.Period <= 0 {
		cfg.Period = DefaultPeriod
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	m := &Meter{cfg: cfg, pid: map[int]*acc{}, gpu: map[string]*acc{}, gpuIdleW: map[string]float64{},
		gpuUse: map[string]int{}, wake: make(chan struct{}, 1)}
	m.loadBaseline()
	return m
}

// CPUHow says how the CPU's energy is obtained now: Measured while the
// packages' counters read, else Estimated with the reason (an
// *UnreadableError when permission was refused; nil when no counter was
// configured).
func (m *Meter) CPUHow() (How, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.cfg.RAPL == nil:
		return Estimated, m.cfg.CPUProblem
	case m.cpuErr == nil:
		return Measured, nil
	}
	return Estimated, m.cpuErr
}

// Power returns what this device's running tasks drew over the last
// sampling interval, in watts, and how it is known; 0 and "" when no
// task runs.
func (m *Meter) Power() (float64, How) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.active == 0 {
		return 0, ""
	}
	return m.powerW, m.powerHow
}

// Task is one task being metered, from Meter.Start to Stop.
type Task struct {
	m     *Meter
	start time.Time
	gpus  []string
	pid0  map[int]acc
	gpu0  map[string]acc
	done  bool
}

// Start begins metering a task that will use gpus (NVML UUIDs; none for a
// CPU task): it samples now and wakes Serve.
func (m *Meter) Start(gpus []string) *Task {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, g := range gpus {
		m.gpuUse[g]++
	}
	m.active++
	now := m.sampleLocked()
	t := &Task{m: m, start: now, gpus: slices.Clone(gpus), pid0: map[int]acc{}, gpu0: map[string]acc{}}
	for pid, a := range m.pid {
		t.pid0[pid] = *a
	}
	for _, g := range gpus {
		if a := m.gpu[g]; a != nil {
			t.gpu0[g] = *a
		}
	}
	select {
	case m.wake <- struct{}{}:
	default:
	}
	return t
}

// Stop ends the task, which ran in the worker process pid (0: unknown),
// samples now and returns its Usage. Stopping twice returns a zero Usage.
func (t *Task) Stop(pid int) Usage {
	m := t.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if t.done {
		return Usage{}
	}
	now := t.endLocked()
	u := Usage{Start: t.start, End: now}
	var cur acc
	if a := m.pid[pid]; a != nil && pid != 0 {
		cur = *a
	}
	if j, how, ok := cur.since(t.pid0[pid]); ok {
		u.CPU = Figure{Joules: max(j, 0), How: how}
	} else {
		// No CPU time of the task's process was read: its span on one
		// core at the rated power per core.
		u.CPU = Figure{Joules: now.Sub(t.start).Seconds() * m.cfg.RatedW / float64(m.cfg.CPUs), How: Estimated}
	}
	u.GPUs = t.gpuUsage()
	return u
}

// endLocked marks t done, samples now and gives back its share of the
// meter's active tasks and GPUs; it returns the sample's time. m.mu is
// held.
func (t *Task) endLocked() time.Time {
	m := t.m
	t.done = true
	now := m.sampleLocked()
	m.active--
	for _, g := range t.gpus {
		if m.gpuUse[g]--; m.gpuUse[g] <= 0 {
			delete(m.gpuUse, g)
		}
	}
	return now
}

// StopAll ends the task as the work of all this device's worker
// processes together (a solo run, whose tasks use every worker), samples
// now and returns its Usage: the CPU energy attributed to every worker
// process over the span and each of its GPUs'. With no CPU time read, the
// CPU's part is the span on every CPU at the rated power, estimated.
// Stopping twice returns a zero Usage.
func (t *Task) StopAll() Usage {
	m := t.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if t.done {
		return Usage{}
	}
	now := t.endLocked()
	u := Usage{Start: t.start, End: now}
	read := false
	for pid, a := range m.pid {
		if j, how, ok := a.since(t.pid0[pid]); ok {
			u.CPU.Joules += max(j, 0)
			u.CPU.How = u.CPU.How.Worse(how)
			read = true
		}
	}
	if !read {
		u.CPU = Figure{Joules: now.Sub(t.start).Seconds() * m.cfg.RatedW, How: Estimated}
	}
	u.GPUs = t.gpuUsage()
	return u
}

// gpuUsage is the energy of the task's GPUs since it started. m.mu is
// held.
func (t *Task) gpuUsage() []GPUFigure {
	var out []GPUFigure
	for _, g := range t.gpus {
		var cur acc
		if a := t.m.gpu[g]; a != nil {
			cur = *a
		}
		if j, how, ok := cur.since(t.gpu0[g]); ok {
			out = append(out, GPUFigure{UUID: g, Figure: Figure{Joules: max(j, 0), How: how}})
		}
	}
	return out
}

// Serve samples every Period while tasks run, and nothing otherwise but
// a baseline measurement once every BaselineEvery (two readings Period
// apart), so that a device at rest spends nothing on it. It returns nil
// when ctx ends.
func (m *Meter) Serve(ctx context.Context) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	baseline := false // the next tick closes a baseline interval
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-m.wake:
		case <-timer.C:
		}
		m.mu.Lock()
		running := m.active > 0
		idleFor := m.cfg.Now().Sub(m.lastAt())
		switch {
		case running, baseline:
			m.sampleLocked()
			baseline = false
		case m.last == nil || idleFor >= BaselineEvery:
			m.sampleLocked()
			baseline = true
		}
		m.mu.Unlock()
		m.saveBaseline(ctx)
		switch {
		case running || baseline:
			timer.Reset(m.cfg.Period)
		default:
			timer.Reset(BaselineEvery)
		}
	}
}

func (m *Meter) lastAt() time.Time {
	if m.last == nil {
		return time.Time{}
	}
	return m.last.at
}

// sampleLocked reads every counter, attributes the interval since the
// last reading, and returns the reading's time.
func (m *Meter) sampleLocked() time.Time {
	cur := m.read()
	if m.last != nil {
		m.advance(m.last, cur)
	} else {
		// The meter's first reading, taken as a task starts (before
		// Serve's first): the GPUs' draw at rest all the same.
		for uuid, r := range cur.gpus {
			if r.HasPower {
				m.noteGPUIdle(uuid, r.PowerW)
			}
		}
	}
	m.last = cur
	return cur.at
}

// times is where CPU times are read: Config.Times, else Proc's; nil
// with neither.
func (m *Meter) times() CPUTimes {
	switch {
	case m.cfg.Times != nil:
		return m.cfg.Times
	case m.cfg.Proc != "":
		return procTimes(m.cfg.Proc)
	}
	return nil
}

func (m *Meter) read() *sample {
	s := &sample{at: m.cfg.Now()}
	if m.cfg.RAPL != nil {
		s.pkg, m.cpuErr = m.cfg.RAPL.Read()
	}
	if times := m.times(); times != nil {
		var err error
		s.busy, err = times.Busy()
		s.busyOK = err == nil
		if m.cfg.PIDs != nil {
			s.pids = map[int]time.Duration{}
			for _, pid := range m.cfg.PIDs() {
				if d, err := times.Process(pid); err == nil {
					s.pids[pid] = d
				}
			}
		}
	}
	if len(m.gpuUse) > 0 && m.cfg.GPUs != nil && !GPUsAsleep(m.cfg.PCIRoot) {
		uuids := slices.Sorted(maps.Keys(m.gpuUse))
		rs, _ := m.cfg.GPUs.ReadGPUs(uuids) // a GPU not read is missing: its interval is skipped
		s.gpus = map[string]GPUReading{}
		for _, r := range rs {
			s.gpus[r.UUID] = r
		}
	}
	return s
}

// advance attributes the energy between two readings.
func (m *Meter) advance(prev, cur *sample) {
	for uuid, r := range cur.gpus {
		if _, ok := prev.gpus[uuid]; !ok && r.HasPower {
			// The first reading of a GPU, as a task starts on it: its
			// idle draw.
			m.noteGPUIdle(uuid, r.PowerW)
		}
	}
	span := cur.at.Sub(prev.at)
	dt := span.Seconds()
	if dt <= 0 {
		return
	}
	var total float64
	how := How("")

	// The CPU time each of our processes spent in the interval.
	ours := map[int]time.Duration{}
	var oursSum time.Duration
	for pid, c := range cur.pids {
		d := c - prev.pids[pid] // a process new since prev: all its time is in the interval
		if d < 0 {
			d = c // the PID was reused
		}
		ours[pid] = d
		oursSum += d
	}
	for pid := range m.pid {
		if _, ok := cur.pids[pid]; !ok && cur.pids != nil {
			delete(m.pid, pid) // gone
		}
	}
	e, known := 0.0, false
	if prev.pkg != nil && cur.pkg != nil && prev.busyOK && cur.busyOK {
		e, known = m.cfg.RAPL.Interval(prev.pkg, cur.pkg)
	}
	if known {
		if oursSum <= span/100 && span <= maxBaselineSpan {
			// Nothing of ours ran: a baseline. The lowest seen is the
			// machine at rest; higher ones had other programs' load.
			if w := e / dt; !m.idleKnown || w < m.idleW {
				m.idleW, m.idleKnown = w, true
				m.baselineAt, m.baselineDirty = cur.at, true
			}
		}
		added := max(e-m.idleW*dt, 0)
		busy := max(cur.busy-prev.busy, oursSum)
		for pid, d := range ours {
			a := m.accFor(pid)
			a.n++
			if busy > 0 {
				j := added * float64(d) / float64(busy)
				a.J += j
				total += j
			}
		}
		if oursSum > 0 {
			how = Measured
		}
	} else {
		perCore := m.cfg.RatedW / float64(m.cfg.CPUs)
		for pid, d := range ours {
			a := m.accFor(pid)
			a.n++
			a.est++
			j := d.Seconds() * perCore
			a.J += j
			total += j
		}
		if oursSum > 0 {
			how = Estimated
		}
	}

	for uuid, r := range cur.gpus {
		p, ok := prev.gpus[uuid]
		if !ok {
			continue
		}
		var e float64
		var h How
		switch {
		case r.HasEnergy && p.HasEnergy:
			e, h = float64(CounterDelta(p.EnergyMJ, r.EnergyMJ, 0))/1000, Measured
		case r.HasPower && p.HasPower:
			e, h = (p.PowerW+r.PowerW)/2*dt, Sampled
		default:
			continue
		}
		if w, ok := m.gpuIdleW[uuid]; ok {
			e = max(e-w*dt, 0)
		}
		a := m.gpu[uuid]
		if a == nil {
			a = &acc{}
			m.gpu[uuid] = a
		}
		a.n++
		a.J += e
		if h == Sampled {
			a.sampled++
		}
		total += e
		how = how.Worse(h)
	}
	m.powerW, m.powerHow = total/dt, how
}

// noteGPUIdle keeps the lowest power a GPU drew before a task started on
// it: its idle draw.
func (m *Meter) noteGPUIdle(uuid string, w float64) {
	if old, ok := m.gpuIdleW[uuid]; !ok || w < old {
		m.gpuIdleW[uuid] = w
		m.baselineAt, m.baselineDirty = m.cfg.Now(), true
	}
}

func (m *Meter) accFor(pid int) *acc {
	a := m.pid[pid]
	if a == nil {
		a = &acc{}
		m.pid[pid] = a
	}
	return a
}
