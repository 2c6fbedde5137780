package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"idlepool/home"
	"idlepool/version"
)

const usage = `idlepool computes jobs that split into independent tasks.

Usage:
  idlepool [--home DIR] COMMAND [ARGS]

Commands:
  run MANIFEST [--workers N] [--json] [--verify] [--fresh] [--cpu-only]
          run a job on this machine, alone and offline
  task MANIFEST [--index N] [--cpu-only]
          run one task of a job as run would, and show its input, its
          stdout and stderr, and its result's digest
  train TRAIN.toml [--rounds N] [--pool URL] [--json]
          train a model round by round, each round one exact job, alone
          or on a pool; goes on from the last finished round
  serve [--listen HOST:PORT] [--data DIR] [--pool NAME] [--invite TOKEN]
          run a pool's coordinator; prints the pool URL once it listens
  serve --cluster NODE/cluster.toml
          run one node of a pool spread over several machines
  cluster init DIR [--nodes N | --node NAME,HTTP,ROUTE ...]
          make the files (certificates, keys, configs) of a clustered pool
  join POOL_URL... [--workers N] [--invite [POOL_URL=]TOKEN] [--owner-key FILE]
          donate this machine's compute to one or more pools until stopped,
          offering its capacity to each; workers shared by the pools' weights
  submit MANIFEST --pool URL [--follow] [--json]
          hand a job to a pool; with --follow, merge its results like run
  status [--json]
          this machine as a donor: its signals, hours, offer, and whether
          it computes or waits, and why
  status JOB --pool URL [--json]
          show a job's progress in a pool, and what the pool is doing
          (JOB, here and in result and cancel: the ID, its first digits
          as idlepool prints them, or its name when one job has it)
  settings [--json] | settings set KEY=VALUE ... | settings reset
          the hours, cores, idle time, battery, programs and GPUs this
          machine computes with
  result JOB --pool URL [--json]
          merge a submitted job's results to the end and print the result
  cancel JOB --pool URL
          withdraw a job you submitted: its tasks are leased no more
  jobs [--pool URL]... [--json]
          the jobs seeking compute in the pools this machine knows, and
          whether this machine matches each, and why not
  jobs accept|refuse|clear JOB_ID|owner:OWNER_ID [--pool URL]
          take or never take a job, or an owner's jobs, on this machine
  offers --pool URL [--json]
          a pool's live capacity offers: the devices offering compute now
  history [--json]
          this device's contributions per pool and day
  events [-n N] [--json]
          what happened to this machine as a donor: pools joined, left and
          unreachable, pauses, tasks handed back, results rejected
  owner [--json] | owner set-name NAME [--link URL]
          this device's owner ID, and the display name and link the
          pools show beside it (signed with the owner key)
  ledger verify POOL_URL | ledger verify FILE [--key KEY]
          check a pool's signed receipt ledger end to end; a FILE needs
          the coordinator's key (GET /v1/pool) unless this device met it
  update [--url URL] [--root FILE] | update --rollback
          check for a newer signed release now, and install it (or put
          back the version before the last update)
  worker  the sandboxed task subprocess (started by idlepool itself)
  version print the version

Global flags:
  --home DIR   keep everything (journals, caches, keys, settings) under DIR;
               also IDLEPOOL_HOME. Default: the OS's user directories.
  -v           log diagnostics to stderr

Run 'idlepool COMMAND --help' for a command's flags.

Guides, in the docs/ folder of the idlepool source:
  docs/donor.md     lending a machine: install, settings, games, GPUs, troubleshooting
  docs/author.md    writing and running jobs: manifests, verification, the program ABI
  docs/operator.md  running a pool: serve, trust, the relay, several machines
  docs/api.md       the coordinator's HTTP API
`

// userError is a failure explained for a person: what went wrong and, where
// it helps, what to do about it. Its cause is kept for errors.Is.
type userError struct {
	Msg   string
	Hint  string
	Cause error
}

func (e *userError) Error() string { return e.Msg }
func (e *userError) Unwrap() error { return e.Cause }

// globals are the flags every command accepts.
type globals struct {
	home    string
	verbose bool
	stdin   io.Reader
	stdout  io.Writer
	stderr  io.Writer
	// now reads the wall clock; tests run commands at a fixed time with
	// runAt. Always set.
	now func() time.Time
	// tasks, when set, times the tasks `run` computes (idlepool train's
	// split of a round's time).
	tasks *taskClock
}

func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.home, "home", g.home, "keep all state under `DIR` (also $IDLEPOOL_HOME)")
	fs.BoolVar(&g.verbose, "v", g.verbose, "log diagnostics to stderr")
}

func (g *globals) dirs() (home.Dirs, error) {
	d, err := home.Resolve(g.home)
	if err != nil {
		return d, err
	}
	return d, d.Create()
}

func (g *globals) logger() *slog.Logger {
	if !g.verbose {
		return slog.New(slog.NewTextHandler(g.stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	}
	return slog.New(slog.NewTextHandler(g.stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// flagSet returns a command's flag set with the global flags registered
// and a usage text: usage (a line "Usage: ..." and what the command does),
// then the flags.
func (g *globals) flagSet(name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(g.stderr)
	fs.Usage = func() {
		fmt.Fprint(g.stderr, usage)
		fs.PrintDefaults()
	}
	g.register(fs)
	return fs
}

// parseInterspersed parses flags that may come before, between or after
// positional arguments, as in `idlepool run job.toml --json`; "--" ends
// flags.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		// A negative number ("jobs weight -1") is a value, not a flag:
		// take it as a positional argument so that the command can say
		// what is wrong with it instead of "flag provided but not
		// defined".
		for len(args) > 0 && isNegativeNumber(args[0]) {
			pos = append(pos, args[0])
			args = args[1:]
		}
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			// The flag package has printed the problem and the usage.
			return nil, fmt.Errorf("%w: %w", errUsage, err)
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// isNegativeNumber reports whether arg is "-" followed by a digit or a
// dot and a digit ("-1", "-0.5"), which no flag of ours starts with.
func isNegativeNumber(arg string) bool {
	if len(arg) < 2 || arg[0] != '-' {
		return false
	}
	c := arg[1]
	if c == '.' && len(arg) > 2 {
		c = arg[2]
	}
	return c >= '0' && c <= '9'
}

// Run runs the command line args (without the program name) and returns
// the exit status: 0 on success, 2 for a usage error, 1 otherwise, with a
// one-line reason (and a hint line where one helps) on stderr.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return runAt(ctx, time.Now, args, stdin, stdout, stderr)
}

// runAt is Run with the wall clock read from now, so that tests of what
// depends on the time of day (pauses, hours) give the same verdict at any
// hour.
func runAt(ctx context.Context, now func() time.Time, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	g := &globals{stdin: stdin, stdout: stdout, stderr: stderr, now: now}
	top := flag.NewFlagSet("idlepool", flag.ContinueOnError)
	top.SetOutput(stderr)
	top.Usage = func() { fmt.Fprint(stderr, usage) }
	g.register(top)
	if err := top.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	rest := top.Args()
	if len(rest) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch cmd, cargs := rest[0], rest[1:]; cmd {
	case "run":
		err = cmdRun(ctx, g, cargs)
	case "task":
		err = cmdTask(ctx, g, cargs)
	case "train":
		err = cmdTrain(ctx, g, cargs)
	case "worker":
		err = cmdWorker(ctx, g, cargs)
	case "serve":
		err = cmdServe(ctx, g, cargs)
	case "cluster":
		err = cmdCluster(ctx, g, cargs)
	case "join":
		err = cmdJoin(ctx, g, cargs)
	case "submit":
		err = cmdSubmit(ctx, g, cargs)
	case "status":
		err = cmdStatus(ctx, g, cargs)
	case "result":
		err = cmdResult(ctx, g, cargs)
	case "cancel":
		err = cmdCancel(ctx, g, cargs)
	case "settings":
		err = cmdSettings(ctx, g, cargs)
	case "history":
		err = cmdHistory(ctx, g, cargs)
	case "jobs":
		err = cmdJobs(ctx, g, cargs)
	case "offers":
		err = cmdOffers(ctx, g, cargs)
	case "ledger":
		err = cmdLedger(ctx, g, cargs)
	case "events":
		err = cmdEvents(ctx, g, cargs)
	case "owner":
		err = cmdOwner(ctx, g, cargs)
	case "update":
		err = cmdUpdate(ctx, g, cargs)
	case "version":
		fmt.Fprintln(stdout, "idlepool", version.Version)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "idlepool: unknown command %q\n", cmd)
		fmt.Fprintf(stderr, "hint: run 'idlepool help' for the list of commands\n")
		return 2
	}
	return report(stderr, err)
}

// errUsage marks a command-line mistake (exit status 2).
var errUsage = errors.New("usage")

func report(stderr io.Writer, err error) int {
	if err == nil {
		return 0
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	var ue *userError
	msg := err.Error()
	if errors.As(err, &ue) {
		msg = ue.Msg
	}
	fmt.Fprintf(stderr, "idlepool: %s\n", strings.TrimSpace(msg))
	if ue != nil && ue.Hint != "" {
		fmt.Fprintf(stderr, "hint: %s\n", ue.Hint)
	} else if h := storeHint(err); ue == nil && h != "" {
		fmt.Fprintf(stderr, "hint: %s\n", h)
	}
	if errors.Is(err, errUsage) {
		return 2
	}
	return 1
}
