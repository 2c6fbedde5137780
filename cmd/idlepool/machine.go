package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"idlepool/agent"
	"idlepool/energy"
	"idlepool/home"
	"idlepool/idle"
	"idlepool/worker"
)

// This file is `idlepool status` without a job (what this machine's
// signals are and what the policy decides from them) and `idlepool
// settings` (the owner's settings in the local store).

const machineStatusHelp = `Usage: idlepool status [--json]

Shows this machine as a donor: the signals the policy reads (input idle
time, other programs' CPU load, power, temperature, listed programs,
GPUs), the owner's hours, what the machine offers, and the decision with
its reason in words. The signals are sampled once, now; a running agent
decides from its own, continuous samples.

With --json it prints one JSON document:

  {
    "at": "2026-03-10T23:00:00+01:00",           when the signals were sampled
    "signals": {                                 each reading has "known" and,
      "input_idle_seconds": READING(number),     when known, "value" and
      "other_cpu_share": READING(number 0..1),   "source"; when unknown,
      "power": READING({"on_battery", "has_battery", "percent"}),
      "max_temperature_c": READING(number),      "error" says why
      "running": READING([program names]),
      "gpus": READING([{"index", "uuid", "name", "memory_total_mib",
               "memory_free_mib", "utilisation_share", "temperature_c",
               "power_w", "compute_capability", "other_processes",
               "other_memory_mib"}]),
      "cpus": number of logical CPUs
    },
    "in_hours": whether the schedule allows now,
    "decision": {"state": "computing"|"waiting"|"paused", "cores": N,
                 "gpus": [UUIDs], "reason": "words"},
    "capacity": what this machine offers (see idle.Capacity),
    "settings": the owner's settings (as 'idlepool settings --json'),
    "agent": what the running donor (idlepool join, or the tray app) is
             doing, from its local API: {"pool", "decision", "running",
             "pools": [{"url", "name", "slots", "running", "error"}],
             "energy": {"powerW", "how", "cpu", "problem", "hint"}, ...};
             absent when none runs
  }

Use 'idlepool status JOB --pool URL' for a job's progress in a pool.
`

// readingDoc is one reading in the JSON of `idlepool status`: Value and
// Source only when Known, Error only when not.
type readingDoc[T any] struct {
	Known  bool   `json:"known"`
	Value  *T     `json:"value,omitempty"`
	Source string `json:"source,omitempty"`
	Error  string `json:"error,omitempty"`
}

func readingOf[T, U any](r idle.Reading[T], conv func(T) U) readingDoc[U] {
	if !r.Known {
		return readingDoc[U]{Error: r.Err}
	}
	v := conv(r.Value)
	return readingDoc[U]{Known: true, Value: &v, Source: r.Source}
}

func same[T any](v T) T { return v }

type powerDoc struct {
	OnBattery  bool    `json:"on_battery"`
	HasBattery bool    `json:"has_battery"`
	Percent    float64 `json:"percent"`
}

type gpuDoc struct {
	Index             int     `json:"index"`
	UUID              string  `json:"uuid"`
	Name              string  `json:"name"`
	MemoryTotalMiB    int64   `json:"memory_total_mib"`
	MemoryFreeMiB     int64   `json:"memory_free_mib"`
	UtilisationShare  float64 `json:"utilisation_share"`
	TemperatureC      float64 `json:"temperature_c"`
	PowerW            float64 `json:"power_w"`
	ComputeCapability string  `json:"compute_capability"`
	OtherProcesses    []int   `json:"other_processes"`
	OtherMemoryMiB    int64   `json:"other_memory_mib"`
}

type signalsDoc struct {
	InputIdleSeconds readingDoc[float64]     `json:"input_idle_seconds"`
	OtherCPUShare    readingDoc[float64]     `json:"other_cpu_share"`
	Power            readingDoc[powerDoc]    `json:"power"`
	MaxTemperatureC  readingDoc[float64]     `json:"max_temperature_c"`
	Running          readingDoc[[]string]    `json:"running"`
	Games            readingDoc[[]idle.Game] `json:"games"`
	GPUs             readingDoc[[]gpuDoc]    `json:"gpus"`
	CPUs             int                     `json:"cpus"`
}

type decisionDoc struct {
	State  idle.State `json:"state"`
	Cores  int        `json:"cores"`
	GPUs   []string   `json:"gpus"`
	Reason string     `json:"reason"`
}

type machineDoc struct {
	At       time.Time     `json:"at"`
	Signals  signalsDoc    `json:"signals"`
	InHours  bool          `json:"in_hours"`
	Decision decisionDoc   `json:"decision"`
	Capacity idle.Capacity `json:"capacity"`
	Settings idle.Settings `json:"settings"`
	// Agent is the running donor's own status; nil when none answers.
	Agent *agent.AgentStatus `json:"agent,omitempty"`
}

func signalsOf(sig idle.Signals) signalsDoc {
	return signalsDoc{
		InputIdleSeconds: readingOf(sig.InputIdle, func(d time.Duration) float64 { return d.Seconds() }),
		OtherCPUShare:    readingOf(sig.OtherCPUShare, same[float64]),
		Power: readingOf(sig.Power, func(p idle.Power) powerDoc {
			return powerDoc{OnBattery: p.OnBattery, HasBattery: p.HasBattery, Percent: p.Percent}
		}),
		MaxTemperatureC: readingOf(sig.MaxTemperatureC, same[float64]),
		Running: readingOf(sig.Running, func(r []string) []string {
			if r == nil {
				return []string{}
			}
			return r
		}),
		Games: readingOf(sig.Games, func(g []idle.Game) []idle.Game {
			if g == nil {
				return []idle.Game{}
			}
			return g
		}),
		GPUs: readingOf(sig.GPUs, func(gs []idle.GPU) []gpuDoc {
			out := make([]gpuDoc, 0, len(gs))
			for _, g := range gs {
				out = append(out, gpuDoc{Index: g.Index, UUID: g.UUID, Name: g.Name, MemoryTotalMiB: g.MemoryTotalMiB,
					MemoryFreeMiB: g.MemoryFreeMiB, UtilisationShare: g.UtilisationShare, TemperatureC: g.TemperatureC,
					PowerW: g.PowerW, ComputeCapability: g.ComputeCapability,
					OtherProcesses: append([]int{}, g.OtherProcesses...), OtherMemoryMiB: g.OtherMemoryMiB})
			}
			return out
		}),
		CPUs: sig.CPUs,
	}
}

// loadSettings returns the owner's settings from the local store under
// dirs, or the defaults when there is no store yet (without creating
// one).
func loadSettings(ctx context.Context, dirs home.Dirs) (idle.Settings, error) {
	if _, err := os.Stat(filepath.Join(dirs.Data, "local.db")); err != nil {
		return idle.Defaults(), nil
	}
	local, err := openLocal(dirs)
	if err != nil {
		return idle.Settings{}, err
	}
	defer local.Close()
	s, err := local.Settings(ctx)
	if err != nil {
		return s, &userError{Msg: fmt.Sprintf("the saved settings are unusable: %v", err),
			Hint: "'idlepool settings reset' goes back to the defaults", Cause: err}
	}
	return s, nil
}

// cmdMachineStatus is `idlepool status` without a job.
func cmdMachineStatus(ctx context.Context, g *globals, asJSON bool) error {
	dirs, err := g.dirs()
	if err != nil {
		return err
	}
	s, err := loadSettings(ctx, dirs)
	if err != nil {
		return err
	}
	sources := idle.DefaultSources(s.SourceOptions())
	gpus := worker.NewGPULister()
	defer gpus.Close()
	sources.GPU = agent.NVMLGPUs{Lister: gpus}
	sampler := idle.NewSampler(idle.SamplerConfig{Sources: sources, Programs: s.PauseFor, GameSigns: s.Signs()})
	defer sampler.Close()
	sig := sampler.Sample(ctx)
	now := g.now()
	d, _ := idle.Decide(s, sig, now, 0, idle.PolicyState{})
	m, err := idle.ReadMachine(ctx)
	if err != nil {
		g.logger().Debug("Machine partly unknown", "err", err)
	}
	c := idle.NewCapacity(m, s, sig.GPUs)
	var running *agent.AgentStatus
	actx, cancel := context.WithTimeout(ctx, 3*time.Second)
	if st, err := agent.ReadStatus(actx, filepath.Join(dirs.Data, agent.LocalAPIFile)); err == nil {
		running = &st
	} else if !errors.Is(err, agent.ErrNoAgent) {
		g.logger().Debug("The running donor's status is unreadable", "err", err)
	}
	cancel()
	c = alwaysCapacity(c, running)
	if d.Finishing && (running == nil || len(running.Running) == 0) {
		// Finish, then pause: nothing is in hand, so it is paused.
		d = idle.Decision{State: idle.StatePaused, Reason: agent.FinishedReason, Hold: idle.HoldOwner}
	}
	if asJSON {
		doc := machineDoc{At: sig.At, Signals: signalsOf(sig), InHours: s.Schedule.Allows(now, s.Location()),
			Decision: decisionDoc{State: d.State, Cores: d.Cores, GPUs: append([]string{}, d.GPUs...), Reason: d.Reason},
			Capacity: c, Settings: s, Agent: running}
		b, err := json.MarshalIndent(doc, "", "  ")
		if err != nil {
			return fmt.Errorf("encode status: %w", err)
		}
		fmt.Fprintf(g.stdout, "%s\n", b)
		return nil
	}
	printMachine(g.stdout, s, sig, d, c, now, noIdlePolicy(running))
	printAgent(g.stdout, running, now)
	return nil
}

// printAgent writes what the running donor is doing, or that none runs
// (that no pool answers, when none does), each pool with its connection
// state, its notices (a clock off the pool's, tasks abandoned; times in the local zone, now being the wall clock) and its
// cache's use.
func printAgent(w io.Writer, st *agent.AgentStatus, now time.Time) {
	if st == nil {
		fmt.Fprintf(w, "%-12s %s\n", "donor", "not running (start it with 'idlepool join' or the tray app)")
		return
	}
	what := st.Decision.Reason
	if what == "" {
		what = "starting"
	}
	if st.AllUnreachable() { // nothing can be leased, whatever the decision
		p := st.PoolsNow()[0]
		what = "no pool answers: " + p.Label() + ": " + p.Connection(time.Local, now)
	}
	if st.Store.Message != "" { // the local store takes no writes: no new task
		what = st.Store.Message
	}
	fmt.Fprintf(w, "%-12s %s; %s held\n", "donor", what, plural(int64(len(st.Running)), "task"))
	if st.Store.Recovered != "" {
		fmt.Fprintf(w, "%-12s %s\n", "  store", st.Store.Recovered)
	}
	quiet := *st // the pool lines say which pools cannot be reached
	quiet.UnreachableSince = time.Time{}
	quiet.Pools = slices.Clone(st.Pools)
	for i := range quiet.Pools {
		quiet.Pools[i].UnreachableSince = time.Time{}
	}
	for _, p := range st.PoolsNow() {
		name := p.URL
		if p.Name != "" {
			name = p.Name + " (" + p.URL + ")"
		}
		state := plural(int64(p.Slots), "worker") + ", " + plural(int64(p.Running), "task") + ", " + p.Connection(time.Local, now)
		if p.Error != "" {
			state = p.Error
		}
		fmt.Fprintf(w, "%-12s %s: %s\n", "  pool", name, state)
		if p.Peers != nil && p.Error == "" {
			fmt.Fprintf(w, "%-12s %s\n", "    peers", p.Peers.Words())
		}
	}
	for _, n := range quiet.Notices(time.Local, now) {
		fmt.Fprintf(w, "%-12s %s\n", "  note", n)
	}
	if st.Cache != nil {
		fmt.Fprintf(w, "%-12s %s\n", "cache", st.Cache.Words())
	}
	if st.Energy != nil {
		fmt.Fprintf(w, "%-12s %s\n", "energy", st.Energy.Words())
	}
}

// noIdlePolicy reports whether the running donor st computes without an
// idle policy (`idlepool join --always`): it has decided, and says so
// (AgentStatus.Always), or decided from no signals (a donor of an
// earlier version, whose agents had no Signaller). False when none runs
// or it has not decided yet.
func noIdlePolicy(st *agent.AgentStatus) bool {
	return st != nil && st.Decision.State != "" && (st.Always || st.Signals.At.IsZero())
}

// alwaysCapacity is what a running donor without an idle policy (join
// --always, see noIdlePolicy) offers, as it says to the pools: any hour,
// and the cores of its slots (at most the logical CPUs), whatever the
// settings say; c unchanged for any other donor, or none.
func alwaysCapacity(c idle.Capacity, running *agent.AgentStatus) idle.Capacity {
	if !noIdlePolicy(running) {
		return c
	}
	c.Schedule = idle.Schedule{}
	if running.Slots > 0 {
		c.Cores = max(1, min(running.Slots, c.LogicalCPUs))
	}
	return c
}

// printMachine writes the status as aligned lines a person reads. With
// always (the running donor has no idle policy, see noIdlePolicy) the
// settings' decision d does not apply now: the decision line says so,
// and no hint about the settings is given.
func printMachine(w io.Writer, s idle.Settings, sig idle.Signals, d idle.Decision, c idle.Capacity, now time.Time, always bool) {
	line := func(label, format string, args ...any) {
		fmt.Fprintf(w, "%-12s %s\n", label, fmt.Sprintf(format, args...))
	}
	model := c.CPUModel
	if model == "" {
		model = "CPU model unknown"
	}
	line("machine", "%s/%s, %s, %d logical CPUs, %s memory", c.OS, c.Arch, model, c.LogicalCPUs, mib(c.MemoryTotalMiB))

	if r := sig.InputIdle; r.Known {
		line("input idle", "%s (%s); starting needs %s", r.Value.Truncate(time.Second), r.Source, idleNeed(s))
	} else {
		line("input idle", "unknown: %s", r.Err)
	}

	if r := sig.OtherCPUShare; r.Known {
		line("CPU load", "other programs %.0f%% of %d CPUs (limit %.0f%%)", r.Value*100, sig.CPUs, s.MaxOtherCPUShare*100)
	} else {
		line("CPU load", "unknown: %s", r.Err)
	}

	if r := sig.Power; r.Known {
		p := r.Value
		switch {
		case p.OnBattery:
			line("power", "on battery, %.0f%%%s", p.Percent, batteryRule(s))
		case p.HasBattery:
			line("power", "AC, battery %.0f%%", p.Percent)
		default:
			line("power", "AC (no battery)")
		}
	} else {
		line("power", "unknown: %s", r.Err)
	}

	ceiling := "no ceiling"
	if s.MaxTemperatureC > 0 {
		ceiling = fmt.Sprintf("ceiling %.0f °C", s.MaxTemperatureC)
	}
	if r := sig.MaxTemperatureC; r.Known {
		line("temperature", "%.0f °C (%s)", r.Value, ceiling)
	} else {
		line("temperature", "unknown: %s (%s)", r.Err, ceiling)
	}

	switch r := sig.Running; {
	case len(s.PauseFor) == 0:
		line("programs", "none listed to pause for")
	case !r.Known:
		line("programs", "unknown: %s (listed: %s)", r.Err, strings.Join(s.PauseFor, ", "))
	case len(r.Value) == 0:
		line("programs", "none of %s running", strings.Join(s.PauseFor, ", "))
	default:
		line("programs", "running: %s", strings.Join(r.Value, ", "))
	}

	switch r := sig.Games; {
	case len(s.Signs()) == 0:
		line("games", "not looked for (pause_for_games off)")
	case len(r.Value) > 0:
		var what []string
		for _, g := range r.Value {
			what = append(what, g.What)
		}
		line("games", "running: %s", strings.Join(what, ", "))
	case !r.Known:
		line("games", "unknown: %s", r.Err)
	default:
		line("games", "none seen (%s)", gameSignsText(s))
	}

	if r := sig.GPUs; !r.Known {
		line("GPUs", "none usable: %s", r.Err)
	} else if len(r.Value) == 0 {
		line("GPUs", "none")
	} else {
		for i, gp := range r.Value {
			label := ""
			if i == 0 {
				label = "GPUs"
			}
			use := "not enabled"
			if s.GPUs[gp.UUID].Use {
				use = "enabled"
			}
			line(label, "%d %s (%s), %s memory, %.0f%% busy, %.0f °C, %d other processes; %s",
				gp.Index, gp.Name, gp.UUID, mib(gp.MemoryTotalMiB), gp.UtilisationShare*100, gp.TemperatureC, len(gp.OtherProcesses), use)
		}
	}

	loc := s.Location()
	switch {
	case always && len(s.Schedule) > 0:
		line("hours", "%s (%s); the running donor does not keep to them (join --always)", s.Schedule, zoneName(s, c))
	case len(s.Schedule) == 0:
		line("hours", "any time")
	case s.Schedule.Allows(now, loc):
		line("hours", "%s (%s); inside them now", s.Schedule, zoneName(s, c))
	default:
		line("hours", "%s (%s); outside them now", s.Schedule, zoneName(s, c))
	}

	gpuOffer := "no GPU"
	if len(c.GPUs) > 0 {
		var names []string
		for _, o := range c.GPUs {
			names = append(names, fmt.Sprintf("%s with %s", o.Name, mib(o.MemoryMiB)))
		}
		gpuOffer = strings.Join(names, ", ")
	}
	line("offers", "%d of %d cores, %s of %s memory, %s", c.Cores, c.LogicalCPUs, mib(c.MemoryMiB), mib(c.MemoryTotalMiB), gpuOffer)
	if always {
		line("decision", "the running donor computes at any time (join --always); without it your settings would say: %s", d.Reason)
		return
	}
	line("decision", "%s", d.Reason)
	if waitsForUnknownIdle(s, sig, d) {
		fmt.Fprintln(w, "hint: "+unknownIdleHint)
	}
}

// unknownIdleHint tells the owner of a machine whose input idle time no
// source can tell (waitsForUnknownIdle) how to let it compute.
const unknownIdleHint = `no source tells this machine's input idle time (no display, no session, no readable input devices);
      on a headless machine 'idlepool settings set idle_for=0' computes without looking at input`

// waitsForUnknownIdle reports whether decision d, made under settings s
// from sig, waits for an input idle time that no source of this machine
// can tell: a wait that never ends on a headless machine.
func waitsForUnknownIdle(s idle.Settings, sig idle.Signals, d idle.Decision) bool {
	return !sig.InputIdle.Known && s.IdleFor > 0 && d.State == idle.StateWaiting && strings.Contains(d.Reason, "idle time unknown")
}

func idleNeed(s idle.Settings) string {
	if s.IdleFor == 0 {
		return "no idle time (idle_for 0)"
	}
	return idle.DurationText(s.IdleFor) + " idle"
}

func batteryRule(s idle.Settings) string {
	switch {
	case s.PauseOnBattery:
		return " (you pause on battery)"
	case s.MinBatteryPercent > 0:
		return fmt.Sprintf(" (you compute on battery above %.0f%%)", s.MinBatteryPercent)
	}
	return " (you compute on battery)"
}

func zoneName(s idle.Settings, c idle.Capacity) string {
	if s.TimeZone != "" {
		return s.TimeZone
	}
	return c.TimeZone
}

// mib writes a MiB count as "23.5 GiB" or "512 MiB".
func mib(n int64) string {
	if n >= 1024 {
		return fmt.Sprintf("%.1f GiB", float64(n)/1024)
	}
	return fmt.Sprintf("%d MiB", n)
}

const settingsHelp = `Usage:
  idlepool settings [--json]            show the settings
  idlepool settings set KEY=VALUE ...   change some, checked before saving
  idlepool settings reset               go back to the defaults

The owner's rules for when and how much this machine computes, kept in the
local store under --home; 'idlepool status' shows what they decide now.

Keys:
`

func cmdSettings(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("idlepool settings", flag.ContinueOnError)
	fs.SetOutput(g.stderr)
	fs.Usage = func() {
		fmt.Fprint(g.stderr, settingsHelp)
		for _, k := range idle.SettingKeys {
			fmt.Fprintf(g.stderr, "  %-26s %s\n", k.Key, k.Takes)
		}
		fmt.Fprintf(g.stderr, "\nExample: idlepool settings set 'hours=Mon-Fri 22:00-07:00; Sat,Sun' cores=75%% idle_for=10m\n\nFlags:\n")
		fs.PrintDefaults()
	}
	g.register(fs)
	asJSON := fs.Bool("json", false, "print the settings as one JSON document")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	dirs, err := g.dirs()
	if err != nil {
		return err
	}
	var s idle.Settings
	switch {
	case len(pos) == 0:
		if s, err = loadSettings(ctx, dirs); err != nil {
			return err
		}
	case pos[0] == "set":
		if len(pos) == 1 {
			fs.Usage()
			return &userError{Msg: "settings set needs at least one KEY=VALUE", Hint: "idlepool settings set cores=4", Cause: errUsage}
		}
		if s, err = updateSettings(ctx, dirs, pos[1:], g.now()); err != nil {
			return err
		}
		g.tellAgent(ctx, dirs)
	case pos[0] == "reset" && len(pos) == 1:
		local, err := openLocal(dirs)
		if err != nil {
			return err
		}
		defer local.Close()
		s = idle.Defaults()
		if err := local.SaveSettings(ctx, s); err != nil {
			return err
		}
		g.tellAgent(ctx, dirs)
	default:
		fs.Usage()
		return &userError{Msg: fmt.Sprintf("settings: unknown subcommand %q", pos[0]), Hint: "'idlepool settings', 'idlepool settings set KEY=VALUE ...' or 'idlepool settings reset'", Cause: errUsage}
	}
	if *asJSON {
		b, err := json.MarshalIndent(s, "", "  ")
		if err != nil {
			return fmt.Errorf("encode settings: %w", err)
		}
		fmt.Fprintf(g.stdout, "%s\n", b)
		return nil
	}
	printSettings(g.stdout, s)
	return nil
}

// tellAgent asks the engine running on this machine (the tray's or
// `idlepool join`'s), if one runs, to read the owner's settings and
// preferences now (agent.AskReload), so that a change takes effect at its
// next sample (a pause within a second) instead of at its next periodic
// read, as the tray's own changes do. With no engine running nothing is
// said: the next start reads the store. An engine that does not take it
// is named on stderr; the change is saved either way.
func (g *globals) tellAgent(ctx context.Context, dirs home.Dirs) {
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	err := agent.AskReload(actx, filepath.Join(dirs.Data, agent.LocalAPIFile))
	if err != nil && !errors.Is(err, agent.ErrNoAgent) {
		fmt.Fprintf(g.stderr, "idlepool: saved, but the running agent did not take the change at once (%v); it reads it within a minute\n", err)
	}
}

// updateSettings applies KEY=VALUE pairs in one transaction: all are
// saved, or none when one is wrong.
func updateSettings(ctx context.Context, dirs home.Dirs, pairs []string, now time.Time) (idle.Settings, error) {
	local, err := openLocal(dirs)
	if err != nil {
		return idle.Settings{}, err
	}
	defer local.Close()
	var keys []string
	for _, k := range idle.SettingKeys {
		keys = append(keys, k.Key)
	}
	hint := "keys: " + strings.Join(keys, ", ") + " (see 'idlepool settings --help')"
	s, err := local.UpdateSettings(ctx, func(s *idle.Settings) error {
		for _, kv := range pairs {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return &userError{Msg: fmt.Sprintf("%q is not KEY=VALUE", kv), Hint: hint, Cause: errUsage}
			}
			k = strings.TrimSpace(k)
			if err := s.Set(k, v, now); err != nil {
				if errors.Is(err, idle.ErrUnknownSetting) {
					return &userError{Msg: fmt.Sprintf("unknown setting %q", k), Hint: hint, Cause: errors.Join(errUsage, err)}
				}
				// The key is right; the message says what its value wants.
				return &userError{Msg: err.Error(), Cause: errors.Join(errUsage, err)}
			}
			if k != "cores" {
				continue
			}
			// A count typed here is for this machine: more than it has is
			// a mistake (a stored one from elsewhere is capped instead).
			if err := s.ValidateFor(runtime.NumCPU()); err != nil {
				return &userError{Msg: err.Error(), Hint: fmt.Sprintf("idlepool settings set cores=%d, or a share such as cores=75%%", runtime.NumCPU()), Cause: errors.Join(errUsage, err)}
			}
		}
		return nil
	})
	if err != nil {
		if _, ok := errors.AsType[*userError](err); ok {
			return s, err
		}
		return s, &userError{Msg: fmt.Sprintf("settings not saved: %v", err), Hint: hint, Cause: errors.Join(errUsage, err)}
	}
	return s, nil
}

// gameSignsText says which signs of a game running the settings look
// for: "fullscreen, gamemode, steam", "fullscreen; off: steam", "off".
func gameSignsText(s idle.Settings) string {
	var on, off []string
	signs := s.Signs()
	for _, g := range idle.GameSigns {
		if slices.Contains(signs, g) {
			on = append(on, string(g))
		} else {
			off = append(off, string(g))
		}
	}
	switch {
	case len(on) == 0:
		return "off"
	case len(off) == 0:
		return strings.Join(on, ", ")
	}
	return strings.Join(on, ", ") + "; off: " + strings.Join(off, ", ")
}

// printSettings writes the settings as KEY VALUE lines, with the keys
// 'idlepool settings set' takes.
func printSettings(w io.Writer, s idle.Settings) {
	line := func(key, format string, args ...any) {
		fmt.Fprintf(w, "%-17s %s\n", key, fmt.Sprintf(format, args...))
	}
	tz := s.TimeZone
	if tz == "" {
		tz = "local (" + time.Local.String() + ")"
	}
	line("hours", "%s", s.Schedule)
	line("time_zone", "%s", tz)
	switch {
	case s.Cores > 0:
		line("cores", "%d", s.Cores)
	case s.CoresShare > 0:
		line("cores", "%.0f%% of the logical CPUs", s.CoresShare*100)
	default:
		line("cores", "default: all but one")
	}
	if s.CPUTimeShare > 0 {
		line("cpu_time", "%.0f%% of the time on each core", s.CPUTimeShare*100)
	} else {
		line("cpu_time", "full")
	}
	if s.NoIdlePriority {
		line("idle_priority", "false: tasks run at a low priority")
	} else {
		line("idle_priority", "true: tasks run only at the system's idle priority")
	}
	line("memory", "%.0f%%", s.MemoryShare*100)
	line("idle_for", "%s", s.IdleFor)
	line("remote_input", "%t", s.RemoteInput)
	line("max_other_cpu", "%.0f%%", s.MaxOtherCPUShare*100)
	line("pause_on_battery", "%t", s.PauseOnBattery)
	if s.MinBatteryPercent > 0 {
		line("min_battery", "%.0f%%", s.MinBatteryPercent)
	} else {
		line("min_battery", "none")
	}
	if len(s.PauseFor) > 0 {
		line("pause_for", "%s", strings.Join(s.PauseFor, ","))
	} else {
		line("pause_for", "none")
	}
	line("pause_for_games", "%s", gameSignsText(s))
	if s.MaxTemperatureC > 0 {
		line("max_temperature", "%.0f °C", s.MaxTemperatureC)
	} else {
		line("max_temperature", "none")
	}
	if s.CacheMiB > 0 {
		line("cache", "%s", mib(s.CacheMiB))
	} else {
		line("cache", "default: %s", mib(idle.DefaultCacheMiB))
	}
	if s.ShareDiskMiB > 0 {
		line("share_disk", "%s", mib(s.ShareDiskMiB))
	} else {
		line("share_disk", "default: %s", mib(idle.DefaultShareDiskMiB))
	}
	line("share_peers", "%t", !s.NoSharePeers)
	switch {
	case s.ShareUploadKiBps == idle.ShareUploadUnlimited:
		line("share_upload", "unlimited")
	case s.ShareUploadKiBps > 0:
		line("share_upload", "%s/s", agent.ByteSize(s.ShareUploadBytesPerSecond()))
	default:
		line("share_upload", "default: %s/s", agent.ByteSize(s.ShareUploadBytesPerSecond()))
	}
	line("updates", "%t", !s.NoUpdates)
	if s.UpdateURL != "" {
		line("update_url", "%s", s.UpdateURL)
	} else {
		line("update_url", "default: the package's, or none")
	}
	switch {
	case s.UpdateKiBps == idle.ShareUploadUnlimited:
		line("update_download", "unlimited")
	case s.UpdateKiBps > 0:
		line("update_download", "%s/s", agent.ByteSize(int64(s.UpdateBytesPerSecond())))
	default:
		line("update_download", "default: %s/s", agent.ByteSize(int64(s.UpdateBytesPerSecond())))
	}
	if s.Tariff.IsSet() {
		line("tariff", "%s per kWh", s.Tariff)
	} else {
		line("tariff", "none: no money shown")
	}
	if s.CO2GramsPerKWh > 0 {
		line("co2", "%g g/kWh", s.CO2GramsPerKWh)
	} else {
		line("co2", "default: %d g/kWh, the %s", energy.DefaultCO2GramsPerKWh, energy.CO2Source)
	}
	if s.CPURatedW > 0 {
		line("cpu_rated_w", "%g W", s.CPURatedW)
	} else {
		line("cpu_rated_w", "default: %d W (for estimates only)", energy.DefaultRatedW)
	}
	capText := func(kWh float64) string {
		if kWh > 0 {
			return fmt.Sprintf("%g kWh", kWh)
		}
		return "none"
	}
	line("energy_day", "%s", capText(s.EnergyDayKWh))
	line("energy_month", "%s", capText(s.EnergyMonthKWh))
	if s.MaxPricePerKWh > 0 {
		line("max_price", "%g %s per kWh", s.MaxPricePerKWh, s.Tariff.Currency)
	} else {
		line("max_price", "none")
	}
	if len(s.QuietHours) > 0 {
		line("quiet_hours", "%s", s.QuietHours)
	} else {
		line("quiet_hours", "none")
	}
	switch {
	case s.FinishThenPause:
		line("pause", "finish: the tasks in hand finish, then paused until pause=off")
	case s.PausedUntil.IsZero():
		line("pause", "off")
	default:
		line("pause", "until %s", s.PausedUntil.In(s.Location()).Format("Mon 2 Jan 2006 15:04 MST"))
	}
	if s.ComputeUntil.IsZero() {
		line("compute", "off: your hours and the idle wait apply")
	} else {
		line("compute", "now, until %s", s.ComputeUntil.In(s.Location()).Format("Mon 2 Jan 2006 15:04 MST"))
	}
	line("compute_during_programs", "%t", s.ComputeDuringPrograms)
	uuids := slices.Sorted(maps.Keys(s.GPUs))
	if len(uuids) == 0 {
		line("gpus", "none enabled")
	}
	for _, u := range uuids {
		gs := s.GPUs[u]
		ceiling, other, memory := "none", percentText(idle.DefaultGPUMaxOtherShare), percentText(idle.DefaultGPUMemoryShare)
		if gs.MaxTemperatureC > 0 {
			ceiling = fmt.Sprintf("%.0f °C", gs.MaxTemperatureC)
		}
		if gs.MaxOtherShare > 0 {
			other = percentText(gs.MaxOtherShare)
		}
		if gs.MemoryShare > 0 {
			memory = percentText(gs.MemoryShare)
		}
		line("gpu."+u, "use=%t memory=%s max_temperature=%s max_other=%s", gs.Use, memory, ceiling, other)
	}
}

func percentText(share float64) string { return fmt.Sprintf("%.0f%%", share*100) }
