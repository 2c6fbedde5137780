package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"idlepool/cluster"
	"idlepool/coord"
	"idlepool/home"
	"idlepool/identity"
	"idlepool/pool"
	"idlepool/store"
)

func cmdServe(ctx context.Context, g *globals, args []string) error {
	fs := g.flagSet("idlepool serve", "Usage: idlepool serve [--listen HOST:PORT] [--data DIR] [--pool NAME] [--invite TOKEN] [--allow-owner ID,...] [--turn HOST:PORT [--turn-ip IP]] [limits]\n       idlepool serve --cluster NODE/cluster.toml [--invite TOKEN] [--allow-owner ID,...] [limits]\n\nRuns a pool's coordinator until stopped; it prints the pool URL once it listens.\nWith --turn it also runs a TURN relay (UDP) for peers that cannot connect directly.\nWith --cluster it runs one node of a pool spread over several machines (made by\n'idlepool cluster init'; see docs/operator.md, \"A pool on several machines\").\nThe limits bound what clients may hold (docs/api.md, \"Limits\"); the defaults suit most pools.\n\n")
	listen := fs.String("listen", coord.DefaultListen, "listen on `HOST:PORT` (port 0 picks a free one)")
	data := fs.String("data", "", "keep the pool's state in `DIR` (default: coordinator/ in the data directory)")
	name := fs.String("pool", "default", "the pool's `NAME`, written into every receipt")
	invite := fs.String("invite", "", "make the pool invite-only with this `TOKEN` (at least 16 characters)")
	allow := fs.String("allow-owner", "", "comma-separated owner `IDs` whose devices may join without a token")
	trusted := fs.String("trusted-owners", "", "comma-separated owner `IDs` established from the start (the operator's own); while one is, two new owners never form a quorum together")
	excludeAfter := fs.Int("exclude-after", pool.DefaultExcludeAfter, "exclude a device and its owner from computing after `N` deviations within --exclude-for (in a pool divided into shards, counted over every shard)")
	excludeFor := fs.Duration("exclude-for", pool.DefaultExcludeFor, "how long an exclusion after repeated deviations lasts (`D`)")
	maxTimeouts := fs.Int("max-timeouts", pool.DefaultMaxTimeouts, "give up on a task that timed out (ran past its policy.time_limit) on `N` distinct devices: it ends failed, unverified")
	noBackups := fs.Bool("no-backups", false, "lease no backup replicas of the tasks running longest in a job's tail (docs/operator.md, \"A job's tail\")")
	idleWithin := fs.Duration("idle-within", pool.DefaultIdleWithin, "count a device as waiting for work, in a job's tail, for `D` after it last asked for work and got none (docs/operator.md, \"A job's tail\")")
	maxConns := fs.Int("max-conns", 0, "hold at most `N` client connections; at the limit a new one closes the idlest or slowest (default: what the file limit allows, at most 4096)")
	headerTimeout := fs.Duration("header-timeout", coord.DefaultReadHeaderTimeout, "close a connection whose request headers take longer than `D`")
	bodyTimeout := fs.Duration("body-timeout", coord.DefaultBodyTimeout, "let a request body take `D` beyond what --min-body-rate needs")
	minRate := fs.Int64("min-body-rate-kib", coord.DefaultMinBodyRate>>10, "close a connection whose request body arrives slower than `KIB` per second on average")
	idleTimeout := fs.Duration("idle-timeout", coord.DefaultIdleTimeout, "close a kept-alive connection idle for `D`")
	bodyMemory := fs.Int64("body-memory-mib", coord.DefaultMaxBodyMemory>>20, "hold at most `MIB` of request bodies in memory; more waits or is answered 503")
	turnAddr := fs.String("turn", "", "also run a TURN relay on UDP `HOST:PORT` (such as 0.0.0.0:3478) for peers behind firewalls; peers get short-lived credentials from the pool")
	turnIP := fs.String("turn-ip", "", "the `IP` peers reach the relay at (default: the --turn host, which must then be a specific address)")
	clusterFile := fs.String("cluster", "", "run one node of a clustered pool from its `FILE` (cluster.toml, made by 'idlepool cluster init'); its listen address, data directory and pool name come from the file")
	minAgent := fs.String("min-agent-version", "", "refuse devices older than idlepool `X.Y.Z` (they say so in words and update themselves)")
	minAPI := fs.Int("min-api-version", 0, "refuse devices speaking an API version below `N`")
	browserCore := fs.String("browser-core", "", "serve the browser peer's core (core.wasm and wasm_exec.js) from `DIR` instead of the one built in (make webpeer builds it into webpeer/static)")
	latestAgent := fs.String("latest-agent-version", "", "the newest idlepool release `X.Y.Z` this pool's operator knows of (GET /v1/pool says it)")
	spool := fs.Int64("spool-mib", coord.DefaultMaxSpoolBytes>>20, "keep at most `MIB` of bodies not yet authenticated in temporary files under --data")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		fs.Usage()
		return &userError{Msg: fmt.Sprintf("serve takes no arguments, got %q", pos), Cause: errUsage}
	}
	tuneServeGC(os.Getenv)
	if _, err := tuneServeMemory(serveMemory); err != nil {
		return &userError{Msg: "cannot set the coordinator's memory limit: " + err.Error(),
			Hint: fmt.Sprintf(`AUTOMEMLIMIT is "off" or the share of the machine's (or its container's) memory the heap may grow to, `+
				"above 0 and at most 1 (%g when unset); GOMEMLIMIT sets the limit itself", serveMemoryRatio), Cause: errUsage}
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"min-body-rate-kib", *minRate}, {"body-memory-mib", *bodyMemory}, {"spool-mib", *spool}} {
		if f.v < 0 {
			return &userError{Msg: fmt.Sprintf("--%s %d is negative", f.name, f.v), Hint: "see 'idlepool serve --help'", Cause: errUsage}
		}
	}
	if *clusterFile != "" {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for _, name := range []string{"listen", "data", "pool", "turn", "turn-ip"} {
			if set[name] {
				return &userError{Msg: fmt.Sprintf("--%s cannot be used with --cluster: the node's cluster.toml says it", name), Hint: "see 'idlepool serve --help'", Cause: errUsage}
			}
		}
		*data = "cluster" // replaced by the node's directory
	}
	if *data == "" {
		dirs, err := g.dirs()
		if err != nil {
			return err
		}
		*data = filepath.Join(dirs.Data, "coordinator")
	}
	cfg := coord.Config{Listen: *listen, DataDir: *data, Pool: *name, InviteToken: *invite, Logger: g.daemonLogger(),
		MaxConns: *maxConns, ReadHeaderTimeout: *headerTimeout, BodyTimeout: *bodyTimeout, MinBodyRate: *minRate << 10,
		IdleTimeout: *idleTimeout, MaxBodyMemory: *bodyMemory << 20, MaxSpoolBytes: *spool << 20,
		Relay:           coord.RelayConfig{Listen: *turnAddr, PublicIP: *turnIP},
		MinAgentVersion: *minAgent, MinAPIVersion: *minAPI, LatestAgentVersion: *latestAgent}
	if *browserCore != "" {
		cfg.BrowserCore = os.DirFS(*browserCore)
	}
	if *excludeAfter < 1 {
		return &userError{Msg: fmt.Sprintf("--exclude-after %d: want at least 1 deviation", *excludeAfter), Hint: "see 'idlepool serve --help'", Cause: errUsage}
	}
	if *excludeFor <= 0 {
		return &userError{Msg: fmt.Sprintf("--exclude-for %s: want a positive duration such as 24h", *excludeFor), Hint: "see 'idlepool serve --help'", Cause: errUsage}
	}
	if *maxTimeouts < 1 {
		return &userError{Msg: fmt.Sprintf("--max-timeouts %d: want at least 1 device", *maxTimeouts), Hint: "see 'idlepool serve --help'", Cause: errUsage}
	}
	if *idleWithin <= 0 {
		return &userError{Msg: fmt.Sprintf("--idle-within %s: want a positive duration such as 2m", *idleWithin), Hint: "see 'idlepool serve --help'", Cause: errUsage}
	}
	cfg.MaxTimeouts = *maxTimeouts
	cfg.Tail.NoBackups = *noBackups
	cfg.Tail.IdleWithin = *idleWithin
	cfg.Trust = pool.TrustConfig{ExcludeAfter: *excludeAfter, ExcludeFor: *excludeFor}
	for o := range strings.SplitSeq(*trusted, ",") {
		if o = strings.TrimSpace(o); o != "" {
			cfg.Trust.TrustedOwners = append(cfg.Trust.TrustedOwners, o)
		}
	}
	for o := range strings.SplitSeq(*allow, ",") {
		if o = strings.TrimSpace(o); o != "" {
			cfg.AllowOwners = append(cfg.AllowOwners, o)
		}
	}
	if *clusterFile != "" {
		return serveCluster(ctx, g, *clusterFile, cfg)
	}
	srv, err := coord.New(ctx, cfg)
	if err != nil {
		if errors.Is(err, coord.ErrConfig) {
			return &userError{Msg: err.Error(), Hint: "see 'idlepool serve --help'", Cause: errors.Join(err, errUsage)}
		}
		if le, ok := errors.AsType[*home.LockedError](err); ok {
			return &userError{Msg: fmt.Sprintf("another coordinator already keeps its pool in %s: %s", *data, holderWords(le)),
				Hint: "stop that one first, or give this one its own --data directory", Cause: err}
		}
		if errors.Is(err, store.ErrCorrupt) {
			return &userError{Msg: fmt.Sprintf("the coordinator's database in %s is damaged: %v", *data, err),
				Hint:  "the pool's state exists nowhere else, so it is not replaced by an empty one: stop here, copy the directory, and restore coordinator.db from a backup (or recover it with the sqlite3 shell's .recover); moving it aside starts an empty pool whose peers must join again",
				Cause: err}
		}
		return &userError{Msg: "cannot start the coordinator: " + err.Error(), Hint: "is another coordinator using the same --listen address or --data directory?", Cause: err}
	}
	fmt.Fprintf(g.stdout, "idlepool: pool %s serving at %s\n", *name, srv.URL())
	fmt.Fprintf(g.stderr, "coordinator key %s (id %s); state in %s\n", identity.EncodePublic(srv.PublicKey()), identity.IDOf(srv.PublicKey()), *data)
	if a := srv.RelayAddr(); a != nil {
		fmt.Fprintf(g.stdout, "idlepool: TURN relay on udp %s; devices reach it at %s\n", a, srv.RelayPublicAddr())
	}
	return srv.Serve(ctx)
}

// serveCluster runs one node of a clustered pool from its cluster.toml.
func serveCluster(ctx context.Context, g *globals, file string, cfg coord.Config) error {
	nc, err := cluster.LoadConfig(file)
	if err != nil {
		return &userError{Msg: err.Error(), Hint: "make a cluster's files with 'idlepool cluster init'", Cause: errors.Join(err, errUsage)}
	}
	if err := cfg.Validate(); err != nil {
		return &userError{Msg: err.Error(), Hint: "see 'idlepool serve --help'", Cause: errors.Join(err, errUsage)}
	}
	fmt.Fprintf(g.stderr, "idlepool: node %s starting; waiting for a majority of the nodes (%d routes configured)\n", nc.Name, len(nc.Routes))
	node, err := cluster.StartNode(ctx, nc, cfg.Logger)
	if err != nil {
		return &userError{Msg: "cannot start the cluster node: " + err.Error(), Hint: "are the other nodes started, and route_listen free?", Cause: err}
	}
	defer node.Close()
	// Said once the node's public port listens, not before: a script that
	// waits for this line then joins would be refused.
	cfg.Listening = func(url string) {
		fmt.Fprintf(g.stdout, "idlepool: pool %s node %s serving at %s\n", nc.Pool, nc.Name, url)
	}
	err = coord.ServeCluster(ctx, node, cfg)
	if errors.Is(err, cluster.ErrPoolKey) {
		return &userError{Msg: "this node cannot start: " + err.Error(),
			Hint:  fmt.Sprintf("every node of a cluster signs with the same pool key: copy %s from another node's data directory ('idlepool cluster init' gives every node the same one)", filepath.Join(nc.DataDir, cluster.PoolKeyFile)),
			Cause: err}
	}
	return err
}
