package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"path/filepath"

	"idlepool/agent"
	"idlepool/job"
)

func cmdResult(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("idlepool result", flag.ContinueOnError)
	fs.SetOutput(g.stderr)
	fs.Usage = func() {
		fmt.Fprintf(g.stderr, "Usage: idlepool result JOB --pool URL [--json]\n\nMerges the verified results of a job this device submitted, to the end, and prints the result like `idlepool run`.\n\n")
		fs.PrintDefaults()
	}
	g.register(fs)
	pc := poolFlags(fs)
	asJSON := fs.Bool("json", false, "print one JSON document with the result on stdout (the shape of run --json)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return &userError{Msg: "result needs exactly one job ID", Hint: "the job ID is what `idlepool submit` printed", Cause: errUsage}
	}
	id, err := parseJobID(pos[0])
	if err != nil {
		return err
	}
	if err := pc.check(); err != nil {
		return err
	}
	s, err := pc.connect(ctx, g)
	if err != nil {
		return err
	}
	j, err := agent.FetchJob(ctx, s.c, id, filepath.Join(s.dirs.Cache, "pools"))
	if err != nil {
		if errors.Is(err, agent.ErrNotFound) {
			return &userError{Msg: fmt.Sprintf("pool %s has no job %s", s.pool, id), Hint: "check the job ID and the pool URL", Cause: err}
		}
		return poolError(err, pc.url, s.dirs)
	}
	return followJob(ctx, g, s, j, *asJSON)
}

// parseJobID parses a job ID given on the command line.
func parseJobID(s string) (job.ID, error) {
	id, err := job.ParseDigest(s)
	if err != nil {
		return id, &userError{Msg: fmt.Sprintf("%q is not a job ID", s), Hint: "a job ID is 64 hex digits, as `idlepool submit` printed it", Cause: errors.Join(err, errUsage)}
	}
	return id, nil
}
