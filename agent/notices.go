package agent

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// ErrAbandoned: a running task was stopped without a result because its
// lease ran out while the pool could not be reached (see
// Config.AbandonAfter). Matched by *AbandonedError.
var ErrAbandoned = errors.New("agent: task abandoned: its lease ran out while the pool could not be reached")

// AbandonedError is why a task was abandoned: the lease's last deadline
// (by this device's clock), since when the pool could not be reached
// (zero when it answered but refused this device's clock), and the last
// heartbeat's error.
type AbandonedError struct {
	Deadline         time.Time
	UnreachableSince time.Time
	ClockRefused     bool
	Err              error
}

func (e *AbandonedError) Error() string {
	return fmt.Sprintf("%v (deadline %s): %v", ErrAbandoned, e.Deadline.Format(time.RFC3339), e.Err)
}

// Is matches ErrAbandoned.
func (e *AbandonedError) Is(target error) bool { return target == ErrAbandoned }

// Unwrap returns the last heartbeat's error.
func (e *AbandonedError) Unwrap() error { return e.Err }

// AbandonedTask is a task this device stopped without a result, in
// AgentStatus: its lease ran out while the pool could not be reached (or
// refused this device's clock), so the pool leased it elsewhere and no
// receipt will come for it.
type AbandonedTask struct {
	Pool    string `json:"pool"`
	Job     string `json:"job"`
	JobName string `json:"jobName,omitempty"`
	Task    int64  `json:"task"`
	Lease   string `json:"lease"`
	// At is when it was stopped; Deadline when its lease ran out (both
	// by this device's clock).
	At       time.Time `json:"at"`
	Deadline time.Time `json:"deadline"`
	// UnreachableSince is since when the pool did not answer; zero when
	// it answered but refused this device's clock (ClockRefused).
	UnreachableSince time.Time `json:"unreachableSince,omitzero"`
	ClockRefused     bool      `json:"clockRefused,omitempty"`
}

// Words says what happened for people, with times in loc: "task 4 of
// job pi abandoned: pool unreachable since 14:02".
func (t AbandonedTask) Words(loc *time.Location) string {
	name := t.JobName
	if name == "" {
		name = shortJob(t.Job)
	}
	why := "the pool refused this device's clock"
	if !t.UnreachableSince.IsZero() {
		why = "pool unreachable since " + clockTime(t.UnreachableSince, t.At, loc)
	}
	return fmt.Sprintf("task %d of job %s abandoned: %s", t.Task, name, why)
}

// shortJob is the first 12 hex digits of a job ID, as idlepool prints it.
func shortJob(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// clockTime is t in loc as "15:04", with the date when it is not the day
// of now.
func clockTime(t, now time.Time, loc *time.Location) string {
	t, now = t.In(loc), now.In(loc)
	if t.YearDay() == now.YearDay() && t.Year() == now.Year() {
		return t.Format("15:04")
	}
	return t.Format("Mon 2 Jan 2006 15:04")
}

// ClockNoticeAfter is the clock offset from which the status names it.
const ClockNoticeAfter = time.Minute

// ClockWords says how far this device's clock is off the pool's, for
// people: "this device's clock is 7 min off the pool's (behind)", or ""
// below ClockNoticeAfter. offset is the pool's clock minus this device's.
func ClockWords(offset time.Duration) string {
	abs := offset.Abs()
	if abs < ClockNoticeAfter {
		return ""
	}
	side := "behind"
	if offset < 0 {
		side = "ahead"
	}
	var n string
	switch {
	case abs < 90*time.Minute:
		n = fmt.Sprintf("%d min", int(math.Round(abs.Minutes())))
	case abs < 48*time.Hour:
		n = fmt.Sprintf("%.1f h", abs.Hours())
	default:
		n = fmt.Sprintf("%.0f days", abs.Hours()/24)
	}
	return fmt.Sprintf("this device's clock is %s off the pool's (%s)", n, side)
}

// Notices lists, for people, what keeps the donor from computing as it
// should: per pool, a clock off the pool's (and whether the pool refuses
// it), a pool unreachable, the tasks abandoned, with times in loc, and the
// tasks handed back at once in the current pause ("handed back task 12 of
// job pi: a game started").
// `idlepool status` and the tray show them.
func (s AgentStatus) Notices(loc *time.Location, now time.Time) []string {
	var out []string
	pools := s.Pools
	if len(pools) == 0 && s.Pool != "" {
		pools = []PoolState{{URL: s.Pool, Name: s.PoolName, ClockOffsetMS: s.ClockOffsetMS,
			ClockRefused: s.ClockRefused, UnreachableSince: s.UnreachableSince, Peers: s.Peers}}
	}
	for _, p := range pools {
		name := p.Name
		if name == "" {
			name = p.URL
		}
		off := time.Duration(p.ClockOffsetMS) * time.Millisecond
		switch w := ClockWords(off); {
		case p.ClockRefused && w != "":
			out = append(out, fmt.Sprintf("pool %s refuses requests: %s; set the clock right (retrying meanwhile)", name, w))
		case p.ClockRefused:
			out = append(out, fmt.Sprintf("pool %s refuses this device's clock; set the clock right (retrying meanwhile)", name))
		case w != "":
			out = append(out, fmt.Sprintf("pool %s: %s; requests are signed with the pool's time", name, w))
		}
		if !p.UnreachableSince.IsZero() {
			out = append(out, fmt.Sprintf("pool %s unreachable since %s (retrying)", name, clockTime(p.UnreachableSince, now, loc)))
		}
	}
	for _, t := range s.Abandoned {
		out = append(out, t.Words(loc))
	}
	for _, t := range s.HandedBack {
		out = append(out, t.Words())
	}
	return out
}

// Words says the cache's use for people: "12.3 MiB of 4.0 GiB (3 jobs,
// 1 in use; 2.1 MiB compiled code)".
func (u CacheUsage) Words() string {
	s := fmt.Sprintf("%s of %s (%d %s", ByteSize(u.UsedBytes), ByteSize(u.CapBytes), u.Jobs, pluralWord(u.Jobs, "job"))
	if u.InUse > 0 {
		s += fmt.Sprintf(", %d in use", u.InUse)
	}
	if u.CompiledBytes > 0 {
		s += "; " + ByteSize(u.CompiledBytes) + " compiled code"
	}
	s += ")"
	if u.UsedBytes > u.CapBytes {
		s += ": over the cap while the jobs left are in use"
	}
	return s
}

func pluralWord(n int, w string) string {
	if n == 1 {
		return w
	}
	return w + "s"
}

// ByteSize writes n bytes for people in binary units: "512 B", "3.4 MiB",
// "4.0 GiB".
func ByteSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

// PoolsNow are the pools of the status with their connection state: a
// Donor's Pools, or a lone Agent's one pool made from its own fields.
func (s AgentStatus) PoolsNow() []PoolState {
	if len(s.Pools) > 0 || s.Pool == "" {
		return s.Pools
	}
	return []PoolState{{URL: s.Pool, Name: s.PoolName, Slots: s.Slots, Running: len(s.Running), ClockOffsetMS: s.ClockOffsetMS,
		ClockRefused: s.ClockRefused, UnreachableSince: s.UnreachableSince}}
}

// Reachable reports whether the pool answers: it has an agent (no
// Error) and its coordinator answered the last request.
func (p PoolState) Reachable() bool { return p.Error == "" && p.UnreachableSince.IsZero() }

// Label is the pool's name, or its URL until it has one.
func (p PoolState) Label() string {
	if p.Name != "" {
		return p.Name
	}
	return p.URL
}

// Connection says the pool's connection state for people, with times in
// loc: "connected", "cannot reach the pool since 14:02, retrying", or why
// no agent computes for it (Error).
func (p PoolState) Connection(loc *time.Location, now time.Time) string {
	switch {
	case p.Error != "":
		return p.Error
	case !p.UnreachableSince.IsZero():
		return "cannot reach the pool since " + clockTime(p.UnreachableSince, now, loc) + ", retrying"
	case p.ClockRefused:
		return "connected, but the pool refuses this device's clock"
	}
	return "connected"
}

// AllUnreachable reports whether the status names pools and none of them
// answers: then nothing can be leased, whatever the decision says.
func (s AgentStatus) AllUnreachable() bool {
	ps := s.PoolsNow()
	if len(ps) == 0 {
		return false
	}
	for _, p := range ps {
		if p.Reachable() {
			return false
		}
	}
	return true
}
