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
	fs := g.flagSet("idlepool result", "Usage: idlepool result JOB --pool URL [--json]\n\nMerges the verified results of a job this device submitted, to the end, and prints the result like `idlepool run`.\n\n")
	pc := poolFlags(fs)
	asJSON := fs.Bool("json", false, "print one JSON document with the result on stdout (the shape of run --json)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	id, s, err := pc.connectJob(ctx, g, fs, pos, "result")
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

// connectJob checks that pos is exactly one job ID and connects to the
// pool for it: the start of every command about one job in a pool.
func (pc *poolConn) connectJob(ctx context.Context, g *globals, fs *flag.FlagSet, pos []string, command string) (job.ID, *session, error) {
	if len(pos) != 1 {
		fs.Usage()
		return job.ID{}, nil, &userError{Msg: command + " needs exactly one job ID", Hint: "the job ID is what `idlepool submit` printed", Cause: errUsage}
	}
	id, err := parseJobID(pos[0])
	if err != nil {
		return id, nil, err
	}
	if err := pc.check(); err != nil {
		return id, nil, err
	}
	s, err := pc.connect(ctx, g)
	return id, s, err
}

// parseJobID parses a job ID given on the command line.
func parseJobID(s string) (job.ID, error) {
	id, err := job.ParseDigest(s)
	if err != nil {
		return id, &userError{Msg: fmt.Sprintf("%q is not a job ID", s), Hint: "a job ID is 64 hex digits, as `idlepool submit` printed it", Cause: errors.Join(err, errUsage)}
	}
	return id, nil
}
