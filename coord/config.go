package coord

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"strings"
	"time"

	"idlepool/cluster"
	"idlepool/job"
	"idlepool/pool"
)

// DefaultListen is the address the coordinator listens on when
// Config.Listen is empty: loopback only, so a pool is never exposed to a
// network by accident.
const DefaultListen = "127.0.0.1:7420"

// Config configures a coordinator. The zero value (with DataDir set) serves
// an open pool named "default" on DefaultListen.
type Config struct {
	// Listen is the TCP address to listen on, HOST:PORT; port 0 picks a
	// free port (see Server.URL). Empty means DefaultListen.
	Listen string
	// DataDir holds the coordinator's state: coordinator.db (SQLite),
	// coordinator.key (its Ed25519 key, mode 0600) and blobs/ (files by
	// SHA-256). It is created (mode 0700) if missing. Required.
	DataDir string
	// Pool is the pool's name, shown to peers and written into every
	// receipt. Empty means "default".
	Pool string
	// InviteToken, when set, makes the pool invite-only: registering needs
	// this token (or an owner on AllowOwners).
	InviteToken string
	// AllowOwners lists owner IDs (identity.IDOf of an owner key, "id…")
	// whose devices may register without a token. A non-empty list also
	// makes the pool invite-only.
	AllowOwners []string

	// Versions (versions.go): MinAgentVersion is the oldest idlepool
	// ("X.Y.Z") whose devices the pool accepts, "" for any; MinAPIVersion
	// the oldest API version (coord.APIVersion of the agent's build) it
	// accepts, 0 for any; LatestAgentVersion the newest release the
	// operator knows of, "" for none. A device older than the minimums
	// is answered 426 "agent_too_old" with the words it shows its owner.
	// In a clustered pool (ServeCluster) a node given any of them stores
	// them for every node; a node given none follows what is stored.
	MinAgentVersion    string
	MinAPIVersion      int
	LatestAgentVersion string
	// StoreBusyTimeout is how long a write to coordinator.db waits for a
	// lock another process holds on it; then the batch is kept, /healthz
	// says so and the batch is tried again with backoff.
	// store.DefaultBusyTimeout when 0.
	StoreBusyTimeout time.Duration
	// CompactEvery is how often a coordinator on coordinator.db (not a
	// cluster's node) compacts it (store.DB.Compact), so that a restart
	// reads the work in play and a summary per job rather than the
	// pool's whole history. DefaultCompactEvery when 0.
	CompactEvery time.Duration
	// Logger receives structured logs; nil discards them.
	Logger *slog.Logger
	// Now is the clock for request timestamps, leases and receipts; nil
	// means time.Now. Tests inject a fake clock here.
	Now func() time.Time
	// Listening, if set, is called once by ServeCluster when the node's
	// public port listens, with the node's URL: from then on its
	// requests are answered (503 "no_leader" while no node is in charge).
	// A single coordinator listens when New returns, and ignores it.
	Listening func(url string)

	// Limits on what a client may hold (docs/api.md, "Limits"). Zero
	// means the default.

	// ReadHeaderTimeout is how long a client may take to send a request's
	// headers. Default 10 s.
	ReadHeaderTimeout time.Duration
	// BodyTimeout is the time a request body may take beyond what
	// MinBodyRate needs: a body of n bytes must arrive within
	// BodyTimeout + n/MinBodyRate of the handler's start, or the
	// connection is closed. Default 30 s.
	BodyTimeout time.Duration
	// MinBodyRate is the slowest average rate, in bytes per second, at
	// which a request body may arrive (see BodyTimeout) and an answer be
	// read (from its first byte, with the same grace). Default 16 KiB/s.
	MinBodyRate int64
	// IdleTimeout is how long a kept-alive connection may wait for its
	// next request. Default 60 s.
	IdleTimeout time.Duration
	// MaxConns bounds the open client connections. At the bound, a new
	// connection closes the connection that has waited longest for a
	// request or is slowest sending a body, so /healthz and well-behaved
	// peers keep being served. Default: as many as the process's file
	// limit allows with room for the coordinator's own files (two per
	// connection, 64 spare), at most 4096; Validate refuses more than that.
	MaxConns int
	// MaxBodyMemory bounds the request body bytes held in memory at once,
	// over all connections; a request that would pass it is answered
	// 503 (retry later). It also bounds one body: a result submission
	// larger than MaxBodyMemory is refused (413). Default 256 MiB; at
	// least 1 MiB.
	MaxBodyMemory int64
	// BodyInMemory is how much of a body not yet authenticated is kept in
	// memory: the rest goes to a temporary file under DataDir until the
	// signature over the body is checked. Default 64 KiB.
	BodyInMemory int64
	// MaxSpoolBytes bounds the bytes of unauthenticated bodies held in
	// temporary files at once; a body that would pass it is answered 503.
	// Default 2 GiB.
	MaxSpoolBytes int64

	// Trust holds the operator's rules on trust and sanctions (trusted
	// owners, exclusion after repeated deviations); see pool.TrustConfig.
	Trust pool.TrustConfig

	// MaxTimeouts is on how many distinct devices a task may time out
	// before the pool gives up on it and it ends failed, unverified
	// (pool.SchedulerConfig.MaxTimeouts). 0 means
	// pool.DefaultMaxTimeouts.
	MaxTimeouts int

	// Tail holds the rules for a job's tail: backup replicas, the
	// devices' records and the lease timeouts derived from them
	// (pool.SchedulerConfig.Tail). The zero value turns them on.
	Tail pool.TailConfig

	// Shard and Shards make this coordinator shard Shard (0 to
	// Shards-1) of a pool divided into Shards shards (1 to 64,
	// cluster.ValidateShardCount), each scheduled by a coordinator of its
	// own behind a ShardRouter: its scheduler writes Shard into its lease
	// IDs (pool.LeaseShard), its answers to requests for work say how
	// many tasks it has waiting (QueuedHeader), and it takes requests
	// that a router forwarded with a MAC under the pool's key
	// (ForwardedHeader; every shard's DataDir holds the same
	// coordinator.key). The zero values are shard 0 of 1: an undivided
	// pool, which refuses forwarded requests.
	Shard, Shards int

	// Cluster, when set, makes this coordinator the one in charge of a
	// clustered pool (idlepool serve --cluster; see ServeCluster): the
	// scheduler's state lives in Cluster.Store instead of coordinator.db,
	// files are mirrored to Cluster.Blobs, and GET /v1/pool lists
	// Cluster.Nodes. nil: a pool of one node, as before.
	Cluster *ClusterHooks

	// Relay, when its Listen is set, runs a TURN relay beside the API
	// (p2p.Relay) and hands peers short-lived credentials for it
	// (GET /v1/ice). See RelayConfig.
	Relay RelayConfig

	// BrowserCore, when not nil, holds the browser peer's generated
	// assets (webpeer.CoreFiles) that the page at GET /join loads, in
	// place of those built into the binary by make: tests build a fresh
	// core with webpeer.BuildCore and serve it from their own directory.
	BrowserCore fs.FS
}

// ClusterHooks connect a coordinator to the other nodes of a clustered
// pool (see Config.Cluster).
type ClusterHooks struct {
	// Store holds the scheduler's state (jobs, replicas, outcomes,
	// ledger, trust), replicated to the other nodes. nil: coordinator.db
	// in DataDir, compacted as a single coordinator's (a shard's
	// coordinator that shares only its files with the others).
	Store pool.Store
	// Blobs mirrors the pool's files to the other nodes: New copies every
	// file it lacks from it before loading, and an upload is answered
	// only once it is mirrored. nil: files are kept on this node only.
	Blobs BlobMirror
	// Nodes returns the HTTP URLs of the cluster's live nodes, for
	// GET /v1/pool. nil: none listed.
	Nodes func() []string
	// Profiles holds the owners' signed profiles, replicated to the
	// other nodes (cluster.Profiles), so that the node that takes over
	// shows the names devices gave another node. nil: this node's
	// coordinator.db.
	Profiles ProfileStore
	// Versions returns the versions the cluster's nodes agreed on
	// (cluster.Rules), read at each request, so that whichever node is
	// in charge refuses the same devices. nil: Config's.
	Versions func() Versions
	// Exclusions, when set, makes the exclusions of every shard's
	// scheduler pool-wide (cluster.Exclusions): each one this node's
	// scheduler decides is published there, and each one stored there
	// is applied to it (pool.Scheduler.Exclude), while Serve runs. nil:
	// the scheduler's exclusions are its own.
	Exclusions ExclusionBoard
	// Deviations, when set, makes the deviations of every shard's
	// scheduler count on every shard (cluster.Deviations): each one this
	// node's scheduler decides is published there, and each one stored
	// there is counted by it (pool.Scheduler.Deviated), while Serve
	// runs. nil: the scheduler counts only its own.
	Deviations DeviationBoard
	// Secrets, when set, makes the known-answers files of every shard's
	// jobs secret on every shard (cluster.Secrets): each one this node's
	// scheduler takes a job with is published there (and all of them
	// again when Serve starts), and each one stored there is made
	// secret here (pool.Scheduler.AddSecret), while Serve runs, so that
	// shard 0, which serves every shard's files, refuses them. nil: a
	// job's known answers are secret on its own coordinator only.
	Secrets SecretBoard
	// LedgerHeads, when set in a divided pool (Config.Shards > 1), ties
	// this shard's ledger to the others' (pool.KindAnchor): every
	// ExchangeEvery while Serve runs, the coordinator publishes its
	// ledger's head there and anchors the heads the other shards
	// published. nil: the shards' ledgers are not anchored.
	LedgerHeads HeadBoard
	// Usage, when set in a divided pool, makes fair share pool-wide:
	// every ExchangeEvery while Serve runs, the coordinator publishes
	// its owners' fair-share figures there (pool.Scheduler.Usage) and
	// hands its scheduler the other shards' (SetShardUsage). nil: each
	// shard's fair share counts only what it saw.
	Usage UsageBoard
	// ExchangeEvery is the period of both; 0 means DefaultExchangeEvery.
	ExchangeEvery time.Duration
}

// BlobMirror is a store of the pool's files shared by a cluster's nodes
// (cluster.Blobs, on a JetStream object store).
type BlobMirror interface {
	// Put stores the file at path, whose SHA-256 is d; it returns once
	// the file is replicated. Storing a digest again is a no-op.
	Put(ctx context.Context, d job.Digest, path string) error
	// List returns the digests of every mirrored file.
	List(ctx context.Context) ([]job.Digest, error)
	// Open returns the mirrored file with digest d.
	Open(ctx context.Context, d job.Digest) (io.ReadCloser, error)
}

// Defaults of the limits in Config.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultBodyTimeout       = 30 * time.Second
	DefaultMinBodyRate       = 16 << 10 // bytes per second
	DefaultIdleTimeout       = 60 * time.Second
	DefaultMaxBodyMemory     = 256 << 20
	DefaultBodyInMemory      = 64 << 10
	DefaultMaxSpoolBytes     = 2 << 30
	// DefaultCompactEvery is Config.CompactEvery's default.
	DefaultCompactEvery = 30 * time.Second
	// maxDefaultConns caps the MaxConns derived from the file limit.
	maxDefaultConns = 4096
	// spareFiles are the file descriptors kept for the coordinator's own
	// files (its database, key, logs, listener) besides two per
	// connection (the socket and a blob or temporary file).
	spareFiles = 64
	// maxInviteToken bounds the invite token, which a registration body
	// (at most maxRegistrationBody) carries.
	maxInviteToken = 1024
)

// InviteOnly reports whether registering needs an invite token or an
// allow-listed owner.
func (c *Config) InviteOnly() bool { return c.InviteToken != "" || len(c.AllowOwners) > 0 }

// Validate fills in defaults and checks the configuration once. Errors
// wrap ErrConfig and name the field.
func (c *Config) Validate() error {
	if err := c.validateVersions(); err != nil {
		return err
	}
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("%w: listen address %q: want HOST:PORT such as %s", ErrConfig, c.Listen, DefaultListen)
	}
	if c.DataDir == "" {
		return fmt.Errorf("%w: no data directory", ErrConfig)
	}
	if c.Pool == "" {
		c.Pool = "default"
	}
	if len(c.Pool) > 64 || strings.ContainsFunc(c.Pool, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return fmt.Errorf("%w: pool name %q: want at most 64 printable characters", ErrConfig, c.Pool)
	}
	if c.InviteToken != "" && len(c.InviteToken) < 16 {
		return fmt.Errorf("%w: invite token of %d characters is too easy to guess: use at least 16", ErrConfig, len(c.InviteToken))
	}
	if len(c.InviteToken) > maxInviteToken {
		return fmt.Errorf("%w: invite token of %d characters is too long: use at most %d", ErrConfig, len(c.InviteToken), maxInviteToken)
	}
	for _, o := range c.AllowOwners {
		if !validID(o) {
			return fmt.Errorf("%w: allowed owner %q is not an owner ID (\"id\" and 32 base32 letters)", ErrConfig, o)
		}
	}
	if err := c.Relay.validate(); err != nil {
		return err
	}
	if c.MaxTimeouts < 0 {
		return fmt.Errorf("%w: MaxTimeouts %d: want at least 1 device (0: the default, %d)", ErrConfig, c.MaxTimeouts, pool.DefaultMaxTimeouts)
	}
	if c.Shards == 0 {
		c.Shards = 1
	}
	if err := cluster.ValidateShardCount(c.Shards); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if c.Shard < 0 || c.Shard >= c.Shards {
		return fmt.Errorf("%w: shard %d of a pool of %d shards: want 0 to %d", ErrConfig, c.Shard, c.Shards, c.Shards-1)
	}
	if c.CompactEvery == 0 {
		c.CompactEvery = DefaultCompactEvery
	}
	if c.CompactEvery < 0 {
		return fmt.Errorf("%w: compaction interval %v is negative", ErrConfig, c.CompactEvery)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c.validateLimits()
}

// validateLimits fills in and checks the limits on clients.
func (c *Config) validateLimits() error {
	durations := []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"read header timeout", &c.ReadHeaderTimeout, DefaultReadHeaderTimeout},
		{"body timeout", &c.BodyTimeout, DefaultBodyTimeout},
		{"idle timeout", &c.IdleTimeout, DefaultIdleTimeout},
	}
	for _, d := range durations {
		if *d.v == 0 {
			*d.v = d.def
		}
		if *d.v < 0 {
			return fmt.Errorf("%w: %s %v is negative", ErrConfig, d.name, *d.v)
		}
	}
	sizes := []struct {
		name  string
		v     *int64
		def   int64
		lo    int64
		loWhy string
		unit  string
	}{
		{"minimum body rate", &c.MinBodyRate, DefaultMinBodyRate, 1, "", " bytes/s"},
		{"body memory", &c.MaxBodyMemory, DefaultMaxBodyMemory, maxJSONBody, " (the largest JSON body)", " bytes"},
		{"body in memory", &c.BodyInMemory, DefaultBodyInMemory, 1, "", " bytes"},
		{"spool size", &c.MaxSpoolBytes, DefaultMaxSpoolBytes, 1, "", " bytes"},
	}
	for _, z := range sizes {
		if *z.v == 0 {
			*z.v = z.def
		}
		if *z.v < z.lo {
			return fmt.Errorf("%w: %s of %d%s is below %d%s", ErrConfig, z.name, *z.v, z.unit, z.lo, z.loWhy)
		}
	}
	if c.BodyInMemory > c.MaxBodyMemory {
		return fmt.Errorf("%w: body in memory (%d bytes) is more than the body memory (%d bytes)", ErrConfig, c.BodyInMemory, c.MaxBodyMemory)
	}
	files, err := fileLimit()
	if err != nil {
		files = 1024 // the usual default where the limit cannot be read
	}
	most := int((files - spareFiles) / 2)
	switch {
	case c.MaxConns < 0:
		return fmt.Errorf("%w: max connections %d is negative", ErrConfig, c.MaxConns)
	case c.MaxConns == 0:
		c.MaxConns = min(most, maxDefaultConns)
		if c.MaxConns < 1 {
			return fmt.Errorf("%w: the file limit of %d open files leaves no room for connections: raise it (ulimit -n)", ErrConfig, files)
		}
	case c.MaxConns > most:
		return fmt.Errorf("%w: max connections %d needs about %d open files, but this process may open %d: raise the limit (ulimit -n) or allow at most %d connections",
			ErrConfig, c.MaxConns, 2*c.MaxConns+spareFiles, files, max(most, 0))
	}
	return nil
}

// validID reports whether s has the form of an identity ID: "id" then 32
// lowercase base32 letters (identity.IDOf).
func validID(s string) bool {
	rest, ok := strings.CutPrefix(s, "id")
	if !ok || len(rest) != 32 {
		return false
	}
	for _, r := range rest {
		if !(r >= 'a' && r <= 'z' || r >= '2' && r <= '7') {
			return false
		}
	}
	return true
}
