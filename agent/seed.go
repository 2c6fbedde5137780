package agent

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"idlepool/castore"
	"idlepool/coord/api"
	"idlepool/job"
	"idlepool/p2p"
	"idlepool/pool"
)

// SeedConfig configures Seed.
type SeedConfig struct {
	// UploadBytesPerSecond caps what the seeder sends (the owner's
	// share_upload); 0: no cap.
	UploadBytesPerSecond int64
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
	// OnStop, if set, is called once the Seeder has stopped (to release
	// the device's data-plane lock, home.DataPlaneLockFile).
	OnStop func()
	// NoOffer keeps the job's files from being offered (the owner does
	// not upload: share_peers=false); the Seeder still fetches the
	// results devices kept (FetchResult).
	NoOffer bool
	// Dir holds the chunks of results being fetched; a temporary
	// directory when "". It is emptied as each result is handed over.
	Dir string
}

// Seeder serves a submitted job's files to the pool's devices from the
// submitter's own copies (Seed). Stop it with Stop.
type Seeder struct {
	node      *p2p.Node
	c         *Client
	onStop    func()
	cancel    context.CancelFunc
	offered   chan struct{} // closed after the first announcement (see Offered)
	offerOnce sync.Once
	wg        sync.WaitGroup
	log       *slog.Logger
	fetched   atomic.Int64 // results fetched with FetchResult
	fetchedB  atomic.Int64 // their bytes
	pp        *peerPlane   // the node's peers, as sources of kept results (a peer that failed is skipped a while)

	dir     string         // Dir of SeedConfig
	storeMu sync.Mutex     // guards results and tmp
	results *castore.Store // the chunks of results being fetched; nil until the first
	tmp     string         // a temporary directory of results, removed at Stop
}

// Seed makes this device, the submitter of job j, a source of j's program
// and inputs for the pool's devices while the returned Seeder runs: it
// serves their chunks from the files themselves over the data plane (a
// p2p.Node) and announces them to the pool's tracker, so that the first
// devices to compute the job fetch its files from the submitter rather
// than from the coordinator, as BitTorrent's initial seed does. The
// known answers are never offered (peers must not see them). A file that
// changed since the job was planned is not offered. The files are read
// for their chunk lists after Seed returns. With SeedConfig.NoOffer it
// offers nothing. While it runs, the Seeder also fetches the results the
// pool's devices keep for this merger (FetchResult), and c says so to the
// pool (Client.SetFetchesKept). It returns a nil Seeder and no error when
// the coordinator relays no signals (an older one): the devices then
// fetch from the coordinator, as always, and results come inline.
func Seed(ctx context.Context, c *Client, j *job.Job, cfg SeedConfig) (*Seeder, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if _, err := c.Signaller().ICEServers(ctx); err != nil {
		if ae, ok := errors.AsType[*APIError](err); ok && ae.Status == http.StatusNotFound {
			return nil, nil
		}
		return nil, fmt.Errorf("ask the pool for ICE servers: %w", err)
	}
	files := &fileChunks{m: map[castore.Digest]fileChunk{}}
	pcfg := p2p.Config{Key: c.key, Signaller: c.Signaller(), Chunks: files,
		Upload: p2p.NewUploadLimit(cfg.UploadBytesPerSecond), LoopbackOnly: loopbackPool(c.URL()),
		Logger: cfg.Logger.With("part", "p2p")}
	n, err := p2p.NewNode(pcfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c.SetFetchesKept(true)
	s := &Seeder{node: n, c: c, cancel: cancel, onStop: cfg.OnStop, offered: make(chan struct{}), dir: cfg.Dir, log: cfg.Logger,
		pp: &peerPlane{node: n, now: time.Now, down: map[string]time.Time{}, used: map[string]bool{}, paths: map[string]p2p.Path{}}}
	s.wg.Go(func() {
		if err := n.Serve(ctx); err != nil && ctx.Err() == nil {
			cfg.Logger.Warn("The seeder's data plane stopped", "err", err)
		}
	})
	if cfg.NoOffer {
		s.markOffered()
		return s, nil
	}
	s.wg.Go(func() {
		// Hashing large inputs takes a while: Seed returns at once.
		defer s.markOffered()
		all := files.load(ctx, j, cfg.Logger)
		if len(all) > api.MaxChunksPerPeer { // more than the tracker lists for one device
			all = all[:api.MaxChunksPerPeer]
		}
		if ctx.Err() == nil {
			s.announce(ctx, c, all, cfg.Logger)
		}
	})
	return s, nil
}

// load reads the chunk lists of j's program and inputs (never its known
// answers), in a fixed order, and returns their chunks; a file that
// changed since the job was planned, or cannot be read, is left out.
func (fc *fileChunks) load(ctx context.Context, j *job.Job, log *slog.Logger) []castore.Digest {
	refs := []job.InputRef{j.Program}
	for _, name := range slices.Sorted(maps.Keys(j.Inputs)) {
		refs = append(refs, j.Inputs[name])
	}
	var all []castore.Digest
	for _, ref := range refs {
		if ctx.Err() != nil {
			return nil
		}
		m, err := castore.ManifestOfFile(ref.Path)
		if err != nil {
			log.Warn("Cannot read a file of the job to offer it", "path", ref.Path, "err", err)
			continue
		}
		if m.SHA256 != castore.Digest(ref.SHA256) {
			log.Warn("A file of the job changed since it was planned; not offering it", "path", ref.Path)
			continue
		}
		fc.mu.Lock()
		for i, ch := range m.Chunks {
			if _, dup := fc.m[ch.Digest]; !dup {
				fc.m[ch.Digest] = fileChunk{path: ref.Path, off: int64(i) * int64(m.ChunkSize), size: ch.Size}
				all = append(all, ch.Digest)
			}
		}
		fc.mu.Unlock()
	}
	return all
}

// announce lists the chunks with the tracker at once and every
// announceEvery, and takes them off when ctx ends.
func (s *Seeder) announce(ctx context.Context, c *Client, chunks []castore.Digest, log *slog.Logger) {
	tick := time.NewTicker(announceEvery)
	defer tick.Stop()
	for {
		if _, err := c.AnnounceChunks(ctx, chunks, nil, true); err != nil && ctx.Err() == nil {
			log.Warn("Cannot offer the job's files to the pool", "err", err)
		}
		s.markOffered()
		select {
		case <-ctx.Done():
			bg, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, _ = c.AnnounceChunks(bg, nil, nil, true) // nothing held any more
			return
		case <-tick.C:
		}
	}
}

// markOffered closes the channel Offered returns, once.
func (s *Seeder) markOffered() {
	s.offerOnce.Do(func() { close(s.offered) })
}

// Offered returns a channel that is closed once the seeder has read the
// job's files and told the pool's tracker of their chunks for the first
// time, or failed to (the failure is logged), or stopped. A submitter
// that waits for it before handing the job to the pool makes the first
// devices find the files with it rather than at the coordinator. A nil
// Seeder's channel is closed.
func (s *Seeder) Offered() <-chan struct{} {
	if s == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return s.offered
}

// Sent returns the chunk bytes the seeder sent to peers so far.
func (s *Seeder) Sent() uint64 {
	st := s.node.Stats()
	return st.DirectSentBytes + st.RelayedSentBytes
}

// Stop takes the offer off the tracker, closes the seeder's connections
// and waits for it to end. A nil Seeder's Stop does nothing.
func (s *Seeder) Stop() {
	if s == nil {
		return
	}
	s.cancel()
	s.wg.Wait()
	s.c.SetFetchesKept(false)
	s.storeMu.Lock()
	if s.tmp != "" {
		_ = os.RemoveAll(s.tmp)
	}
	s.storeMu.Unlock()
	if s.onStop != nil {
		s.onStop()
	}
}

// fileChunk is where one chunk lies in a file.
type fileChunk struct {
	path string
	off  int64
	size int
}

// fileChunks serves chunks straight from the files they are part of: the
// submitter's own copies, with no second copy in a chunk store. Safe for
// concurrent use.
type fileChunks struct {
	mu sync.RWMutex
	m  map[castore.Digest]fileChunk
}

// ReadChunk reads chunk d from its file; a chunk that no longer has those
// bytes (the file changed) is an error, never wrong bytes.
func (fc *fileChunks) ReadChunk(d [32]byte) ([]byte, error) {
	fc.mu.RLock()
	ch, ok := fc.m[d]
	fc.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("chunk %x: %w", d[:8], fs.ErrNotExist)
	}
	f, err := os.Open(ch.path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, ch.size)
	if _, err := f.ReadAt(b, ch.off); err != nil {
		return nil, fmt.Errorf("read chunk %x of %s: %w", d[:8], ch.path, err)
	}
	if sha256.Sum256(b) != d {
		return nil, fmt.Errorf("chunk %x of %s: the file changed since the job was submitted", d[:8], ch.path)
	}
	return b, nil
}

// resultStore returns the store of the chunks of results being fetched,
// opening it on first use.
func (s *Seeder) resultStore() (*castore.Store, error) {
	s.storeMu.Lock()
	defer s.storeMu.Unlock()
	if s.results != nil {
		return s.results, nil
	}
	dir := s.dir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "idlepool-results-")
		if err != nil {
			return nil, fmt.Errorf("fetch results: %w", err)
		}
		s.tmp, dir = tmp, tmp
	}
	st, err := castore.Open(castore.Config{Dir: dir, Logger: s.log})
	if err != nil {
		return nil, fmt.Errorf("fetch results: %w", err)
	}
	s.results = st
	return st, nil
}

// FetchResult fetches the result of ok outcome v, which the devices that
// computed it kept (v.Ref), from the devices the pool's tracker names
// (several at once, every chunk checked against its digest; a device
// that serves wrong bytes is avoided), and returns its bytes once they
// hash to the accepted digest. An error wrapping castore.ErrNoSource
// means no device could give some chunk. A nil Seeder has no data plane:
// errNoDataPlane.
func (s *Seeder) FetchResult(ctx context.Context, c *Client, v pool.Verified) ([]byte, error) {
	if s == nil {
		return nil, errNoDataPlane
	}
	if v.Ref == nil {
		return nil, fmt.Errorf("fetch the result of task %d: the outcome names no kept result", v.Task)
	}
	st, err := s.resultStore()
	if err != nil {
		return nil, err
	}
	m := *v.Ref
	release := st.Hold(m.Digests())
	defer func() {
		release()
		st.Remove(m.Digests())
	}()
	self := c.PeerID()
	f := &castore.Fetcher{Store: st, Device: self, Locate: c.ChunkHolders, Logger: s.log,
		Peers: func(id string) castore.Source {
			if id == self {
				return nil
			}
			return nodeSource{s.pp, id}
		}}
	if _, err := f.Fetch(ctx, m); err != nil {
		return nil, fmt.Errorf("fetch the result of task %d from the devices that kept it: %w", v.Task, err)
	}
	out := make([]byte, 0, m.Size)
	for _, ch := range m.Chunks {
		b, err := st.ReadChunk(ch.Digest)
		if err != nil {
			return nil, fmt.Errorf("fetch the result of task %d: %w", v.Task, err)
		}
		out = append(out, b...)
	}
	if castore.Digest(sha256.Sum256(out)) != m.SHA256 || int64(len(out)) != m.Size {
		return nil, fmt.Errorf("fetch the result of task %d: %w: the chunks do not make the accepted result", v.Task, castore.ErrDigestMismatch)
	}
	s.fetched.Add(1)
	s.fetchedB.Add(int64(len(out)))
	return out, nil
}

// Fetched returns how many results FetchResult fetched from the devices
// that kept them, and their bytes. A nil Seeder fetched none.
func (s *Seeder) Fetched() (results, bytes int64) {
	if s == nil {
		return 0, 0
	}
	return s.fetched.Load(), s.fetchedB.Load()
}
