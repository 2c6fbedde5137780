package agent

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"time"
)

// EventsFile is the event log's name in the home's data directory.
const EventsFile = "events.log"

// DefaultEventsMaxBytes is the size at which the event log is rotated:
// the file is renamed to EventsFile+".1" (replacing the older one) and a
// new one begun, so that the two take at most twice this.
const DefaultEventsMaxBytes = 256 << 10

// Event is one line of the event log: when it happened and what, in words
// for people ("pool lanparty unreachable (retrying)").
type Event struct {
	At    time.Time `json:"at"`
	Words string    `json:"words"`
}

// EventLog is a bounded log file of what happened to the donor, for
// people: pools joined and left, pauses for a game and resumes, a pool
// unreachable and reachable again, tasks handed back or abandoned,
// results rejected and why, the local store full and recovered. One line
// per event: the time (RFC 3339, this device's clock) and the words. One
// process writes it (the one holding the data directory's lock); its
// methods are safe for concurrent use, and a nil *EventLog discards
// events, so that it is optional wherever it is passed.
type EventLog struct {
	path     string
	maxBytes int64
	now      func() time.Time

	mu sync.Mutex
}

// NewEventLog returns the event log at path (conventionally EventsFile in
// the data directory), rotated when a line would take it past maxBytes
// (DefaultEventsMaxBytes when ≤ 0); now is the clock stamped on events
// (time.Now when nil). The file is made at the first event.
func NewEventLog(path string, maxBytes int64, now func() time.Time) *EventLog {
	if maxBytes <= 0 {
		maxBytes = DefaultEventsMaxBytes
	}
	if now == nil {
		now = time.Now
	}
	return &EventLog{path: path, maxBytes: maxBytes, now: now}
}

// Addf appends an event with the words of format and args, one line (line
// breaks in the words become spaces). It returns an error only when the
// file cannot be written; the donor logs it and goes on.
func (l *EventLog) Addf(format string, args ...any) error {
	if l == nil {
		return nil
	}
	words := strings.Join(strings.Fields(fmt.Sprintf(format, args...)), " ")
	l.mu.Lock()
	defer l.mu.Unlock()
	line := l.now().Format(time.RFC3339) + " " + words + "\n"
	if fi, err := os.Stat(l.path); err == nil && fi.Size() > 0 && fi.Size()+int64(len(line)) > l.maxBytes {
		if err := os.Rename(l.path, l.path+".1"); err != nil {
			return fmt.Errorf("rotate event log: %w", err)
		}
	}
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("open event log: %w", err)
	}
	if _, err := f.WriteString(line); err != nil {
		_ = f.Close()
		return fmt.Errorf("write event log: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write event log: %w", err)
	}
	return nil
}

// event adds an event to Config.Events; a failure is logged, not
// returned.
func (a *Agent) event(format string, args ...any) {
	if err := a.cfg.Events.Addf(format, args...); err != nil {
		a.log.Warn("Cannot write the event log", "err", err)
	}
}

// ReadEvents returns the last n events of the event log at path (n ≤ 0:
// all it keeps), oldest first, from the rotated file and the current one.
// No log yet is no events and no error; lines that do not parse are
// skipped.
func ReadEvents(path string, n int) ([]Event, error) {
	var out []Event
	for _, p := range []string{path + ".1", path} {
		evs, err := readEventFile(p)
		if err != nil {
			return nil, err
		}
		out = append(out, evs...)
	}
	if n > 0 && len(out) > n {
		out = out[len(out)-n:]
	}
	return out, nil
}

func readEventFile(path string) ([]Event, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read event log: %w", err)
	}
	defer f.Close()
	var out []Event
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		stamp, words, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		at, err := time.Parse(time.RFC3339, stamp)
		if err != nil {
			continue
		}
		out = append(out, Event{At: at, Words: words})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read event log %s: %w", path, err)
	}
	return out, nil
}

// Line writes the event for people with its time in loc: "14:02:07
// pool lanparty unreachable (retrying)", with the date when it is not
// now's day.
func (e Event) Line(loc *time.Location, now time.Time) string {
	t, n := e.At.In(loc), now.In(loc)
	stamp := t.Format("Mon 2 Jan 15:04:05")
	if t.YearDay() == n.YearDay() && t.Year() == n.Year() {
		stamp = t.Format("15:04:05")
	}
	return stamp + "  " + e.Words
}
