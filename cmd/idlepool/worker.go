package main

import (
	"context"
	"flag"
	"os"
	"path/filepath"

	"idlepool/worker"
)

// cmdWorker is the sandboxed task subprocess: it speaks the worker
// protocol on stdin and stdout until stdin closes.
func cmdWorker(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("idlepool worker", flag.ContinueOnError)
	fs.SetOutput(g.stderr)
	g.register(fs)
	cache := fs.String("cache", "", "compilation cache `DIR` (default: under the home cache)")
	if _, err := parseInterspersed(fs, args); err != nil {
		return err
	}
	if *cache == "" {
		*cache = os.Getenv(worker.CacheDirEnv)
	}
	if *cache == "" {
		d, err := g.dirs()
		if err != nil {
			return err
		}
		*cache = filepath.Join(d.Cache, "wazero")
	}
	return worker.Serve(ctx, g.stdin, g.stdout, *cache)
}
