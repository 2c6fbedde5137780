package idle

import (
	"fmt"
	"strings"
	"time"
)

// This file holds the owner's overrides of the rules: the pause, compute
// now, and finish then pause. At most one of them is in force: setting
// one clears the others, so that the last thing the owner asked for is
// what happens.

// SetPause pauses computing until until, ending compute now and finish
// then pause; a zero until resumes: it ends the pause and finish then
// pause (the tray's and the CLI's Resume).
func (s *Settings) SetPause(until time.Time) {
	s.PausedUntil = until
	s.FinishThenPause = false
	if !until.IsZero() {
		s.ComputeUntil = time.Time{}
	}
}

// SetComputeUntil computes now until until, ending the owner's pause and
// finish then pause; a zero until ends compute now, and the rules (the
// hours, the idle wait) apply again.
func (s *Settings) SetComputeUntil(until time.Time) {
	s.ComputeUntil = until
	if !until.IsZero() {
		s.PausedUntil, s.FinishThenPause = time.Time{}, false
	}
}

// SetFinishThenPause asks to finish the tasks in hand and then pause
// until the owner resumes (SetPause with a zero time); it ends a timed
// pause and compute now.
func (s *Settings) SetFinishThenPause() {
	s.FinishThenPause = true
	s.PausedUntil, s.ComputeUntil = time.Time{}, time.Time{}
}

// ComputingNow reports whether the owner's compute now is in force at
// wall-clock time now.
func (s Settings) ComputingNow(now time.Time) bool {
	return !s.ComputeUntil.IsZero() && now.Before(s.ComputeUntil)
}

// NextHours returns when the schedule next allows computing after now,
// for "compute now until my hours start". It fails when the schedule
// allows any time, or allows now (the hours have started already).
func (s Settings) NextHours(now time.Time) (time.Time, error) {
	loc := s.Location()
	switch {
	case len(s.Schedule) == 0:
		return time.Time{}, fmt.Errorf("your hours are any time, so there is no start to wait for; give a duration such as 3h")
	case s.Schedule.Allows(now, loc):
		return time.Time{}, fmt.Errorf("your hours have started already; give a duration such as 3h to compute without waiting for idle")
	}
	next, ok := s.Schedule.Next(now, loc)
	if !ok {
		return time.Time{}, fmt.Errorf("your hours never start; give a duration such as 3h")
	}
	return next, nil
}

// MaxComputeNow is the longest compute now may last: a week, after which
// the owner's hours are back in any case.
const MaxComputeNow = 7 * 24 * time.Hour

// parseCompute reads the value of "compute" (see SettingKeys) at
// wall-clock time now: the end of compute now, or zero for "off".
func (s Settings) parseCompute(v string, now time.Time) (time.Time, error) {
	switch strings.ToLower(v) {
	case "off", "no", "false", "":
		return time.Time{}, nil
	case "hours", "schedule":
		return s.NextHours(now)
	}
	var until time.Time
	if d, err := time.ParseDuration(v); err == nil {
		if d <= 0 {
			return time.Time{}, fmt.Errorf("compute now must last more than 0")
		}
		until = now.Add(d).Round(0).Truncate(time.Second)
	} else if t, err := time.Parse(time.RFC3339, v); err == nil {
		if !t.After(now) {
			return time.Time{}, fmt.Errorf("%s is not in the future", v)
		}
		until = t
	} else {
		return time.Time{}, fmt.Errorf(`want a duration (3h), "hours" (until your hours start), a time (2026-05-01T08:00:00+02:00) or "off"`)
	}
	if until.Sub(now) > MaxComputeNow {
		return time.Time{}, fmt.Errorf("compute now lasts at most a week (168h); set your hours instead")
	}
	return until, nil
}

// ValidateFor is Validate, and also refuses a count of cores above cpus,
// the logical CPUs of this machine (a count the owner typed here; a
// stored one from elsewhere is capped by CoresFor). cpus < 1 skips that
// check.
func (s Settings) ValidateFor(cpus int) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if cpus > 0 && s.Cores > cpus {
		return fmt.Errorf("cores: this computer has %d logical CPUs; %d is more than it has (give at most %d, or a percentage)", cpus, s.Cores, cpus)
	}
	return nil
}
