package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"idlepool/castore"
	"idlepool/coord/api"
	"idlepool/job"
	"idlepool/pool"
	"idlepool/store"
)

// Results kept for the merger (RATIONALE.md, "Results stay with the
// devices"): a result over pool.InlineResultBytes of a job compared by
// digest, whose merger follows it with a data plane, is put in the chunk
// store, held there, announced to the pool's
// tracker and submitted by its chunk manifest; the job's merger fetches
// it over the data plane. The device asks the pool which of its kept
// results it must go on keeping every keptSweep and deletes the others
// (their merger acknowledged them, or the job is gone).

// keptSweep is the wait between two questions to the pool about which
// kept results to keep.
const keptSweep = 30 * time.Second

// keptFile is the file, in the chunk store's directory, that lists the
// results kept, so that a restarted device keeps serving them.
const keptFile = "results.json"

// refsAPIVersion is the coordinator API version from which results may
// be submitted by reference (api.APIVersion).
const refsAPIVersion = 4

// keptResult is one result kept for a job's merger.
type keptResult struct {
	Pool     string           `json:"pool"`
	Job      api.HexDigest    `json:"job"` // hex, for a person who reads the file
	Task     int64            `json:"task"`
	Manifest castore.Manifest `json:"manifest"`
}

type keptKey struct {
	pool string
	job  job.ID
	task int64
}

// resultKeeper holds the results kept in a chunk store; safe for
// concurrent use.
type resultKeeper struct {
	st   *castore.Store
	path string
	log  *slog.Logger

	mu      sync.Mutex
	kept    map[keptKey]keptResult
	release map[keptKey]func()
}

// openKeeper opens the keeper of the chunk store st in dir, holding again
// the results a previous run kept whose chunks are all still there.
func openKeeper(st *castore.Store, dir string, log *slog.Logger) *resultKeeper {
	k := &resultKeeper{st: st, path: filepath.Join(dir, keptFile), log: log,
		kept: map[keptKey]keptResult{}, release: map[keptKey]func(){}}
	b, err := os.ReadFile(k.path)
	if err != nil {
		return k
	}
	var list []keptResult
	if err := json.Unmarshal(b, &list); err != nil {
		log.Warn("The list of kept results does not decode; starting with none", "path", k.path, "err", err)
		return k
	}
	for _, r := range list {
		if r.Manifest.Validate() != nil || len(st.Missing(r.Manifest)) > 0 {
			continue // gone: its merger reports it lost, and it is computed again
		}
		key := keptKey{r.Pool, job.ID(r.Job), r.Task}
		k.kept[key], k.release[key] = r, st.Hold(r.Manifest.Digests())
	}
	return k
}

// keep puts result b of task (url, id, task) in the chunk store, held,
// and returns its manifest; keeping it again returns the same.
func (k *resultKeeper) keep(url string, id job.ID, task int64, b []byte) (castore.Manifest, error) {
	key := keptKey{url, id, task}
	k.mu.Lock()
	if r, ok := k.kept[key]; ok {
		k.mu.Unlock()
		return r.Manifest, nil
	}
	k.mu.Unlock()
	// Held before they are stored, so that storing the last chunks
	// cannot evict the first.
	m, err := castore.Split(bytes.NewReader(b), castore.ChunkSize, func(castore.Digest, []byte) error { return nil })
	if err != nil {
		return m, fmt.Errorf("keep the result of task %d: %w", task, err)
	}
	release := k.st.Hold(m.Digests())
	if _, err := castore.Split(bytes.NewReader(b), castore.ChunkSize, k.st.Put); err != nil {
		release()
		return m, fmt.Errorf("keep the result of task %d: %w", task, err)
	}
	k.mu.Lock()
	k.kept[key], k.release[key] = keptResult{Pool: url, Job: api.HexDigest(id), Task: task, Manifest: m}, release
	err = k.saveLocked()
	k.mu.Unlock()
	if err != nil {
		k.drop(key)
		return m, fmt.Errorf("keep the result of task %d: %w", task, err)
	}
	return m, nil
}

// drop deletes a kept result's chunks (those no other kept result or
// task holds).
func (k *resultKeeper) drop(key keptKey) {
	k.mu.Lock()
	r, ok := k.kept[key]
	release := k.release[key]
	delete(k.kept, key)
	delete(k.release, key)
	if ok {
		if err := k.saveLocked(); err != nil {
			k.log.Warn("Cannot save the list of kept results", "err", err)
		}
	}
	k.mu.Unlock()
	if !ok {
		return
	}
	release()
	k.st.Remove(r.Manifest.Digests())
}

// saveLocked writes the list of kept results; k.mu is held.
func (k *resultKeeper) saveLocked() error {
	list := make([]keptResult, 0, len(k.kept))
	for _, r := range k.kept {
		list = append(list, r)
	}
	slices.SortFunc(list, func(a, b keptResult) int {
		if c := bytes.Compare(a.Job[:], b.Job[:]); c != 0 {
			return c
		}
		return int(a.Task - b.Task)
	})
	b, err := json.Marshal(list)
	if err != nil {
		return err
	}
	tmp := k.path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, k.path)
}

// of returns the results kept for pool url.
func (k *resultKeeper) of(url string) []keptResult {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []keptResult
	for key, r := range k.kept {
		if key.pool == url {
			out = append(out, r)
		}
	}
	return out
}

// bytes returns the bytes of the results kept.
func (k *resultKeeper) bytes() int64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	var n int64
	for _, r := range k.kept {
		n += r.Manifest.Size
	}
	return n
}

// keeper returns the cache's result keeper, opening it with the chunk
// store; nil when there is no chunk store.
func (c *Cache) keeper() *resultKeeper {
	st, err := c.shareStore()
	if err != nil {
		return nil
	}
	c.shareMu.Lock()
	defer c.shareMu.Unlock()
	if c.kept == nil {
		c.kept = openKeeper(st, c.shareDir, c.log)
	}
	return c.kept
}

// keptChunks returns the chunks of the results kept for pool url.
func (c *Cache) keptChunks(url string) []castore.Digest {
	k := c.keeper()
	if k == nil {
		return nil
	}
	var out []castore.Digest
	for _, r := range k.of(url) {
		out = append(out, r.Manifest.Digests()...)
	}
	return out
}

// noteByRef records whether job id's results may be kept and submitted by
// reference: only when it is compared by digest (no tolerance rule).
func (a *Agent) noteByRef(j *job.Job) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.byRef == nil {
		a.byRef = map[job.ID]bool{}
	}
	a.byRef[j.ID] = j.Manifest.Verify.Rule == ""
}

// inlineFor is how long a job's results go inline after the pool said
// its merger does not fetch kept results (409 send_inline).
const inlineFor = time.Minute

// sendInline makes job id's results go inline for inlineFor.
func (a *Agent) sendInline(id job.ID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.inline == nil {
		a.inline = map[job.ID]time.Time{}
	}
	a.inline[id] = a.cfg.Now().Add(inlineFor)
}

// submission returns what to send for contribution c: by reference when
// its result is over pool.InlineResultBytes, its job is compared by
// digest, this device shares chunks, the coordinator takes references,
// the job's merger fetched kept results when last asked (sendInline),
// and keeping it leaves at least half the chunk store to the jobs'
// files; else the bytes, as always.
func (a *Agent) submission(ctx context.Context, c store.Contribution) pool.Submission {
	sub := c.Submission()
	a.mu.Lock()
	byRef := a.byRef[c.Job] && !a.cfg.Now().Before(a.inline[c.Job])
	a.mu.Unlock()
	if sub.Failed || len(sub.Result) <= pool.InlineResultBytes || !byRef || a.cfg.NoShare || a.peers.Load() == nil ||
		a.c.apiVersion(ctx) < refsAPIVersion {
		return sub
	}
	k := a.cache.keeper()
	if k == nil {
		return sub
	}
	if _, capB, _ := k.st.Usage(); k.bytes()+int64(len(sub.Result)) > capB/2 {
		a.log.Info("Results kept fill half the chunk store: sending this one to the coordinator", "jobID", c.Job.String(), "taskIndex", c.Task)
		return sub
	}
	m, err := k.keep(a.c.URL(), c.Job, c.Task, sub.Result)
	if err != nil {
		a.log.Warn("Cannot keep a result for its merger: sending it to the coordinator", "err", err)
		return sub
	}
	// Listed with the tracker before the pool hears of it, so that the
	// merger finds this device holding it.
	a.shareMore(m.Digests())
	if _, err := a.c.AnnounceChunks(ctx, m.Digests(), nil, false); err != nil {
		a.log.Debug("Cannot announce a kept result yet; the next announcement lists it", "err", err)
	}
	a.kickShare()
	sub.Result, sub.Ref = nil, &m
	return sub
}

// shareMore adds chunks ds to what peers may fetch from this device, ahead
// of the next announcement (which lists them too).
func (a *Agent) shareMore(ds []castore.Digest) {
	for {
		old := a.shared.Load()
		next := map[castore.Digest]bool{}
		if old != nil {
			maps.Copy(next, *old)
		}
		for _, d := range ds {
			next[d] = true
		}
		if a.shared.CompareAndSwap(old, &next) {
			return
		}
	}
}

// dropKept deletes the kept result of contribution c, which the pool
// refused.
func (a *Agent) dropKept(c store.Contribution) {
	if k := a.cache.keeper(); k != nil {
		k.drop(keptKey{a.c.URL(), c.Job, c.Task})
	}
}

// serveKept asks the pool every keptSweep which of the results kept for
// it to go on keeping, and deletes the others. It returns nil when ctx
// ends.
func (a *Agent) serveKept(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(keptSweep):
		}
		a.sweepKept(ctx)
	}
}

// sweepKept asks the pool once which kept results to keep and deletes
// the others; a failed question keeps everything.
func (a *Agent) sweepKept(ctx context.Context) {
	k := a.cache.keeper()
	if k == nil {
		return
	}
	list := k.of(a.c.URL())
	dropped := 0
	for len(list) > 0 {
		n := min(len(list), pool.MaxHeldQuery)
		part := list[:n]
		list = list[n:]
		held := make([]pool.HeldResult, n)
		for i, r := range part {
			held[i] = pool.HeldResult{Job: job.ID(r.Job), Task: r.Task, Digest: job.Digest(r.Manifest.SHA256)}
		}
		keep, err := a.c.KeepResults(ctx, held)
		if err != nil {
			if ctx.Err() == nil {
				a.log.Debug("Cannot ask the pool which results to keep", "err", err)
			}
			return
		}
		for i, r := range part {
			if !keep[i] {
				k.drop(keptKey{a.c.URL(), job.ID(r.Job), r.Task})
				dropped++
			}
		}
	}
	if dropped > 0 {
		a.log.Debug("Deleted results their mergers have", "results", dropped)
		a.kickShare()
	}
}

// KeepResults asks the pool which of the results this device keeps for
// mergers to go on keeping (POST /v1/results/held, at most
// pool.MaxHeldQuery): one answer per result, in order.
func (c *Client) KeepResults(ctx context.Context, held []pool.HeldResult) ([]bool, error) {
	var out api.KeepResults
	if _, err := c.postJSON(ctx, "/v1/results/held", api.HeldResults{Results: held}, &out); err != nil {
		return nil, err
	}
	if len(out.Keep) != len(held) {
		return nil, fmt.Errorf("%w: POST /v1/results/held: %d answers to %d results", ErrUnavailable, len(out.Keep), len(held))
	}
	return out.Keep, nil
}

// ResultLost tells the pool that no holder of outcome seq of job id could
// give its result, so that its task is computed again (POST
// /v1/jobs/{id}/results/{seq}/lost); only the job's merger may.
func (c *Client) ResultLost(ctx context.Context, id job.ID, seq int64) error {
	_, err := c.do(ctx, http.MethodPost, "/v1/jobs/"+id.String()+"/results/"+url.PathEscape(strconv.FormatInt(seq, 10))+"/lost",
		nil, []byte("{}"), true, nil)
	return err
}

// errNoDataPlane means an outcome's result is kept by devices and this
// merger has no data plane to fetch it with.
var errNoDataPlane = errors.New("agent: no data plane to fetch results kept by devices")
