package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"idlepool/energy"
	"idlepool/store"
)

// historyRow is one pool's day in `idlepool history`: its contributions
// and, when this device metered them, the energy its tasks added, priced
// at the owner's tariff and CO2 intensity. The energy is the donor's own
// measurement and never part of a receipt's cost.
type historyRow struct {
	store.DaySummary
	Energy *store.EnergyDay `json:"energy,omitempty"`
}

func cmdHistory(ctx context.Context, g *globals, args []string) error {
	fs := g.flagSet("idlepool history", "Usage: idlepool history [--json]\n\nShows this device's contributions per pool and per day: pending, confirmed and rejected results and, of the confirmed ones, the work their tasks took (WebAssembly instructions counted), the cost units their jobs declared and the cost units their receipts credited: the work, at 10^8 instructions a unit, up to what the job declared. Beside them, what the work cost you: the energy its tasks added (kWh), its price at your tariff and its CO2, each marked as measured, sampled or ~estimated.\n\n")
	asJSON := fs.Bool("json", false, "print the history as one JSON array")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		fs.Usage()
		return &userError{Msg: fmt.Sprintf("history takes no arguments, got %q", pos), Cause: errUsage}
	}
	dirs, err := g.dirs()
	if err != nil {
		return err
	}
	var days []store.DaySummary
	var energyDays []store.EnergyDay
	prices := store.EnergyPrices{}
	if _, err := os.Stat(filepath.Join(dirs.Data, "local.db")); err == nil {
		local, err := openLocal(dirs)
		if err != nil {
			return err
		}
		defer local.Close()
		if days, err = local.History(ctx); err != nil {
			return err
		}
		s, err := local.Settings(ctx)
		if err != nil {
			return err
		}
		prices = store.EnergyPrices{Tariff: s.Tariff, CO2PerKWh: s.CO2GramsPerKWh, Location: s.Location()}
		if energyDays, err = local.EnergyHistory(ctx, prices); err != nil {
			return err
		}
	}
	rows := joinHistory(days, energyDays)
	if *asJSON {
		b, err := json.MarshalIndent(rows, "", "  ")
		if err != nil {
			return fmt.Errorf("encode history: %w", err)
		}
		fmt.Fprintf(g.stdout, "%s\n", b)
		return nil
	}
	if len(rows) == 0 {
		fmt.Fprintln(g.stdout, "no contributions yet: `idlepool join POOL_URL` donates this machine's idle time")
		return nil
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "pool\tday\tpending\tconfirmed\trejected\tinstructions\tdeclared units\tcost units\tenergy\tmoney\tCO2\t")
	var total store.DaySummary
	var totalE store.EnergyDay
	metered := false
	for _, r := range rows {
		d := r.DaySummary
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%.3g\t%.4g\t%.4g\t%s\t\n", d.Pool, d.Day, d.Pending, d.Confirmed, d.Rejected,
			float64(d.Work), d.DeclaredCost, d.ConfirmedCost, energyCells(r.Energy))
		total.Pending += d.Pending
		total.Confirmed += d.Confirmed
		total.Rejected += d.Rejected
		total.Work += d.Work
		total.DeclaredCost += d.DeclaredCost
		total.ConfirmedCost += d.ConfirmedCost
		if e := r.Energy; e != nil {
			metered = true
			totalE.Joules += e.Joules
			totalE.How = totalE.How.Worse(e.How)
			if e.Cost != nil {
				if totalE.Cost == nil {
					totalE.Cost, totalE.Currency = new(float64), e.Currency
				}
				*totalE.Cost += *e.Cost
			}
			totalE.CO2Grams += e.CO2Grams
		}
	}
	if len(rows) > 1 {
		var te *store.EnergyDay
		if metered {
			te = &totalE
		}
		fmt.Fprintf(tw, "total\t\t%d\t%d\t%d\t%.3g\t%.4g\t%.4g\t%s\t\n", total.Pending, total.Confirmed, total.Rejected,
			float64(total.Work), total.DeclaredCost, total.ConfirmedCost, energyCells(te))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if metered {
		fmt.Fprintln(g.stdout, energyFootnote(prices))
	}
	return nil
}

// energyCells writes a day's energy, money and CO2 as three tab-ended
// cells, each with the precision its How allows; "-" where not metered
// or no tariff is set.
func energyCells(e *store.EnergyDay) string {
	if e == nil {
		return "-\t-\t-"
	}
	money := "-"
	if e.Cost != nil {
		money = energy.FormatCost(*e.Cost, e.Currency, e.How)
	}
	kwh := energy.FormatKWh(e.Joules, e.How)
	if m := e.How.Mark(); m != "" && e.How != energy.Estimated {
		kwh += " (" + m + ")"
	}
	return kwh + "\t" + money + "\t" + energy.FormatCO2(e.CO2Grams, e.How)
}

// energyFootnote says how the energy columns are made.
func energyFootnote(p store.EnergyPrices) string {
	co2 := fmt.Sprintf("CO2 at %g g/kWh (settings: co2)", p.CO2PerKWh)
	if p.CO2PerKWh <= 0 {
		co2 = fmt.Sprintf("CO2 at %d g/kWh, the %s (settings: co2)", energy.DefaultCO2GramsPerKWh, energy.CO2Source)
	}
	money := "money: no tariff set (settings: tariff)"
	if p.Tariff.IsSet() {
		money = "money at your tariff " + p.Tariff.String()
	}
	return strings.Join([]string{
		"energy: what this machine's tasks added above its idle draw; ~ marks an estimate from CPU time, (sampled) GPU power read every 10 s",
		money + "; " + co2,
		"these are your own figures: they never enter a receipt's cost",
	}, "\n")
}

// joinHistory pairs each pool's day of contributions with its energy;
// days with energy but no contribution (tasks handed back) are kept.
func joinHistory(days []store.DaySummary, energyDays []store.EnergyDay) []historyRow {
	type key struct{ pool, day string }
	byKey := map[key]int{}
	rows := make([]historyRow, 0, len(days))
	for _, d := range days {
		byKey[key{d.Pool, d.Day}] = len(rows)
		rows = append(rows, historyRow{DaySummary: d})
	}
	for _, e := range energyDays {
		if i, ok := byKey[key{e.Pool, e.Day}]; ok {
			rows[i].Energy = &e
			continue
		}
		rows = append(rows, historyRow{DaySummary: store.DaySummary{Pool: e.Pool, Day: e.Day}, Energy: &e})
	}
	sortRows(rows)
	return rows
}

// sortRows orders rows by pool, then day.
func sortRows(rows []historyRow) {
	slices.SortStableFunc(rows, func(a, b historyRow) int {
		if c := strings.Compare(a.Pool, b.Pool); c != 0 {
			return c
		}
		return strings.Compare(a.Day, b.Day)
	})
}
