// Command liar is a donor that lies, for the pool tests. It joins a pool
// over HTTP as `idlepool join` does (its own device and owner keys, a
// signed capacity offer) and computes each task it is leased in a worker
// (itself, run as `liar worker`), as a donor must to count the work, which
// replicas agree on like on the result: it returns the results honestly
// for its first -honest tasks, to earn the pool's trust, and -lie for
// every task after that, with the count of the task it computed. With
// -poison it returns, instead of -lie, its honest result with every
// number of the array -poison-field changed: negated, scaled by 4, or
// replaced by random numbers (cycle: each in turn), as a device poisoning
// a training round's update would; a result without that array it
// returns honestly.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"idlepool/agent"
	"idlepool/identity"
	"idlepool/idle"
	"idlepool/job"
	"idlepool/offers"
	"idlepool/pool"
	"idlepool/worker"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "worker" {
		if err := worker.Serve(context.Background(), os.Stdin, os.Stdout, os.Getenv(worker.CacheDirEnv)); err != nil {
			fmt.Fprintln(os.Stderr, "liar worker:", err)
			os.Exit(1)
		}
		return
	}
	url := flag.String("pool", "", "the pool's URL")
	dir := flag.String("dir", "", "a directory for the job files it fetches")
	honest := flag.Int("honest", 3, "tasks answered honestly before it lies")
	lie := flag.String("lie", `{"x":1000}`, "the result it returns once it lies")
	poison := flag.String("poison", "", "lie with the honest result's array -poison-field changed: negate, scale, random or cycle (each in turn)")
	field := flag.String("poison-field", "update", "the result's array that -poison changes")
	flag.Parse()
	switch *poison {
	case "", "negate", "scale", "random", "cycle":
	default:
		fmt.Fprintf(os.Stderr, "liar: -poison must be negate, scale, random or cycle, got %q\n", *poison)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *url, *dir, *honest, *lie, *poison, *field); err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "liar:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, url, dir string, honest int, lie, poison, field string) error {
	dev, err := identity.Generate()
	if err != nil {
		return err
	}
	owner, err := identity.Generate()
	if err != nil {
		return err
	}
	c, err := agent.NewClient(url, dev, nil)
	if err != nil {
		return err
	}
	info, err := c.Pool(ctx)
	if err != nil {
		return err
	}
	if _, err := c.Register(ctx, owner, "liar", ""); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "liar: device %s owner %s\n", dev.ID(), owner.ID())
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	wp, err := worker.NewPool(worker.Config{Command: []string{exe, "worker"}, Slots: 1, CacheDir: filepath.Join(dir, "wazero"),
		Env: append(os.Environ(), worker.PriorityEnv+"=normal")})
	if err != nil {
		return err
	}
	defer wp.Close()
	jobs := map[job.ID]*job.Job{}
	answered, trusted, poisonedN := 0, false, 0
	var offered time.Time
	for ctx.Err() == nil {
		if time.Since(offered) > 30*time.Second {
			now := time.Now()
			o := offers.Offer{Owner: owner.ID(), Pool: info.Pool,
				Capacity: idle.Capacity{OS: "linux", Arch: "amd64", LogicalCPUs: 2, Cores: 2, MemoryTotalMiB: 4096, MemoryMiB: 2048, TimeZone: "UTC"},
				State:    idle.StateComputing, Issued: now, Expires: now.Add(2 * time.Minute)}
			o.Sign(dev)
			if err := c.PutOffer(ctx, o); err != nil {
				fmt.Fprintln(os.Stderr, "liar: offer:", err)
			} else {
				offered = now
			}
		}
		if answered == honest && !trusted {
			// Lie only once the honest results were agreed with (a
			// receipt each): a patient liar waits to be trusted, so that
			// its lies are computed alone rather than beside a replica
			// of an honest device.
			trusted = waitReceipts(ctx, c, honest)
		}
		ls, err := c.Lease(ctx, 1)
		if err != nil || len(ls) == 0 {
			if err != nil {
				fmt.Fprintln(os.Stderr, "liar: lease:", err)
			}
			pause(ctx, 100*time.Millisecond)
			continue
		}
		for _, l := range ls {
			j, err := fetch(ctx, c, dir, jobs, l.Job)
			if err != nil {
				return err
			}
			program, inputDir, err := pool.PrepareInputs(j, filepath.Join(dir, "run", j.ID.String()))
			if err != nil {
				return err
			}
			out, err := pool.RunTask(ctx, wp, pool.TaskRequest(j, j.Task(l.Task), program, inputDir), nil)
			if err != nil {
				return err
			}
			sub, what := out.Submission(), "honest"
			if answered >= honest {
				result := []byte(lie + "\n")
				if poison != "" {
					mode := poison
					if mode == "cycle" {
						mode = []string{"negate", "scale", "random"}[poisonedN%3]
					}
					result, err = poisoned(sub.Result, field, mode)
					if err != nil {
						return err
					}
					if result != nil {
						what = "lie (" + mode + ")"
						poisonedN++
					}
				}
				if result != nil {
					sub.Result, sub.Digest = result, pool.ReplicaDigest(result, false, "")
					if poison == "" {
						what = "lie"
					}
				}
			}
			answered++
			if err := c.SendResult(ctx, l.ID, sub); err != nil {
				fmt.Fprintln(os.Stderr, "liar: result:", err)
				continue
			}
			fmt.Fprintf(os.Stderr, "liar: task %d lease %s: %s\n", l.Task, l.ID, what)
		}
	}
	return nil
}

// waitReceipts waits until the pool has given this device n receipts, for
// two minutes at most; it reports whether they came.
func waitReceipts(ctx context.Context, c *agent.Client, n int) bool {
	for end := time.Now().Add(2 * time.Minute); ctx.Err() == nil && time.Now().Before(end); pause(ctx, 100*time.Millisecond) {
		es, err := c.Receipts(ctx, 0, 1000)
		if err != nil {
			fmt.Fprintln(os.Stderr, "liar: receipts:", err)
			continue
		}
		got := 0
		for _, e := range es {
			if e.Kind == pool.KindReceipt {
				got++
			}
		}
		if got >= n {
			fmt.Fprintf(os.Stderr, "liar: %d receipts: trusted now\n", got)
			return true
		}
	}
	return false
}

// fetch returns job id, fetching its encoding and files once.
func fetch(ctx context.Context, c *agent.Client, dir string, jobs map[job.ID]*job.Job, id job.ID) (*job.Job, error) {
	if j := jobs[id]; j != nil {
		return j, nil
	}
	canon, err := c.Canonical(ctx, id)
	if err != nil {
		return nil, err
	}
	j, err := job.FromCanonical(canon, func(d job.Digest) string {
		p := filepath.Join(dir, d.String())
		if _, err := os.Stat(p); err != nil {
			if err := c.FetchBlob(ctx, d, p); err != nil {
				fmt.Fprintln(os.Stderr, "liar: fetch:", err)
			}
		}
		return p
	})
	if err != nil {
		return nil, err
	}
	jobs[id] = j
	return j, nil
}

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// poisoned returns the result object with every number of its array
// field negated, scaled by 4 or replaced by a random integer, or nil when
// it has no such array.
func poisoned(result []byte, field, mode string) ([]byte, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(result, &obj); err != nil {
		return nil, fmt.Errorf("poison: the honest result: %w", err)
	}
	var xs []json.Number
	if v, ok := obj[field]; !ok || json.Unmarshal(v, &xs) != nil {
		return nil, nil
	}
	out := make([]any, len(xs))
	for i, x := range xs {
		n, err := x.Int64()
		switch {
		case mode == "random":
			out[i] = rand.Int64N(1<<40) - 1<<39
		case err != nil: // not an integer
			f, _ := x.Float64()
			out[i] = map[string]float64{"negate": -f, "scale": 4 * f}[mode]
		case mode == "negate":
			out[i] = -n
		default:
			out[i] = 4 * n
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	obj[field] = b
	if b, err = json.Marshal(obj); err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
