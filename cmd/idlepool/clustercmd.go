package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"

	"idlepool/cluster"
)

func cmdCluster(ctx context.Context, g *globals, args []string) error {
	if len(args) == 0 || args[0] != "init" {
		return &userError{Msg: "usage: idlepool cluster init DIR [--nodes N --host HOST --port P --route-port R | --node NAME,HTTP_HOST:PORT,ROUTE_HOST:PORT ...]", Cause: errUsage}
	}
	fs := g.flagSet("idlepool cluster init", "Usage: idlepool cluster init DIR [--pool NAME] [--shards K] [--nodes N] [--host HOST] [--port P] [--route-port R]\n       idlepool cluster init DIR [--pool NAME] [--shards K] --node NAME,HTTP_HOST:PORT,ROUTE_HOST:PORT --node ...\n\nMakes the files of a new clustered pool under DIR: for each node, DIR/NAME/ with\ncluster.toml, the cluster's CA certificate, the node's certificate and key, and the\npool's key. Copy each node's directory to its machine and run\n'idlepool serve --cluster NAME/cluster.toml' there. With --nodes, the nodes are\nnode1..nodeN on HOST, with HTTP ports P, P+1, ... and route ports R, R+1, ...\n(one machine: for trying it out).\n\n")
	poolName := fs.String("pool", "default", "the pool's `NAME`, written into every receipt")
	n := fs.Int("nodes", 3, "make `N` nodes on --host")
	host := fs.String("host", "127.0.0.1", "the `HOST` of the nodes made by --nodes")
	port := fs.Int("port", 7420, "the first node's HTTP `PORT` (agents and submitters connect there)")
	routePort := fs.Int("route-port", 6250, "the first node's route `PORT` (the nodes connect to each other there)")
	shards := fs.Int("shards", 1, "divide the pool's work into `K` shards (1 to 64), each scheduled by one node at a time, the nodes sharing them; fixed for the pool's life (docs/operator.md, \"Dividing the work among the nodes\")")
	var specs stringList
	fs.Var(&specs, "node", "a node as `NAME,HTTP_HOST:PORT,ROUTE_HOST:PORT` (repeat for each node)")
	pos, err := parseInterspersed(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return &userError{Msg: "cluster init takes one directory", Cause: errUsage}
	}
	var nodes []cluster.InitNode
	if len(specs) > 0 {
		for _, s := range specs {
			parts := strings.Split(s, ",")
			if len(parts) != 3 {
				return &userError{Msg: fmt.Sprintf("--node %q: want NAME,HTTP_HOST:PORT,ROUTE_HOST:PORT", s), Cause: errUsage}
			}
			nodes = append(nodes, cluster.InitNode{Name: parts[0], Listen: parts[1], RouteListen: parts[2]})
		}
	} else {
		if *n < 1 || *n > 9 {
			return &userError{Msg: fmt.Sprintf("--nodes %d: want 1 to 9", *n), Cause: errUsage}
		}
		for i := range *n {
			nodes = append(nodes, cluster.InitNode{Name: "node" + strconv.Itoa(i+1),
				Listen: net.JoinHostPort(*host, strconv.Itoa(*port+i)), RouteListen: net.JoinHostPort(*host, strconv.Itoa(*routePort+i))})
		}
	}
	if *shards < 1 || *shards > cluster.MaxShards {
		return &userError{Msg: fmt.Sprintf("--shards %d: want 1 to %d", *shards, cluster.MaxShards), Cause: errUsage}
	}
	cfgs, err := cluster.Init(pos[0], *poolName, *shards, nodes)
	if err != nil {
		if errors.Is(err, cluster.ErrConfig) {
			return &userError{Msg: err.Error(), Cause: errors.Join(err, errUsage)}
		}
		return err
	}
	var urls []string
	for _, c := range cfgs {
		urls = append(urls, c.URL)
		fmt.Fprintf(g.stdout, "%s: idlepool serve --cluster %s   (API %s, routes %s)\n", c.Name, filepath.Join(c.Dir, cluster.ConfigFile), c.URL, c.RouteListen)
	}
	fmt.Fprintf(g.stdout, "pool URL for join and submit: %s\n", strings.Join(urls, ","))
	if *shards > 1 {
		if len(cfgs) == 1 {
			fmt.Fprintf(g.stdout, "the pool's work is divided into %d shards, all in the charge of the one node\n", *shards)
		} else {
			fmt.Fprintf(g.stdout, "the pool's work is divided into %d shards: while all %d nodes run, each is in charge of at most %d\n", *shards, len(cfgs), cluster.FairShare(*shards, len(cfgs)))
		}
	}
	fmt.Fprintf(g.stderr, "keep %s private: it holds the pool's key and the nodes' credentials\n", pos[0])
	return nil
}
