package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	"idlepool/agent"
)

// cmdEvents prints the last events of the donor's event log (agent.EventLog
// in the data directory): pools joined, left, unreachable and reachable
// again, pauses, tasks handed back or abandoned, results rejected.
func cmdEvents(_ context.Context, g *globals, args []string) error {
	fs := g.flagSet("idlepool events", "Usage: idlepool events [-n N] [--json]\n\nPrints what happened to this machine as a donor, oldest first: pools joined and left, a pool unreachable and reachable again, pauses for a game, tasks handed back or abandoned, results rejected and why.\n\n")
	n := fs.Int("n", 20, "how many of the latest events to print (0: all kept)")
	asJSON := fs.Bool("json", false, "print the events as one JSON array")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return &userError{Msg: fmt.Sprintf("events takes no arguments, got %q", pos[0]), Hint: "run 'idlepool events -n 50' for the last 50 events", Cause: errUsage}
	}
	if *n < 0 {
		return &userError{Msg: fmt.Sprintf("-n %d is negative", *n), Hint: "give how many events to print, or 0 for all", Cause: errUsage}
	}
	dirs, err := g.dirs()
	if err != nil {
		return err
	}
	evs, err := agent.ReadEvents(filepath.Join(dirs.Data, agent.EventsFile), *n)
	if err != nil {
		return err
	}
	if *asJSON {
		if evs == nil {
			evs = []agent.Event{}
		}
		b, err := json.MarshalIndent(evs, "", "  ")
		if err != nil {
			return fmt.Errorf("encode events: %w", err)
		}
		fmt.Fprintf(g.stdout, "%s\n", b)
		return nil
	}
	if len(evs) == 0 {
		fmt.Fprintln(g.stdout, "no events yet (the donor writes them while 'idlepool join' or the tray app runs)")
		return nil
	}
	now := g.now()
	for _, e := range evs {
		fmt.Fprintln(g.stdout, e.Line(time.Local, now))
	}
	return nil
}
