package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"idlepool/agent"
	"idlepool/job"
	"idlepool/pool"
)

func cmdResult(ctx context.Context, g *globals, args []string) error {
	fs := g.flagSet("idlepool result", "Usage: idlepool result JOB --pool URL [--json] [--wait D]\n\nMerges the verified results of a job this device submitted, to the end, and prints the result like `idlepool run`.\n\n"+jobArgHelp)
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

// connectJob checks that pos is exactly one job, given as its ID, the
// first hex digits of one as idlepool prints it (12 in its messages), or
// the name its manifest gives it, and connects to the pool for it: the
// start of every command about one job in a pool. A prefix or a name is
// looked up among the pool's jobs (resolveJob) and must name exactly one.
func (pc *poolConn) connectJob(ctx context.Context, g *globals, fs *flag.FlagSet, pos []string, command string) (job.ID, *session, error) {
	if len(pos) != 1 {
		fs.Usage()
		return job.ID{}, nil, &userError{Msg: command + " needs exactly one job ID",
			Hint: "the job ID is what `idlepool submit` printed; the job's name works too when one job of the pool has it", Cause: errUsage}
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
	id, err = s.resolveJob(ctx, pos[0])
	return id, s, err
}

// jobArgHelp says what the JOB of status, result and cancel may be
// (connectJob), in their --help.
const jobArgHelp = "JOB is the job's ID, its first 6 or more hex digits (idlepool prints 12), or its name from the manifest when that names one job of the pool, or one of yours.\n\n"

// minJobPrefix is the fewest hex digits of a job ID a command accepts.
const minJobPrefix = 6

// parseJobID parses a job given on the command line: 64 hex digits
// (full), else id is zero and resolveJob finds the job by the first
// digits of its ID or by its name. Only a blank s is refused: it is
// neither, as a manifest's name may be any text but blank.
func parseJobID(s string) (id job.ID, full bool, err error) {
	t := strings.ToLower(strings.TrimSpace(s))
	if id, err := job.ParseDigest(t); err == nil {
		return id, true, nil
	}
	if t == "" {
		return id, false, &userError{Msg: fmt.Sprintf("%q is not a job ID", s),
			Hint: fmt.Sprintf("a job ID is 64 hex digits, or its first %d or more (idlepool prints the first 12); a job's name works too", minJobPrefix), Cause: errUsage}
	}
	return id, false, nil
}

// isJobPrefix reports whether t, lowercase, is the first hex digits of a
// job ID: minJobPrefix of them or more, fewer than all 64.
func isJobPrefix(t string) bool {
	isHex := !strings.ContainsFunc(t, func(r rune) bool { return !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') })
	return isHex && len(t) >= minJobPrefix && len(t) < 64
}

// resolveJob finds the one job of the pool that arg names: the job whose
// ID starts with arg when arg is the first digits of an ID (isJobPrefix,
// in any case), else the job whose name is arg (jobNamed). An arg that
// could be either (a name such as "decade" or "20240601") is the job it
// names when no ID starts with it, and is refused as naming two jobs when
// both match, so that a job whose ID was made to start with another's
// name is never taken for it.
func (s *session) resolveJob(ctx context.Context, arg string) (job.ID, error) {
	jobs, err := s.c.Jobs(ctx)
	if err != nil {
		return job.ID{}, poolError(fmt.Errorf("list jobs: %w", err), s.c.URL(), s.dirs)
	}
	prefix := strings.ToLower(strings.TrimSpace(arg))
	if !isJobPrefix(prefix) {
		return s.jobNamed(jobs, arg)
	}
	var found []pool.JobStatus
	for _, st := range jobs {
		if strings.HasPrefix(st.Job.String(), prefix) {
			found = append(found, st)
		}
	}
	if slices.ContainsFunc(jobs, func(st pool.JobStatus) bool { return st.Name == arg }) {
		if len(found) == 0 {
			return s.jobNamed(jobs, arg)
		}
		return job.ID{}, &userError{Msg: fmt.Sprintf("%s is both the name of a job in pool %s and the start of a job's ID (%s)", arg, s.pool, found[0].Job.String()[:12]),
			Hint: "give the job's whole ID (64 hex digits): `idlepool submit` printed it", Cause: errUsage}
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

// jobNamed finds the one job of jobs (the pool's, oldest first) whose
// manifest's name is name, exactly. Of several (a manifest changed and
// submitted again), those of this device's owner are taken if there are
// any; more than one left is refused with a list of them.
func (s *session) jobNamed(jobs []pool.JobStatus, name string) (job.ID, error) {
	var named, mine []pool.JobStatus
	for _, st := range jobs {
		if st.Name == name {
			named = append(named, st)
			if st.Owner == s.owner {
				mine = append(mine, st)
			}
		}
	}
	found, whose := named, ""
	if len(named) > 1 && len(mine) > 0 {
		found, whose = mine, " of yours"
	}
	switch len(found) {
	case 1:
		return found[0].Job, nil
	case 0:
		return job.ID{}, &userError{Msg: fmt.Sprintf("pool %s has no job named %q", s.pool, name),
			Hint:  fmt.Sprintf("the pool's page (%s in a browser) lists its newest jobs by name, finished ones too; a job ID's first %d or more hex digits work too", s.c.Node(), minJobPrefix),
			Cause: errors.Join(agent.ErrNotFound, errUsage)}
	}
	each := make([]string, len(found))
	for i, st := range found {
		each[i] = st.Job.String()[:12] + " (" + progressWords(st) + ")"
	}
	return job.ID{}, &userError{Msg: fmt.Sprintf("%d jobs%s in pool %s are named %q, oldest first: %s", len(found), whose, s.pool, name, strings.Join(each, ", ")),
		Hint: fmt.Sprintf("give the job ID (its first %d or more digits) instead", minJobPrefix), Cause: errUsage}
}

// progressWords is a job's state and progress in a few words, for a list
// of jobs: "running, 3 of 20 tasks accepted".
func progressWords(st pool.JobStatus) string {
	state := "running"
	switch {
	case st.Complete:
		state = "complete"
	case st.Cancelled:
		state = "cancelled"
	}
	return fmt.Sprintf("%s, %d of %d tasks accepted", state, st.Accepted, st.Tasks)
}
