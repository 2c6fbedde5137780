package app

import (
	"fmt"
	"strings"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/layout"
	"fyne.io/fyne/v2/widget"

	"idlepool/energy"
	"idlepool/idle"
)

// energyFields are the Settings window's Energy tab: what a kWh costs and
// its CO2, the rated power for estimates, and the limits that pause
// computing (idle.Settings' Tariff to QuietHours).
type energyFields struct {
	tariff, co2, ratedW, day, month, maxPrice, quiet                   *widget.Entry
	tariffErr, co2Err, ratedWErr, dayErr, monthErr, priceErr, quietErr *widget.Label
}

// energyParsed is what the Energy tab's fields say.
type energyParsed struct {
	tariff        energy.Tariff
	co2, ratedW   float64
	day, month    float64
	maxPrice      float64
	quiet         string // idle.Schedule's text, compared as such
	quietSchedule idle.Schedule
}

// numberText writes a setting's number for its field: "" for 0 (the
// default or no limit).
func numberText(v float64) string {
	if v == 0 {
		return ""
	}
	return fmt.Sprintf("%g", v)
}

// energyTab builds the Energy tab from s.
func (f *settingsForm) energyTab(s idle.Settings) fyne.CanvasObject {
	e := &f.energy
	entry := func(text, placeholder string) *widget.Entry {
		w := widget.NewEntry()
		w.SetText(text)
		w.SetPlaceHolder(placeholder)
		return w
	}
	e.tariff = entry(s.Tariff.String(), "none, such as 0.32 EUR or EUR 0.35 23-7=0.15")
	e.co2 = entry(numberText(s.CO2GramsPerKWh), fmt.Sprintf("%d (the world average)", energy.DefaultCO2GramsPerKWh))
	e.ratedW = entry(numberText(s.CPURatedW), fmt.Sprintf("%d", energy.DefaultRatedW))
	e.day = entry(numberText(s.EnergyDayKWh), "no limit")
	e.month = entry(numberText(s.EnergyMonthKWh), "no limit")
	e.maxPrice = entry(numberText(s.MaxPricePerKWh), "no limit")
	quiet := ""
	if len(s.QuietHours) > 0 {
		quiet = s.QuietHours.String()
	}
	e.quiet = entry(quiet, "none, such as daily 22:00-07:00")
	for _, l := range []**widget.Label{&e.tariffErr, &e.co2Err, &e.ratedWErr, &e.dayErr, &e.monthErr, &e.priceErr, &e.quietErr} {
		*l = newErrorLabel()
	}
	form := container.New(layout.NewFormLayout(), concat(
		field("Tariff per kWh", e.tariff,
			"What a kWh costs you, with its currency: one price (0.32 EUR), or a price for every other hour and prices for hours (EUR 0.35 23-7=0.15). Empty: no money shown.",
			e.tariffErr),
		field("CO2 (g per kWh)", e.co2,
			fmt.Sprintf("Your electricity's carbon intensity (your supplier's bill says it). Empty: %d g, the %s.", energy.DefaultCO2GramsPerKWh, energy.CO2Source),
			e.co2Err),
		field("Processor's power (W)", e.ratedW,
			"Its rated power (TDP), for the estimates made where the energy counters cannot be read. Empty: 65 W.", e.ratedWErr),
		[]fyne.CanvasObject{heading("Limits"), layout.NewSpacer()},
		field("kWh a day", e.day, "Pause for the rest of the day once your tasks added this much. Empty: no limit.", e.dayErr),
		field("kWh a month", e.month, "Pause for the rest of the month once your tasks added this much. Empty: no limit.", e.monthErr),
		field("Highest price per kWh", e.maxPrice, "Wait while the tariff's price of the hour is above this. Empty: no limit.", e.priceErr),
		field("Quiet hours", e.quiet, "Hours never to compute, such as daily 22:00-07:00 or Mon-Fri 00:00-06:00. Empty: none.", e.quietErr),
	)...)
	return container.NewVBox(heading("What a donation costs"), form, hint(energyMeans))
}

func concat(parts ...[]fyne.CanvasObject) []fyne.CanvasObject {
	var out []fyne.CanvasObject
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// parseEnergy reads the Energy tab; check marks each field.
func (e *energyFields) parse(check func(l *widget.Label, ok bool, msg string)) energyParsed {
	var p energyParsed
	var err error
	p.tariff, err = energy.ParseTariff(e.tariff.Text)
	msg := ""
	if err != nil {
		msg = sentence(err)
	}
	check(e.tariffErr, err == nil, msg)
	number := func(w *widget.Entry, l *widget.Label, hi float64, msg string, suffixes ...string) float64 {
		if strings.TrimSpace(w.Text) == "" {
			check(l, true, "")
			return 0
		}
		v, ok := parseNumber(w.Text, 0, hi, suffixes...)
		check(l, ok, msg)
		return v
	}
	p.co2 = number(e.co2, e.co2Err, 2000, "The CO2 intensity must be a number of grams per kWh from 0 to 2000.", "g")
	p.ratedW = number(e.ratedW, e.ratedWErr, 2000, "The processor's power must be a number of watts from 0 to 2000.", "W")
	p.day = number(e.day, e.dayErr, 1e6, "The daily limit must be a number of kWh, such as 2.", "kWh")
	p.month = number(e.month, e.monthErr, 1e7, "The monthly limit must be a number of kWh, such as 40.", "kWh")
	p.maxPrice = number(e.maxPrice, e.priceErr, 1e6, "The highest price must be a number, such as 0.20.")
	if p.maxPrice > 0 && !p.tariff.IsSet() {
		check(e.priceErr, false, "A highest price needs a tariff to compare with: fill in the tariff above.")
	}
	q := strings.TrimSpace(e.quiet.Text)
	if strings.EqualFold(q, "none") {
		q = ""
	}
	p.quietSchedule, err = idle.ParseSchedule(q)
	msg = ""
	if err != nil {
		msg = "Quiet hours: " + sentence(err)
	}
	check(e.quietErr, err == nil, msg)
	p.quiet = p.quietSchedule.String()
	return p
}

// apply writes the fields the owner changed (p differs from base) into s.
func (p energyParsed) apply(s *idle.Settings, base energyParsed) {
	if p.tariff != base.tariff {
		s.Tariff = p.tariff
	}
	if p.co2 != base.co2 {
		s.CO2GramsPerKWh = p.co2
	}
	if p.ratedW != base.ratedW {
		s.CPURatedW = p.ratedW
	}
	if p.day != base.day {
		s.EnergyDayKWh = p.day
	}
	if p.month != base.month {
		s.EnergyMonthKWh = p.month
	}
	if p.maxPrice != base.maxPrice {
		s.MaxPricePerKWh = p.maxPrice
	}
	if p.quiet != base.quiet {
		s.QuietHours = p.quietSchedule
	}
}
