package agent_test

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"idlepool/agent"
	"idlepool/idle"
	"idlepool/job"
)

// program returns a valid WebAssembly module of about size bytes: an
// empty module with a custom section named tag holding padding.
func program(size int, tag string) []byte {
	payload := append([]byte{byte(len(tag))}, tag...)
	payload = append(payload, bytes.Repeat([]byte{'p'}, size)...)
	b := []byte("\x00asm\x01\x00\x00\x00\x00")
	for n := len(payload); ; { // LEB128 length of the section
		c := byte(n & 0x7f)
		n >>= 7
		if n != 0 {
			b = append(b, c|0x80)
			continue
		}
		b = append(b, c)
		break
	}
	return append(b, payload...)
}

// planOneTask plans a one-task job named name running prog.
func planOneTask(t testing.TB, name string, prog []byte) *job.Job {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "prog.wasm"), prog, 0o644); err != nil {
		t.Fatal(err)
	}
	text := fmt.Sprintf(`name = %q
program = "prog.wasm"
[split]
rule = "range"
tasks = 1
[[merge]]
field = "square"
rule = "sum"
[policy]
lease_timeout = "10s"
redundancy = 1
quorum = 1
`, name)
	m, err := job.ParseManifest("job.toml", dir, []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	j, err := job.Plan(m)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// diskUse is the bytes of the files under dir, each file counted once
// however many links it has (what the files take on disk, less blocks).
func diskUse(t testing.TB, dir string) int64 {
	t.Helper()
	var seen []fs.FileInfo
	var total int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		for _, s := range seen {
			if os.SameFile(s, info) {
				return nil
			}
		}
		seen = append(seen, info)
		total += info.Size()
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return total
}

// startCachingAgent starts an agent of dev with the given cache and
// sweep period.
func startCachingAgent(t *testing.T, url string, dev *device, exec *fakeExec, cache *agent.Cache, sweep time.Duration) *runningAgent {
	t.Helper()
	a, err := agent.New(agent.Config{
		PoolURL: url, Home: dev.dirs, DeviceKey: dev.key, OwnerKey: dev.owner, Slots: 1,
		Executor: exec, Store: dev.local, HTTP: httpClient(t), Cache: cache, CacheSweep: sweep,
		MaxBackoff: 200 * time.Millisecond, IdlePoll: 50 * time.Millisecond, ReceiptPoll: 50 * time.Millisecond,
		Logger: quietLogger(t).With("side", "agent"),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ra := &runningAgent{Agent: a, dev: dev, stop: cancel, done: make(chan error, 1)}
	go func() { ra.done <- a.Serve(ctx) }()
	t.Cleanup(func() { ra.Stop(t) })
	return ra
}

// runJob submits j and follows it to the end, failing the test on error.
func runJob(t *testing.T, sub *submitter, j *job.Job) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := sub.run(t, ctx, j); err != nil {
		t.Fatalf("job %s: %v", j.Manifest.Name, err)
	}
}

func TestCacheKeepsOneCopyPerFile(t *testing.T) {
	// The case: many one-task jobs sharing one program. Each job
	// used to keep its own copy of the program beside the one in the
	// blob cache; the cache must hold the program once.
	const size, jobs = 1 << 20, 8
	prog := program(size, "shared")
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	dev := newDevice(t, nil)
	startAgent(t, co.url, dev, &fakeExec{}, 1, nil)
	sub := newSubmitter(t, co.url, nil)
	for i := range jobs {
		runJob(t, sub, planOneTask(t, fmt.Sprintf("one-task-%d", i), prog))
	}
	used := diskUse(t, dev.dirs.Cache)
	t.Logf("%d one-task jobs sharing one program of %d bytes: %d bytes in the donor's cache", jobs, len(prog), used)
	if limit := int64(len(prog)) + 64<<10; used > limit {
		t.Errorf("the cache holds %d bytes after %d jobs sharing one program of %d bytes; want at most %d (one copy)", used, jobs, len(prog), limit)
	}
}

func TestCacheRemovesFinishedJobs(t *testing.T) {
	// Once a job is complete, no task will need its files: the sweep
	// removes them (job directory and blobs).
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	dev := newDevice(t, nil)
	cache := agent.NewCache(agent.CacheConfig{Dir: agent.JobCache(dev.dirs), Compiled: agent.WorkerCache(dev.dirs)})
	startCachingAgent(t, co.url, dev, &fakeExec{}, cache, 20*time.Millisecond)
	sub := newSubmitter(t, co.url, nil)
	for i := range 3 {
		runJob(t, sub, planOneTask(t, fmt.Sprintf("finished-%d", i), program(64<<10, fmt.Sprint(i))))
	}
	waitFor(t, "the finished jobs' files are removed and the usage says so", func() bool {
		u := cache.Usage()
		return len(cache.CachedJobs("")) == 0 && diskUse(t, agent.JobCache(dev.dirs)) == 0 && u.Jobs == 0 && u.UsedBytes == 0
	})
}

func TestCacheHoldsItsCapLeastRecentlyUsedFirst(t *testing.T) {
	// Three jobs with programs of their own under a cap that fits two:
	// the least recently used job goes, the two latest stay.
	const size = 256 << 10
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	dev := newDevice(t, nil)
	cache := agent.NewCache(agent.CacheConfig{Dir: agent.JobCache(dev.dirs), CapBytes: 2*size + 32<<10})
	startCachingAgent(t, co.url, dev, &fakeExec{}, cache, time.Hour)
	sub := newSubmitter(t, co.url, nil)
	var ids []job.ID
	for i := range 3 {
		j := planOneTask(t, fmt.Sprintf("lru-%d", i), program(size, fmt.Sprint(i)))
		ids = append(ids, j.ID)
		runJob(t, sub, j)
	}
	u := cache.Trim()
	if u.UsedBytes > u.CapBytes {
		t.Errorf("cache uses %d bytes, over its cap of %d", u.UsedBytes, u.CapBytes)
	}
	got := map[job.ID]bool{}
	for _, id := range cache.CachedJobs("") {
		got[id] = true
	}
	if got[ids[0]] || !got[ids[1]] || !got[ids[2]] {
		t.Errorf("jobs kept: first %t, second %t, third %t; want the two latest only", got[ids[0]], got[ids[1]], got[ids[2]])
	}
}

func TestCacheNeverRemovesAJobInUse(t *testing.T) {
	// Under a cap smaller than one program, the job of a running task
	// keeps its files until the task ends; then they go.
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	dev := newDevice(t, nil)
	cache := agent.NewCache(agent.CacheConfig{Dir: agent.JobCache(dev.dirs), CapBytes: 1})
	exec := &fakeExec{Block: make(chan struct{})}
	ra := startCachingAgent(t, co.url, dev, exec, cache, time.Hour)
	sub := newSubmitter(t, co.url, nil)
	j := planOneTask(t, "in-use", program(128<<10, "in-use"))
	done := make(chan struct{})
	go func() {
		defer close(done)
		runJob(t, sub, j)
	}()
	waitFor(t, "the task runs", func() bool { return len(ra.Running()) == 1 })
	u := cache.Trim()
	if len(cache.CachedJobs("")) != 1 || u.InUse != 1 {
		t.Fatalf("while its task runs, the cache holds jobs %v (usage %+v); want the running one", cache.CachedJobs(""), u)
	}
	if _, err := os.Stat(filepath.Join(agent.JobCache(dev.dirs), "blobs", j.Program.SHA256.String())); err != nil {
		t.Fatalf("the running job's program was removed: %v", err)
	}
	close(exec.Block)
	<-done
	waitFor(t, "the task no longer uses its job", func() bool { return len(ra.Running()) == 0 && cache.Usage().InUse == 0 })
	if u := cache.Trim(); u.Jobs != 0 || u.UsedBytes > u.CapBytes {
		t.Errorf("after the task ended: %+v, want no job held over the cap", u)
	}
}

func TestDonorStatusShowsCacheAndOwnersCap(t *testing.T) {
	// The owner's cap (`idlepool settings set cache=64MiB`) reaches the
	// running donor, and its status shows the cache's use and cap.
	dev := newDevice(t, nil)
	if _, err := dev.local.UpdateSettings(context.Background(), func(s *idle.Settings) error {
		return s.Set("cache", "64MiB", time.Now())
	}); err != nil {
		t.Fatal(err)
	}
	d, _, _ := startDonor(t, dev, &fakeExec{}, nil)
	waitFor(t, "the status shows the owner's cap", func() bool {
		c := d.Status().Cache
		return c != nil && c.CapBytes == 64<<20
	})
	if got, want := d.Status().Cache.Words(), "0 B of 64.0 MiB (0 jobs)"; got != want {
		t.Errorf("cache in words: %q, want %q", got, want)
	}
}
