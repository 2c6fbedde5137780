package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"idlepool/worker"
)

// A program's worker subcommand is one call of Serve.
func ExampleServe() {
	// In `idlepool worker`, started by a Pool:
	ctx := context.Background()
	if err := worker.Serve(ctx, os.Stdin, os.Stdout, os.Getenv(worker.CacheDirEnv)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// Run one task and tell its three possible outcomes apart. (Not run as a
// test: it needs the idlepool binary and a module.)
func ExamplePool_Run() {
	exe, err := os.Executable()
	if err != nil {
		panic(err)
	}
	pool, err := worker.NewPool(worker.Config{
		Command:  []string{exe, "worker"},
		Slots:    2,
		CacheDir: filepath.Join(os.TempDir(), "idlepool-wazero-cache"),
		Logger:   slog.Default(),
	})
	if err != nil {
		panic(err)
	}
	defer pool.Close()

	res, err := pool.Run(context.Background(), worker.Request{
		ModulePath:   "program.wasm",
		ModuleSHA256: "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae",
		Stdin:        []byte(`{"n": 1000}`),
		Seed:         [32]byte{1},
		Timeout:      time.Minute,
	})
	switch {
	case err != nil:
		fmt.Println("not run:", err)
	case res.Failure != nil:
		fmt.Println("failed:", res.Failure.Kind, res.Failure.Message)
	default:
		fmt.Printf("result from worker %d: %s", res.PID, res.Stdout)
	}
}
