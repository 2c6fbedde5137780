package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"time"

	"idlepool/agent"
	"idlepool/coord"
	"idlepool/offers"
	"idlepool/pool"
)

func cmdStatus(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("idlepool status", flag.ContinueOnError)
	fs.SetOutput(g.stderr)
	fs.Usage = func() {
		fmt.Fprintf(g.stderr, "Usage: idlepool status JOB --pool URL [--json]\n\nShows a job's progress in a pool.\n\n%s", jobArgHelp)
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
			Tasks: st.Tasks, Accepted: st.Accepted, Failed: st.Failed, Leased: st.Leased, Waiting: st.Waiting, Acked: st.Acked,
			Complete: st.Complete, Cancelled: st.Cancelled, Quorum: st.Quorum, Redundancy: st.Redundancy,
			Retrying: st.Retrying, Trouble: st.Trouble, Transfer: st.Transfer, Recomputing: st.Recomputing,
			TimingOut: st.TimingOut, TimeoutDevices: st.TimeoutDevices, Timeouts: st.Timeouts}, "", "  ")
		if err != nil {
			return fmt.Errorf("encode status: %w", err)
		}
		fmt.Fprintf(g.stdout, "%s\n", b)
		return nil
	}
	state := "running"
	switch {
	case st.Complete:
		state = "complete"
	case st.Cancelled:
		state = "cancelled by its owner: it leases nothing more"
	}
	w := g.stdout
	fmt.Fprintf(w, "job      %s\n", st.Name)
	fmt.Fprintf(w, "id       %s\n", st.Job)
	fmt.Fprintf(w, "pool     %s\n", s.pool)
	fmt.Fprintf(w, "state    %s\n", state)
	fmt.Fprintf(w, "tasks    %d accepted, %d failed, %d leased now, %d with results waiting for a quorum, %d total\n",
		st.Accepted, st.Failed, st.Leased, st.Waiting, st.Tasks)
	if st.Retrying > 0 && !st.Complete {
		fmt.Fprintf(w, "retrying %s\n", retryingWords(st.Retrying, st.Trouble, st.Cancelled))
	} else if st.Trouble != "" {
		fmt.Fprintf(w, "blocked  %s\n", st.Trouble) // the quorum it cannot reach with the devices connected
	}
	if st.Timeouts != "" {
		fmt.Fprintf(w, "timeouts %s\n", st.Timeouts)
	}
	if st.Recomputing > 0 {
		fmt.Fprintf(w, "again    %s whose accepted result every holder lost, computed again for the merger\n", plural(st.Recomputing, "task"))
	}
	fmt.Fprintf(w, "merged   %d of %d outcomes taken by the merger\n", st.Acked, st.Accepted+st.Failed)
	fmt.Fprintf(w, "quorum   %d agreeing replicas of distinct owners (%d leased at first)\n", st.Quorum, st.Redundancy)
	fmt.Fprintf(w, "owner    %s\n", jobOwnerText(ctx, s, id, st.Owner))
	fmt.Fprintf(w, "merger   %s\n", st.Merger)
	if st.Transfer != nil { // how the devices said they fetched the job's files
		fmt.Fprintf(w, "data     %s\n", agent.TransferWords(*st.Transfer))
	}
	if !st.Complete && !st.Cancelled {
		printPoolActivity(ctx, w, s, st)
	}
	return nil
}

// printPoolActivity adds what the pool is doing about the job: the
// donors' offers, results waiting for a quorum and why, and why the job
// cannot progress, if it cannot. A pool whose offers or job cannot be
// read is left out.
func printPoolActivity(ctx context.Context, w io.Writer, s *session, st pool.JobStatus) {
	live, err := s.c.Offers(ctx)
	if err != nil {
		return
	}
	ls, err := s.c.Listings(ctx)
	if err != nil {
		return
	}
	i := slices.IndexFunc(ls, func(l offers.Listing) bool { return l.Job == st.Job })
	if i < 0 {
		return
	}
	a := agent.Describe(st, ls[i], live, time.Now())
	fmt.Fprintf(w, "donors   %s\n", a.Donors)
	if a.Quorum != "" {
		fmt.Fprintf(w, "waiting  %s\n", a.Quorum)
	}
	if a.Stuck != "" {
		fmt.Fprintf(w, "stalled  %s\n", a.Stuck)
	}
}

func cmdCancel(ctx context.Context, g *globals, args []string) error {
	fs := g.flagSet("idlepool cancel", "Usage: idlepool cancel JOB --pool URL\n\nWithdraws a job you submitted from a pool: it leases nothing more, donors stop its tasks at their next heartbeat, and results already accepted keep their receipts. Only a device of the job's owner may cancel it; cancelling again is fine.\n\n"+jobArgHelp)
	pc := poolFlags(fs)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	id, s, err := pc.connectJob(ctx, g, fs, pos, "cancel")
	if err != nil {
		return err
	}
	st, err := s.c.Cancel(ctx, id)
	switch {
	case errors.Is(err, agent.ErrNotFound):
		return &userError{Msg: fmt.Sprintf("pool %s has no job %s", s.pool, id), Hint: "check the job ID and the pool URL", Cause: err}
	case errors.Is(err, agent.ErrForbidden):
		return &userError{Msg: fmt.Sprintf("pool %s refused to cancel job %s: this device does not belong to the job's owner", s.pool, id.String()[:12]),
			Hint: "only a device of the job's owner may cancel it (the same owner key: --owner-key FILE)", Cause: err}
	case err != nil:
		return poolError(err, pc.url, s.dirs)
	}
	fmt.Fprintf(g.stdout, "job %s (%s) cancelled in pool %s: %d of %d tasks accepted, %d failed; it leases nothing more\n",
		st.Name, st.Job.String()[:12], s.pool, st.Accepted, st.Tasks, st.Failed)
	return nil
}

// retryingWords says what becomes of the n undecided tasks that failed on
// a device for a reason of that device, with trouble (JobStatus.Trouble:
// the task that failed most) when there is one.
func retryingWords(n int64, trouble string, cancelled bool) string {
	what := plural(n, "task") + " that failed on a device for a reason of the device (timeout, dead worker)"
	if cancelled {
		what += ", not leased again: the job is cancelled"
	} else {
		what += ", leased again: to other devices first, to the same ones (after a wait that doubles) when no other connected device may take them"
	}
	if trouble != "" {
		what += "; " + trouble
	}
	return what
}
