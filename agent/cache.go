package agent

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"idlepool/castore"
	"idlepool/idle"
	"idlepool/job"
)

// DefaultCacheBytes is the cache's cap when the owner set none
// (idle.DefaultCacheMiB, 4 GiB).
const DefaultCacheBytes int64 = idle.DefaultCacheMiB << 20

// orphanGrace is how old a file must be before the cache removes it
// although no job names it: a download of another process (`idlepool
// result`) may be under way.
const orphanGrace = time.Hour

// Cache is a donor's job cache on disk, shared by the agents of one home
// (every pool): each file of a job (program and inputs) is stored once,
// by its SHA-256, in <dir>/blobs, whichever jobs and pools name it; a job
// keeps only its canonical encoding, the list of the files it names
// (jobs/<id>/files, whose modification time is the job's last use) and,
// for the sandbox, hard links to its inputs (jobs/<id>/input). The
// program runs from its blob.
//
// Trim keeps the cache (with the workers' compilation cache, compiled
// code being counted as part of it) under its cap: it removes first the
// jobs that no task will need again (finished, unknown to their pool, of a
// pool that is not joined: see Forget), then the least recently used
// jobs, and every file no remaining job names; compiled code goes, oldest
// first, only when the jobs left are all in use and the cap is still
// exceeded (a program is compiled again when it runs next). A job in use
// by a running task (between acquire and its release) is never removed.
//
// A Cache is safe for concurrent use. Create it with NewCache.
type Cache struct {
	dir      string // jobs/ and blobs/
	compiled string // the workers' compilation cache; "" for none
	log      *slog.Logger
	now      func() time.Time

	// files is held for reading while a job is prepared (files fetched
	// and linked) and for writing while Trim removes files, so that a
	// file being fetched for a job is never removed.
	files sync.RWMutex

	mu     sync.Mutex
	capB   int64
	jobs   map[job.ID]*cachedJob
	pins   map[job.ID]int
	forget map[job.ID]bool // no task will need it again
	// touched is when touch last wrote a job's time of use, by job.
	touched map[job.ID]time.Time
	usage   CacheUsage

	// share is the chunk store (chunks.go) in shareDir, opened on first
	// use, capped by shareCap apart from the cache.
	shareMu  sync.Mutex
	shareDir string
	share    *castore.Store
	shareCap int64
	shareGen atomic.Uint64 // counts the files fetched in chunks, and chunks stored
	// partial are the files being fetched in chunks now, by digest, with
	// the pool they come from: their chunks are offered to the pool's
	// other devices as they arrive (poolChunks).
	partial map[castore.Digest]partialFile
	kept    *resultKeeper // the results kept for mergers (results.go); nil until first used
	// shareWake is closed (and replaced) when chunks arrived, to wake
	// the agents' announcers (serveShare).
	shareWake chan struct{}
}

// partialFile is a file being fetched in chunks.
type partialFile struct {
	pool string
	m    castore.Manifest
}

// CacheUsage is how much disk the cache uses, in AgentStatus.
type CacheUsage struct {
	// UsedBytes is what the cache held at its last Trim, compiled code
	// included; CapBytes its cap.
	UsedBytes int64 `json:"usedBytes"`
	CapBytes  int64 `json:"capBytes"`
	// CompiledBytes is the part of UsedBytes that is the workers'
	// compiled code.
	CompiledBytes int64 `json:"compiledBytes"`
	// Jobs is how many jobs have files in the cache; InUse how many of
	// them running tasks use now.
	Jobs  int `json:"jobs"`
	InUse int `json:"inUse"`
}

// CacheConfig configures a Cache.
type CacheConfig struct {
	// Dir holds the jobs and their files (Home.Cache/pools).
	Dir string
	// Compiled is the workers' compilation cache (WorkerCache), counted
	// in the cap; "" for none.
	Compiled string
	// CapBytes is the cap; DefaultCacheBytes when 0 or less.
	CapBytes int64
	// ShareDir holds the chunk store (package castore): the chunks of
	// the jobs' files, kept to serve other devices of the pools
	// (ShareDir(home)). "" means none: files are fetched whole from the
	// coordinator.
	ShareDir string
	// ShareCapBytes caps the chunks in ShareDir (not counted in
	// CapBytes); castore.DefaultCapBytes when 0 or less.
	ShareCapBytes int64
	// Now is the clock of last uses; time.Now when nil.
	Now func() time.Time
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
}

// NewCache returns the cache in cfg.Dir; it touches nothing on disk until
// used.
func NewCache(cfg CacheConfig) *Cache {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.CapBytes <= 0 {
		cfg.CapBytes = DefaultCacheBytes
	}
	return &Cache{dir: cfg.Dir, compiled: cfg.Compiled, log: cfg.Logger, now: cfg.Now, capB: cfg.CapBytes,
		jobs: map[job.ID]*cachedJob{}, pins: map[job.ID]int{}, forget: map[job.ID]bool{}, touched: map[job.ID]time.Time{},
		usage: CacheUsage{CapBytes: cfg.CapBytes}, shareDir: cfg.ShareDir, shareCap: cfg.ShareCapBytes}
}

// SetCap changes the cap (bytes; DefaultCacheBytes when 0 or less) and
// reports whether it changed; the next Trim applies it.
func (c *Cache) SetCap(n int64) bool {
	if n <= 0 {
		n = DefaultCacheBytes
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	changed := c.capB != n
	c.capB = n
	c.usage.CapBytes = n
	return changed
}

// Usage returns the use measured by the last Trim.
func (c *Cache) Usage() CacheUsage {
	c.mu.Lock()
	defer c.mu.Unlock()
	u := c.usage
	u.InUse = len(c.pins)
	return u
}

// cachedJob is a job ready to run tasks of: ready is closed once j (with
// program and inputDir) or err is set.
type cachedJob struct {
	ready             chan struct{}
	j                 *job.Job
	program, inputDir string
	err               error
	chunks            []castore.Digest // its files' chunks in the chunk store
}

// acquire returns job id prepared to run, fetching what is missing from
// the pool c speaks to (in chunks, from peers, nil for none, and the
// coordinator: fetchInChunks), and holds it in use (never removed) until
// the release it returns is called. A failed preparation is forgotten, so
// the next call tries again. Concurrent calls for one job share one fetch.
func (c *Cache) acquire(ctx context.Context, cl *Client, id job.ID, peers func(string) castore.Source) (*cachedJob, func(), error) {
	// Pinned while no Trim runs, so that Trim's view of the pins holds
	// for its whole run.
	c.files.RLock()
	c.mu.Lock()
	c.pins[id]++
	delete(c.forget, id)
	cj, ok := c.jobs[id]
	if ok {
		select {
		case <-cj.ready:
			if cj.err == nil {
				if _, err := os.Stat(cj.program); err != nil {
					ok = false // removed under us (another process): prepare again
				}
			}
		default: // being prepared: wait for it below
		}
	}
	if !ok {
		cj = &cachedJob{ready: make(chan struct{})}
		c.jobs[id] = cj
	}
	c.mu.Unlock()
	c.files.RUnlock()
	release := func() {
		c.touch(id)
		c.mu.Lock()
		if c.pins[id]--; c.pins[id] <= 0 {
			delete(c.pins, id)
		}
		c.mu.Unlock()
	}
	if !ok {
		c.files.RLock()
		cj.j, cj.err = fetchJob(ctx, cl, id, c.dir, c.fetchInChunks(cl, id, peers, c.log.With("jobID", id.String())))
		if cj.err == nil {
			cj.program = cj.j.Program.Path
			cj.inputDir, cj.err = linkInputs(cj.j, filepath.Join(c.dir, "jobs", id.String()))
			cj.chunks = c.jobChunks(cj.j)
		}
		c.files.RUnlock()
		if cj.err != nil {
			c.mu.Lock()
			if c.jobs[id] == cj {
				delete(c.jobs, id)
			}
			c.mu.Unlock()
		}
		close(cj.ready)
		if cj.err == nil {
			c.Trim() // new files arrived
		}
	}
	select {
	case <-cj.ready:
	case <-ctx.Done():
		release()
		return nil, nil, ctx.Err()
	}
	if cj.err != nil {
		release()
		return nil, nil, cj.err
	}
	c.touch(id)
	// Its chunks stay while a task uses the job: other devices fetching
	// the same files now are the likeliest to ask for them.
	if st, err := c.shareStore(); err == nil && len(cj.chunks) > 0 {
		hold := st.Hold(cj.chunks)
		return cj, func() { hold(); release() }, nil
	}
	return cj, release, nil
}

// touchEvery is how often a job's time of use is written while it is
// used: the least recently used job goes first when the cache is full,
// and a minute is fine enough for that, where a write per task was 7% of
// a device's CPU for tasks of milliseconds.
const touchEvery = time.Minute

// touch records that job id was used now: its files list's modification
// time, unless this Cache wrote it less than touchEvery ago.
func (c *Cache) touch(id job.ID) {
	t := c.now()
	c.mu.Lock()
	last, ok := c.touched[id]
	if ok && !t.Before(last) && t.Sub(last) < touchEvery {
		c.mu.Unlock()
		return
	}
	c.touched[id] = t
	c.mu.Unlock()
	_ = os.Chtimes(filepath.Join(c.dir, "jobs", id.String(), jobFilesName), t, t)
}

// Forget marks job id as needed by no task again (its job is finished or
// its pool does not know it): Trim removes it once no task uses it.
func (c *Cache) Forget(id job.ID) {
	c.mu.Lock()
	c.forget[id] = true
	c.mu.Unlock()
}

// cachedJobInfo is one job found on disk by Trim.
type cachedJobInfo struct {
	id      job.ID
	dir     string
	files   jobFiles
	known   bool // its files list could be read
	lastUse time.Time
	own     int64 // bytes of its own (not its linked blobs)
}

// CachedJobs returns the jobs in the cache whose files list names pool
// url (every job when url is ""), least recently used first.
func (c *Cache) CachedJobs(url string) []job.ID {
	jobs, _ := c.scanJobs(nil)
	var out []job.ID
	for _, ji := range jobs {
		if ji.known && (url == "" || ji.files.Pool == url) {
			out = append(out, ji.id)
		}
	}
	return out
}

// ForgetPoolsExcept forgets (Forget) every cached job whose pool is not
// one of urls: no agent of this home will need it.
func (c *Cache) ForgetPoolsExcept(urls []string) {
	jobs, _ := c.scanJobs(nil)
	for _, ji := range jobs {
		if !ji.known || !slices.Contains(urls, ji.files.Pool) {
			c.Forget(ji.id)
		}
	}
}

// scanJobs lists the jobs on disk, least recently used first, with what
// each holds of its own; blobs maps digests to their files' info (nil:
// not needed).
func (c *Cache) scanJobs(blobs map[job.Digest]fs.FileInfo) ([]cachedJobInfo, int64) {
	root := filepath.Join(c.dir, "jobs")
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, 0
	}
	var out []cachedJobInfo
	var total int64
	for _, e := range ents {
		id, err := job.ParseDigest(e.Name())
		if err != nil || !e.IsDir() {
			continue
		}
		ji := cachedJobInfo{id: job.ID(id), dir: filepath.Join(root, e.Name())}
		if st, err := os.Stat(filepath.Join(ji.dir, jobFilesName)); err == nil {
			ji.lastUse = st.ModTime()
			if b, err := os.ReadFile(filepath.Join(ji.dir, jobFilesName)); err == nil && json.Unmarshal(b, &ji.files) == nil {
				ji.known = true
			}
		} else if info, err := e.Info(); err == nil {
			ji.lastUse = info.ModTime()
		}
		_ = filepath.WalkDir(ji.dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil
			}
			info, err := d.Info()
			if err != nil {
				return nil
			}
			if filepath.Dir(p) == filepath.Join(ji.dir, "input") && blobs != nil {
				if dg, err := job.ParseDigest(ji.files.Inputs[d.Name()]); err == nil {
					if bi, ok := blobs[dg]; ok && os.SameFile(info, bi) {
						return nil // a link to its blob, counted once there
					}
				}
			}
			ji.own += info.Size()
			return nil
		})
		total += ji.own
		out = append(out, ji)
	}
	slices.SortFunc(out, func(a, b cachedJobInfo) int { return a.lastUse.Compare(b.lastUse) })
	return out, total
}

// Trim removes what the cache need not keep (see Cache) and returns the
// use it leaves. Failures to remove a file are logged; the file is
// counted as still there.
func (c *Cache) Trim() CacheUsage {
	c.files.Lock()
	defer c.files.Unlock()
	now := c.now()

	blobDir := filepath.Join(c.dir, "blobs")
	blobs := map[job.Digest]fs.FileInfo{}
	var total int64
	if ents, err := os.ReadDir(blobDir); err == nil {
		for _, e := range ents {
			info, err := e.Info()
			if err != nil || info.IsDir() {
				continue
			}
			d, err := job.ParseDigest(e.Name())
			if err != nil {
				// A download's temporary file: removed once stale.
				if strings.HasPrefix(e.Name(), ".") && now.Sub(info.ModTime()) > orphanGrace {
					c.remove(filepath.Join(blobDir, e.Name()))
					continue
				}
				total += info.Size()
				continue
			}
			blobs[d] = info
			total += info.Size()
		}
	}
	jobs, own := c.scanJobs(blobs)
	total += own
	type compiledFile struct {
		path string
		size int64
		mod  time.Time
	}
	var compiled []compiledFile
	var compiledBytes int64
	if c.compiled != "" {
		_ = filepath.WalkDir(c.compiled, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil
			}
			if info, err := d.Info(); err == nil {
				compiled = append(compiled, compiledFile{p, info.Size(), info.ModTime()})
				compiledBytes += info.Size()
			}
			return nil
		})
	}
	total += compiledBytes

	c.mu.Lock()
	capB := c.capB
	pinned := make(map[job.ID]bool, len(c.pins))
	for id := range c.pins {
		pinned[id] = true
	}
	forget := make(map[job.ID]bool, len(c.forget))
	for id := range c.forget {
		forget[id] = true
	}
	c.mu.Unlock()

	// The jobs to remove: those no task needs, then the least recently
	// used while over the cap.
	keep := map[job.ID]bool{}
	var removed []cachedJobInfo
	var lru []cachedJobInfo
	for _, ji := range jobs {
		switch {
		case pinned[ji.id]:
			keep[ji.id] = true
		case forget[ji.id] || !ji.known:
			removed = append(removed, ji)
		default:
			keep[ji.id] = true
			lru = append(lru, ji)
		}
	}
	named := func() map[job.Digest]bool {
		m := map[job.Digest]bool{}
		for _, ji := range jobs {
			if keep[ji.id] {
				for _, d := range ji.files.digests() {
					m[d] = true
				}
			}
		}
		return m
	}
	removeJob := func(ji cachedJobInfo) {
		if err := removeAll(ji.dir); err != nil {
			c.log.Warn("Cannot remove a cached job", "jobID", ji.id.String(), "err", err)
			keep[ji.id] = true // its files stay named
			return
		}
		total -= ji.own
		c.mu.Lock()
		if cj, ok := c.jobs[ji.id]; ok && c.pins[ji.id] == 0 {
			select {
			case <-cj.ready:
				delete(c.jobs, ji.id)
			default:
			}
		}
		delete(c.forget, ji.id)
		delete(c.touched, ji.id)
		c.mu.Unlock()
		c.log.Debug("Removed a cached job", "jobID", ji.id.String(), "bytes", ji.own)
	}
	dropBlobs := func(gone map[job.Digest]bool) {
		still := named()
		for d, info := range blobs {
			if still[d] || (!gone[d] && now.Sub(info.ModTime()) < orphanGrace) {
				continue
			}
			if c.remove(filepath.Join(blobDir, d.String())) {
				total -= info.Size()
				delete(blobs, d)
			}
		}
	}
	gone := map[job.Digest]bool{}
	for _, ji := range removed {
		removeJob(ji)
		for _, d := range ji.files.digests() {
			gone[d] = true
		}
	}
	dropBlobs(gone)
	for len(lru) > 0 && total > capB {
		ji := lru[0]
		lru = lru[1:]
		delete(keep, ji.id)
		removeJob(ji)
		gone := map[job.Digest]bool{}
		for _, d := range ji.files.digests() {
			gone[d] = true
		}
		dropBlobs(gone)
	}
	slices.SortFunc(compiled, func(a, b compiledFile) int { return a.mod.Compare(b.mod) })
	for _, f := range compiled {
		if total <= capB {
			break
		}
		if c.remove(f.path) {
			total -= f.size
			compiledBytes -= f.size
		}
	}
	if total > capB {
		c.log.Warn("The cache is over its cap: the jobs left are in use", "usedBytes", total, "capBytes", capB)
	}
	u := CacheUsage{UsedBytes: total, CapBytes: capB, CompiledBytes: compiledBytes, Jobs: len(keep)}
	c.mu.Lock()
	c.usage = u
	u.InUse = len(c.pins)
	c.mu.Unlock()
	return u
}

// remove removes one file, reporting whether it is gone.
func (c *Cache) remove(path string) bool {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		c.log.Warn("Cannot remove a cached file", "path", path, "err", err)
		return false
	}
	return true
}

// removeAll removes dir, making its read-only files' directories
// writable first where the system asks for it.
func removeAll(dir string) error {
	err := os.RemoveAll(dir)
	if err == nil {
		return nil
	}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(dir)
}

// jobFilesName is the file in a cached job's directory that lists the
// files the job names; its modification time is the job's last use.
const jobFilesName = "files"

// jobFiles is the content of a cached job's files list.
type jobFiles struct {
	Pool   string            `json:"pool"`             // the pool's URL
	Files  []string          `json:"files"`            // hex SHA-256 of each file, the program's first
	Inputs map[string]string `json:"inputs,omitempty"` // name -> hex SHA-256, once the job was rebuilt
}

// digests returns the digests of the files listed.
func (f jobFiles) digests() []job.Digest {
	var out []job.Digest
	for _, s := range append(slices.Clone(f.Files), slices.Collect(maps.Values(f.Inputs))...) {
		if d, err := job.ParseDigest(s); err == nil {
			out = append(out, d)
		}
	}
	return out
}

// linkInputs makes the input directory the sandbox sees for j under
// jobDir: each named input (but a "chunks" split's, which tasks see in
// pieces) as a hard link to its blob, so that it takes no space of its
// own; a copy, checked against its digest, where the file system allows
// no link. It returns the directory.
func linkInputs(j *job.Job, jobDir string) (string, error) {
	inputDir := filepath.Join(jobDir, "input")
	if err := os.MkdirAll(filepath.Join(inputDir, "chunks"), 0o700); err != nil {
		return "", fmt.Errorf("prepare inputs: %w", err)
	}
	for name, ref := range j.Inputs {
		if j.Manifest.Split.Rule == "chunks" && name == j.Manifest.Split.Input {
			continue
		}
		dst := filepath.Join(inputDir, name)
		src, err := os.Stat(ref.Path)
		if err != nil {
			return "", fmt.Errorf("prepare input %s: %w", name, err)
		}
		if st, err := os.Stat(dst); err == nil && os.SameFile(st, src) {
			continue
		}
		_ = os.Remove(dst)
		if err := os.Link(ref.Path, dst); err == nil {
			continue
		}
		if err := copyChecked(ref, dst); err != nil {
			return "", fmt.Errorf("prepare input %s: %w", name, err)
		}
	}
	return inputDir, nil
}

// copyChecked copies ref's file to dst (read-only), checking its digest.
func copyChecked(ref job.InputRef, dst string) error {
	src, err := os.Open(ref.Path)
	if err != nil {
		return err
	}
	defer src.Close()
	tmp := dst + ".tmp"
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(out, h), src)
	if err = errors.Join(err, out.Close()); err != nil {
		os.Remove(tmp)
		return err
	}
	var got job.Digest
	h.Sum(got[:0])
	if got != ref.SHA256 {
		os.Remove(tmp)
		return fmt.Errorf("%w: %s", ErrBadBlob, ref.Path)
	}
	if err := os.Chmod(tmp, 0o400); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, dst)
}

// inUse reports whether a task uses job id now.
func (c *Cache) inUse(id job.ID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pins[id] > 0
}

// serveCache trims the cache at once, then every CacheSweep asks the pool
// which of its jobs in the cache are finished or unknown, forgets those
// and trims again. It returns nil when ctx ends.
func (a *Agent) serveCache(ctx context.Context) error {
	a.cache.Trim()
	tick := time.NewTicker(a.cfg.CacheSweep)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		a.sweepCache(ctx)
	}
}

// sweepCache forgets the cached jobs of this pool that no task of it will
// need again (complete, or unknown to the pool), then trims the cache. A
// job whose state cannot be read now is kept.
func (a *Agent) sweepCache(ctx context.Context) {
	for _, id := range a.cache.CachedJobs(a.c.URL()) {
		if a.cache.inUse(id) {
			continue
		}
		st, err := a.c.Status(ctx, id)
		var ae *APIError
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, ErrNotFound), errors.As(err, &ae) && ae.Status == 410:
			a.cache.Forget(id)
		case err == nil && (st.Complete || st.Cancelled):
			a.cache.Forget(id)
		}
	}
	a.cache.Trim()
}
