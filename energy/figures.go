package energy

import (
	"math"
	"strconv"
)

// digits is how many significant digits a figure obtained so may show:
// a counter is read to well under 1%, sampled power misses what changes
// between samples, and an estimate can be off by a factor of two.
func (h How) digits() int {
	switch h {
	case Measured:
		return 3
	case Sampled:
		return 2
	}
	return 1
}

// Mark is how h shows beside a figure: "" for measured, "sampled" or
// "estimated".
func (h How) Mark() string {
	if h == Measured || h == "" {
		return ""
	}
	return string(h)
}

// round writes v with h's significant digits, "~" before an estimate.
func round(v float64, h How) string {
	s := strconv.FormatFloat(v, 'g', h.digits(), 64)
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		s = strconv.FormatFloat(f, 'f', -1, 64) // 1.2e-05 as 0.000012
	}
	if h == Estimated {
		return "~" + s
	}
	return s
}

// FormatKWh writes joules as kWh with the precision h allows:
// "0.0123 kWh", "~0.01 kWh" for an estimate.
func FormatKWh(joules float64, h How) string { return round(KWh(joules), h) + " kWh" }

// FormatWatts writes a power draw: "42.1 W", "~40 W".
func FormatWatts(w float64, h How) string { return round(w, h) + " W" }

// FormatCO2 writes grams of CO2: "5.9 g", "~6 g".
func FormatCO2(grams float64, h How) string { return round(grams, h) + " g" }

// FormatCost writes money with the precision h allows, never past a
// hundredth of the currency unless the amount is smaller: "0.04 EUR",
// "~0.004 EUR".
func FormatCost(amount float64, currency string, h How) string {
	if amount >= 0.01 {
		amount = math.Round(amount*100) / 100
	}
	return round(amount, h) + " " + currency
}
