package castore

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"time"
)

// Source gives chunks by digest: a peer reached through the network
// layer, or the coordinator over HTTP. Fetch returns the chunk's bytes
// (the fetcher checks them against the digest), an error wrapping
// fs.ErrNotExist when the source does not hold the chunk, or another
// error when the source failed (it is then not asked again during that
// fetch). Implementations must be safe for concurrent use.
type Source interface {
	ID() string
	Fetch(ctx context.Context, digest [32]byte) ([]byte, error)
}

// Locator says which sources (by Source.ID) hold each of the chunks ds,
// such as the coordinator's tracker (POST /v1/chunks/holders). Chunks
// nobody holds may be absent from the answer.
type Locator func(ctx context.Context, ds []Digest) (map[Digest][]string, error)

// Defaults of a Fetcher's limits.
const (
	DefaultPerSource = 4
	DefaultParallel  = 16
	// DefaultRelocate is how often a fetch asks again who holds the
	// chunks it still lacks.
	DefaultRelocate = time.Second
	// fallbackTries is how often the fallback is asked for one chunk
	// before the fetch fails.
	fallbackTries = 3
)

// Fetcher fetches the missing chunks of a manifest into a Store, from
// several sources at once:
//
//   - rarest first: chunks held by fewer peers are asked for first (the
//     BitTorrent "rarest first" piece selection, Cohen 2003), so that the
//     rare ones spread before their holders leave; ties are broken by a
//     hash of the device and the digest, random-looking but the same on
//     each try of one device and different between devices;
//   - a chunk goes to the least busy of its holders, each source having at
//     most PerSource requests in flight and the fetch at most Parallel;
//   - every chunk is checked against its digest: a source that serves
//     wrong bytes is avoided for the rest of the fetch and reported
//     (OnBadSource); a source that fails is replaced by another holder;
//   - the Fallback (the coordinator) is asked only for chunks no peer
//     holds, or whose peers all failed;
//   - every Relocate, Locate is asked again about the chunks not yet
//     asked for, and the holders it names since are asked too.
//
// The zero value is not usable: set Store, and Fallback or Locate and
// Peers.
type Fetcher struct {
	// Store receives the chunks. Required.
	Store *Store
	// Locate says who holds the chunks; nil: nobody (the Fallback gives
	// everything).
	Locate Locator
	// Peers returns the source for a holder's ID, or nil when it cannot
	// be reached; nil: no peers.
	Peers func(id string) Source
	// Fallback is asked for chunks that no peer gave; nil: none.
	Fallback Source
	// Device is this device's ID, which seeds the ties of rarest first.
	Device string
	// PerSource and Parallel bound the requests in flight per source and
	// in all; DefaultPerSource and DefaultParallel when 0 or less.
	PerSource, Parallel int
	// OnBadSource, if set, is called when a source served bytes that do
	// not match the digest asked for (for the caller to report it).
	OnBadSource func(id string, d Digest)
	// Relocate is how often Locate is asked again, during a fetch, who
	// holds the chunks not yet asked for, so that devices that got them
	// since the fetch began are asked too (as BitTorrent peers learn of
	// each other's new pieces); DefaultRelocate when 0, never when
	// negative.
	Relocate time.Duration
	// OnStored, if set, is called after each chunk is stored (for the
	// caller to offer it to others before the whole file is in). It runs
	// on the fetch's goroutine: it must not block.
	OnStored func(d Digest)
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
}

// Stats says what one Fetch got from where.
type Stats struct {
	// Chunks and Bytes count the chunks and bytes stored, by source ID.
	Chunks map[string]int
	Bytes  map[string]int64
	// Failures counts failed requests by source ID (a source that did not
	// hold a chunk, failed, or served wrong bytes).
	Failures map[string]int
	// Bad lists the sources that served wrong bytes, in the order found.
	Bad []string
	// Order lists the chunks in the order the fetch planned to ask for
	// them when it began (rarest first); later answers of the locator
	// may change the order they were asked in.
	Order []Digest
}

// attempt is the answer to one request.
type attempt struct {
	d    Digest
	src  string
	data []byte
	err  error
}

// Fetch fetches the chunks of m that f.Store lacks (see Fetcher) and
// returns what came from where. It returns when every chunk is stored,
// or with an error wrapping ErrNoSource when some chunk has no source
// left, or ctx's error when ctx ends (requests in flight are cancelled
// and awaited first). Hold m's chunks (Store.Hold) until they are used.
func (f *Fetcher) Fetch(ctx context.Context, m Manifest) (Stats, error) {
	st := Stats{Chunks: map[string]int{}, Bytes: map[string]int64{}, Failures: map[string]int{}}
	if err := m.Validate(); err != nil {
		return st, err
	}
	log := f.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	perSource, parallel := f.PerSource, f.Parallel
	if perSource <= 0 {
		perSource = DefaultPerSource
	}
	if parallel <= 0 {
		parallel = DefaultParallel
	}
	missing := f.Store.Missing(m)
	if len(missing) == 0 {
		return st, nil
	}
	holders := map[Digest][]string{}
	if f.Locate != nil && f.Peers != nil {
		h, err := f.Locate(ctx, missing)
		if err != nil {
			if ctx.Err() != nil {
				return st, ctx.Err()
			}
			log.Warn("Cannot ask who holds the chunks; fetching from the fallback", "err", err)
		}
		for d, ids := range h {
			holders[d] = slices.Compact(slices.Sorted(slices.Values(ids)))
		}
	}
	sources := map[string]Source{}
	if f.Fallback != nil {
		sources[f.Fallback.ID()] = f.Fallback
	}
	source := func(id string) Source {
		if s, ok := sources[id]; ok {
			return s
		}
		var s Source
		if f.Peers != nil {
			s = f.Peers(id)
		}
		sources[id] = s
		return s
	}
	// Rarest first, ties by a per-device hash.
	tie := func(d Digest, extra string) uint64 {
		h := sha256.New()
		h.Write([]byte(f.Device))
		h.Write([]byte{0})
		h.Write([]byte(extra))
		h.Write(d[:])
		return binary.BigEndian.Uint64(h.Sum(nil))
	}
	rank := make(map[Digest]uint64, len(missing))
	for _, d := range missing {
		rank[d] = tie(d, "")
	}
	rarestFirst := func(ds []Digest) {
		slices.SortStableFunc(ds, func(a, b Digest) int {
			if la, lb := len(holders[a]), len(holders[b]); la != lb {
				return la - lb
			}
			switch ra, rb := rank[a], rank[b]; {
			case ra < rb:
				return -1
			case ra > rb:
				return 1
			}
			return 0
		})
	}
	rarestFirst(missing)
	st.Order = slices.Clone(missing)

	avoid := map[string]bool{} // failed or served wrong bytes: not asked again
	tried := map[Digest]map[string]bool{}
	fallbackUsed := map[Digest]int{}
	inflight := map[string]int{}
	total := 0
	fallbackID := ""
	if f.Fallback != nil {
		fallbackID = f.Fallback.ID()
	}
	// pick chooses a source for d: "" and false while the sources that
	// could give it are busy; "" and true when none is left.
	pick := func(d Digest) (string, bool) {
		best, bestLoad, busy := "", 0, false
		var bestTie uint64
		for _, id := range holders[d] {
			if avoid[id] || tried[d][id] || id == fallbackID || source(id) == nil {
				continue
			}
			if inflight[id] >= perSource {
				busy = true
				continue
			}
			t := tie(d, id)
			if best == "" || inflight[id] < bestLoad || inflight[id] == bestLoad && t < bestTie {
				best, bestLoad, bestTie = id, inflight[id], t
			}
		}
		if best != "" || busy {
			return best, false
		}
		if f.Fallback != nil && fallbackUsed[d] < fallbackTries {
			if inflight[fallbackID] >= perSource {
				return "", false
			}
			return fallbackID, false
		}
		return "", true
	}
	results := make(chan attempt)
	// Who holds what, asked again every Relocate; one question at a time.
	var relocate <-chan time.Time
	if every := f.Relocate; f.Locate != nil && f.Peers != nil && every >= 0 {
		if every == 0 {
			every = DefaultRelocate
		}
		t := time.NewTicker(every)
		defer t.Stop()
		relocate = t.C
	}
	located := make(chan map[Digest][]string, 1)
	locating := false
	ctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		for ; total > 0; total-- {
			<-results
		}
		if locating {
			<-located
		}
	}()
	pending := missing
	for len(pending) > 0 || total > 0 {
		for i := 0; i < len(pending) && total < parallel; {
			d := pending[i]
			id, none := pick(d)
			if none {
				return st, fmt.Errorf("%w: chunk %x of file %x (sources failed: %d)", ErrNoSource, d[:8], m.SHA256[:8], len(avoid))
			}
			if id == "" {
				i++
				continue
			}
			pending = slices.Delete(pending, i, i+1)
			if id == fallbackID {
				fallbackUsed[d]++
			}
			inflight[id]++
			total++
			src := source(id)
			go func() {
				b, err := src.Fetch(ctx, d)
				results <- attempt{d: d, src: id, data: b, err: err}
			}()
		}
		if total == 0 {
			break
		}
		var a attempt
		select {
		case a = <-results:
		case <-relocate:
			if !locating && len(pending) > 0 {
				locating = true
				ask := slices.Clone(pending)
				go func() {
					h, _ := f.Locate(ctx, ask) // a failed question changes nothing
					located <- h
				}()
			}
			continue
		case h := <-located:
			locating = false
			for d, ids := range h {
				if len(ids) > 0 {
					holders[d] = slices.Compact(slices.Sorted(slices.Values(append(ids, holders[d]...))))
				}
			}
			rarestFirst(pending)
			continue
		}
		total--
		inflight[a.src]--
		if ctx.Err() != nil {
			return st, ctx.Err()
		}
		err := a.err
		if err == nil && Digest(sha256.Sum256(a.data)) != a.d {
			err = fmt.Errorf("%w: chunk %x from %s", ErrDigestMismatch, a.d[:8], a.src)
			if !slices.Contains(st.Bad, a.src) {
				st.Bad = append(st.Bad, a.src)
				log.Warn("A source served a wrong chunk; avoiding it", "source", a.src, "chunk", hex.EncodeToString(a.d[:]))
				if f.OnBadSource != nil {
					f.OnBadSource(a.src, a.d)
				}
			}
			avoid[a.src] = true
		}
		if err == nil {
			if err := f.Store.Put(a.d, a.data); err != nil {
				return st, fmt.Errorf("store chunk: %w", err)
			}
			st.Chunks[a.src]++
			st.Bytes[a.src] += int64(len(a.data))
			if f.OnStored != nil {
				f.OnStored(a.d)
			}
			continue
		}
		st.Failures[a.src]++
		if tried[a.d] == nil {
			tried[a.d] = map[string]bool{}
		}
		tried[a.d][a.src] = true
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, ErrDigestMismatch) && a.src != fallbackID && !avoid[a.src] {
			// Failed: replaced by another holder. Said once per source:
			// the chunks asked of it at once fail together.
			avoid[a.src] = true
			log.Info("A source failed; asking others", "source", a.src, "err", err)
		}
		pending = slices.Insert(pending, 0, a.d) // asked again first
	}
	return st, nil
}
