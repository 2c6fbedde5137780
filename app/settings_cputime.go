package app

import (
	"fmt"
	"strings"

	"fyne.io/fyne/v2/widget"

	"idlepool/idle"
)

// cpuTimeHelp explains the field of idle.Settings.CPUTimeShare.
const cpuTimeHelp = "How hard to work: the percentage of time each task computes on its core, such as 50 for half of it. " +
	"Empty: all of the time."

// idlePriorityHelp explains the check mark of the idle priority.
const idlePriorityHelp = "Ticked, tasks compute only when no other program wants the processor (the system's idle priority). " +
	"Unticked, they run at a low priority and still progress while other programs keep it busy."

// cpuTimeMsg is the message of a CPU time the field refuses.
var cpuTimeMsg = fmt.Sprintf("The time on each core must be a percentage from %.0f to 100, or empty for all of the time.", idle.MinCPUTimeShare*100)

// cpuTimeControls builds the Computer tab's controls of how hard to work,
// shown beside the cores: the share of time on each core (empty for no
// limit) and the check mark of the OS's idle priority.
func cpuTimeControls(s idle.Settings) (*widget.Entry, *widget.Label, *widget.Check) {
	entry := widget.NewEntry()
	entry.SetPlaceHolder("100 (all of the time)")
	if s.CPUTimeShare > 0 {
		entry.SetText(formatPercent(s.CPUTimeShare))
	}
	check := widget.NewCheck("Idle priority", nil)
	check.SetChecked(!s.NoIdlePriority)
	return entry, newErrorLabel(), check
}

// parseCPUTime reads the field of the time on each core: empty (or 100%)
// is no limit (0), else a percentage from idle.MinCPUTimeShare; ok is
// false for anything else.
func parseCPUTime(text string) (share float64, ok bool) {
	if strings.TrimSpace(text) == "" {
		return 0, true
	}
	pct, ok := parseNumber(text, idle.MinCPUTimeShare*100, 100, "%")
	if !ok {
		return 0, false
	}
	if pct == 100 {
		return 0, true
	}
	return pct / 100, true
}
