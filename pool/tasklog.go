package pool

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// A failed task's reason (RunTask) is one line naming the failure, then,
// when the program wrote a log on stderr, the end of that log: what the
// person who wrote the program needs to see why it failed. The reason is
// the failed replica's bytes, compared between devices like a result and
// stored by the pool, so it is deterministic (the program's log is) and
// bounded (MaxReasonBytes).

// MaxReasonBytes bounds a failed task's reason: RunTask never writes a
// longer one, and a pool refuses a submission with a longer one.
const MaxReasonBytes = maxReasonBytes

// Bounds of the program log a failure reason shows.
const (
	// maxLogLines is how many of the log's last lines are shown (before
	// a Go panic's report, which is shown besides).
	maxLogLines = 20
	// maxStackLines bounds the lines of a Go panic's report: the panic
	// and the frames of the failing goroutine.
	maxStackLines = 40
	// maxLogLineBytes bounds one line of the log as shown.
	maxLogLineBytes = 300
	// maxHeadBytes bounds the reason's first part, the worker's failure
	// and its hint (a trap's message may hold a WebAssembly stack).
	maxHeadBytes = 1024
)

// logHeader starts the program log in a failure reason, on its own line.
const logHeader = "program log:"

// failureReason joins the worker's failure (with its hint) and the end
// of the program's log (its stderr as the worker kept it) into a failed
// task's reason of at most MaxReasonBytes. goPanic says the program
// trapped, so its log may end with the Go runtime's report of a panic or
// fatal error, which is kept whole (up to maxStackLines) besides the
// log's last lines.
func failureReason(head string, stderr []byte, goPanic bool) string {
	head = clipBytes(strings.ToValidUTF8(head, "\uFFFD"), maxHeadBytes)
	if len(strings.TrimSpace(string(stderr))) == 0 {
		return head
	}
	budget := MaxReasonBytes - len(head) - len("\n"+logHeader)
	return head + "\n" + logHeader + programLog(stderr, budget, goPanic)
}

// programLog returns the end of a program's log for a failure reason,
// each line after a line break, in at most budget bytes: the last
// maxLogLines lines, preceded by "… N earlier lines cut" when some were,
// and, when goPanic and the log holds a Go runtime report ("panic: " or
// "fatal error: " at the start of a line, with the goroutine block that
// follows), that report after them, its frames cut at maxStackLines
// lines or half the budget. Lines are cut at maxLogLineBytes; invalid
// UTF-8 becomes U+FFFD (a reason travels as a JSON string).
func programLog(stderr []byte, budget int, goPanic bool) string {
	text := strings.ToValidUTF8(strings.TrimRight(string(stderr), "\r\n"), "\uFFFD")
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		lines[i] = clipBytes(strings.TrimRight(l, "\r"), maxLogLineBytes)
	}
	earlier, report := lines, []string(nil)
	if goPanic {
		if p, e := goReport(lines); p >= 0 {
			earlier, report = lines[:p], lines[p:e]
		}
	}
	// The earlier lines want at most maxLogLines lines and the line
	// saying what was cut; the report gets the rest of the budget, at
	// least half of it: it says where the program failed.
	maxCut := len(cutLine(earlier))
	want := maxCut
	for _, l := range earlier[max(0, len(earlier)-maxLogLines):] {
		want += 1 + len(l)
	}
	reportBudget := budget - min(want, budget/2)
	var shown []string
	used := 0
	for i, l := range report {
		cut := fmt.Sprintf("… %d more lines of the report cut", len(report)-i)
		last := i == len(report)-1
		if i == maxStackLines || used+1+len(l) > reportBudget || !last && used+1+len(l)+1+len(cut) > reportBudget {
			shown = append(shown, cut)
			used += 1 + len(cut)
			break
		}
		shown = append(shown, l)
		used += 1 + len(l)
	}
	// Then the last lines before it, as many as fit.
	budget -= used
	start, size := len(earlier), 0
	for start > 0 && len(earlier)-start < maxLogLines {
		l := earlier[start-1]
		// Room is kept for the line saying what was cut.
		if size+1+len(l)+maxCut > budget {
			break
		}
		size += 1 + len(l)
		start--
	}
	var b strings.Builder
	if start > 0 {
		b.WriteString(cutLine(earlier[:start]))
	}
	for _, l := range earlier[start:] {
		b.WriteString("\n")
		b.WriteString(l)
	}
	for _, l := range shown {
		b.WriteString("\n")
		b.WriteString(l)
	}
	return b.String()
}

// cutLine says, on a line of its own, what of the log before the lines
// shown is cut: the lines cut, and the bytes the worker dropped from the
// middle of a long log (its "[... N bytes omitted ...]" line).
func cutLine(cut []string) string {
	n, omitted := len(cut), ""
	for _, l := range cut {
		var b int64
		if !strings.HasPrefix(l, "[... ") {
			continue
		}
		if _, err := fmt.Sscanf(l, "[... %d bytes omitted ...]", &b); err == nil {
			n--
			omitted = fmt.Sprintf(", and %d bytes before some of them", b)
		}
	}
	if n == 1 {
		return "\n… 1 earlier line cut" + omitted
	}
	return fmt.Sprintf("\n… %d earlier lines cut%s", n, omitted)
}

// goReport finds the Go runtime's report of a panic or fatal error in a
// program's log lines: from the last line that starts with "panic: " or
// "fatal error: " through the first goroutine block after it ("goroutine
// 1 [running]:" and its frames, up to a blank line); without a goroutine
// block, that line and the lines up to a blank one. It returns the
// report's bounds [p, e), p = -1 when there is none.
func goReport(lines []string) (p, e int) {
	p = -1
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "panic: ") || strings.HasPrefix(lines[i], "fatal error: ") {
			p = i
			break
		}
	}
	if p < 0 {
		return -1, 0
	}
	e = p + 1
	for e < len(lines) && lines[e] != "" { // "[recovered]" panics, an indented "panic: "
		e++
	}
	g := e
	for g < len(lines) && lines[g] == "" {
		g++
	}
	if g < len(lines) && strings.HasPrefix(lines[g], "goroutine ") {
		e = g + 1
		for e < len(lines) && lines[e] != "" {
			e++
		}
	}
	return p, e
}

// clipBytes cuts s to at most max bytes at a rune boundary, marking the
// cut with "…".
func clipBytes(s string, max int) string {
	if len(s) <= max {
		return s
	}
	n := max - len("…")
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// ReasonSummary returns the first line of a failed task's reason: the
// failure in a few words, without the program log RunTask adds after it.
// Pools write it, not the whole reason, into the ledger.
func ReasonSummary(reason string) string {
	first, _, _ := strings.Cut(reason, "\n")
	return first
}
