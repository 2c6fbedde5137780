package idle

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Weekdays is a set of days of the week, bit d for time.Weekday d. As
// text it is a comma-separated list of three-letter names and ranges:
// "Mon-Fri", "Sat,Sun", "Fri-Mon" (a range may wrap past Sunday); "daily"
// is every day.
type Weekdays uint8

// EveryDay is all seven days.
const EveryDay Weekdays = 1<<7 - 1

var dayNames = [7]string{"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"}

// Has reports whether d is in the set.
func (w Weekdays) Has(d time.Weekday) bool { return w&(1<<d) != 0 }

// String writes the set as ranges from Monday on: "Mon-Fri", "Sat,Sun",
// "daily".
func (w Weekdays) String() string {
	if w&EveryDay == EveryDay {
		return "daily"
	}
	var parts []string
	// Walk Mon..Sun (Sunday last, as people write weeks).
	order := [7]time.Weekday{time.Monday, time.Tuesday, time.Wednesday, time.Thursday, time.Friday, time.Saturday, time.Sunday}
	for i := 0; i < 7; {
		if !w.Has(order[i]) {
			i++
			continue
		}
		j := i
		for j+1 < 7 && w.Has(order[j+1]) {
			j++
		}
		switch {
		case j == i:
			parts = append(parts, dayNames[order[i]])
		case j == i+1:
			parts = append(parts, dayNames[order[i]], dayNames[order[j]])
		default:
			parts = append(parts, dayNames[order[i]]+"-"+dayNames[order[j]])
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// MarshalText implements encoding.TextMarshaler with String's form.
func (w Weekdays) MarshalText() ([]byte, error) { return []byte(w.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler; see ParseWeekdays.
func (w *Weekdays) UnmarshalText(b []byte) error {
	v, err := ParseWeekdays(string(b))
	if err != nil {
		return err
	}
	*w = v
	return nil
}

// ParseWeekdays parses "Mon-Fri", "sat,sun", "daily" (or "every day",
// "*"). Names are three letters or more ("Monday"), in any case.
func ParseWeekdays(s string) (Weekdays, error) {
	s = strings.TrimSpace(strings.ToLower(s))
	switch s {
	case "daily", "every day", "everyday", "*", "all":
		return EveryDay, nil
	case "":
		return 0, fmt.Errorf("no days given")
	}
	var w Weekdays
	for part := range strings.SplitSeq(s, ",") {
		from, to, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := parseDay(from)
		if err != nil {
			return 0, err
		}
		b := a
		if isRange {
			if b, err = parseDay(to); err != nil {
				return 0, err
			}
		}
		for d := a; ; d = (d + 1) % 7 {
			w |= 1 << d
			if d == b {
				break
			}
		}
	}
	return w, nil
}

func parseDay(s string) (time.Weekday, error) {
	s = strings.TrimSpace(s)
	if len(s) >= 3 {
		for d, n := range dayNames {
			if strings.EqualFold(s[:3], n) && strings.HasPrefix(strings.ToLower(time.Weekday(d).String()), strings.ToLower(s)) {
				return time.Weekday(d), nil
			}
		}
	}
	return 0, fmt.Errorf("%q is not a day of the week (Mon, Tue, ... Sun)", s)
}

// Clock is a wall-clock time of day in minutes after midnight, 0..1440;
// 1440 ("24:00") is the end of the day. As text it is "HH:MM".
type Clock int

// String writes "HH:MM".
func (c Clock) String() string { return fmt.Sprintf("%02d:%02d", int(c)/60, int(c)%60) }

// MarshalText implements encoding.TextMarshaler: "HH:MM".
func (c Clock) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler; see ParseClock.
func (c *Clock) UnmarshalText(b []byte) error {
	v, err := ParseClock(string(b))
	if err != nil {
		return err
	}
	*c = v
	return nil
}

// ParseClock parses "22:00", "7:30", "24:00" or a bare hour "22".
func ParseClock(s string) (Clock, error) {
	s = strings.TrimSpace(s)
	hs, ms, hasMin := strings.Cut(s, ":")
	h, err := strconv.Atoi(hs)
	m := 0
	if err == nil && hasMin {
		if len(ms) != 2 {
			err = fmt.Errorf("minutes need two digits")
		} else {
			m, err = strconv.Atoi(ms)
		}
	}
	if err != nil || h < 0 || m < 0 || m > 59 || h*60+m > 1440 {
		return 0, fmt.Errorf("%q is not a time of day (HH:MM, 00:00 to 24:00)", s)
	}
	return Clock(h*60 + m), nil
}

// Window is a span of allowed hours in local wall-clock time that starts
// on each of Days at Start and ends at End. An End at or before Start
// crosses midnight: {Mon-Fri 22:00 07:00} runs from Monday 22:00 to
// Tuesday 07:00, ..., Friday 22:00 to Saturday 07:00. "00:00"–"24:00" is
// the whole day.
//
// Windows follow the wall clock, so daylight-saving changes are handled
// the way a person reading the clock would expect: on the night clocks go
// forward an hour that does not exist is in no window (a 02:00–03:00
// window is empty that day, a 22:00–07:00 window lasts 8 hours); on the
// night they go back the repeated hour is in a window both times (a
// 02:00–03:00 window lasts two hours, a 22:00–07:00 one 10 hours).
type Window struct {
	Days  Weekdays `json:"days"`
	Start Clock    `json:"start"`
	End   Clock    `json:"end"`
}

// String writes "Mon-Fri 22:00-07:00".
func (w Window) String() string { return fmt.Sprintf("%s %s-%s", w.Days, w.Start, w.End) }

// crosses reports whether the window ends on the day after it starts.
func (w Window) crosses() bool { return w.End <= w.Start }

// validate checks the window's fields.
func (w Window) validate() error {
	switch {
	case w.Days&EveryDay == 0:
		return fmt.Errorf("window %s has no days", w)
	case w.Start < 0 || w.Start >= 1440:
		return fmt.Errorf("window %s: start must be 00:00 to 23:59", w)
	case w.End < 0 || w.End > 1440:
		return fmt.Errorf("window %s: end must be 00:00 to 24:00", w)
	case w.Start == w.End:
		return fmt.Errorf("window %s is empty: start and end are the same (use 00:00-24:00 for a whole day)", w)
	}
	return nil
}

// contains reports whether the local wall-clock reading (day, minute of
// day) is inside the window.
func (w Window) contains(day time.Weekday, minute Clock) bool {
	if !w.crosses() {
		return w.Days.Has(day) && minute >= w.Start && minute < w.End
	}
	if w.Days.Has(day) && minute >= w.Start {
		return true
	}
	return w.Days.Has((day+6)%7) && minute < w.End
}

// Schedule is the weekly allowed hours: a time is allowed when it is in
// any window. An empty Schedule allows any time. As text (ParseSchedule,
// String) windows are separated by ";": "Mon-Fri 22:00-07:00; Sat,Sun
// 00:00-24:00", or "always".
type Schedule []Window

// String writes the schedule as ParseSchedule reads it; "always" when
// empty.
func (s Schedule) String() string {
	if len(s) == 0 {
		return "always"
	}
	parts := make([]string, len(s))
	for i, w := range s {
		parts[i] = w.String()
	}
	return strings.Join(parts, "; ")
}

// ParseSchedule parses windows separated by ";", each "DAYS START-END"
// ("Mon-Fri 22:00-07:00") or "DAYS" alone for whole days ("Sat,Sun"), or
// "START-END" alone for every day ("22:00-07:00"). "always", "any" and ""
// are the empty Schedule: any time.
func ParseSchedule(text string) (Schedule, error) {
	text = strings.TrimSpace(text)
	switch strings.ToLower(text) {
	case "", "always", "any", "anytime", "any time":
		return nil, nil
	}
	var s Schedule
	for part := range strings.SplitSeq(text, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		days, span := "daily", part
		if i := strings.LastIndexByte(part, ' '); i >= 0 {
			days, span = part[:i], strings.TrimSpace(part[i+1:])
		}
		if span[0] < '0' || span[0] > '9' { // days without hours: whole days
			days, span = part, "00:00-24:00"
		}
		var w Window
		var err error
		if w.Days, err = ParseWeekdays(days); err != nil {
			return nil, fmt.Errorf("window %q: %w", part, err)
		}
		from, to, ok := strings.Cut(span, "-")
		if !ok {
			return nil, fmt.Errorf("window %q: hours must be START-END, e.g. 22:00-07:00", part)
		}
		if w.Start, err = ParseClock(from); err != nil {
			return nil, fmt.Errorf("window %q: %w", part, err)
		}
		if w.End, err = ParseClock(to); err != nil {
			return nil, fmt.Errorf("window %q: %w", part, err)
		}
		if err := w.validate(); err != nil {
			return nil, err
		}
		s = append(s, w)
	}
	return s, nil
}

// Allows reports whether t, read on the wall clock of loc, is in the
// schedule.
func (s Schedule) Allows(t time.Time, loc *time.Location) bool {
	if len(s) == 0 {
		return true
	}
	t = t.In(loc)
	h, m, _ := t.Clock()
	day, minute := t.Weekday(), Clock(h*60+m)
	for _, w := range s {
		if w.contains(day, minute) {
			return true
		}
	}
	return false
}

// Next returns the first moment after t at which a window opens (the
// schedule allows it and did not allow the minute before), searching eight
// days ahead; ok is false when none does (an empty schedule, or one that
// allows every minute). It walks whole minutes of real time, so a window
// whose start falls in the hour skipped when clocks go forward opens when
// the clock first reads a time inside it (02:30–04:00 opens at 03:00).
func (s Schedule) Next(t time.Time, loc *time.Location) (next time.Time, ok bool) {
	if len(s) == 0 {
		return time.Time{}, false
	}
	u := t.Truncate(time.Minute)
	was := s.Allows(u, loc)
	for range 8 * 24 * 60 {
		u = u.Add(time.Minute)
		now := s.Allows(u, loc)
		if now && !was {
			return u.In(loc), true
		}
		was = now
	}
	return time.Time{}, false
}

// Left returns how long from t the schedule keeps allowing without a
// break: 0 when it does not allow t, and ok false when the allowed span
// does not end within eight days (an empty schedule, or one that allows
// every minute). Windows that touch ("Sat 00:00-24:00; Sun") are one span.
// The span can only end at a window's End, so only those moments, on the
// wall clock of loc, are looked at; an End in the hour skipped when
// clocks go forward is read as time.Date normalises it.
func (s Schedule) Left(t time.Time, loc *time.Location) (left time.Duration, ok bool) {
	if len(s) == 0 {
		return 0, false
	}
	if !s.Allows(t, loc) {
		return 0, true
	}
	lt := t.In(loc)
	y, m, d := lt.Date()
	var end time.Time
	for day := range 9 {
		for _, w := range s {
			at := time.Date(y, m, d+day, int(w.End)/60, int(w.End)%60, 0, 0, loc)
			if !at.After(t) || (!end.IsZero() && !at.Before(end)) || s.Allows(at, loc) {
				continue
			}
			end = at
		}
		if !end.IsZero() {
			return end.Sub(t), true
		}
	}
	return 0, false
}
