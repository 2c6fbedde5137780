package idle

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseSchedule(t *testing.T) {
	weekdays := EveryDay &^ (1<<time.Saturday | 1<<time.Sunday)
	weekend := Weekdays(1<<time.Saturday | 1<<time.Sunday)
	tests := []struct {
		in     string
		want   Schedule
		string string
	}{
		{"always", nil, "always"},
		{"", nil, "always"},
		{"Mon-Fri 22:00-07:00", Schedule{{weekdays, 22 * 60, 7 * 60}}, "Mon-Fri 22:00-07:00"},
		{"mon-fri 22:00-07:00; Sat,Sun", Schedule{{weekdays, 22 * 60, 7 * 60}, {weekend, 0, 1440}}, "Mon-Fri 22:00-07:00; Sat,Sun 00:00-24:00"},
		{"22-7", Schedule{{EveryDay, 22 * 60, 7 * 60}}, "daily 22:00-07:00"},
		{"Fri-Mon 9:30-17:00", Schedule{{1<<time.Friday | weekend | 1<<time.Monday, 9*60 + 30, 17 * 60}}, "Mon,Fri-Sun 09:30-17:00"},
		{"Wednesday 00:00-24:00", Schedule{{1 << time.Wednesday, 0, 1440}}, "Wed 00:00-24:00"},
		{"Mon,Wed,Thu 01:00-02:00", Schedule{{1<<time.Monday | 1<<time.Wednesday | 1<<time.Thursday, 60, 120}}, "Mon,Wed,Thu 01:00-02:00"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseSchedule(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if s := got.String(); s != tc.string {
				t.Errorf("String() = %q, want %q", s, tc.string)
			}
			again, err := ParseSchedule(got.String())
			if err != nil || !cmp.Equal(again, got) {
				t.Errorf("String() does not parse back: %v %v", again, err)
			}
		})
	}
}

func TestParseScheduleErrors(t *testing.T) {
	for in, want := range map[string]string{
		"Mon-Fri 22:00":        `hours must be START-END`,
		"Funday 10:00-11:00":   `"funday" is not a day of the week`,
		"Mon 25:00-26:00":      `"25:00" is not a time of day`,
		"Mon 10:00-10:00":      "is empty",
		"Mon 10:7-11:00":       `"10:7" is not a time of day`,
		"Mon 24:00-01:00":      "start must be 00:00 to 23:59",
		"Mo 10:00-11:00":       `"mo" is not a day of the week`,
		"Mon-Fri 10:00-11:00;": "", // a trailing separator is fine
	} {
		_, err := ParseSchedule(in)
		switch {
		case want == "" && err != nil:
			t.Errorf("ParseSchedule(%q): %v", in, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("ParseSchedule(%q) = %v, want an error containing %q", in, err, want)
		}
	}
}

// allowedMinutes counts the minutes of real time in [from, to) that s
// allows.
func allowedMinutes(s Schedule, from, to time.Time, loc *time.Location) int {
	n := 0
	for u := from; u.Before(to); u = u.Add(time.Minute) {
		if s.Allows(u, loc) {
			n++
		}
	}
	return n
}

// TestScheduleDST: windows follow the wall clock of Europe/Berlin across
// the last Sundays of March (02:00 → 03:00) and October (03:00 → 02:00)
// 2026.
func TestScheduleDST(t *testing.T) {
	loc := berlin(t)
	sunday := Weekdays(1 << time.Sunday)
	saturday := Weekdays(1 << time.Saturday)
	tests := []struct {
		name     string
		s        Schedule
		from, to time.Time
		minutes  int
	}{
		{"spring forward: 02:00-03:00 does not exist", Schedule{{sunday, 120, 180}},
			time.Date(2026, 3, 29, 0, 0, 0, 0, loc), time.Date(2026, 3, 30, 0, 0, 0, 0, loc), 0},
		{"spring forward: 01:00-04:00 lasts two hours", Schedule{{sunday, 60, 240}},
			time.Date(2026, 3, 29, 0, 0, 0, 0, loc), time.Date(2026, 3, 30, 0, 0, 0, 0, loc), 120},
		{"spring forward: 22:00-07:00 across midnight lasts 8 hours", Schedule{{saturday, 22 * 60, 7 * 60}},
			time.Date(2026, 3, 28, 12, 0, 0, 0, loc), time.Date(2026, 3, 29, 12, 0, 0, 0, loc), 8 * 60},
		{"fall back: 02:00-03:00 happens twice", Schedule{{sunday, 120, 180}},
			time.Date(2026, 10, 25, 0, 0, 0, 0, loc), time.Date(2026, 10, 26, 0, 0, 0, 0, loc), 120},
		{"fall back: 22:00-07:00 across midnight lasts 10 hours", Schedule{{saturday, 22 * 60, 7 * 60}},
			time.Date(2026, 10, 24, 12, 0, 0, 0, loc), time.Date(2026, 10, 25, 12, 0, 0, 0, loc), 10 * 60},
		{"an ordinary night: 22:00-07:00 lasts 9 hours", Schedule{{saturday, 22 * 60, 7 * 60}},
			time.Date(2026, 3, 21, 12, 0, 0, 0, loc), time.Date(2026, 3, 22, 12, 0, 0, 0, loc), 9 * 60},
		{"whole days", Schedule{{saturday | sunday, 0, 1440}},
			time.Date(2026, 3, 27, 0, 0, 0, 0, loc), time.Date(2026, 3, 31, 0, 0, 0, 0, loc), 47 * 60},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := allowedMinutes(tc.s, tc.from, tc.to, loc); got != tc.minutes {
				t.Errorf("allowed %d minutes, want %d", got, tc.minutes)
			}
		})
	}
}

func TestScheduleNext(t *testing.T) {
	loc := berlin(t)
	tests := []struct {
		name string
		s    Schedule
		at   time.Time
		want time.Time // zero: none
	}{
		{"later today", Schedule{{EveryDay, 22 * 60, 7 * 60}}, time.Date(2026, 3, 10, 12, 0, 0, 0, loc), time.Date(2026, 3, 10, 22, 0, 0, 0, loc)},
		{"over the weekend", Schedule{{EveryDay &^ (1<<time.Saturday | 1<<time.Sunday), 22 * 60, 7 * 60}},
			time.Date(2026, 3, 14, 12, 0, 0, 0, loc), time.Date(2026, 3, 16, 22, 0, 0, 0, loc)},
		{"start in the skipped hour opens at 03:00 CEST", Schedule{{1 << time.Sunday, 150, 240}},
			time.Date(2026, 3, 29, 1, 0, 0, 0, loc), time.Date(2026, 3, 29, 3, 0, 0, 0, loc)},
		{"a window that never exists this week: next week's", Schedule{{1 << time.Sunday, 120, 180}},
			time.Date(2026, 3, 29, 1, 0, 0, 0, loc), time.Date(2026, 4, 5, 2, 0, 0, 0, loc)},
		{"always: no next", nil, time.Date(2026, 3, 10, 12, 0, 0, 0, loc), time.Time{}},
		{"every minute: no next", Schedule{{EveryDay, 0, 1440}}, time.Date(2026, 3, 10, 12, 0, 0, 0, loc), time.Time{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tc.s.Next(tc.at, loc)
			if ok != !tc.want.IsZero() || !got.Equal(tc.want) {
				t.Errorf("Next = %v, %v; want %v", got, ok, tc.want)
			}
		})
	}
}

func TestScheduleJSON(t *testing.T) {
	s, err := ParseSchedule("Mon-Fri 22:00-07:00; Sat,Sun")
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"days":"Mon-Fri","start":"22:00","end":"07:00"},{"days":"Sat,Sun","start":"00:00","end":"24:00"}]`
	if string(b) != want {
		t.Errorf("JSON %s, want %s", b, want)
	}
	var back Schedule
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(s, back); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

func TestScheduleLeft(t *testing.T) {
	loc := berlin(t)
	weekdays := EveryDay &^ (1<<time.Saturday | 1<<time.Sunday)
	tests := []struct {
		name string
		s    Schedule
		at   time.Time
		left time.Duration
		ok   bool
	}{
		{"79 s before a night window ends", Schedule{{weekdays, 22 * 60, 7 * 60}},
			time.Date(2026, 3, 10, 6, 58, 41, 0, loc), 79 * time.Second, true},
		{"across midnight", Schedule{{weekdays, 22 * 60, 7 * 60}},
			time.Date(2026, 3, 10, 23, 0, 0, 0, loc), 8 * time.Hour, true},
		{"outside: nothing left", Schedule{{weekdays, 22 * 60, 7 * 60}},
			time.Date(2026, 3, 10, 12, 0, 0, 0, loc), 0, true},
		{"touching windows are one span", Schedule{{1 << time.Saturday, 0, 1440}, {1 << time.Sunday, 0, 12 * 60}},
			time.Date(2026, 3, 14, 20, 0, 0, 0, loc), 16 * time.Hour, true},
		{"the earlier of two windows' ends", Schedule{{EveryDay, 8 * 60, 12 * 60}, {EveryDay, 10 * 60, 18 * 60}},
			time.Date(2026, 3, 10, 9, 0, 0, 0, loc), 9 * time.Hour, true},
		{"a window to 24:00", Schedule{{1 << time.Tuesday, 20 * 60, 1440}},
			time.Date(2026, 3, 10, 23, 30, 0, 0, loc), 30 * time.Minute, true},
		{"fall back: the night lasts an hour longer", Schedule{{1 << time.Saturday, 22 * 60, 7 * 60}},
			time.Date(2026, 10, 25, 1, 0, 0, 0, loc), 7 * time.Hour, true},
		{"always: no end", nil, time.Date(2026, 3, 10, 12, 0, 0, 0, loc), 0, false},
		{"every minute: no end", Schedule{{EveryDay, 0, 1440}}, time.Date(2026, 3, 10, 12, 0, 0, 0, loc), 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			left, ok := tc.s.Left(tc.at, loc)
			if left != tc.left || ok != tc.ok {
				t.Errorf("Left = %v, %v; want %v, %v", left, ok, tc.left, tc.ok)
			}
		})
	}
}
