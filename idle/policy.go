package idle

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// LoadHold is how long other programs' CPU load must stay above
// Settings.MaxOtherCPUShare before computing steps aside, and below it
// before computing resumes: a 2-second spike every 30 s changes nothing.
// The first call of a fresh PolicyState takes the reading as it is (a
// one-shot `idlepool status`, an agent starting on a busy machine).
const LoadHold = 3 * time.Second

// TemperatureMarginC is the hysteresis of temperature ceilings: above a
// ceiling computing (or a GPU) waits until the temperature has fallen
// this many °C below it.
const TemperatureMarginC = 5

// GameHold is how long a game seen last is still taken as running while
// every reading since has been unknown (a hung X server, a broken bus):
// long enough to ride out a probe that hangs once, short enough that a
// sign that stays broken does not pause computing for good.
const GameHold = 30 * time.Second

// PolicyState is what Decide remembers between calls: the timers of the
// idle countdown, the load hysteresis and the owner's pause, all on the
// monotonic clock, and the last known power state and listed programs
// for when a probe does not answer. The zero value is a fresh start.
// Callers keep the state Decide returns and pass it to the next call; it
// is only meaningful with mono readings from the same clock (one
// process). Fields are exported for tests and diagnostics; treat them as
// read-only.
type PolicyState struct {
	Seen bool          // Decide has run before
	Mono time.Duration // the mono reading of the last call

	// ActiveAt is the mono reading when the owner last gave input, as
	// far as any reading has shown (a later reading that claims a longer
	// idle time does not move it back).
	ActiveAt    time.Duration
	ActiveKnown bool

	// Busy is whether other programs' load counts as too high; since
	// CrossSince (when Crossing) the readings have been on the other side
	// of the limit.
	Busy       bool
	Crossing   bool
	CrossSince time.Duration

	// Hot is whether the CPU is above its ceiling and not yet cooled by
	// TemperatureMarginC; GPUHot the same per GPU UUID.
	Hot    bool
	GPUHot map[string]bool

	// PauseFrom is the Settings.PausedUntil that PauseEnd, a mono
	// deadline, was made from. A PausedUntil that differs is a new
	// pause. PauseOver reports that the owner's pause has run out by the
	// monotonic clock, so that a caller holding the settings store may
	// clear PausedUntil.
	PauseFrom time.Time
	PauseEnd  time.Duration
	PauseOver bool

	// ComputeFrom, ComputeEnd and ComputeOver are the same for the
	// owner's compute now (Settings.ComputeUntil).
	ComputeFrom time.Time
	ComputeEnd  time.Duration
	ComputeOver bool

	// Power and Running are the last known readings (PowerKnown,
	// RunningKnown say whether there was one), used while a probe's
	// reading is unknown.
	Power        Power
	PowerKnown   bool
	Running      []string
	RunningKnown bool

	// Games are the games (of the signs switched on) last seen, at
	// GamesAt, a mono reading; GameSeen says whether one was ever seen.
	// After the last one ends, computing waits Settings.IdleFor from
	// GamesAt, as after the owner's input.
	Games    []Game
	GamesAt  time.Duration
	GameSeen bool
}

// Decide turns the owner's settings and the signals sampled at wall-clock
// time now into a decision, and the state for the next call. mono is a
// monotonic clock reading (e.g. time.Since of a fixed start, or
// time.Now().Sub(start) — both use Go's monotonic clock) that only moves
// forward; every timer — the idle countdown, the owner's pause, the load
// hysteresis — runs on it, so moving the wall clock by days neither ends
// nor stretches a wait. Only the schedule reads the wall clock, in the
// settings' time zone, as it must. Decide is pure: the same arguments
// give the same result. A mono reading below the previous one (another
// process's clock) starts from a fresh state.
//
// The first reason that applies wins, in this order: the owner's pause;
// a listed program or a game (a GameSign switched on) running, named
// together; outside the schedule; on battery (or below its minimum); the
// CPU above its ceiling; a game seen less than IdleFor ago; the owner's
// input not idle long enough, or its idle time unknown; other programs'
// CPU load. Each reason carries its coarse Hold (Decision.Hold), what a
// capacity offer publishes: the owner's pause, programs, games, input and
// other programs' load are HoldOwner, the schedule HoldHours, the battery
// HoldBattery and the temperature ceiling HoldLimit.
// The owner's compute now (Settings.ComputeUntil, until it runs out on
// the monotonic clock) skips the schedule, the idle wait (and the wait
// after a game) and the load, and the listed programs and games too when
// Settings.ComputeDuringPrograms: the owner at the machine asked for it;
// the battery and the temperature ceilings, which protect the hardware,
// still apply, and a wait for them says that compute now waits.
// Settings.FinishThenPause decides as usual but marks the decision
// Finishing (no new tasks; once none is in hand, the caller pauses).
// Otherwise it computes on Settings.CoresFor(sig.CPUs) cores and the GPUs
// the settings allow and that are neither too hot nor busy with another
// process, naming each GPU skipped and why.
//
// Unknown readings (a failed or hung probe):
//   - input idle time unknown is not idle: wait (unless IdleFor is 0),
//     naming the reading's Err when it is one source's reason and saying
//     "no input source works" when several failed;
//   - power unknown: the last known state holds; never known: assume AC,
//     and say so;
//   - listed programs unknown: the last known list holds; never known:
//     none, and say so;
//   - games unknown (a sign asked failed): the games the other signs saw,
//     or the last ones seen for GameHold; otherwise none, and say so;
//   - CPU load unknown counts as below the limit, temperature unknown as
//     below the ceiling (a dead sensor must not stop computing forever),
//     and the reason says so;
//   - GPUs unknown (no NVIDIA driver, built without NVML): compute on the
//     CPU only, and say so when a GPU is enabled.
func Decide(s Settings, sig Signals, now time.Time, mono time.Duration, prev PolicyState) (Decision, PolicyState) {
	st := prev
	if !st.Seen || mono < st.Mono {
		st = PolicyState{}
	}
	fresh := !st.Seen
	st.Seen, st.Mono = true, mono
	loc := s.Location()

	// Update every timer and remembered reading first, so that they keep
	// running whatever reason wins below.

	// The owner's pause, turned into a monotonic deadline once.
	switch {
	case s.PausedUntil.IsZero():
		st.PauseFrom, st.PauseEnd, st.PauseOver = time.Time{}, 0, false
	case !s.PausedUntil.Equal(st.PauseFrom):
		st.PauseFrom, st.PauseEnd = s.PausedUntil, mono+s.PausedUntil.Sub(now)
	}
	paused := !st.PauseFrom.IsZero() && mono < st.PauseEnd
	st.PauseOver = !st.PauseFrom.IsZero() && !paused

	// The owner's compute now, likewise.
	switch {
	case s.ComputeUntil.IsZero():
		st.ComputeFrom, st.ComputeEnd, st.ComputeOver = time.Time{}, 0, false
	case !s.ComputeUntil.Equal(st.ComputeFrom):
		st.ComputeFrom, st.ComputeEnd = s.ComputeUntil, mono+s.ComputeUntil.Sub(now)
	}
	forced := !st.ComputeFrom.IsZero() && mono < st.ComputeEnd && !paused
	st.ComputeOver = !st.ComputeFrom.IsZero() && mono >= st.ComputeEnd

	// The idle countdown: the latest input any reading has shown.
	if sig.InputIdle.Known {
		at := mono - max(sig.InputIdle.Value, 0)
		if !st.ActiveKnown || at > st.ActiveAt {
			st.ActiveAt = at
		}
		st.ActiveKnown = true
	}

	// Other programs' load, with hysteresis.
	load := sig.OtherCPUShare.Value
	above := sig.OtherCPUShare.Known && load > s.MaxOtherCPUShare
	switch {
	case fresh:
		st.Busy = above
	case above == st.Busy:
		st.Crossing = false
	case !st.Crossing:
		st.Crossing, st.CrossSince = true, mono
	}
	if st.Crossing && mono-st.CrossSince >= LoadHold {
		st.Busy, st.Crossing = above, false
	}

	// CPU temperature, with hysteresis.
	temp := sig.MaxTemperatureC
	switch {
	case s.MaxTemperatureC <= 0 || !temp.Known:
		st.Hot = false
	case temp.Value > s.MaxTemperatureC:
		st.Hot = true
	case temp.Value <= s.MaxTemperatureC-TemperatureMarginC:
		st.Hot = false
	}

	if sig.Power.Known {
		st.Power, st.PowerKnown = sig.Power.Value, true
	}
	if sig.Running.Known {
		st.Running, st.RunningKnown = listed(s.PauseFor, sig.Running.Value), true
	}
	running := listed(s.PauseFor, st.Running)

	// Games seen without a list, of the signs switched on; the last ones
	// seen hold for GameHold while the readings are unknown.
	games, gamesStale := gamesFor(s, sig.Games.Value), false
	switch {
	case len(games) > 0:
		st.Games, st.GamesAt, st.GameSeen = games, mono, true
	case !sig.Games.Known && len(st.Games) > 0 && mono-st.GamesAt < GameHold:
		games, gamesStale = gamesFor(s, st.Games), true
	default:
		st.Games = nil
	}

	gpus, gpuNotes, gpuHot := chooseGPUs(s, sig.GPUs, st.GPUHot)
	st.GPUHot = gpuHot

	// forcedText is how compute now shows in a reason: "compute now
	// until 15:00".
	forcedText := ""
	if forced {
		forcedText = "compute now until " + clockText(now.Add(st.ComputeEnd-mono).Round(time.Second).In(loc), now.In(loc))
	}
	wait := func(state State, hold Hold, cause Cause, until time.Time, reason string) (Decision, PolicyState) {
		if forced {
			reason += "; " + forcedText + " waits for this"
		}
		if s.FinishThenPause {
			reason += "; then pausing, as you asked"
		}
		return Decision{State: state, Reason: reason, Hold: hold, Cause: cause, Until: until,
			Finishing: s.FinishThenPause, ComputeNow: forced, GPUsAllowed: gpus}, st
	}

	// The reasons, first match wins.
	if paused {
		// To the second: the sample's wall clock and the monotonic one
		// are read a moment apart, which would show 13:59:59.95 as 13:59.
		until := now.Add(st.PauseEnd - mono).Round(time.Second).In(loc)
		return wait(StatePaused, HoldOwner, CausePaused, until, "paused by you until "+clockText(until, now.In(loc)))
	}
	if (len(running) > 0 || len(games) > 0) && !(forced && s.ComputeDuringPrograms) {
		what := slices.Clone(running)
		for _, g := range games {
			what = append(what, g.What)
		}
		verb := "is"
		if len(what) > 1 {
			verb = "are"
		}
		reason := fmt.Sprintf("paused: %s %s running", joinAnd(what), verb)
		switch {
		case len(running) > 0 && !sig.Running.Known:
			reason += " (last seen; the process list is unknown now)"
		case len(running) == 0 && gamesStale:
			reason += " (last seen; cannot tell now)"
		}
		cause := CauseProgram
		if len(games) > 0 {
			cause = CauseGame
		}
		return wait(StatePaused, HoldOwner, cause, time.Time{}, reason)
	}
	if !forced && !s.Schedule.Allows(now, loc) {
		if next, ok := s.Schedule.Next(now, loc); ok {
			return wait(StateWaiting, HoldHours, CauseHours, next, fmt.Sprintf("waiting: outside your hours (next window %s)", dayText(next, now.In(loc))))
		}
		return wait(StateWaiting, HoldHours, CauseHours, time.Time{}, "waiting: outside your hours")
	}
	if !forced && len(s.QuietHours) > 0 && s.QuietHours.Allows(now, loc) {
		if left, ok := s.QuietHours.Left(now, loc); ok {
			return wait(StateWaiting, HoldHours, CauseQuiet, now.Add(left), "waiting: quiet hours until "+dayText(now.Add(left).In(loc), now.In(loc)))
		}
		return wait(StateWaiting, HoldHours, CauseQuiet, time.Time{}, "waiting: quiet hours")
	}
	if !forced && s.MaxPricePerKWh > 0 && s.Tariff.IsSet() {
		if price := s.Tariff.PriceAt(now, loc); price > s.MaxPricePerKWh {
			reason := fmt.Sprintf("waiting: electricity costs %g %s/kWh now, above your %g", price, s.Tariff.Currency, s.MaxPricePerKWh)
			next, ok := s.Tariff.NextBelow(now, loc, s.MaxPricePerKWh)
			if ok {
				reason += " (cheaper from " + dayText(next.In(loc), now.In(loc)) + ")"
			}
			return wait(StateWaiting, HoldHours, CausePrice, next, reason)
		}
	}
	if u := sig.EnergyUsed; !forced && u.Known {
		switch {
		case s.EnergyDayKWh > 0 && u.Value.DayKWh >= s.EnergyDayKWh:
			n := now.In(loc)
			return wait(StatePaused, HoldLimit, CauseEnergy, time.Date(n.Year(), n.Month(), n.Day()+1, 0, 0, 0, 0, loc), fmt.Sprintf("paused: today's %g kWh are used (resuming at midnight)", s.EnergyDayKWh))
		case s.EnergyMonthKWh > 0 && u.Value.MonthKWh >= s.EnergyMonthKWh:
			n := now.In(loc)
			return wait(StatePaused, HoldLimit, CauseEnergy, time.Date(n.Year(), n.Month()+1, 1, 0, 0, 0, 0, loc), fmt.Sprintf("paused: this month's %g kWh are used (resuming on the 1st)", s.EnergyMonthKWh))
		}
	}
	if p := st.Power; st.PowerKnown && p.OnBattery {
		stale := ""
		if !sig.Power.Known {
			stale = ", last known"
		}
		switch {
		case s.PauseOnBattery:
			return wait(StateWaiting, HoldBattery, CauseBattery, time.Time{}, fmt.Sprintf("waiting: on battery (%.0f%%%s)", p.Percent, stale))
		case s.MinBatteryPercent > 0 && p.Percent < s.MinBatteryPercent:
			return wait(StateWaiting, HoldBattery, CauseBattery, time.Time{}, fmt.Sprintf("waiting: on battery at %.0f%%%s, below your minimum of %.0f%%", p.Percent, stale, s.MinBatteryPercent))
		}
	}
	if st.Hot {
		if temp.Value > s.MaxTemperatureC {
			return wait(StateWaiting, HoldLimit, CauseHot, time.Time{}, fmt.Sprintf("waiting: CPU at %.0f °C, ceiling %.0f °C", temp.Value, s.MaxTemperatureC))
		}
		return wait(StateWaiting, HoldLimit, CauseHot, time.Time{}, fmt.Sprintf("waiting: CPU at %.0f °C, cooling to %.0f °C (ceiling %.0f °C)", temp.Value, s.MaxTemperatureC-TemperatureMarginC, s.MaxTemperatureC))
	}
	if since := mono - st.GamesAt; st.GameSeen && s.IdleFor > 0 && since < s.IdleFor && !forced {
		return wait(StateWaiting, HoldOwner, CauseActive, now.Add(s.IdleFor-since), fmt.Sprintf("waiting: a game ran %s ago; starting after %s idle", durationText(since), durationText(s.IdleFor)))
	}
	if s.IdleFor > 0 && !forced {
		if !sig.InputIdle.Known {
			why := sig.InputIdle.Err
			if why == "" || strings.Contains(why, "; ") {
				why = "no input source works" // several sources' reasons: too long for a reason line
			}
			return wait(StateWaiting, HoldOwner, CauseActive, time.Time{}, fmt.Sprintf("waiting: idle time unknown (%s)", why))
		}
		if idle := mono - st.ActiveAt; idle < s.IdleFor {
			return wait(StateWaiting, HoldOwner, CauseActive, now.Add(s.IdleFor-idle), fmt.Sprintf("waiting: you were active %s ago; starting after %s idle", durationText(idle), durationText(s.IdleFor)))
		}
	}
	if st.Busy && !forced {
		if above {
			return wait(StateWaiting, HoldOwner, CauseLoad, time.Time{}, fmt.Sprintf("waiting: other programs use %s of the CPU, more than your %s", percent(load), percent(s.MaxOtherCPUShare)))
		}
		return wait(StateWaiting, HoldOwner, CauseLoad, time.Time{}, fmt.Sprintf("waiting: other programs' CPU use fell to %s; resuming after %s below %s", percent(load), durationText(LoadHold), percent(s.MaxOtherCPUShare)))
	}

	cpus := max(sig.CPUs, 1)
	cores := s.CoresFor(cpus)
	reason := fmt.Sprintf("computing on %d of %d cores", cores, cpus)
	switch {
	case s.FinishThenPause:
		reason = fmt.Sprintf("finishing the tasks in hand on %d of %d cores, then pausing, as you asked", cores, cpus)
	case forced:
		reason = fmt.Sprintf("computing now, as you asked, until %s, on %d of %d cores", strings.TrimPrefix(forcedText, "compute now until "), cores, cpus)
	}
	reason += gpuWords(sig.GPUs.Value, gpus)
	notes := gpuNotes
	if !sig.Power.Known {
		if st.PowerKnown {
			notes = append(notes, "power state unknown: last known on AC")
		} else {
			notes = append(notes, "power state unknown: assuming AC")
		}
	}
	if !sig.Running.Known && len(s.PauseFor) > 0 {
		notes = append(notes, "process list unknown: cannot check your pause-for programs")
	}
	if !sig.Games.Known && sig.Games.Err != "" && len(s.Signs()) > 0 {
		notes = append(notes, "cannot tell whether a game runs ("+sig.Games.Err+")")
	}
	if s.MaxTemperatureC > 0 && !temp.Known {
		notes = append(notes, "CPU temperature unknown: ceiling not applied")
	}
	if !sig.OtherCPUShare.Known {
		notes = append(notes, "CPU load of other programs unknown")
	}
	if s.IdleFor == 0 && !forced {
		notes = append(notes, "input idle time not required (idle_for 0)")
	}
	if forced && len(running) > 0 {
		notes = append(notes, "while "+joinAnd(running)+" runs, as you allowed")
	}
	for _, n := range notes {
		reason += "; " + n
	}
	return Decision{State: StateComputing, Cores: cores, GPUs: gpus, Reason: reason, Finishing: s.FinishThenPause, ComputeNow: forced}, st
}

// Policy is Decide with its state kept between calls and its own
// monotonic clock, started by NewPolicy: what an agent's decision function
// needs. Its methods are safe for concurrent use.
type Policy struct {
	start time.Time // carries Go's monotonic reading: time.Since(start) is mono

	mu       sync.Mutex
	settings Settings
	state    PolicyState
}

// NewPolicy returns a Policy deciding by s, its monotonic clock starting
// now.
func NewPolicy(s Settings) *Policy { return &Policy{start: time.Now(), settings: s} }

// SetSettings makes later decisions use s (the owner changed them); the
// timers and remembered readings carry on.
func (p *Policy) SetSettings(s Settings) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.settings = s
}

// Decide decides on sig sampled at wall-clock time now (see the package
// function Decide), reading the monotonic clock itself.
func (p *Policy) Decide(sig Signals, now time.Time) Decision {
	p.mu.Lock()
	defer p.mu.Unlock()
	var d Decision
	d, p.state = Decide(p.settings, sig, now, time.Since(p.start), p.state)
	return d
}

// State returns the state after the last decision, e.g. to see
// PauseOver.
func (p *Policy) State() PolicyState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state
}

// gpuWords is " and GPU 0, GPU 1 and GPU 3" for the allowed gpus (UUIDs) among
// those listed, by their indexes; "" for none.
func gpuWords(listed []GPU, gpus []string) string {
	if len(gpus) == 0 {
		return ""
	}
	var names []string
	for _, g := range listed {
		if slices.Contains(gpus, g.UUID) {
			names = append(names, fmt.Sprintf("GPU %d", g.Index))
		}
	}
	return " and " + joinAnd(names)
}

// chooseGPUs returns the UUIDs of the GPUs the settings allow now, the
// reasons for those skipped, and the new hot set.
func chooseGPUs(s Settings, r Reading[[]GPU], wasHot map[string]bool) (allowed []string, notes []string, hot map[string]bool) {
	var enabled []string
	for uuid, g := range s.GPUs {
		if g.Use {
			enabled = append(enabled, uuid)
		}
	}
	if len(enabled) == 0 {
		return nil, nil, nil
	}
	slices.Sort(enabled)
	if !r.Known {
		why := r.Err
		if why == "" {
			why = "GPUs unknown"
		}
		return nil, []string{"no usable GPU (" + why + "): CPU only"}, wasHot
	}
	gs := slices.Clone(r.Value)
	slices.SortFunc(gs, func(a, b GPU) int { return a.Index - b.Index })
	hot = map[string]bool{}
	found := map[string]bool{}
	for _, g := range gs {
		found[g.UUID] = true
		set := s.gpu(g.UUID)
		if !set.Use {
			continue
		}
		isHot := wasHot[g.UUID]
		switch {
		case set.MaxTemperatureC <= 0:
			isHot = false
		case g.TemperatureC > set.MaxTemperatureC:
			isHot = true
		case g.TemperatureC <= set.MaxTemperatureC-TemperatureMarginC:
			isHot = false
		}
		if isHot {
			hot[g.UUID] = true
			notes = append(notes, fmt.Sprintf("GPU %d skipped: %.0f °C, ceiling %.0f °C", g.Index, g.TemperatureC, set.MaxTemperatureC))
			continue
		}
		if other := otherGPUShare(g); other > set.MaxOtherShare {
			notes = append(notes, fmt.Sprintf("GPU %d skipped: another process uses %s of it", g.Index, percent(other)))
			continue
		}
		allowed = append(allowed, g.UUID)
	}
	for _, uuid := range enabled {
		if !found[uuid] {
			notes = append(notes, fmt.Sprintf("GPU %s not found", uuid))
		}
	}
	if len(hot) == 0 {
		hot = nil
	}
	return allowed, notes, hot
}

// otherGPUShare is the share (0..1) of a GPU other processes use: the
// share of its memory they hold, and, while no process of ours has a
// context on it (so that all of its utilisation is theirs), its
// utilisation. Whether a GPU is ours is what NVML's process list shows
// now, never what an earlier decision allowed: a GPU allowed to tasks
// that do not use it (every WebAssembly task) is all another process's,
// and a game that starts on it with little memory is seen by its
// utilisation. While a task of ours shares the GPU with another process
// NVML cannot split the utilisation, and only their memory counts.
func otherGPUShare(g GPU) float64 {
	share := 0.0
	if g.MemoryTotalMiB > 0 {
		share = float64(g.OtherMemoryMiB) / float64(g.MemoryTotalMiB)
	}
	if len(g.OurProcesses) == 0 && len(g.OtherProcesses) > 0 {
		share = max(share, g.UtilisationShare)
	}
	return share
}

// listed returns the names in running that the settings list (compared
// without case), sorted, without repeats.
func listed(pauseFor, running []string) []string {
	var out []string
	for _, r := range running {
		for _, p := range pauseFor {
			if strings.EqualFold(r, p) {
				out = append(out, r)
				break
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// joinAnd writes "a", "a and b", "a, b and c".
func joinAnd(names []string) string {
	switch len(names) {
	case 0:
		return ""
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// percent writes a share as "71%".
func percent(share float64) string { return fmt.Sprintf("%.0f%%", share*100) }

// durationText writes a duration for people: "40 s", "3 min", "3 min
// 12 s", "1 h 5 min".
func durationText(d time.Duration) string {
	d = max(d, 0).Truncate(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%d s", int(d.Seconds()))
	case d < time.Hour:
		m, s := int(d/time.Minute), int(d%time.Minute/time.Second)
		if s == 0 {
			return fmt.Sprintf("%d min", m)
		}
		return fmt.Sprintf("%d min %d s", m, s)
	default:
		h, m := int(d/time.Hour), int(d%time.Hour/time.Minute)
		if m == 0 {
			return fmt.Sprintf("%d h", h)
		}
		return fmt.Sprintf("%d h %d min", h, m)
	}
}

// DurationText writes a duration as the policy's reasons do: "40 s",
// "3 min 12 s", "1 h 5 min".
func DurationText(d time.Duration) string { return durationText(d) }

// clockText writes t relative to now (both in the same zone): see
// ClockText.
func clockText(t, now time.Time) string { return ClockText(t, now) }

// ClockText writes a moment for people, relative to now, both in the zone
// to show it in: "14:05" on now's day, "Mon 14:05" in the six days after
// it, "2 Jan 14:05" at any other date of now's year, and "2 Jan 2027
// 14:05" in another year. Every end of a pause (the policy's reason, the
// tray, status) is written by it, so that a pause until a far date shows
// that date and its year.
func ClockText(t, now time.Time) string {
	ty, tm, td := t.Date()
	ny, nm, nd := now.Date()
	switch {
	case ty == ny && tm == nm && td == nd:
		return t.Format("15:04")
	case t.After(now) && t.Sub(now) < 6*24*time.Hour:
		return t.Format("Mon 15:04")
	case ty == ny:
		return t.Format("2 Jan 15:04")
	default:
		return t.Format("2 Jan 2006 15:04")
	}
}

// dayText writes t with its weekday, "Mon 22:00", or, when it is a week or
// more after now, with its date as ClockText does.
func dayText(t, now time.Time) string {
	if t.After(now) && t.Sub(now) < 6*24*time.Hour {
		return t.Format("Mon 15:04")
	}
	return ClockText(t, now)
}

// DecideAlways is the decision of a donor that computes at any time
// (`idlepool join --always`, for dedicated machines): computing on slots
// workers whatever the hours, pauses, input, load, battery and cores of
// s say, and on the GPUs the owner enabled in s that sig.GPUs lists,
// under the same per-GPU rules as Decide (a GPU's temperature ceiling,
// with its margin kept in prev, and its share used by other processes).
// Only sig.GPUs is read. The reason reads "computing on 2 slots and GPU
// 0 (no idle policy)", followed by why an enabled GPU is skipped.
func DecideAlways(s Settings, sig Signals, slots int, prev PolicyState) (Decision, PolicyState) {
	slots = max(slots, 1)
	gpus, notes, hot := chooseGPUs(s, sig.GPUs, prev.GPUHot)
	prev.GPUHot = hot
	reason := fmt.Sprintf("computing on %d slots", slots)
	if slots == 1 {
		reason = "computing on 1 slot"
	}
	reason += gpuWords(sig.GPUs.Value, gpus)
	reason += " (no idle policy)"
	for _, n := range notes {
		reason += "; " + n
	}
	return Decision{State: StateComputing, Cores: slots, GPUs: gpus, Reason: reason}, prev
}
