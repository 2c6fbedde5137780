package app

import (
	"context"
	"fmt"
	"strings"
	"time"

	"idlepool/agent"
	"idlepool/idle"
)

// This file is the tray's overrides of the owner's rules besides the
// pause: compute now (for an hour, for ComputeHours hours, or until the
// hours start) and finish then pause. Like the pause they are settings
// (idle.Settings.ComputeUntil and FinishThenPause) that the engine reads
// at once, so that `idlepool settings set compute=...|pause=finish` and
// the tray are one mechanism.

// ComputeHours is the longer of the tray's two "Compute now for" items.
const ComputeHours = 3

// Labels of the override items.
const (
	labelComputeHour     = "Compute now for 1 hour"
	labelComputeStop     = "Back to your hours"
	labelFinishThenPause = "Finish current tasks, then pause"
)

var labelComputeHours = fmt.Sprintf("Compute now for %d hours", ComputeHours)

// finishingStatus is the tray's status while the owner asked to finish
// the tasks in hand and then pause: finishing while any is held, paused
// after.
func finishingStatus(st agent.AgentStatus) TrayStatus {
	if n := len(st.Running); n > 0 {
		line := "Finishing " + plural(n, "task") + ", then pausing"
		if st.Decision.State != idle.StateComputing && st.Decision.Reason != "" {
			line += " (" + strings.TrimSuffix(st.Decision.Reason, "; then pausing, as you asked") + ")"
		}
		return TrayStatus{State: TrayComputing, Finishing: true, Line: cut(line)}
	}
	return TrayStatus{State: TrayPaused, Finishing: true, Line: "Paused by you after finishing the tasks in hand"}
}

// withOverrides adds the owner's compute now to ts: its end, in the line.
func withOverrides(ts TrayStatus, st agent.AgentStatus, s idle.Settings, now time.Time) TrayStatus {
	if !s.ComputingNow(now) || ts.Finishing || !ts.PausedUntil.IsZero() {
		return ts
	}
	loc := s.Location()
	ts.ComputeUntil = s.ComputeUntil
	until := clockText(s.ComputeUntil.In(loc), now.In(loc))
	switch {
	case ts.Line == lineStarting:
		ts.Line = cut("Computing now, as you asked, until " + until + ": starting…")
	case strings.Contains(ts.Line, "compute now until"): // the policy's reason says it waits
	case ts.State == TrayComputing:
		ts.Line = cut("Computing now until " + until + ": " + strings.TrimPrefix(ts.Line, "Computing: "))
	case st.Decision.State == idle.StateComputing && strings.HasPrefix(ts.Line, "Idle: "):
		ts.Line = cut("Computing now until " + until + ", but " + strings.TrimPrefix(ts.Line, "Idle: "))
	default:
		ts.Line = cut("Compute now until " + until + ": " + ts.Line)
	}
	return ts
}

// computeItems are the menu's compute now items: for 1 hour, for
// ComputeHours hours and until the hours start (shown outside the
// owner's hours), or, while compute now is in force, its end.
func (t *Tray) computeItems(st TrayStatus, s traySnapshot) []TrayItem {
	forced := !st.ComputeUntil.IsZero()
	untilLabel, untilHidden := "", true
	if next, err := t.settings.NextHours(s.now); err == nil {
		loc := t.settings.Location()
		untilLabel, untilHidden = "Compute now until your hours start ("+clockText(next.In(loc), s.now.In(loc))+")", forced
	}
	stopLabel := labelComputeStop
	if forced {
		loc := t.settings.Location()
		stopLabel = "Stop computing now (it ends at " + clockText(st.ComputeUntil.In(loc), s.now.In(loc)) + ")"
	}
	return []TrayItem{
		{Action: ActionComputeHour, Label: labelComputeHour, Hidden: forced},
		{Action: ActionComputeHours, Label: labelComputeHours, Hidden: forced},
		{Action: ActionComputeUntilHours, Label: untilLabel, Hidden: untilHidden},
		{Action: ActionComputeStop, Label: stopLabel, Hidden: !forced},
	}
}

// override carries out a compute now or finish then pause item: it
// changes the owner's settings, makes the engine read them, and
// refreshes the menu.
func (t *Tray) override(a TrayAction) {
	ctx, cancel := context.WithTimeout(context.Background(), trayTimeout)
	defer cancel()
	now := t.deps.now()
	_, err := t.deps.Store.UpdateSettings(ctx, func(s *idle.Settings) error {
		switch a {
		case ActionComputeHour:
			s.SetComputeUntil(now.Add(time.Hour))
		case ActionComputeHours:
			s.SetComputeUntil(now.Add(ComputeHours * time.Hour))
		case ActionComputeUntilHours:
			next, err := s.NextHours(now)
			if err != nil {
				return err
			}
			s.SetComputeUntil(next)
		case ActionComputeStop:
			s.SetComputeUntil(time.Time{})
		case ActionFinishThenPause:
			s.SetFinishThenPause()
		}
		return nil
	})
	t.problem = ""
	if err != nil {
		what := "compute now"
		if a == ActionFinishThenPause {
			what = "finish and pause"
		}
		t.problem = "Could not " + what + ": " + err.Error()
		t.log.Error("Cannot change the owner's override", "action", a, "err", err)
	} else {
		t.deps.Engine.Reload()
	}
	t.cached.fresh = false
	t.Refresh()
}
