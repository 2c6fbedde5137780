package idle

import (
	"strings"
	"testing"
	"time"

	"idlepool/energy"
)

// The donor's energy limits: a price bound on an hourly tariff across
// midnight and the days clocks change, quiet hours, and caps that pause
// and resume, each saying why in the reason line.
func TestDecideEnergyLimits(t *testing.T) {
	loc := berlin(t)
	tariff := func(s string) energy.Tariff {
		tr, err := energy.ParseTariff(s)
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	used := func(day, month float64) func(*Signals) {
		return func(s *Signals) {
			s.EnergyUsed = Reading[EnergyUsed]{Value: EnergyUsed{DayKWh: day, MonthKWh: month}, Known: true}
		}
	}
	at := func(y int, m time.Month, d, h, min int) time.Time { return time.Date(y, m, d, h, min, 0, 0, loc) }
	tests := []struct {
		name   string
		set    func(*Settings)
		now    time.Time
		sig    func(*Signals)
		state  State
		hold   Hold
		reason string // substring
	}{
		{name: "night tariff: evening is dear", set: func(s *Settings) { s.Tariff, s.MaxPricePerKWh = tariff("EUR 0.35 23-7=0.12"), 0.2 },
			now: at(2026, 6, 10, 22, 30), state: StateWaiting, hold: HoldHours,
			reason: "waiting: electricity costs 0.35 EUR/kWh now, above your 0.2 (cheaper from Wed 23:00)"},
		{name: "night tariff: before midnight", set: func(s *Settings) { s.Tariff, s.MaxPricePerKWh = tariff("EUR 0.35 23-7=0.12"), 0.2 },
			now: at(2026, 6, 10, 23, 30), state: StateComputing},
		{name: "night tariff: after midnight", set: func(s *Settings) { s.Tariff, s.MaxPricePerKWh = tariff("EUR 0.35 23-7=0.12"), 0.2 },
			now: at(2026, 6, 11, 6, 59), state: StateComputing},
		{name: "night tariff: morning", set: func(s *Settings) { s.Tariff, s.MaxPricePerKWh = tariff("EUR 0.35 23-7=0.12"), 0.2 },
			now: at(2026, 6, 11, 7, 0), state: StateWaiting, reason: "cheaper from Thu 23:00"},
		// 29 March 2026: clocks go from 02:00 to 03:00, so the cheap hour
		// 2-3 does not happen that night.
		{name: "cheap hour skipped by the clocks", set: func(s *Settings) { s.Tariff, s.MaxPricePerKWh = tariff("EUR 0.35 2-3=0.10"), 0.2 },
			now: at(2026, 3, 29, 1, 30), state: StateWaiting, reason: "(cheaper from Mon 02:00)"},
		// 25 October 2026: 02:00 to 03:00 happens twice; both are cheap.
		{name: "cheap hour lived twice, first", set: func(s *Settings) { s.Tariff, s.MaxPricePerKWh = tariff("EUR 0.35 2-3=0.10"), 0.2 },
			now: time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC), state: StateComputing},
		{name: "cheap hour lived twice, second", set: func(s *Settings) { s.Tariff, s.MaxPricePerKWh = tariff("EUR 0.35 2-3=0.10"), 0.2 },
			now: time.Date(2026, 10, 25, 1, 30, 0, 0, time.UTC), state: StateComputing},
		{name: "quiet hours", set: func(s *Settings) { s.QuietHours, _ = ParseSchedule("daily 22:00-07:00") },
			now: at(2026, 6, 10, 23, 0), state: StateWaiting, hold: HoldHours, reason: "waiting: quiet hours until Thu 07:00"},
		{name: "after quiet hours", set: func(s *Settings) { s.QuietHours, _ = ParseSchedule("daily 22:00-07:00") },
			now: at(2026, 6, 11, 7, 0), state: StateComputing},
		{name: "day cap reached", set: func(s *Settings) { s.EnergyDayKWh = 2 }, sig: used(2, 2),
			now: at(2026, 6, 10, 15, 0), state: StatePaused, hold: HoldLimit, reason: "paused: today's 2 kWh are used (resuming at midnight)"},
		{name: "day cap: a new day", set: func(s *Settings) { s.EnergyDayKWh = 2 }, sig: used(0, 2),
			now: at(2026, 6, 11, 0, 1), state: StateComputing},
		{name: "month cap reached", set: func(s *Settings) { s.EnergyDayKWh, s.EnergyMonthKWh = 2, 30 }, sig: used(0.5, 30.2),
			now: at(2026, 6, 10, 15, 0), state: StatePaused, hold: HoldLimit, reason: "paused: this month's 30 kWh are used"},
		{name: "cap with the usage unknown", set: func(s *Settings) { s.EnergyDayKWh = 2 },
			now: at(2026, 6, 10, 15, 0), state: StateComputing},
		{name: "compute now overrides the caps", set: func(s *Settings) {
			s.EnergyDayKWh = 2
			s.ComputeUntil = time.Date(2026, 6, 10, 16, 0, 0, 0, loc)
		}, sig: used(3, 3), now: at(2026, 6, 10, 15, 0), state: StateComputing},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := Defaults()
			s.TimeZone = "Europe/Berlin"
			tc.set(&s)
			if err := s.Validate(); err != nil {
				t.Fatal(err)
			}
			sig := idleDesktop(tc.now)
			if tc.sig != nil {
				tc.sig(&sig)
			}
			d, _ := Decide(s, sig, tc.now, time.Hour, PolicyState{})
			if d.State != tc.state || (tc.hold != "" && d.Hold != tc.hold) || !strings.Contains(d.Reason, tc.reason) {
				t.Errorf("Decide = %s %q (hold %q), want %s with %q (hold %q)", d.State, d.Reason, d.Hold, tc.state, tc.reason, tc.hold)
			}
			// The cause and its end, for the hand-back of a suspended task.
			var cause Cause
			switch {
			case strings.Contains(d.Reason, "quiet hours"):
				cause = CauseQuiet
			case strings.Contains(d.Reason, "electricity costs"):
				cause = CausePrice
			case strings.Contains(d.Reason, "kWh are used"):
				cause = CauseEnergy
			}
			if d.Cause != cause || (cause != "" && !d.Until.After(tc.now)) {
				t.Errorf("cause %q until %s, want %q with an end after now", d.Cause, d.Until, cause)
			}
			if cause == CauseEnergy && strings.Contains(d.Reason, "today's") && !d.Until.Equal(time.Date(2026, 6, 11, 0, 0, 0, 0, loc)) {
				t.Errorf("the day cap lasts until %s, want the next midnight", d.Until)
			}
		})
	}
}

func TestEnergySettings(t *testing.T) {
	now := time.Date(2026, 6, 10, 12, 0, 0, 0, time.UTC)
	s := Defaults()
	for _, kv := range [][2]string{{"tariff", "EUR 0.35 23-7=0.12"}, {"max_price", "0.2"}, {"energy_day", "2kWh"},
		{"energy_month", "40"}, {"co2", "350"}, {"cpu_rated_w", "105W"}, {"quiet_hours", "daily 22:00-07:00"}, {"gpu_power", "150W"}} {
		if err := s.Set(kv[0], kv[1], now); err != nil {
			t.Fatalf("Set(%s=%s): %v", kv[0], kv[1], err)
		}
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	b, err := s.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	back := Defaults()
	if err := back.UnmarshalJSON(b); err != nil {
		t.Fatal(err)
	}
	if back.Tariff != s.Tariff || back.MaxPricePerKWh != 0.2 || back.EnergyDayKWh != 2 || back.EnergyMonthKWh != 40 ||
		back.CO2GramsPerKWh != 350 || back.CPURatedW != 105 || back.QuietHours.String() != s.QuietHours.String() || back.GPUPowerW != 150 {
		t.Errorf("settings after a JSON round trip: %+v", back)
	}

	for _, tc := range []struct{ key, value, want string }{
		{"energy_day", "lots", `"lots" is not kWh`},
		{"co2", "-3", `"-3" is not grams per kWh`},
		{"tariff", "0.3", "no currency"},
		{"gpu_power", "much", `"much" is not watts`},
	} {
		d := Defaults()
		if err := d.Set(tc.key, tc.value, now); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Set(%s=%s) = %v, want %q", tc.key, tc.value, err, tc.want)
		}
	}
	noTariff := Defaults()
	noTariff.MaxPricePerKWh = 0.2
	if err := noTariff.Validate(); err == nil || !strings.Contains(err.Error(), "set tariff first") {
		t.Errorf("max_price without a tariff: Validate = %v", err)
	}
	tiny := Defaults()
	tiny.GPUPowerW = 5
	if err := tiny.Validate(); err == nil || !strings.Contains(err.Error(), "gpu_power_w: must be 0 (no ceiling) or 10 to 2000 W") {
		t.Errorf("gpu_power=5: Validate = %v", err)
	}
}
