//go:build unix

package agent_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"idlepool/agent"
	"idlepool/coord"
	"idlepool/job"
)

// The coordinator benchmark: one job of b.N empty tasks at redundancy 2
// and quorum 2, computed by 8 in-process agents (4 slots each) over real
// HTTP on loopback, merged by an in-process Follow. It reports accepted
// tasks per second and CPU time per accepted task:
//
//	go test -run '^$' -bench Coordinator -benchtime 2000x ./agent/
//
// In "inproc" the coordinator shares the process with the agents and the
// merger, so cpu-µs/task (getrusage of the process) is an upper bound of
// the coordinator's share. In "subprocess" the coordinator is this test
// binary re-executed, so coord-cpu-µs/task is the coordinator's own CPU
// time (its /proc/PID/stat, HTTP, signatures, scheduling and SQLite
// included) and agents-cpu-µs/task the rest. The scheduler alone, without
// HTTP, is measured by BenchmarkSchedulerEmptyTasks in package store.

// benchCoordinatorEnv, when set to a directory, makes the test binary a
// coordinator with its state there: it prints its URL on stdout and
// serves until SIGTERM.
const benchCoordinatorEnv = "IDLEPOOL_BENCH_COORDINATOR"

// benchProfileEnv, when set to a file name, makes that coordinator write
// its CPU profile there (go tool pprof -top FILE):
//
//	IDLEPOOL_BENCH_CPUPROFILE=/tmp/coord.prof go test -run '^$' -bench Coordinator/subprocess ./agent/
const benchProfileEnv = "IDLEPOOL_BENCH_CPUPROFILE"

// benchMemProfileEnv, when set to a file name, makes that coordinator
// write its heap profile there as it stops; its alloc_space and
// alloc_objects say what the run allocated (go tool pprof -sample_index
// alloc_space -top FILE).
const benchMemProfileEnv = "IDLEPOOL_BENCH_MEMPROFILE"

func init() {
	dir := os.Getenv(benchCoordinatorEnv)
	if dir == "" {
		return
	}
	os.Exit(benchCoordinator(dir))
}

// benchCoordinator serves a coordinator with its state in dir until
// SIGTERM and returns the process's exit code.
func benchCoordinator(dir string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if path := os.Getenv(benchProfileEnv); path != "" {
		f, err := os.Create(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	if path := os.Getenv(benchMemProfileEnv); path != "" {
		defer func() {
			f, err := os.Create(path)
			if err == nil {
				err = pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
		}()
	}
	// Compacting every second (30 s by default) puts its cost, which
	// grows with the tasks decided, inside the benchmark's window.
	srv, err := coord.New(ctx, coord.Config{Listen: "127.0.0.1:0", DataDir: dir, Pool: "bench", CompactEvery: time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("%s\n", srv.URL())
	if err := srv.Serve(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// startSelf runs this test binary again with env ("NAME=value", a
// variable that makes it a server: benchCoordinatorEnv, floorServerEnv)
// and returns the URL it prints on its first line and its process ID.
// The process is stopped (SIGTERM, then waited for) when b's run ends;
// what names it in an error.
func startSelf(b *testing.B, env, what string) (url string, pid int) {
	b.Helper()
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), env)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		io.Copy(io.Discard, out)
		cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatalf("%s: %v", what, err)
	}
	return strings.TrimSpace(line), cmd.Process.Pid
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// childCPU reads a process's user + system CPU time from /proc (Linux);
// ok is false elsewhere.
func childCPU(pid int) (time.Duration, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// Fields after the command name (which may hold spaces) start at ")".
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return 0, false
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	const userHZ = 100 // sysconf(_SC_CLK_TCK) on Linux
	return time.Duration(ut+st) * time.Second / userHZ, true
}

func BenchmarkCoordinator(b *testing.B) {
	b.Run("inproc", func(b *testing.B) {
		co := startCoordinator(b, b.TempDir(), "127.0.0.1:0")
		benchPool(b, co.url, nil)
	})
	b.Run("subprocess", func(b *testing.B) {
		if runtime.GOOS != "linux" {
			b.Skip("reads the coordinator's CPU time from /proc")
		}
		url, pid := startSelf(b, benchCoordinatorEnv+"="+b.TempDir(), "coordinator subprocess")
		benchPool(b, url, []int{pid})
	})
	b.Run("external", func(b *testing.B) {
		// A pool started outside the benchmark (scripts/bench-cluster.sh):
		// IDLEPOOL_BENCH_POOL is its URL (a cluster's node URLs separated
		// by commas), IDLEPOOL_BENCH_PIDS its processes, one per node in
		// the same order, whose CPU time is reported node by node.
		url := os.Getenv(benchPoolEnv)
		if url == "" || runtime.GOOS != "linux" {
			b.Skip("set " + benchPoolEnv + " and " + benchPIDsEnv + " (scripts/bench-cluster.sh)")
		}
		var pids []int
		for f := range strings.SplitSeq(os.Getenv(benchPIDsEnv), ",") {
			pid, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				b.Fatalf("%s: %v", benchPIDsEnv, err)
			}
			pids = append(pids, pid)
		}
		benchPool(b, url, pids)
	})
}

// benchLeaseAheadEnv sets the benchmark agents' Config.LeaseAhead
// (default 0: the agent's own choice, MaxAutoLeaseAhead for these empty
// tasks; 1 is an agent that leases one task at a time).
const benchLeaseAheadEnv = "IDLEPOOL_BENCH_LEASE_AHEAD"

// benchTaskDelayEnv makes each of the benchmark's tasks take that long
// (a Go duration; default, or 0 or less: none) on its slot: with
// benchLeaseAheadEnv=1, requests then come spread out as a pool of
// long tasks sends them, not in the bursts of instant tasks. 8 agents of
// 4 slots with tasks of 5ms ask about 1,300 tasks a second of one node
// on a 2-core machine, what 10,000 eight-core machines with tasks of a
// minute would (docs/benchmarks.md).
const benchTaskDelayEnv = "IDLEPOOL_BENCH_TASK_DELAY"

// benchGatherEnv sets the benchmark mergers' FollowConfig.Gather (a Go
// duration; default, or 0: agent.DefaultGather; a negative one such as
// -1ns: none, each page asked for as soon as the last is acknowledged).
const benchGatherEnv = "IDLEPOOL_BENCH_GATHER"

// envDuration returns the Go duration the environment variable name
// holds (0 when it is unset or empty), failing b on any other value.
func envDuration(b *testing.B, name string) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		b.Fatalf("%s: %q: want a Go duration such as 10ms", name, v)
	}
	return d
}

// The environment of BenchmarkCoordinator/external.
const (
	benchPoolEnv = "IDLEPOOL_BENCH_POOL"
	benchPIDsEnv = "IDLEPOOL_BENCH_PIDS"
)

// benchJobsEnv splits the benchmark's b.N tasks into that many jobs
// (default 1), submitted together and followed side by side: a pool
// divided into shards schedules each job on its job's shard, so one
// job would keep every shard but one idle.
const benchJobsEnv = "IDLEPOOL_BENCH_JOBS"

// benchPool runs one job of b.N empty tasks (or benchJobsEnv jobs
// sharing them) on the pool at url with 8
// agents of distinct owners; coordPIDs, if any, are the coordinator's
// processes (a cluster's nodes, in the order of url's list), whose CPU
// time is reported apart: in all, and node by node when there are
// several.
func benchPool(b *testing.B, url string, coordPIDs []int) {
	const agents, slots = 8, 4
	exec := &fakeExec{Delay: envDuration(b, benchTaskDelayEnv)}
	gather := envDuration(b, benchGatherEnv) // FollowConfig.Gather; 0: its default

	ahead := 0 // tasks each slot leases at once (agent.Config.LeaseAhead; 0: the agent chooses)
	if v := os.Getenv(benchLeaseAheadEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			b.Fatalf("%s: %v", benchLeaseAheadEnv, err)
		}
		ahead = n
	}
	b.ReportMetric(float64(ahead), "lease-ahead")
	for i := range agents {
		dev := newDevice(b, nil)
		a, err := agent.New(agent.Config{
			PoolURL: url, Home: dev.dirs, DeviceKey: dev.key, OwnerKey: dev.owner, Slots: slots, LeaseAhead: ahead,
			Executor: exec, Store: newMemStore(), HTTP: httpClient(b),
			MaxBackoff: 100 * time.Millisecond, IdlePoll: 5 * time.Millisecond, ReceiptPoll: time.Second,
			Logger: quietLogger(b).With("agent", i),
		})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.Serve(ctx) }()
		b.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				b.Error(err)
			}
		})
	}
	sub := newSubmitter(b, url, nil)
	jobs := 1
	if v := os.Getenv(benchJobsEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("%s: %q: want a count from 1", benchJobsEnv, v)
		}
		jobs = min(n, b.N) // the benchmark's first run has b.N = 1
	}
	b.ReportMetric(float64(jobs), "jobs")
	ctx := context.Background()
	var js []*job.Job
	for i := range jobs {
		tasks := b.N / jobs
		if i < b.N%jobs {
			tasks++
		}
		j := planJob(b, fmt.Sprintf("bench-%d-%d-of-%d", b.N, i+1, jobs), tasks, "")
		// A divided pool's shard may still be changing hands as the
		// nodes spread them: sent again, as `idlepool submit` does.
		err := sub.c.Submit(ctx, j)
		for try := 0; agent.InTakeOver(err) && try < 60; try++ {
			time.Sleep(agent.TakeOverPoll)
			err = sub.c.Submit(ctx, j)
		}
		if err != nil {
			b.Fatal(err)
		}
		js = append(js, j)
	}
	b.ResetTimer()
	start, cpu0 := time.Now(), processCPU()
	ccpu0, _ := childrenCPU(coordPIDs)
	var ok64 atomic.Int64
	var g errgroup.Group
	for _, j := range js {
		dir := b.TempDir()
		g.Go(func() error {
			out, err := agent.Follow(ctx, sub.c, j, agent.FollowConfig{Dir: dir, Poll: time.Millisecond, Page: 1000, Gather: gather})
			if err == nil {
				ok64.Add(out.OK)
			}
			return err
		})
	}
	err := g.Wait()
	elapsed, cpu := time.Since(start), processCPU()-cpu0
	ccpu1, ok := childrenCPU(coordPIDs)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	if got := ok64.Load(); got != int64(b.N) {
		b.Fatalf("%d of %d tasks ok", got, b.N)
	}
	n := float64(b.N)
	reportRequests(b, url, n)
	b.ReportMetric(n/elapsed.Seconds(), "tasks/s")
	if len(coordPIDs) == 0 {
		b.ReportMetric(float64(cpu.Microseconds())/n, "cpu-µs/task")
	} else if ok {
		var all time.Duration
		for i := range coordPIDs {
			d := ccpu1[i] - ccpu0[i]
			all += d
			if len(coordPIDs) > 1 {
				b.ReportMetric(float64(d.Microseconds())/n, fmt.Sprintf("node%d-cpu-µs/task", i+1))
			}
		}
		b.ReportMetric(float64(all.Microseconds())/n, "coord-cpu-µs/task")
		b.ReportMetric(float64(cpu.Microseconds())/n, "agents-cpu-µs/task")
	}
	b.ReportMetric(0, "ns/op")
}

// childrenCPU is childCPU of each of pids; ok is false when one cannot
// be read.
func childrenCPU(pids []int) ([]time.Duration, bool) {
	out := make([]time.Duration, len(pids))
	for i, pid := range pids {
		d, ok := childCPU(pid)
		if !ok {
			return nil, false
		}
		out[i] = d
	}
	return out, true
}

// reportRequests reports the coordinator's HTTP requests per accepted
// task (all routes together), and logs them by route. Of a cluster, it
// reads the first node's /metrics.
func reportRequests(b *testing.B, url string, tasks float64) {
	url, _, _ = strings.Cut(url, ",")
	// No connection kept: a pool started outside the benchmark outlives it.
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := hc.Get(url + "/metrics")
	if err != nil {
		b.Logf("metrics: %v", err)
		return
	}
	defer resp.Body.Close()
	total := 0.0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "idlepool_coord_http_requests_total{") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		total += v
		b.Logf("%s: %.3f per task", strings.TrimPrefix(line[:i], "idlepool_coord_http_requests_total"), v/tasks)
	}
	b.ReportMetric(total/tasks, "requests/task")
}
