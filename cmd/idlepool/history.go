package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"

	"idlepool/store"
)

func cmdHistory(ctx context.Context, g *globals, args []string) error {
	fs := g.flagSet("idlepool history", "Usage: idlepool history [--json]\n\nShows this device's contributions per pool and per day: pending, confirmed and rejected results and, of the confirmed ones, the work their tasks took (WebAssembly instructions counted), the cost units their jobs declared and the cost units their receipts credited: the work, at 10^8 instructions a unit, up to what the job declared.\n\n")
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
	if _, err := os.Stat(filepath.Join(dirs.Data, "local.db")); err == nil {
		local, err := openLocal(dirs)
		if err != nil {
			return err
		}
		defer local.Close()
		if days, err = local.History(ctx); err != nil {
			return err
		}
	}
	if days == nil {
		days = []store.DaySummary{}
	}
	if *asJSON {
		b, err := json.MarshalIndent(days, "", "  ")
		if err != nil {
			return fmt.Errorf("encode history: %w", err)
		}
		fmt.Fprintf(g.stdout, "%s\n", b)
		return nil
	}
	if len(days) == 0 {
		fmt.Fprintln(g.stdout, "no contributions yet: `idlepool join POOL_URL` donates this machine's idle time")
		return nil
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "pool\tday\tpending\tconfirmed\trejected\tinstructions\tdeclared units\tcost units\t")
	var total store.DaySummary
	for _, d := range days {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%.3g\t%.4g\t%.4g\t\n", d.Pool, d.Day, d.Pending, d.Confirmed, d.Rejected,
			float64(d.Work), d.DeclaredCost, d.ConfirmedCost)
		total.Pending += d.Pending
		total.Confirmed += d.Confirmed
		total.Rejected += d.Rejected
		total.Work += d.Work
		total.DeclaredCost += d.DeclaredCost
		total.ConfirmedCost += d.ConfirmedCost
	}
	if len(days) > 1 {
		fmt.Fprintf(tw, "total\t\t%d\t%d\t%d\t%.3g\t%.4g\t%.4g\t\n", total.Pending, total.Confirmed, total.Rejected,
			float64(total.Work), total.DeclaredCost, total.ConfirmedCost)
	}
	return tw.Flush()
}
