package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"idlepool/agent"
	"idlepool/idle"
	"idlepool/offers"
)

const offersHelp = `Usage: idlepool offers --pool URL [--json]

Lists the live capacity offers in a pool, for its operator: every device
that offers its machine now, with its owner, the cores, memory and GPUs it
offers, what it does now and why, and when its offer runs out. A device
that stops without a word drops out once its offer expires.

With --json it prints the offers as the pool serves them (docs/offers.md).

Flags:
`

func cmdOffers(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("idlepool offers", flag.ContinueOnError)
	fs.SetOutput(g.stderr)
	fs.Usage = func() {
		fmt.Fprint(g.stderr, offersHelp)
		fs.PrintDefaults()
	}
	g.register(fs)
	pc := poolFlags(fs)
	asJSON := fs.Bool("json", false, "print the offers as one JSON array")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		fs.Usage()
		return &userError{Msg: fmt.Sprintf("offers takes no arguments, got %q", pos), Hint: "idlepool offers --pool URL", Cause: errUsage}
	}
	if err := pc.check(); err != nil {
		return err
	}
	s, err := pc.connect(ctx, g)
	if err != nil {
		return err
	}
	list, err := s.c.Offers(ctx)
	if err != nil {
		if errors.Is(err, agent.ErrNotFound) {
			return &userError{Msg: fmt.Sprintf("the pool at %s takes no capacity offers", pc.url),
				Hint: "its coordinator runs an idlepool from before capacity offers", Cause: err}
		}
		return poolError(err, pc.url, s.dirs)
	}
	if list == nil {
		list = []offers.Offer{}
	}
	if *asJSON {
		b, err := json.MarshalIndent(list, "", "  ")
		if err != nil {
			return fmt.Errorf("encode offers: %w", err)
		}
		fmt.Fprintf(g.stdout, "%s\n", b)
		return nil
	}
	printOffers(g.stdout, s.pool, list, time.Now())
	return nil
}

// printOffers writes the offers as a table a person reads at a glance.
func printOffers(w io.Writer, pool string, list []offers.Offer, now time.Time) {
	if len(list) == 0 {
		fmt.Fprintf(w, "no live offers in pool %s: no device offers its machine right now\n", pool)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PEER\tOWNER\tMACHINE\tCORES\tMEMORY\tGPUS\tSTATE\tEXPIRES")
	states := map[idle.State]int{}
	for _, o := range list {
		c := o.Capacity
		gpus := "none"
		if len(c.GPUs) > 0 {
			var names []string
			for _, g := range c.GPUs {
				names = append(names, fmt.Sprintf("%s (%s)", g.Name, offers.MiBText(g.MemoryMiB)))
			}
			gpus = strings.Join(names, ", ")
		}
		state := o.StateText() // "waiting (outside its hours)"
		states[o.State]++
		fmt.Fprintf(tw, "%s\t%s\t%s/%s\t%d of %d\t%s\t%s\t%s\tin %s\n",
			offers.ShortID(o.Peer), offers.PlainLine(offers.OwnerLabel(o.Owner, offers.OwnerName(o.Owner, o.OwnerProfile)), 80), c.OS, c.Arch, c.Cores, c.LogicalCPUs,
			offers.MiBText(c.MemoryMiB), gpus, state, idle.DurationText(o.Expires.Sub(now)))
	}
	tw.Flush()
	noun := "offers"
	if len(list) == 1 {
		noun = "offer"
	}
	fmt.Fprintf(w, "\n%d %s in pool %s: %d computing, %d waiting, %d paused.\n", len(list), noun, pool,
		states[idle.StateComputing], states[idle.StateWaiting], states[idle.StatePaused])
}
