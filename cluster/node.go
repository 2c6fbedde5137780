package cluster

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// clusterName is the NATS cluster name every idlepool node uses.
const clusterName = "idlepool"

// NodeConfig is one node of a clustered pool, as the node's cluster.toml
// gives it (see LoadConfig and Init).
type NodeConfig struct {
	// Name is the node's name, unique in the cluster ("node1").
	Name string `toml:"name"`
	// Pool is the pool's name, written into every receipt; the same on
	// every node.
	Pool string `toml:"pool"`
	// Listen is the HOST:PORT of the pool's HTTP API on this node, where
	// agents and submitters connect.
	Listen string `toml:"listen"`
	// URL is how others reach Listen ("http://HOST:PORT"); default
	// "http://" + Listen.
	URL string `toml:"url"`
	// Internal is the HOST:PORT of this node's coordinator while it is in
	// charge; the other nodes forward requests there. Default: Listen's
	// host with port 0 (any free port; it is published to the others).
	Internal string `toml:"internal"`
	// RouteListen is the HOST:PORT of NATS cluster routes (TLS, with
	// credentials), where the other nodes connect.
	RouteListen string `toml:"route_listen"`
	// Routes are the other nodes' route addresses, "HOST:PORT".
	Routes []string `toml:"routes"`
	// Replicas is the replication factor of the pool's state: 3 for a
	// cluster of three or more nodes. Default 3 when Routes is not
	// empty, else 1.
	Replicas int `toml:"replicas"`
	// RouteUser and RoutePassword are the credentials every node
	// presents on its routes (the same on every node).
	RouteUser     string `toml:"route_user"`
	RoutePassword string `toml:"route_password"`
	// CA, Cert and Key are PEM files (relative to the config file's
	// directory): the cluster's CA, and this node's certificate and key,
	// which it presents on routes; both sides verify the other against
	// CA.
	CA   string `toml:"ca"`
	Cert string `toml:"cert"`
	Key  string `toml:"key"`
	// LeaderTTL is how long the node in charge holds its lease without
	// renewing it ("3s"); another node takes over after it. Default 3 s.
	LeaderTTL Duration `toml:"leader_ttl"`
	// SnapshotEvery is how many state messages the node in charge
	// appends between two snapshots of the pool's state (the state
	// stream is trimmed behind the one before, so a node that starts
	// from nothing loads a snapshot and replays at most about this many
	// messages). Default 4096.
	SnapshotEvery uint64 `toml:"snapshot_every"`
	// ColdStandby makes the node apply nothing of the pool's state
	// while another node is in charge: when it takes charge it loads the
	// newest snapshot and the batches after it (at most about
	// SnapshotEvery of them), as a node that starts from nothing does.
	// It saves the node the CPU of decoding and applying every batch the
	// node in charge commits (measured: 40-80 µs per accepted task
	// instead of 110-150, docs/benchmarks.md) and the pool's state in its
	// memory, and makes each take-over by this node longer by the time
	// that load takes (about 1 s per 650 batches of 30 tasks). Default
	// false: the node follows the state stream every quarter of
	// LeaderTTL (Store.Follow), a warm standby, and applies only the
	// last few batches when it takes charge. In a pool divided into
	// shards a warm node follows only the shards it stands by for, of
	// which it is the Successor (Leadership.Campaign gives it those
	// first when their node is gone), and takes any other as a cold
	// standby does.
	ColdStandby bool `toml:"cold_standby"`
	// Shards is K, how many shards the pool's work is divided into
	// (RATIONALE.md, "Dividing the work among the nodes"), 1 to
	// MaxShards; the same on every node, and fixed for the pool's life
	// (a job's shard is one of K: ShardOf's, or in a pool that places
	// jobs by load the one recorded in Placements): the first node to start
	// records it, and a node whose config says otherwise refuses to
	// start (Rules.ClaimShards). Each shard is scheduled by one node at
	// a time, and the nodes share the shards. Default 1: one node
	// schedules everything.
	Shards int `toml:"shards"`

	// Dir is the directory of the config file; relative paths are under
	// it. The node keeps its data in Dir/data unless DataDir is set.
	Dir     string `toml:"-"`
	DataDir string `toml:"data_dir"`
}

// Duration is a time.Duration written as "3s" in TOML.
type Duration struct{ time.Duration }

// UnmarshalText parses a Go duration such as "3s".
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

// MarshalText writes d as a Go duration.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

func (c *NodeConfig) path(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(c.Dir, p)
}

// withDefaults fills in defaults and checks the config; errors name the
// field.
func (c NodeConfig) withDefaults() (NodeConfig, error) {
	if c.Name == "" {
		return c, fmt.Errorf("%w: name is empty", ErrConfig)
	}
	if c.Pool == "" {
		c.Pool = "default"
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return c, fmt.Errorf("%w: listen %q: %v", ErrConfig, c.Listen, err)
	}
	if c.URL == "" {
		c.URL = "http://" + c.Listen
	}
	if c.Internal == "" {
		h, _, _ := net.SplitHostPort(c.Listen)
		c.Internal = net.JoinHostPort(h, "0")
	}
	if _, _, err := net.SplitHostPort(c.RouteListen); err != nil {
		return c, fmt.Errorf("%w: route_listen %q: %v", ErrConfig, c.RouteListen, err)
	}
	for _, r := range c.Routes {
		if _, _, err := net.SplitHostPort(r); err != nil {
			return c, fmt.Errorf("%w: routes: %q: %v", ErrConfig, r, err)
		}
	}
	if c.Replicas == 0 {
		c.Replicas = 1
		if len(c.Routes) > 0 {
			c.Replicas = 3
		}
	}
	if c.Replicas < 1 || c.Replicas > 5 {
		return c, fmt.Errorf("%w: replicas %d: want 1 to 5", ErrConfig, c.Replicas)
	}
	if len(c.Routes) > 0 && (c.CA == "" || c.Cert == "" || c.Key == "" || c.RouteUser == "" || c.RoutePassword == "") {
		return c, fmt.Errorf("%w: a node with routes needs ca, cert, key, route_user and route_password (made by idlepool cluster init)", ErrConfig)
	}
	if c.LeaderTTL.Duration == 0 {
		c.LeaderTTL.Duration = 3 * time.Second
	}
	if c.LeaderTTL.Duration < 500*time.Millisecond {
		return c, fmt.Errorf("%w: leader_ttl %s: want at least 500ms", ErrConfig, c.LeaderTTL)
	}
	if c.Shards == 0 {
		c.Shards = 1
	}
	if err := ValidateShardCount(c.Shards); err != nil {
		return c, fmt.Errorf("%w: shards %d: want 1 to %d", ErrConfig, c.Shards, MaxShards)
	}
	if c.SnapshotEvery == 0 {
		c.SnapshotEvery = 4096
	}
	if c.DataDir == "" {
		c.DataDir = "data"
	}
	c.DataDir = c.path(c.DataDir)
	return c, nil
}

// ErrConfig marks a node configuration that cannot work; the message
// names the field.
var ErrConfig = errors.New("cluster: bad node config")

// ErrNodeDirExists marks an Init refused because a node's directory
// exists already (a cluster made there before): Init writes over no
// node's keys.
var ErrNodeDirExists = errors.New("cluster: a node's directory exists already")

// Node is a running NATS server with JetStream, embedded in this process
// and joined to the other nodes by routes, with an in-process client
// connection. Its NATS client port is on 127.0.0.1 and needs a token only
// this process knows.
type Node struct {
	cfg NodeConfig
	ns  *server.Server
	nc  *nats.Conn
	js  jetstream.JetStream
	log *slog.Logger
}

// StartNode starts the embedded server of cfg and waits up to ctx for it
// to be ready and, in a cluster, for JetStream's meta group to have a
// leader (a majority of the nodes is up). JetStream keeps its files under
// DataDir/jetstream.
func StartNode(ctx context.Context, cfg NodeConfig, log *slog.Logger) (*Node, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("cluster: create data directory: %w", err)
	}
	var tb [24]byte
	if _, err := rand.Read(tb[:]); err != nil {
		return nil, err
	}
	token := hex.EncodeToString(tb[:])
	opts := &server.Options{
		ServerName: cfg.Name,
		// A client port on loopback, random, with a token nobody is
		// given: the server starts routing only once it listens for
		// clients, and this process connects in-process anyway.
		Host:               "127.0.0.1",
		Port:               server.RANDOM_PORT,
		Authorization:      token,
		NoSigs:             true,
		JetStream:          true,
		StoreDir:           filepath.Join(cfg.DataDir, "jetstream"),
		MaxPayload:         8 << 20,
		JetStreamMaxMemory: 64 << 20,
		// A node whose peer died tries its route again every second, and
		// the server reported each failure as an error by default: an
		// ERROR line a second, for as long as that node is down. Its
		// first failure is reported, then one in reconnectErrorReports.
		ReconnectErrorReports: reconnectErrorReports,
	}
	if len(cfg.Routes) > 0 || cfg.Replicas > 1 {
		host, port, err := splitPort(cfg.RouteListen)
		if err != nil {
			return nil, fmt.Errorf("%w: route_listen: %v", ErrConfig, err)
		}
		opts.Cluster = server.ClusterOpts{Name: clusterName, Host: host, Port: port,
			Username: cfg.RouteUser, Password: cfg.RoutePassword, ConnectRetries: -1,
			// Every node names every other in routes (cluster init makes
			// a full mesh), so clients are told of no other node. NATS
			// still tells routed nodes of each new route (gossip), and a
			// node told of one it has no route to yet connects to it at
			// the address its connection came from and its route port:
			// a node may reach another outside its routes, over the same
			// network.
			NoAdvertise: true,
			// One connection per pair of nodes: the pool's traffic is
			// small, and a node then talks to another on exactly the
			// connection its routes name.
			PoolSize: -1}
		if cfg.CA != "" {
			tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: cfg.path(cfg.Cert), KeyFile: cfg.path(cfg.Key),
				CaFile: cfg.path(cfg.CA), Verify: true, Timeout: 2})
			if err != nil {
				return nil, fmt.Errorf("cluster: route TLS: %w", err)
			}
			// Routes dial out too: trust the same CA as servers and clients.
			tc.RootCAs = tc.ClientCAs
			tc.MinVersion = tls.VersionTLS13
			opts.Cluster.TLSConfig, opts.Cluster.TLSTimeout = tc, 2
		}
		for _, r := range cfg.Routes {
			u := &url.URL{Scheme: "nats", Host: r, User: url.UserPassword(cfg.RouteUser, cfg.RoutePassword)}
			opts.Routes = append(opts.Routes, u)
		}
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("cluster: start NATS server: %w", err)
	}
	ns.SetLoggerV2(natsLogger{log.With("component", "nats")}, false, false, false)
	ns.Start()
	n := &Node{cfg: cfg, ns: ns, log: log}
	if !ns.ReadyForConnections(10 * time.Second) {
		n.Close()
		return nil, fmt.Errorf("cluster: NATS server %s did not start within 10s (is route_listen %s in use?)", cfg.Name, cfg.RouteListen)
	}
	if n.nc, err = nats.Connect("", nats.InProcessServer(ns), nats.Token(token), nats.Name("idlepool "+cfg.Name), nats.MaxReconnects(-1)); err != nil {
		n.Close()
		return nil, fmt.Errorf("cluster: connect to the embedded server: %w", err)
	}
	if n.js, err = jetstream.New(n.nc); err != nil {
		n.Close()
		return nil, fmt.Errorf("cluster: JetStream: %w", err)
	}
	// Wait for JetStream to answer: in a cluster, once a majority of the
	// nodes has formed the meta group.
	for {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := n.js.AccountInfo(actx)
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			n.Close()
			return nil, fmt.Errorf("cluster: JetStream not ready on %s (are a majority of the nodes up and routed?): %w", cfg.Name, err)
		}
		log.Info("Waiting for the cluster's JetStream", "node", cfg.Name, "waitingFor", "the cluster's JetStream to answer",
			"need", "a majority of the nodes up and routed to this one", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
	return n, nil
}

// Config returns the node's configuration with defaults filled in.
func (n *Node) Config() NodeConfig { return n.cfg }

// JetStream returns the node's JetStream client.
func (n *Node) JetStream() jetstream.JetStream { return n.js }

// Server returns the embedded NATS server, for health reports.
func (n *Node) Server() *server.Server { return n.ns }

// Close closes the client connection and shuts the server down. It is
// idempotent.
func (n *Node) Close() {
	if n.nc != nil {
		n.nc.Close()
	}
	if n.ns != nil {
		n.ns.Shutdown()
		n.ns.WaitForShutdown()
	}
}

func splitPort(hp string) (string, int, error) {
	h, p, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port in %q", hp)
	}
	return h, port, nil
}

// reconnectErrorReports is how many failed tries to reach a lost route
// make one report in the log (the server's ReconnectErrorReports): at a
// try a second, about one a minute.
const reconnectErrorReports = 60

// natsLogger sends the embedded server's log to slog: notices at debug
// (they are many), warnings and errors as such.
type natsLogger struct{ l *slog.Logger }

func (g natsLogger) Noticef(f string, v ...any) { g.l.Debug(fmt.Sprintf(f, v...)) }
func (g natsLogger) Warnf(f string, v ...any) {
	msg := fmt.Sprintf(f, v...)
	if strings.HasPrefix(msg, "Metalayer blocking snapshot") {
		g.l.Debug(msg) // routine, though the server calls it a warning
		return
	}
	g.l.Warn(msg)
}
func (g natsLogger) Fatalf(f string, v ...any) { g.l.Error(fmt.Sprintf(f, v...)) }
func (g natsLogger) Errorf(f string, v ...any) { g.l.Error(fmt.Sprintf(f, v...)) }
func (g natsLogger) Debugf(f string, v ...any) {}
func (g natsLogger) Tracef(f string, v ...any) {}
