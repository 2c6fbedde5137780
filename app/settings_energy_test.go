package app

import (
	"strings"
	"testing"

	"idlepool/energy"
	"idlepool/idle"
)

// The Energy tab saves the tariff, CO2 intensity, rated power and the
// limits, and names what is wrong with a field.
func TestSettingsEnergyTab(t *testing.T) {
	fx := newSettingsFixture(t, nil)
	f := fx.form
	fx.showTab("Energy")
	e := &f.energy
	e.tariff.SetText("EUR 0.35 23-7=0.15")
	e.co2.SetText("350")
	e.ratedW.SetText("105 W")
	e.day.SetText("2")
	e.month.SetText("40 kWh")
	e.maxPrice.SetText("0.2")
	e.quiet.SetText("daily 22:00-07:00")
	fx.tapSave()
	if f.saveErr.Visible() {
		t.Fatalf("save failed: %s", f.saveErr.Text)
	}
	got := fx.saved(t)
	tariff, _ := energy.ParseTariff("EUR 0.35 23-7=0.15")
	quiet, _ := idle.ParseSchedule("daily 22:00-07:00")
	if got.Tariff != tariff || got.CO2GramsPerKWh != 350 || got.CPURatedW != 105 || got.EnergyDayKWh != 2 ||
		got.EnergyMonthKWh != 40 || got.MaxPricePerKWh != 0.2 || got.QuietHours.String() != quiet.String() {
		t.Errorf("saved %+v", got)
	}

	e.tariff.SetText("")
	e.quiet.SetText("nightly")
	fx.tapSave()
	if !f.saveErr.Visible() || !strings.Contains(f.saveErr.Text, "Energy tab") {
		t.Errorf("save of bad fields: %q", f.saveErr.Text)
	}
	if !strings.Contains(e.priceErr.Text, "needs a tariff") || !e.quietErr.Visible() {
		t.Errorf("field messages: price %q, quiet %q", e.priceErr.Text, e.quietErr.Text)
	}

	e.maxPrice.SetText("")
	e.quiet.SetText("")
	e.day.SetText("")
	fx.tapSave()
	if got := fx.saved(t); got.Tariff.IsSet() || got.MaxPricePerKWh != 0 || got.EnergyDayKWh != 0 || len(got.QuietHours) != 0 || got.EnergyMonthKWh != 40 {
		t.Errorf("after clearing: %+v", got)
	}
}
