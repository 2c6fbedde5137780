package app

import (
	"fmt"
	"strings"
	"time"

	"idlepool/energy"
	"idlepool/idle"
	"idlepool/store"
)

// energyMeans is the history window's and the Now window's note on the
// energy figures: they are the donor's own and never part of a receipt.
const energyMeans = "Energy, money and CO2 are this machine's own measurement: what its tasks added above its idle draw, " +
	"~ marking an estimate from CPU time. They never enter a receipt's cost, which comes from the work alone."

// pricesOf is how the owner's settings price energy.
func pricesOf(s idle.Settings) store.EnergyPrices {
	return store.EnergyPrices{Tariff: s.Tariff, CO2PerKWh: s.CO2GramsPerKWh, Location: s.Location()}
}

// energySum is energy added up over tasks: joules, the least exact How,
// and money (nil without a tariff) and grams of CO2.
type energySum struct {
	joules   float64
	how      energy.How
	cost     *float64
	currency string
	co2      float64
	tasks    int
}

func (e *energySum) add(t store.TaskEnergy, p store.EnergyPrices) {
	j := t.Joules()
	e.tasks++
	e.joules += j
	e.how = e.how.Worse(t.How())
	if p.Tariff.IsSet() {
		if e.cost == nil {
			e.cost, e.currency = new(float64), p.Tariff.Currency
		}
		loc := p.Location
		if loc == nil {
			loc = time.Local
		}
		*e.cost += p.Tariff.Cost(j, t.Start, t.End, loc)
	}
	e.co2 += energy.CO2Grams(j, p.CO2PerKWh)
}

// words writes the sum for people: "0.0123 kWh, 0.04 EUR, 5.9 g CO2",
// with the precision its How allows; "" when no task was metered.
func (e energySum) words() string {
	if e.tasks == 0 {
		return ""
	}
	parts := []string{energy.FormatKWh(e.joules, e.how)}
	if m := e.how.Mark(); m != "" && e.how != energy.Estimated {
		parts[0] += " (" + m + ")"
	}
	if e.cost != nil {
		parts = append(parts, energy.FormatCost(*e.cost, e.currency, e.how))
	}
	parts = append(parts, energy.FormatCO2(e.co2, e.how)+" CO2")
	return strings.Join(parts, ", ")
}

// taskEnergyWords writes one task's energy for the details pane: the
// total, each device's part with how it was obtained, the span, and its
// money and CO2.
func taskEnergyWords(t store.TaskEnergy, p store.EnergyPrices) string {
	var s energySum
	s.add(t, p)
	var b strings.Builder
	fmt.Fprintf(&b, "Energy: %s", s.words())
	parts := []string{fmt.Sprintf("CPU %s %s", energy.FormatKWh(t.CPU.Joules, t.CPU.How), t.CPU.How)}
	for _, g := range t.GPUs {
		parts = append(parts, fmt.Sprintf("GPU %s %s %s", shortUUID(g.UUID), energy.FormatKWh(g.Joules, g.How), g.How))
	}
	fmt.Fprintf(&b, "\n  %s; %s to %s", strings.Join(parts, ", "),
		t.Start.Local().Format("15:04:05"), t.End.Local().Format("15:04:05"))
	return b.String()
}

// shortUUID shortens a GPU's UUID for people: "GPU-5e3a12ab".
func shortUUID(u string) string {
	if len(u) > 12 {
		return u[:12]
	}
	return u
}
