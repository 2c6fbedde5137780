package energy

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// JoulesPerKWh converts joules to kilowatt-hours.
const JoulesPerKWh = 3.6e6

// DefaultCO2GramsPerKWh is the carbon intensity assumed when the donor set
// none: 480 g of CO2 per kWh, the world's average of electricity
// generation in 2023 (Ember, Global Electricity Review 2024). A donor's
// own grid may be far cleaner (France, Norway: under 60) or dirtier
// (Poland, India: over 600): it is a setting (co2).
const DefaultCO2GramsPerKWh = 480

// CO2Source names where DefaultCO2GramsPerKWh comes from, for people.
const CO2Source = "world average 2023, Ember Global Electricity Review 2024"

// Tariff is what a kWh costs the donor, by local hour of day, in one
// currency. The zero Tariff is unset (no price). As text (ParseTariff):
// "0.32 EUR" (one price), or a currency, a price for every hour not
// named, and prices for ranges of hours: "EUR 0.35 23-7=0.15" (0.15 from
// 23:00 to 07:00, across midnight; 0.35 otherwise). Hours are the wall
// clock of the settings' time zone, so a day with a daylight-saving
// change has 23 or 25 priced hours.
type Tariff struct {
	// Currency is the donor's currency as written ("EUR", "USD", "€").
	Currency string
	// PerKWh is the price of a kWh from hour h:00 to h+1:00.
	PerKWh [24]float64
}

// FlatTariff is one price at every hour; currency must not be empty.
func FlatTariff(perKWh float64, currency string) Tariff {
	t := Tariff{Currency: currency}
	for h := range t.PerKWh {
		t.PerKWh[h] = perKWh
	}
	return t
}

// IsSet reports whether t holds prices: a set Tariff always names its
// currency.
func (t Tariff) IsSet() bool { return t.Currency != "" }

// Hourly reports whether prices differ by hour.
func (t Tariff) Hourly() bool {
	for _, p := range t.PerKWh {
		if p != t.PerKWh[0] {
			return true
		}
	}
	return false
}

// ParseTariff reads a Tariff from its text form (see Tariff); "" and
// "none" are the unset Tariff. It names what is wrong: a missing
// currency, a negative price, an hour outside 0..24.
func ParseTariff(s string) (Tariff, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "none" || s == "off" {
		return Tariff{}, nil
	}
	var t Tariff
	var base *float64
	var ranges []string
	for f := range strings.FieldsSeq(s) {
		switch {
		case strings.Contains(f, "="):
			ranges = append(ranges, f)
		case isNumber(f):
			if base != nil {
				return Tariff{}, fmt.Errorf("tariff %q: two prices for every hour (%g and %s); name hours as 23-7=0.15", s, *base, f)
			}
			v, err := parsePrice(f)
			if err != nil {
				return Tariff{}, fmt.Errorf("tariff %q: %w", s, err)
			}
			base = &v
		default:
			if t.Currency != "" {
				return Tariff{}, fmt.Errorf("tariff %q: %q is neither a price nor hours=price", s, f)
			}
			t.Currency = strings.TrimSuffix(f, "/kWh")
		}
	}
	if t.Currency == "" {
		return Tariff{}, fmt.Errorf("tariff %q: no currency: write e.g. \"0.32 EUR\"", s)
	}
	named := [24]bool{}
	for _, r := range ranges {
		hours, price, _ := strings.Cut(r, "=")
		from, to, ok := strings.Cut(hours, "-")
		a, errA := strconv.Atoi(from)
		b, errB := strconv.Atoi(to)
		if !ok || errA != nil || errB != nil || a < 0 || a > 23 || b < 0 || b > 24 || a == b {
			return Tariff{}, fmt.Errorf("tariff %q: %q: hours are FROM-TO, whole hours 0..24, e.g. 23-7=0.15", s, r)
		}
		v, err := parsePrice(price)
		if err != nil {
			return Tariff{}, fmt.Errorf("tariff %q: %q: %w", s, r, err)
		}
		n := (b - a + 24) % 24
		if n == 0 {
			n = 24
		}
		for i := range n {
			h := (a + i) % 24
			if named[h] {
				return Tariff{}, fmt.Errorf("tariff %q: hour %d:00 has two prices", s, h)
			}
			named[h], t.PerKWh[h] = true, v
		}
	}
	for h, ok := range named {
		if ok {
			continue
		}
		if base == nil {
			return Tariff{}, fmt.Errorf("tariff %q: no price for %d:00; add one for every other hour, e.g. \"EUR 0.35 23-7=0.15\"", s, h)
		}
		t.PerKWh[h] = *base
	}
	return t, nil
}

func isNumber(s string) bool {
	return s != "" && (unicode.IsDigit(rune(s[0])) || s[0] == '.' || s[0] == '-')
}

func parsePrice(s string) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("price %q is not a number", s)
	}
	if v < 0 {
		return 0, fmt.Errorf("price %q is negative", s)
	}
	return v, nil
}

// String writes t in ParseTariff's form; "" when unset.
func (t Tariff) String() string {
	if !t.IsSet() {
		return ""
	}
	if !t.Hourly() {
		return fmt.Sprintf("%s %s", fmtPrice(t.PerKWh[0]), t.Currency)
	}
	// The most common price is the base; runs of other prices are named.
	count := map[float64]int{}
	for _, p := range t.PerKWh {
		count[p]++
	}
	base := t.PerKWh[0]
	for p, n := range count {
		if n > count[base] || n == count[base] && p < base {
			base = p
		}
	}
	parts := []string{t.Currency, fmtPrice(base)}
	// Start at an hour where the price changes, so that a run across
	// midnight is written once (23-7).
	start := 0
	for h := range 24 {
		if t.PerKWh[h] != t.PerKWh[(h+23)%24] {
			start = h
			break
		}
	}
	for i := 0; i < 24; {
		h := (start + i) % 24
		j := i
		for j+1 < 24 && t.PerKWh[(start+j+1)%24] == t.PerKWh[h] {
			j++
		}
		if t.PerKWh[h] != base {
			end := (start + j + 1) % 24
			if end == 0 {
				end = 24
			}
			parts = append(parts, fmt.Sprintf("%d-%d=%s", h, end, fmtPrice(t.PerKWh[h])))
		}
		i = j + 1
	}
	return strings.Join(parts, " ")
}

func fmtPrice(p float64) string { return strconv.FormatFloat(p, 'f', -1, 64) }

// MarshalText implements encoding.TextMarshaler with String's form.
func (t Tariff) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParseTariff.
func (t *Tariff) UnmarshalText(b []byte) error {
	v, err := ParseTariff(string(b))
	if err != nil {
		return err
	}
	*t = v
	return nil
}

// PriceAt is the price of a kWh at instant at, by its hour in loc.
func (t Tariff) PriceAt(at time.Time, loc *time.Location) float64 {
	return t.PerKWh[at.In(loc).Hour()]
}

// hourEnd returns the end of the wall-clock hour of loc holding at: the
// next instant whose local minutes and seconds are zero. It steps in real
// time, so the repeated hour of a daylight-saving change counts twice and
// the skipped one not at all.
func hourEnd(at time.Time, loc *time.Location) time.Time {
	l := at.In(loc)
	into := time.Duration(l.Minute())*time.Minute + time.Duration(l.Second())*time.Second + time.Duration(l.Nanosecond())
	return at.Add(time.Hour - into)
}

// Cost is what joules spent evenly from start to end cost: each part of
// the span at the price of its local hour in loc. A span of no length
// costs its joules at start's price.
func (t Tariff) Cost(joules float64, start, end time.Time, loc *time.Location) float64 {
	if !end.After(start) {
		return joules / JoulesPerKWh * t.PriceAt(start, loc)
	}
	total := end.Sub(start).Seconds()
	var cost float64
	for at := start; at.Before(end); {
		next := hourEnd(at, loc)
		if next.After(end) {
			next = end
		}
		part := joules * next.Sub(at).Seconds() / total
		cost += part / JoulesPerKWh * t.PriceAt(at, loc)
		at = next
	}
	return cost
}

// NextBelow returns the first hour start after at whose price is at most
// bound, within two days; false when none is.
func (t Tariff) NextBelow(at time.Time, loc *time.Location, bound float64) (time.Time, bool) {
	for h, n := hourEnd(at, loc), 0; n < 48; h, n = hourEnd(h, loc), n+1 {
		if t.PriceAt(h, loc) <= bound {
			return h, true
		}
	}
	return time.Time{}, false
}

// KWh converts joules to kilowatt-hours.
func KWh(joules float64) float64 { return joules / JoulesPerKWh }

// CO2Grams is the CO2 of joules at intensity grams per kWh
// (DefaultCO2GramsPerKWh when intensity is 0 or less).
func CO2Grams(joules, gramsPerKWh float64) float64 {
	if gramsPerKWh <= 0 {
		gramsPerKWh = DefaultCO2GramsPerKWh
	}
	return KWh(joules) * gramsPerKWh
}
