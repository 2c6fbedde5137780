package energy

import (
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the zones below on any machine
)

func TestParseTariff(t *testing.T) {
	tests := []struct {
		in      string
		want    string // String of the result
		at      map[int]float64
		wantErr string
	}{
		{in: "0.32 EUR", want: "0.32 EUR", at: map[int]float64{0: 0.32, 23: 0.32}},
		{in: "EUR/kWh 0.32", want: "0.32 EUR", at: map[int]float64{12: 0.32}},
		{in: "EUR 0.35 23-7=0.15", want: "EUR 0.35 23-7=0.15", at: map[int]float64{22: 0.35, 23: 0.15, 0: 0.15, 6: 0.15, 7: 0.35}},
		{in: "USD 0-12=0.1 12-24=0.2", want: "USD 0.1 12-24=0.2", at: map[int]float64{11: 0.1, 12: 0.2, 23: 0.2}},
		{in: "", want: ""},
		{in: "none", want: ""},
		{in: "0.32", wantErr: "no currency"},
		{in: "EUR -1", wantErr: "negative"},
		{in: "EUR 0.3 25-3=0.1", wantErr: "whole hours 0..24"},
		{in: "EUR 0-12=0.1", wantErr: "no price for 12:00"},
		{in: "EUR 0.3 0-8=0.1 6-9=0.2", wantErr: "hour 6:00 has two prices"},
		{in: "EUR 0.3 0.4", wantErr: "two prices for every hour"},
		{in: "EUR 0.3 6-8=cheap", wantErr: `price "cheap" is not a number`},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseTariff(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseTariff(%q) = %v, want an error with %q", tc.in, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.String() != tc.want {
				t.Errorf("String = %q, want %q", got.String(), tc.want)
			}
			again, err := ParseTariff(got.String())
			if err != nil || again != got {
				t.Errorf("ParseTariff(String()) = %v, %v; want the same tariff", again, err)
			}
			for h, p := range tc.at {
				if got.PerKWh[h] != p {
					t.Errorf("price at %d:00 = %g, want %g", h, got.PerKWh[h], p)
				}
			}
		})
	}
}

// A task across midnight pays each hour's price; on the days clocks
// change, the repeated hour counts twice and the skipped one not at all.
func TestTariffCostByHour(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	night, err := ParseTariff("EUR 0.40 23-1=0.10 2-3=1.00")
	if err != nil {
		t.Fatal(err)
	}
	kWh := JoulesPerKWh
	tests := []struct {
		name       string
		start, end time.Time
		joules     float64
		want       float64
	}{
		{"one hour", time.Date(2026, 6, 1, 12, 0, 0, 0, berlin), time.Date(2026, 6, 1, 13, 0, 0, 0, berlin), kWh, 0.40},
		{"across midnight", time.Date(2026, 6, 1, 22, 30, 0, 0, berlin), time.Date(2026, 6, 2, 0, 30, 0, 0, berlin), 4 * kWh,
			1*0.40 + 2*0.10 + 1*0.10},
		// 25 October 2026: 03:00 CEST becomes 02:00 CET; 02:00-03:00 is
		// lived twice. 01:00 to 04:00 is four real hours: 1.0 kWh each.
		{"clocks back", time.Date(2026, 10, 25, 1, 0, 0, 0, berlin), time.Date(2026, 10, 25, 4, 0, 0, 0, berlin), 4 * kWh,
			0.40 + 1.00 + 1.00 + 0.40},
		// 29 March 2026: 02:00 CET becomes 03:00 CEST; the expensive hour
		// never happens. 01:00 to 04:00 is two real hours.
		{"clocks forward", time.Date(2026, 3, 29, 1, 0, 0, 0, berlin), time.Date(2026, 3, 29, 4, 0, 0, 0, berlin), 2 * kWh,
			0.40 + 0.40},
		{"an instant", time.Date(2026, 6, 1, 23, 10, 0, 0, berlin), time.Date(2026, 6, 1, 23, 10, 0, 0, berlin), kWh, 0.10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := night.Cost(tc.joules, tc.start, tc.end, berlin); !near(got, tc.want) {
				t.Errorf("Cost = %.6f, want %.6f", got, tc.want)
			}
		})
	}
	// India's half-hour offset: hours begin at :00 local time, not UTC.
	kolkata, err := time.LoadLocation("Asia/Kolkata")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 6, 1, 22, 0, 0, 0, kolkata)
	if got := night.Cost(2*kWh, start, start.Add(2*time.Hour), kolkata); !near(got, 0.40+0.10) {
		t.Errorf("Cost in Kolkata = %g, want 0.50", got)
	}
}

func TestTariffNextBelow(t *testing.T) {
	tr, _ := ParseTariff("EUR 0.40 23-6=0.10")
	at := time.Date(2026, 6, 1, 14, 20, 0, 0, time.UTC)
	next, ok := tr.NextBelow(at, time.UTC, 0.2)
	if want := time.Date(2026, 6, 1, 23, 0, 0, 0, time.UTC); !ok || !next.Equal(want) {
		t.Errorf("NextBelow = %s, %v; want %s", next, ok, want)
	}
	if _, ok := tr.NextBelow(at, time.UTC, 0.05); ok {
		t.Error("NextBelow found an hour below every price")
	}
}

func TestFormat(t *testing.T) {
	tests := []struct{ got, want string }{
		{FormatKWh(44280, Measured), "0.0123 kWh"},
		{FormatKWh(44280, Sampled), "0.012 kWh"},
		{FormatKWh(44280, Estimated), "~0.01 kWh"},
		{FormatKWh(7.2e6, Measured), "2 kWh"},
		{FormatWatts(42.14, Measured), "42.1 W"},
		{FormatCO2(5.93, Estimated), "~6 g"},
		{FormatCost(0.0412, "EUR", Measured), "0.04 EUR"},
		{FormatCost(0.00412, "EUR", Measured), "0.00412 EUR"},
		{FormatCost(12.345, "EUR", Measured), "12.3 EUR"},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
	if CO2Grams(JoulesPerKWh, 0) != DefaultCO2GramsPerKWh {
		t.Error("CO2Grams with no intensity does not use the default")
	}
}
