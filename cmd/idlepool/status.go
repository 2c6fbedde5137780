package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"

	"idlepool/agent"
	"idlepool/coord"
)

func cmdStatus(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("idlepool status", flag.ContinueOnError)
	fs.SetOutput(g.stderr)
	fs.Usage = func() {
		fmt.Fprintf(g.stderr, "Usage: idlepool status JOB --pool URL [--json]\n\nShows a job's progress in a pool.\n\n")
		fs.PrintDefaults()
		fmt.Fprintf(g.stderr, "\n%s", machineStatusHelp)
	}
	g.register(fs)
	pc := poolFlags(fs)
	asJSON := fs.Bool("json", false, "print the status as one JSON document")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 && pc.url == "" {
		return cmdMachineStatus(ctx, g, *asJSON)
	}
	id, s, err := pc.connectJob(ctx, g, fs, pos, "status")
	if err != nil {
		return err
	}
	st, err := s.c.Status(ctx, id)
	if err != nil {
		if errors.Is(err, agent.ErrNotFound) {
			return &userError{Msg: fmt.Sprintf("pool %s has no job %s", s.pool, id), Hint: "check the job ID and the pool URL", Cause: err}
		}
		return poolError(err, pc.url, s.dirs)
	}
	if *asJSON {
		b, err := json.MarshalIndent(coord.JobInfo{Job: coord.HexDigest(st.Job), Name: st.Name, Owner: st.Owner, Merger: st.Merger,
			Tasks: st.Tasks, Accepted: st.Accepted, Failed: st.Failed, Leased: st.Leased, Acked: st.Acked,
			Complete: st.Complete, Quorum: st.Quorum, Redundancy: st.Redundancy, Retrying: st.Retrying, Trouble: st.Trouble}, "", "  ")
		if err != nil {
			return fmt.Errorf("encode status: %w", err)
		}
		fmt.Fprintf(g.stdout, "%s\n", b)
		return nil
	}
	state := "running"
	if st.Complete {
		state = "complete"
	}
	w := g.stdout
	fmt.Fprintf(w, "job      %s\n", st.Name)
	fmt.Fprintf(w, "id       %s\n", st.Job)
	fmt.Fprintf(w, "pool     %s\n", s.pool)
	fmt.Fprintf(w, "state    %s\n", state)
	fmt.Fprintf(w, "tasks    %d accepted, %d failed, %d leased now, %d total\n", st.Accepted, st.Failed, st.Leased, st.Tasks)
	if st.Retrying > 0 {
		fmt.Fprintf(w, "retrying %s that failed on a device for a reason of the device (timeout, dead worker), leased again to others: %s\n",
			plural(st.Retrying, "task"), st.Trouble)
	}
	fmt.Fprintf(w, "merged   %d of %d outcomes taken by the merger\n", st.Acked, st.Accepted+st.Failed)
	fmt.Fprintf(w, "quorum   %d agreeing replicas of distinct owners (%d leased at first)\n", st.Quorum, st.Redundancy)
	fmt.Fprintf(w, "owner    %s\n", st.Owner)
	fmt.Fprintf(w, "merger   %s\n", st.Merger)
	return nil
}
