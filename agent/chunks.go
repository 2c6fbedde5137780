package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"idlepool/castore"
	"idlepool/coord/api"
	"idlepool/home"
	"idlepool/job"
	"idlepool/p2p"
	"idlepool/pool"
)

// ShareDir is the chunk store's directory under dirs (CacheConfig.ShareDir):
// the chunks this device keeps to serve other devices, capped apart from
// the job cache (idle.Settings.ShareDiskMiB).
func ShareDir(dirs home.Dirs) string { return filepath.Join(dirs.Cache, "share") }

// errNoShare means the cache has no chunk store (CacheConfig.ShareDir).
var errNoShare = errors.New("agent: no chunk store")

// announceEvery is the wait between announcements of the chunks this
// device holds when nothing changed; well within api.TrackerTTL, so the
// tracker keeps naming the device.
const announceEvery = 5 * time.Minute

// announceGap is the least wait between two announcements of chunks that
// arrived during a fetch: the chunks of a file are offered to other
// devices as they come, in at most one request a second (each also reads
// the job cache's directory); fetchers ask who holds what as often
// (castore.DefaultRelocate).
const announceGap = time.Second

// coordinatorSource is the ID of the coordinator as a chunk source.
const coordinatorSource = "coordinator"

// ChunkManifest fetches the chunk manifest of the pool's file with digest
// d (GET /v1/blobs/{d}/chunks). A coordinator from before chunks answers
// an *APIError with status 404 and code "not_found".
func (c *Client) ChunkManifest(ctx context.Context, d job.Digest) (castore.Manifest, error) {
	var m castore.Manifest
	_, err := c.do(ctx, http.MethodGet, "/v1/blobs/"+d.String()+"/chunks", nil, nil, false, &m)
	if err != nil {
		return m, err
	}
	if m.SHA256 != castore.Digest(d) {
		return m, fmt.Errorf("%w: the manifest of file %s describes %x", ErrBadBlob, d, m.SHA256[:8])
	}
	return m, nil
}

// Chunk fetches one chunk from the coordinator (GET /v1/chunks/{d}),
// reading at most castore.MaxChunkSize bytes; a chunk it does not have
// wraps fs.ErrNotExist. The caller checks the digest.
func (c *Client) Chunk(ctx context.Context, d castore.Digest) ([]byte, error) {
	path := "/v1/chunks/" + job.Digest(d).String()
	resp, err := c.send(ctx, http.MethodGet, path, nil, payload{}, false)
	var ae *APIError
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
		return nil, fmt.Errorf("%w: %w", err, fs.ErrNotExist)
	}
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, castore.MaxChunkSize+1))
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: GET %s: %w", ErrUnavailable, path, err)
	}
	c.chunkBytes.Add(int64(len(b)))
	return b, nil
}

// AnnounceChunks tells the pool's tracker which chunks this device now
// holds and no longer holds (POST /v1/chunks/announce; with replace, add
// is the whole list). It sends at most api.MaxChunksPerRequest digests
// per request, in as many requests as needed, and returns how many chunks
// the tracker lists for the device.
func (c *Client) AnnounceChunks(ctx context.Context, add, drop []castore.Digest, replace bool) (int, error) {
	hex := func(ds []castore.Digest) []api.HexDigest {
		out := make([]api.HexDigest, len(ds))
		for i, d := range ds {
			out[i] = api.HexDigest(d)
		}
		return out
	}
	held := 0
	first := true
	for first || len(add)+len(drop) > 0 {
		var req api.ChunkAnnounce
		req.Replace = replace && first
		n := min(len(drop), api.MaxChunksPerRequest)
		req.Drop, drop = hex(drop[:n]), drop[n:]
		m := min(len(add), api.MaxChunksPerRequest-n)
		req.Add, add = hex(add[:m]), add[m:]
		var out api.ChunkAnnounced
		if _, err := c.postJSON(ctx, "/v1/chunks/announce", req, &out); err != nil {
			return held, err
		}
		held, first = out.Held, false
	}
	return held, nil
}

// ChunkHolders asks the pool's tracker which other devices hold chunks ds
// (POST /v1/chunks/holders, api.MaxChunksPerRequest at a time); it is
// a castore.Locator.
func (c *Client) ChunkHolders(ctx context.Context, ds []castore.Digest) (map[castore.Digest][]string, error) {
	out := map[castore.Digest][]string{}
	for len(ds) > 0 {
		n := min(len(ds), api.MaxChunksPerRequest)
		req := api.ChunkHoldersRequest{Chunks: make([]api.HexDigest, n)}
		for i, d := range ds[:n] {
			req.Chunks[i] = api.HexDigest(d)
		}
		ds = ds[n:]
		var ans api.ChunkHolders
		if _, err := c.postJSON(ctx, "/v1/chunks/holders", req, &ans); err != nil {
			return out, err
		}
		for d, ids := range ans.Holders {
			out[castore.Digest(d)] = ids
		}
	}
	return out, nil
}

// CoordinatorSource is the pool's coordinator as a castore.Source (ID
// "coordinator"): the fallback for chunks no device can give.
type CoordinatorSource struct{ C *Client }

var _ castore.Source = CoordinatorSource{}

// ID returns "coordinator".
func (CoordinatorSource) ID() string { return coordinatorSource }

// Fetch fetches chunk d from the coordinator (Client.Chunk).
func (s CoordinatorSource) Fetch(ctx context.Context, d [32]byte) ([]byte, error) {
	return s.C.Chunk(ctx, d)
}

// shareStore returns the cache's chunk store, opening it on first use.
func (c *Cache) shareStore() (*castore.Store, error) {
	c.shareMu.Lock()
	defer c.shareMu.Unlock()
	if c.share != nil {
		return c.share, nil
	}
	if c.shareDir == "" {
		return nil, errNoShare
	}
	st, err := castore.Open(castore.Config{Dir: c.shareDir, CapBytes: c.shareCap,
		Now: c.now, Logger: c.log})
	if err != nil {
		return nil, err
	}
	// The files of the cache that were fetched in chunks serve their
	// chunks again.
	for _, f := range st.Manifests() {
		path := filepath.Join(c.dir, "blobs", job.Digest(f).String())
		if _, err := os.Stat(path); err != nil {
			continue
		}
		if m, err := st.Manifest(f); err == nil {
			_ = st.AddFile(m, path)
		}
	}
	c.share = st
	return st, nil
}

// SetShareCap changes the cap of the chunks kept for other devices
// (bytes; castore.DefaultCapBytes when 0 or less), evicting what it asks.
func (c *Cache) SetShareCap(n int64) {
	c.shareMu.Lock()
	c.shareCap = n
	st := c.share
	c.shareMu.Unlock()
	if st != nil {
		st.SetCap(n)
	}
}

// ShareStore returns the chunk store this device serves other devices
// from (its ReadChunk is what the network layer calls), opening it on
// first use; an error when CacheConfig.ShareDir was "".
func (c *Cache) ShareStore() (*castore.Store, error) { return c.shareStore() }

// fetchInChunks returns a file fetcher (see fetchJob) that gets each file
// in chunks: its manifest from the coordinator, its chunks from the
// devices that hold them (peers, nil for none) and the coordinator as
// the fallback, into the chunk store, then puts the file together. A
// coordinator from before chunks, or a chunk store that cannot be
// opened, gets the whole file from the coordinator instead.
//
// What each file's fetch got from where is queued for the coordinator as
// job id's transfer report (Client.NoteTransfer).
func (c *Cache) fetchInChunks(cl *Client, id job.ID, peers func(id string) castore.Source, log *slog.Logger) func(ctx context.Context, d job.Digest, path string) error {
	wholeFile := func(ctx context.Context, d job.Digest, path string) error {
		if err := cl.FetchBlob(ctx, d, path); err != nil {
			return err
		}
		if fi, err := os.Stat(path); err == nil {
			cl.NoteTransfer(id, pool.Transfer{Coordinator: fi.Size()})
		}
		return nil
	}
	return func(ctx context.Context, d job.Digest, path string) error {
		st, err := c.shareStore()
		if err != nil {
			if !errors.Is(err, errNoShare) {
				log.Warn("Cannot open the chunk store; fetching the whole file", "err", err)
			}
			return wholeFile(ctx, d, path)
		}
		m, err := cl.ChunkManifest(ctx, d)
		var ae *APIError
		if errors.As(err, &ae) && ae.Status == http.StatusNotFound && ae.Code == "not_found" {
			return wholeFile(ctx, d, path) // a coordinator from before chunks
		}
		if err != nil {
			return err
		}
		release := st.Hold(m.Digests())
		defer release()
		c.startPartial(cl.URL(), m)
		defer c.endPartial(m.SHA256)
		f := &castore.Fetcher{Store: st, Fallback: CoordinatorSource{cl}, Device: cl.PeerID(), Logger: log,
			OnStored: func(castore.Digest) { c.chunksArrived() }}
		paths := &sourcePaths{paths: map[string]p2p.Path{}}
		if peers != nil {
			f.Peers, f.Locate = paths.wrap(peers), cl.ChunkHolders
		}
		stats, err := f.Fetch(ctx, m)
		cl.NoteTransfer(id, paths.transfer(stats))
		if err != nil {
			if errors.Is(err, castore.ErrNoSource) {
				err = fmt.Errorf("%w: %w", ErrUnavailable, err)
			}
			return fmt.Errorf("fetch the chunks of file %s: %w", d, err)
		}
		if err := st.PutManifest(m); err != nil {
			return fmt.Errorf("keep the manifest of file %s: %w", d, err)
		}
		if err := st.Assemble(m, path); err != nil {
			if errors.Is(err, castore.ErrDigestMismatch) {
				err = fmt.Errorf("%w: %w", ErrBadBlob, err)
			}
			return fmt.Errorf("put file %s together: %w", d, err)
		}
		// The cache's copy serves the chunks from now on: no second copy.
		if err := st.AddFile(m, path); err != nil {
			return fmt.Errorf("serve file %s: %w", d, err)
		}
		c.chunksArrived()
		log.Debug("Fetched a file in chunks", "file", d.String(), "chunks", len(m.Chunks),
			"bySource", stats.Chunks, "badSources", stats.Bad)
		return nil
	}
}

// sourcePaths notes the path (p2p.Path) each peer source's chunks took,
// for a fetch's transfer report; safe for concurrent use.
type sourcePaths struct {
	mu    sync.Mutex
	paths map[string]p2p.Path // source ID -> the path of its last chunk
}

// pathSource is a source that knows how its bytes travel (a peer over
// the agent's Node). A source that does not, or a peer whose connection
// was never seen open (it closed at once), is counted as direct: the
// only other path, a relay, is seen whenever it carried a chunk to an
// open connection.
type pathSource interface {
	castore.Source
	path() p2p.Path
}

// wrap returns peers with each source's path noted after every chunk it
// gives.
func (sp *sourcePaths) wrap(peers func(id string) castore.Source) func(id string) castore.Source {
	return func(id string) castore.Source {
		src := peers(id)
		if src == nil {
			return nil
		}
		return notedSource{src, sp}
	}
}

// transfer sorts a fetch's bytes by path: the coordinator's, and each
// peer's by the path its chunks took.
func (sp *sourcePaths) transfer(st castore.Stats) pool.Transfer {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	var t pool.Transfer
	for id, n := range st.Bytes {
		switch {
		case id == coordinatorSource:
			t.Coordinator += n
		case sp.paths[id] == p2p.PathRelayed:
			t.Relayed += n
		default:
			t.Direct += n
		}
	}
	return t
}

// notedSource is a peer source whose path is noted in a sourcePaths.
type notedSource struct {
	castore.Source
	sp *sourcePaths
}

func (s notedSource) Fetch(ctx context.Context, d [32]byte) ([]byte, error) {
	b, err := s.Source.Fetch(ctx, d)
	if err == nil {
		p := p2p.PathDirect
		if ps, ok := s.Source.(pathSource); ok {
			p = ps.path()
		}
		s.sp.mu.Lock()
		if p != p2p.PathUnknown || s.sp.paths[s.ID()] == p2p.PathUnknown {
			s.sp.paths[s.ID()] = p
		}
		s.sp.mu.Unlock()
	}
	return b, err
}

// startPartial notes that file m is being fetched from pool url: its
// chunks are offered as they arrive. endPartial ends that; by then the
// file is whole (and offered as a cached job's file) or its fetch failed.
func (c *Cache) startPartial(url string, m castore.Manifest) {
	c.shareMu.Lock()
	defer c.shareMu.Unlock()
	if c.partial == nil {
		c.partial = map[castore.Digest]partialFile{}
	}
	c.partial[m.SHA256] = partialFile{pool: url, m: m}
}

func (c *Cache) endPartial(file castore.Digest) {
	c.shareMu.Lock()
	delete(c.partial, file)
	c.shareMu.Unlock()
}

// chunksArrived counts a change of the chunks held and wakes the
// announcers.
func (c *Cache) chunksArrived() {
	c.shareGen.Add(1)
	c.shareMu.Lock()
	if c.shareWake != nil {
		close(c.shareWake)
		c.shareWake = nil
	}
	c.shareMu.Unlock()
}

// shareChanged returns a channel closed at the next chunksArrived.
func (c *Cache) shareChanged() <-chan struct{} {
	c.shareMu.Lock()
	defer c.shareMu.Unlock()
	if c.shareWake == nil {
		c.shareWake = make(chan struct{})
	}
	return c.shareWake
}

// jobChunks returns the chunks of j's files whose manifests the chunk
// store keeps.
func (c *Cache) jobChunks(j *job.Job) []castore.Digest {
	st, err := c.shareStore()
	if err != nil {
		return nil
	}
	files := []job.Digest{j.Program.SHA256}
	for _, ref := range j.Inputs {
		files = append(files, ref.SHA256)
	}
	var out []castore.Digest
	for _, f := range files {
		if m, err := st.Manifest(castore.Digest(f)); err == nil {
			out = append(out, m.Digests()...)
		}
	}
	return out
}

// poolChunks returns the stored chunks of the files of the cached jobs of
// pool url and of the files being fetched from it, at most
// api.MaxChunksPerPeer.
func (c *Cache) poolChunks(url string) []castore.Digest {
	st, err := c.shareStore()
	if err != nil {
		return nil
	}
	jobs, _ := c.scanJobs(nil)
	seen := map[castore.Digest]bool{}
	var out []castore.Digest
	c.shareMu.Lock()
	for _, p := range c.partial {
		if p.pool != url {
			continue
		}
		for _, d := range p.m.Digests() {
			if !seen[d] && st.Has(d) && len(out) < api.MaxChunksPerPeer {
				seen[d] = true
				out = append(out, d)
			}
		}
	}
	c.shareMu.Unlock()
	for _, ji := range jobs {
		if !ji.known || ji.files.Pool != url {
			continue
		}
		for _, f := range ji.files.digests() {
			m, err := st.Manifest(castore.Digest(f))
			if err != nil {
				continue
			}
			for _, d := range m.Digests() {
				if !seen[d] && st.Has(d) && len(out) < api.MaxChunksPerPeer {
					seen[d] = true
					out = append(out, d)
				}
			}
		}
	}
	return out
}

// serveShare announces to the pool's tracker the chunks this device holds
// of the pool's jobs: the whole list at first (and after any failure),
// then what changed, whenever a task's files were fetched (kickShare) or
// chunks of a file being fetched arrived (at most every announceGap), and
// every announceEvery, which keeps the device listed. It returns nil when
// ctx ends.
func (a *Agent) serveShare(ctx context.Context) error {
	var announced map[castore.Digest]bool // nil: the tracker's list is not known
	tick := time.NewTicker(announceEvery)
	defer tick.Stop()
	keepAlive := true
	var gen uint64
	for {
		wake := a.cache.shareChanged() // before the look: a chunk stored after it wakes the select
		// After a kick, only when files or chunks arrived since the last look.
		if g := a.cache.shareGen.Load(); keepAlive || announced == nil || g != gen {
			gen = g
			announced = a.announce(ctx, announced, keepAlive)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			keepAlive = true
		case <-a.shareKick:
			keepAlive = false
		case <-wake:
			// Chunks arrive many per second: what came within
			// announceGap goes in one announcement.
			keepAlive = false
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(announceGap):
			}
		}
	}
}

// announce sends the tracker what changed since announced (everything
// when announced is nil; nothing unless keepAlive when nothing changed)
// and returns what the tracker now lists, nil after a failure.
func (a *Agent) announce(ctx context.Context, announced map[castore.Digest]bool, keepAlive bool) map[castore.Digest]bool {
	var now []castore.Digest
	if !a.cfg.NoShare { // the owner does not upload: the tracker lists none
		now = append(a.cache.poolChunks(a.c.URL()), a.cache.keptChunks(a.c.URL())...)
		now = now[:min(len(now), api.MaxChunksPerPeer)]
	}
	held := make(map[castore.Digest]bool, len(now))
	var add, drop []castore.Digest
	for _, d := range now {
		held[d] = true
		if !announced[d] {
			add = append(add, d)
		}
	}
	for d := range announced {
		if !held[d] {
			drop = append(drop, d)
		}
	}
	if announced != nil && len(add) == 0 && len(drop) == 0 && !keepAlive {
		return announced
	}
	slices.SortFunc(add, func(x, y castore.Digest) int { return slices.Compare(x[:], y[:]) })
	a.shared.Store(&held) // served from now on: peers ask once the tracker names this device
	n, err := a.c.AnnounceChunks(ctx, add, drop, announced == nil)
	var ae *APIError
	switch {
	case ctx.Err() != nil:
		return announced
	case errors.As(err, &ae) && ae.Status == http.StatusNotFound && ae.Code == "not_found":
		return held // a coordinator from before chunks: nothing to tell it
	case err != nil:
		a.log.Warn("Cannot announce the chunks held", "err", err)
		return nil
	}
	a.log.Debug("Announced the chunks held", "added", len(add), "dropped", len(drop), "held", n)
	return held
}

// kickShare wakes serveShare: files arrived.
func (a *Agent) kickShare() {
	select {
	case a.shareKick <- struct{}{}:
	default:
	}
}
