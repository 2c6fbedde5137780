package agent

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"idlepool/idle"
	"idlepool/store"
)

// Early hand-back. A task suspended because the owner needs the machine
// holds its lease by heartbeat until it has been suspended for its job's
// lease timeout less a margin (pauseLimit), then hands it back. When the
// pause is known or expected to last longer than holding the task is
// worth, the agent hands the task back as soon as it is suspended:
// PredictPause says how much longer the pause goes on, from the kind of
// its reason (idle.Decision.Cause) and, for the owner at the machine,
// from the owner's own pattern (OwnerPattern); handBackNow is the rule.
// The task's worker is killed, its partial work earns nothing (no
// contribution is recorded) and the pool leases the task again at once.

// ErrHandedBackEarly is the cause with which a suspended task is stopped
// because its pause is expected to outlast what holding the task is worth
// (see handBackNow); its lease is handed back. Matched by the
// *EarlyHandBackError that carries the prediction.
var ErrHandedBackEarly = errors.New("agent: task handed back: its pause is expected to last")

// EarlyHandBackError is why a suspended task was handed back at once.
type EarlyHandBackError struct {
	Prediction PausePrediction
}

func (e *EarlyHandBackError) Error() string {
	return fmt.Sprintf("%v another %s: %s", ErrHandedBackEarly, e.Prediction.Left.Round(time.Second), e.Prediction.Words)
}

// Unwrap returns ErrHandedBackEarly.
func (e *EarlyHandBackError) Unwrap() error { return ErrHandedBackEarly }

// How long pauses whose end nothing says are taken to last in all, from
// their start. A game or a program the owner pauses for is played or used
// for an hour or more at a time; a laptop taken off its charger stays off
// it about as long; a CPU above its ceiling cools within a minute or two;
// other programs' busy spells (a build, an update) last a few minutes.
// A pause with no end (paused by the owner until resumed, hours with no
// window ahead) is taken to last a day.
const (
	GamePause          = time.Hour
	BatteryPause       = time.Hour
	HotPause           = 2 * time.Minute
	LoadPause          = 3 * time.Minute
	DefaultActivePause = 10 * time.Minute // the owner at the machine, before OwnerPattern knows better
	EndlessPause       = 24 * time.Hour
)

// HandBackOverhead is what handing a task back costs its job besides the
// work thrown away: the release, another device's lease, its fetch of the
// job's files (mostly cached by then) and its worker starting.
const HandBackOverhead = 30 * time.Second

// PausePrediction is how much longer a pause is expected to last, and its
// reason in the words that a hand-back names.
type PausePrediction struct {
	// Left is the time expected until the device computes again.
	Left time.Duration
	// Words says why, for the owner: "a game started", "a program you
	// pause for started", "on battery", "outside your hours until Tue
	// 22:00", "you are using this computer", "paused by you until 15:00",
	// "the CPU is too hot", "other programs are busy".
	Words string
}

// PredictPause predicts how much longer the pause of decision d goes on,
// at wall-clock now, when it has lasted pausedFor; pattern is the owner's
// (nil: none learnt). Where the end is known (the owner's pause, the
// hours) it is that end; otherwise the pause's expected length (the
// constants above; OwnerPattern's mean for the owner at the machine, or
// DefaultActivePause) less what has passed, and a pause that outlived
// its expected length is taken to last as long again. An idle wait that
// cannot end before d.Until is not predicted to. ok is false when d
// computes or names no Cause (a policy other than idle.Decide): nothing
// is predicted then.
func PredictPause(d idle.Decision, now time.Time, pausedFor time.Duration, pattern *OwnerPattern) (p PausePrediction, ok bool) {
	if d.Run() || d.Cause == idle.CauseNone {
		return PausePrediction{}, false
	}
	typical := func(total time.Duration) time.Duration {
		if pausedFor < total {
			return total - pausedFor
		}
		return max(pausedFor, time.Second)
	}
	until := func() time.Duration {
		if d.Until.IsZero() {
			return EndlessPause
		}
		return max(d.Until.Sub(now), 0)
	}
	loc := now.Location()
	switch d.Cause {
	case idle.CausePaused:
		p = PausePrediction{Left: until(), Words: "paused by you"}
		if !d.Until.IsZero() {
			p.Words += " until " + clockTime(d.Until, now, loc)
		}
	case idle.CauseGame:
		p = PausePrediction{Left: typical(GamePause), Words: "a game started"}
	case idle.CauseProgram:
		p = PausePrediction{Left: typical(GamePause), Words: "a program you pause for started"}
	case idle.CauseHours:
		p = PausePrediction{Left: until(), Words: "outside your hours"}
		if !d.Until.IsZero() {
			p.Words += " until " + clockTime(d.Until, now, loc)
		}
	case idle.CauseQuiet, idle.CausePrice, idle.CauseEnergy:
		p = PausePrediction{Left: until(), Words: map[idle.Cause]string{idle.CauseQuiet: "your quiet hours",
			idle.CausePrice: "electricity above your price", idle.CauseEnergy: "your energy cap is reached"}[d.Cause]}
		if !d.Until.IsZero() {
			p.Words += " until " + clockTime(d.Until, now, loc)
		}
	case idle.CauseBattery:
		p = PausePrediction{Left: typical(BatteryPause), Words: "on battery"}
	case idle.CauseHot:
		p = PausePrediction{Left: typical(HotPause), Words: "the CPU is too hot"}
	case idle.CauseLoad:
		p = PausePrediction{Left: typical(LoadPause), Words: "other programs are busy"}
	case idle.CauseActive:
		total := DefaultActivePause
		if m, ok := pattern.Expected(now.Add(-pausedFor)); ok {
			total = m
		}
		p = PausePrediction{Left: typical(total), Words: "you are using this computer"}
		if !d.Until.IsZero() {
			p.Left = max(p.Left, d.Until.Sub(now))
		}
	default:
		return PausePrediction{}, false
	}
	return p, true
}

// handBackNow is the rule: a task suspended for pausedFor, which had been
// in hand for ran before the pause, whose lease lets it stay suspended
// for holdLimit in all (pauseLimit), is handed back now when left, how
// much longer the pause is expected to go on, exceeds
// min(holdLimit-pausedFor, ran+HandBackOverhead).
//
// Why that bound: held, the task ends after left + (E - ran), E being its
// time to compute; handed back, another device that is free ends it after
// about E + HandBackOverhead. Handing back is sooner when left > ran +
// HandBackOverhead, whatever E is (which this device does not know), and
// loses only the ran already spent. And a pause longer than the lease
// lets the task stay suspended ends in a hand-back anyway, only later.
func handBackNow(left, pausedFor, ran, holdLimit time.Duration) bool {
	return left > min(holdLimit-pausedFor, ran+HandBackOverhead)
}

// Learning the owner's pattern.
const (
	// patternMin is how many pauses an hour (or the whole day) needs
	// before its mean is trusted.
	patternMin = 3
	// patternWeight is the least weight of a new pause in its hour's
	// running mean: the mean follows a changed habit within a few weeks.
	patternWeight = 0.2
)

// OwnerPattern is how long the owner's use of this machine
// (idle.CauseActive) keeps it from computing, learnt from the pauses
// seen, by the local hour of the day each began: per hour a count and a
// running mean in which a new pause weighs 1/count, at least
// patternWeight: 24 pairs of numbers, updated in constant time; a Donor
// keeps them in its local store (store.Local.OwnerPauses). Its methods
// are safe for concurrent use; a nil *OwnerPattern knows nothing.
type OwnerPattern struct {
	mu    sync.Mutex
	hours [24]store.HourPauses
}

// NewOwnerPattern returns a pattern that knows the hours seen (as read
// from the store); hours outside 0..23 are ignored.
func NewOwnerPattern(seen []store.HourPauses) *OwnerPattern {
	p := &OwnerPattern{}
	p.load(seen)
	return p
}

func (p *OwnerPattern) load(seen []store.HourPauses) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for h := range p.hours {
		p.hours[h] = store.HourPauses{Hour: h}
	}
	for _, h := range seen {
		if h.Hour >= 0 && h.Hour < 24 && h.Count >= 0 && h.Mean >= 0 {
			p.hours[h.Hour] = h
		}
	}
}

// Note adds a pause that began at start (its hour in start's location)
// and lasted d, and returns its hour as it stands now, to be saved. A
// pause of no length is ignored (ok false).
func (p *OwnerPattern) Note(start time.Time, d time.Duration) (h store.HourPauses, ok bool) {
	if p == nil || d <= 0 {
		return store.HourPauses{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	h = p.hours[start.Hour()]
	h.Hour = start.Hour()
	h.Count++
	w := max(1/float64(h.Count), patternWeight)
	h.Mean += time.Duration(math.Round(w * float64(d-h.Mean)))
	p.hours[h.Hour] = h
	return h, true
}

// Expected is the expected length of a pause that begins at t: the mean
// of t's hour once patternMin pauses began in it, else the mean of every
// hour weighted by its count once patternMin were seen in all; ok is
// false while fewer were.
func (p *OwnerPattern) Expected(t time.Time) (time.Duration, bool) {
	if p == nil {
		return 0, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if h := p.hours[t.Hour()]; h.Count >= patternMin {
		return h.Mean, true
	}
	var n int
	var sum float64
	for _, h := range p.hours {
		n += h.Count
		sum += float64(h.Count) * float64(h.Mean)
	}
	if n < patternMin {
		return 0, false
	}
	return time.Duration(sum / float64(n)), true
}

// HandedBackTask is a task this device handed back at once when it was
// suspended for a pause expected to last (see PredictPause), in
// AgentStatus until the device computes again.
type HandedBackTask struct {
	Pool    string `json:"pool"`
	Job     string `json:"job"`
	JobName string `json:"jobName,omitempty"`
	Task    int64  `json:"task"`
	Lease   string `json:"lease"`
	// At is when it was handed back (this device's clock).
	At time.Time `json:"at"`
	// Why is the pause's reason in words (PausePrediction.Words).
	Why string `json:"why"`
	// ExpectedMS is how much longer the pause was expected to last then,
	// in milliseconds.
	ExpectedMS int64 `json:"expectedMs"`
}

// Words says what happened for people: "handed back task 12 of job
// pi-small: a game started".
func (t HandedBackTask) Words() string {
	name := t.JobName
	if name == "" {
		name = shortJob(t.Job)
	}
	return fmt.Sprintf("handed back task %d of job %s: %s", t.Task, name, t.Why)
}
