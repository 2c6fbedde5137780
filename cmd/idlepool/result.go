package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"strings"

	"idlepool/agent"
	"idlepool/job"
	"idlepool/pool"
)

func cmdResult(ctx context.Context, g *globals, args []string) error {
	fs := g.flagSet("idlepool result", "Usage: idlepool result JOB --pool URL [--json] [--wait D]\n\nMerges the verified results of a job this device submitted, to the end, and prints the result like `idlepool run`.\n\n")
	pc := poolFlags(fs)
	pc.waitFlag(fs)
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
	return followJob(ctx, g, "idlepool result", s, j, *asJSON, seedJob(ctx, g, s, j))
}

// connectJob checks that pos is exactly one job ID, or the first hex
// digits of one as idlepool prints it (12 in its messages), and connects
// to the pool for it: the start of every command about one job in a pool.
// A prefix is looked up among the pool's jobs and must name exactly one.
func (pc *poolConn) connectJob(ctx context.Context, g *globals, fs *flag.FlagSet, pos []string, command string) (job.ID, *session, error) {
	if len(pos) != 1 {
		fs.Usage()
		return job.ID{}, nil, &userError{Msg: command + " needs exactly one job ID", Hint: "the job ID is what `idlepool submit` printed", Cause: errUsage}
	}
	id, full, err := parseJobID(pos[0])
	if err != nil {
		return id, nil, err
	}
	if err := pc.check(); err != nil {
		return id, nil, err
	}
	s, err := pc.connect(ctx, g)
	if err != nil || full {
		return id, s, err
	}
	id, err = s.resolveJob(ctx, strings.ToLower(strings.TrimSpace(pos[0])))
	return id, s, err
}

// minJobPrefix is the fewest hex digits of a job ID a command accepts.
const minJobPrefix = 6

// parseJobID parses a job ID given on the command line: 64 hex digits
// (full), or at least minJobPrefix of its first ones (full is false and
// id is zero; resolveJob finds the job).
func parseJobID(s string) (id job.ID, full bool, err error) {
	t := strings.ToLower(strings.TrimSpace(s))
	if id, err := job.ParseDigest(t); err == nil {
		return id, true, nil
	}
	isHex := t != "" && !strings.ContainsFunc(t, func(r rune) bool { return !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') })
	if isHex && len(t) >= minJobPrefix && len(t) < 64 {
		return job.ID{}, false, nil
	}
	return id, false, &userError{Msg: fmt.Sprintf("%q is not a job ID", s),
		Hint: fmt.Sprintf("a job ID is 64 hex digits, or its first %d or more (idlepool prints the first 12)", minJobPrefix), Cause: errUsage}
}

// resolveJob finds the one job of the pool whose ID starts with prefix.
func (s *session) resolveJob(ctx context.Context, prefix string) (job.ID, error) {
	jobs, err := s.c.Jobs(ctx)
	if err != nil {
		return job.ID{}, poolError(fmt.Errorf("list jobs: %w", err), s.c.URL(), s.dirs)
	}
	var found []pool.JobStatus
	for _, st := range jobs {
		if strings.HasPrefix(st.Job.String(), prefix) {
			found = append(found, st)
		}
	}
	switch len(found) {
	case 1:
		return found[0].Job, nil
	case 0:
		return job.ID{}, &userError{Msg: fmt.Sprintf("pool %s has no job whose ID starts with %s", s.pool, prefix),
			Hint: "check the job ID and the pool URL", Cause: errors.Join(agent.ErrNotFound, errUsage)}
	}
	names := make([]string, len(found))
	for i, st := range found {
		names[i] = st.Job.String()[:16] + " (" + st.Name + ")"
	}
	return job.ID{}, &userError{Msg: fmt.Sprintf("%s starts the IDs of %d jobs in pool %s: %s", prefix, len(found), s.pool, strings.Join(names, ", ")),
		Hint: "give more digits", Cause: errUsage}
}
