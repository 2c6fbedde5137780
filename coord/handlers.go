package coord

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"idlepool/identity"
	"idlepool/job"
	"idlepool/pool"
	"idlepool/version"
	"idlepool/webpeer"
)

// Body limits (docs/api.md).
const (
	maxJSONBody = 1 << 20
	// maxRegistrationBody bounds a registration, which is read before
	// anyone is known: two keys, an endorsement, a name of 64 bytes and an
	// invite token of at most maxInviteToken, in JSON, take under 2 KiB.
	maxRegistrationBody = 4 << 10
	maxResultBody       = 96 << 20 // a 64 MiB result in base64 with room to spare
	maxBlobBody         = 1 << 30
)

// Paging limits of list endpoints.
const (
	defaultResults = 100
	maxResults     = 1000
	// maxResultsBytes bounds the result bytes of one results answer; at
	// least one outcome is always sent.
	maxResultsBytes = 64 << 20
	ledgerPage      = 1000
	maxReceipts     = 10000
)

// notInvited is the message an invite-only pool gives a stranger.
const notInvited = "this pool is invite-only: ask its operator for an invite token"

// routes builds the API's handler.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	handle := func(pattern string, h http.Handler) { mux.Handle(pattern, s.metrics.instrument(pattern, h)) }
	handle("GET /healthz", http.HandlerFunc(s.healthz))
	handle("GET /metrics", s.metrics.handler())
	handle("GET /v1/pool", s.plain(s.poolInfo))
	handle("POST /v1/peers", s.plain(s.register))
	handle("PUT /v1/blobs/{digest}", s.plain(s.putBlob))
	handle("GET /v1/blobs/{digest}", s.plain(s.getBlob))
	handle("GET /v1/blobs/{digest}/chunks", s.plain(s.blobChunks))
	handle("GET /v1/chunks/{digest}", s.plain(s.getChunk))
	handle("POST /v1/chunks/announce", s.signed(maxJSONBody, s.announceChunks))
	handle("POST /v1/chunks/holders", s.signed(maxJSONBody, s.chunkHolders))
	handle("POST /v1/jobs", s.signed(maxJSONBody, s.addJob))
	handle("GET /v1/jobs", s.signed(maxJSONBody, s.listJobs))
	handle("GET /v1/jobs/{id}", s.signed(maxJSONBody, s.jobStatus))
	handle("GET /v1/jobs/{id}/canonical", s.signed(maxJSONBody, s.jobCanonical))
	handle("GET /v1/jobs/{id}/results", s.signed(maxJSONBody, s.results))
	handle("POST /v1/jobs/{id}/ack", s.signed(maxJSONBody, s.ack))
	handle("POST /v1/jobs/{id}/results/{seq}/lost", s.signed(maxJSONBody, s.resultLost))
	handle("POST /v1/results/held", s.signed(maxJSONBody, s.heldResults))
	handle("POST /v1/jobs/{id}/cancel", s.signed(maxJSONBody, s.cancel))
	handle("POST /v1/leases", s.signed(maxJSONBody, s.lease))
	handle("POST /v1/leases/{lease}/heartbeat", s.signed(maxJSONBody, s.heartbeat))
	handle("POST /v1/leases/{lease}/result", s.signed(maxResultBody, s.submit))
	handle("POST /v1/leases/{lease}/release", s.signed(maxJSONBody, s.release))
	handle("POST /v1/work", s.signed(maxWorkBody, s.work))
	handle("POST /v1/offers", s.signed(maxJSONBody, s.putOffer))
	handle("GET /v1/offers", s.signed(maxJSONBody, s.listOffers))
	handle("GET /v1/listings", s.signed(maxJSONBody, s.listListings))
	handle("GET /v1/ledger", s.plain(s.ledger))
	handle("GET /v1/receipts", s.signed(maxJSONBody, s.receipts))
	handle("POST /v1/signals", s.signed(maxSignalBody, s.postSignal))
	handle("GET /v1/signals", s.signed(maxJSONBody, s.getSignals))
	handle("GET /v1/ice", s.signed(maxJSONBody, s.getICE))
	handle("GET /v1/dashboard", s.plain(s.dashboardData))
	handle("GET /{$}", s.plain(s.servePage))
	handle("GET /web/{file}", s.plain(s.servePage))
	// The browser peer: a page and its assets, under a strict
	// Content-Security-Policy (webpeer.CSP).
	peer := webpeer.Handler("/join", webpeer.Build{Version: version.Version, API: APIVersion}, s.cfg.BrowserCore)
	handle("GET /join", peer)
	handle("GET /join/{asset}", peer)
	if s.cfg.Shards > 1 {
		handle("GET /v1/peers/{id}/key", s.signed(maxJSONBody, s.peerKey))
	}
	handle("/", s.plain(func(w http.ResponseWriter, r *http.Request) error {
		return notFound("not_found", "no such endpoint: %s %s (see docs/api.md)", r.Method, r.URL.Path)
	}))
	return s.limitBodies(mux)
}

// limitBodies bounds the time every request body may take (slowBody)
// and the time a client may take to read an answer (slowWriter).
func (s *Server) limitBodies(h http.Handler) http.Handler { return limitBodies(&s.cfg, h) }

// limitBodies is Server.limitBodies with the limits of cfg (validated),
// for a coordinator and for a cluster node's public port alike.
func limitBodies(cfg *Config, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
			b := &slowBody{ReadCloser: r.Body, rc: rc, conn: connOf(r.Context()),
				pace: pace{start: time.Now(), grace: cfg.BodyTimeout, rate: cfg.MinBodyRate}}
			b.extend(0)
			// A copy: the server looks at its own request's body after
			// the handler, to decide whether to drain it or close.
			r = r.WithContext(r.Context())
			r.Body = b
		}
		h.ServeHTTP(&slowWriter{ResponseWriter: w, rc: rc, pace: pace{grace: cfg.BodyTimeout, rate: cfg.MinBodyRate}}, r)
	})
}

// plain adapts a handler that returns an error.
func (s *Server) plain(h func(http.ResponseWriter, *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			s.fail(w, r, err)
		}
	})
}

// call is an authenticated request: the peer that signed it and its body.
type call struct {
	peer pool.Peer
	body []byte
}

// signed authenticates a request before h runs: a well-formed
// Authorization header with a fresh timestamp (401), a registered peer
// (401), a body within limit (413), and a signature by that peer's key over
// the request (401). Only then does h see the request, so a refused request
// changes nothing.
func (s *Server) signed(limit int64, h func(http.ResponseWriter, *http.Request, call) error) http.Handler {
	return s.plain(func(w http.ResponseWriter, r *http.Request) error {
		if err := s.checkAgentVersion(r); err != nil {
			return err
		}
		// A request a shard router forwarded (forward.go) carries its MAC
		// instead of the device's signature.
		var a authorization
		var f forwarded
		var err error
		fwd := isForwarded(r)
		if fwd {
			f, err = s.authenticateForwarded(r)
			a.Peer = f.Peer
		} else {
			a, err = s.authenticate(r)
		}
		if err != nil {
			return err
		}
		p, ok := s.sched.Peer(a.Peer)
		if !ok {
			return unauthorized(fmt.Errorf("unknown peer %s: register first (POST /v1/peers)", a.Peer))
		}
		b, err := s.receiveBody(w, r, limit)
		if err != nil {
			return err
		}
		defer b.release()
		if fwd {
			err = f.verify(&s.fwdKey, s.cfg.Shard, r.Method, r.URL.RequestURI(), b.sum)
		} else {
			err = a.verify(s.reqKeys, p.Key, r.Method, r.URL.RequestURI(), b.sum)
		}
		if err != nil {
			return err
		}
		// An authenticated body may wait a while for memory to load into.
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.BodyTimeout)
		body, err := b.load(ctx)
		cancel()
		if err != nil {
			return err
		}
		s.dash.noteSeen(p.ID, s.cfg.Now(), r)
		return h(w, r, call{peer: p, body: body})
	})
}

// authenticate parses the Authorization header and checks its timestamp.
func (s *Server) authenticate(r *http.Request) (authorization, error) {
	a, err := parseAuthorization(r.Header.Get("Authorization"))
	if err != nil {
		return a, err
	}
	return a, a.checkTime(s.cfg.Now())
}

// healthz is GET /healthz: 200 "ok", or 503 and why while the pool's
// database takes no writes (disk full, locked by another process).
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if since, err := s.sched.StoreFault(); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "store unavailable since %s: %s\n", since.UTC().Format(time.RFC3339), s.storeWords(err))
		return
	}
	io.WriteString(w, "ok\n")
}

func (s *Server) poolInfo(w http.ResponseWriter, _ *http.Request) error {
	v := s.versions()
	info := PoolInfo{Pool: s.cfg.Pool, Key: s.key.Public(), InviteOnly: s.cfg.InviteOnly(), Version: APIVersion,
		MinAgent: v.MinAgent, MinAPI: v.MinAPI, LatestAgent: v.LatestAgent}
	if c := s.cfg.Cluster; c != nil && c.Nodes != nil {
		info.Nodes = c.Nodes()
	}
	if s.cfg.Shards > 1 {
		info.Shards = s.cfg.Shards
	}
	writeJSON(w, http.StatusOK, info)
	return nil
}

// register is POST /v1/peers. The request is signed by the key being
// registered; the owner key's endorsement of it must verify; an
// invite-only pool needs its token or an allowed owner.
func (s *Server) register(w http.ResponseWriter, r *http.Request) error {
	if err := s.checkAgentVersion(r); err != nil {
		return err
	}
	a, err := s.authenticate(r)
	if err != nil {
		return err
	}
	b, err := s.receiveBody(w, r, maxRegistrationBody)
	if err != nil {
		return err
	}
	defer b.release()
	body, err := b.load(r.Context())
	if err != nil {
		return err
	}
	reg, err := decodeRegistration(body)
	if err != nil {
		return badRequest("%v", err)
	}
	id, owner := identity.IDOf(reg.Key), identity.IDOf(reg.OwnerKey)
	if a.Peer != id {
		return unauthorized(fmt.Errorf("the request is signed as peer %s but registers the key of peer %s", a.Peer, id))
	}
	if err := a.verify(s.reqKeys, reg.Key, r.Method, r.URL.RequestURI(), b.sum); err != nil {
		return err
	}
	if err := identity.Verify(reg.OwnerKey, pool.EndorsementMessage(reg.Key), reg.Endorsement); err != nil {
		return &apiError{http.StatusUnauthorized, "bad_endorsement",
			"the endorsement does not verify: it must be the owner key's signature over the device key (pool.EndorsementMessage)", nil}
	}
	if !s.invited(reg.Invite, owner) {
		s.log.Info("Registration refused", "peer", id, "owner", owner, "reason", "not invited")
		return &apiError{http.StatusForbidden, "not_invited", notInvited, nil}
	}
	if err := s.acceptProfile(r.Context(), owner, reg.Profile); err != nil {
		return err
	}
	_, known := s.sched.Peer(id)
	err = s.sched.RegisterPeer(r.Context(), pool.Peer{ID: id, Owner: owner, Key: reg.Key, OwnerKey: reg.OwnerKey,
		Endorsement: reg.Endorsement, Name: reg.Name, Joined: s.cfg.Now().UTC()})
	if err != nil {
		return fmt.Errorf("register peer %s: %w", id, err)
	}
	s.dash.noteRegistration(id, r)
	s.dash.noteSeen(id, s.cfg.Now(), r)
	status := http.StatusOK
	if !known {
		status = http.StatusCreated
		s.metrics.registered.Inc() // the Scheduler logs "Peer registered"
	}
	writeJSON(w, status, Registered{Peer: id, Owner: owner})
	return nil
}

// peerKey is GET /v1/peers/{id}/key on a shard of a divided pool: the
// device's public key (PeerKey), answered only to a ShardRouter that
// forwarded the request acting for that device (ForwardedHeader), which
// checks the device's signatures on requests it splits.
func (s *Server) peerKey(w http.ResponseWriter, r *http.Request, c call) error {
	if !isForwarded(r) || r.PathValue("id") != c.peer.ID {
		return notFound("not_found", "no such endpoint: %s %s (see docs/api.md)", r.Method, r.URL.Path)
	}
	writeJSON(w, http.StatusOK, PeerKey{Peer: c.peer.ID, Key: c.peer.Key})
	return nil
}

// invited reports whether a registration with invite token tok by owner
// may join: always in an open pool.
func (s *Server) invited(tok, owner string) bool {
	if !s.cfg.InviteOnly() {
		return true
	}
	if s.cfg.InviteToken != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(s.cfg.InviteToken)) == 1 {
		return true
	}
	return slices.Contains(s.cfg.AllowOwners, owner)
}

// pathDigest parses the path value name as a digest.
func pathDigest(r *http.Request, name string) (job.Digest, error) {
	d, err := job.ParseDigest(r.PathValue(name))
	if err != nil {
		return d, badRequest("%s %q in the path is not 64 hex digits", name, r.PathValue(name))
	}
	return d, nil
}

// putBlob is PUT /v1/blobs/{digest}. The body's SHA-256 must be the
// digest, so the signature is checked against the path's digest before
// the body is read: a file already stored is answered 200 without reading
// it (a client that sent "Expect: 100-continue" never sends it).
func (s *Server) putBlob(w http.ResponseWriter, r *http.Request) error {
	d, err := pathDigest(r, "digest")
	if err != nil {
		return err
	}
	a, err := s.authenticate(r)
	if err != nil {
		return err
	}
	p, ok := s.sched.Peer(a.Peer)
	if !ok {
		return unauthorized(fmt.Errorf("unknown peer %s: register first (POST /v1/peers)", a.Peer))
	}
	if err := a.verify(s.reqKeys, p.Key, r.Method, r.URL.RequestURI(), d); err != nil {
		return unauthorized(fmt.Errorf("%w (for a blob, sign the body's SHA-256, which is the digest in the path)", err))
	}
	if s.blobs.has(d) {
		writeJSON(w, http.StatusOK, map[string]HexDigest{"digest": HexDigest(d)})
		return nil
	}
	if r.ContentLength > maxBlobBody {
		return &http.MaxBytesError{Limit: maxBlobBody}
	}
	created, err := s.blobs.put(d, http.MaxBytesReader(w, r.Body, maxBlobBody))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.Is(err, errDigestMismatch):
		return &apiError{http.StatusBadRequest, "digest_mismatch", err.Error(), nil}
	case errors.As(err, &tooLarge):
		return err
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, io.ErrUnexpectedEOF):
		return bodyErr(err)
	case err != nil:
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		s.log.Debug("Blob stored", "digest", d.String(), "peer", p.ID)
	}
	writeJSON(w, status, map[string]HexDigest{"digest": HexDigest(d)})
	return nil
}

// getBlob is GET (and HEAD) /v1/blobs/{digest}: the file's bytes, with
// range requests; anyone may read (files are named by content).
func (s *Server) getBlob(w http.ResponseWriter, r *http.Request) error {
	d, err := pathDigest(r, "digest")
	if err != nil {
		return err
	}
	if s.sched.SecretBlob(d) {
		// A job's known answers: served to nobody, and answered as if
		// absent, so a peer cannot learn which tasks are checks.
		return notFound("unknown_blob", "no file with digest %s: upload it first", d)
	}
	return s.serveBlob(w, r, d, s.blobKind(d))
}

// serveBlob serves blob d, counting the bytes sent as kind (a served*
// label of idlepool_coord_bytes_served_total).
func (s *Server) serveBlob(w http.ResponseWriter, r *http.Request, d job.Digest, kind string) error {
	f, err := s.blobs.open(d)
	if errors.Is(err, fs.ErrNotExist) {
		return notFound("unknown_blob", "no file with digest %s: upload it first", d)
	}
	if err != nil {
		return fmt.Errorf("open blob: %w", err)
	}
	defer f.Close()
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("ETag", `"`+d.String()+`"`)
	h.Set("Cache-Control", "public, max-age=31536000, immutable")
	cw := &countingWriter{ResponseWriter: w}
	http.ServeContent(cw, r, "", time.Time{}, f)
	s.metrics.served.WithLabelValues(kind).Add(float64(cw.n))
	return nil
}

// addJob is POST /v1/jobs. The canonical encoding is stored as a blob
// under its own digest, the job ID.
func (s *Server) addJob(w http.ResponseWriter, r *http.Request, c call) error {
	req, err := decodeJobRequest(c.body)
	if err != nil {
		return badRequest("%v", err)
	}
	id := job.ID(sha256.Sum256(req.Canonical))
	if st, err := s.sched.Status(id); err == nil {
		if st.Cancelled {
			return &apiError{http.StatusGone, "job_cancelled",
				fmt.Sprintf("job %s was cancelled in this pool by its owner and is not queued again; a changed manifest is a new job", id), nil}
		}
		if req.FetchesKept {
			_ = s.sched.MergerFetchesKept(c.peer.ID, id, true) // only its merger's word counts
		}
		s.noteQueued(w)
		writeJSON(w, http.StatusOK, JobCreated{Job: HexDigest(id), Tasks: st.Tasks})
		return nil
	}
	var named []job.Digest
	j, planErr := job.FromCanonical(req.Canonical, func(d job.Digest) string {
		named = append(named, d)
		return s.blobs.path(d)
	})
	if req.KnownAnswers != nil {
		named = append(named, job.Digest(*req.KnownAnswers)) // kept by the pool, never served
	}
	var missing []HexDigest
	fetched := false
	for _, d := range named {
		if slices.Contains(missing, HexDigest(d)) || s.blobs.has(d) {
			continue
		}
		// With a mirror, the file may be on another node or shard.
		ok, err := s.blobs.hasOrFetches(r.Context(), d)
		if !ok {
			if err != nil {
				s.log.Debug("File not had from the mirror", "digest", d.String(), "err", err)
			}
			missing = append(missing, HexDigest(d))
		}
		fetched = fetched || ok
	}
	if len(missing) > 0 {
		return &apiError{http.StatusConflict, "missing_files",
			fmt.Sprintf("the job names %d file(s) the pool does not have: upload them (PUT /v1/blobs/{digest}) and submit again", len(missing)), missing}
	}
	if fetched { // planned again with the files now here
		j, planErr = job.FromCanonical(req.Canonical, s.blobs.path)
	}
	if planErr != nil {
		return &apiError{http.StatusBadRequest, "bad_job", planErr.Error(), nil}
	}
	if req.KnownAnswers != nil {
		d := job.Digest(*req.KnownAnswers)
		if err := j.LoadKnownAnswers(s.blobs.path(d), d); err != nil {
			return &apiError{http.StatusBadRequest, "bad_known_answers", err.Error(), nil}
		}
	}
	if _, err := s.blobs.putBytes(req.Canonical); err != nil {
		return err
	}
	created, err := s.sched.AddJob(r.Context(), j, c.peer.ID)
	if err != nil {
		return fmt.Errorf("add job %s: %w", id, err)
	}
	if req.FetchesKept {
		_ = s.sched.MergerFetchesKept(c.peer.ID, id, true) // only its merger's word counts
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated // the Scheduler logs "Job added"
	}
	s.noteQueued(w) // with its tasks: a router places the next new job by it
	writeJSON(w, status, JobCreated{Job: HexDigest(id), Tasks: j.NumTasks()})
	return nil
}

func (s *Server) listJobs(w http.ResponseWriter, r *http.Request, c call) error {
	if err := noQuery(r); err != nil {
		return err
	}
	jobs := s.sched.Jobs()
	out := make([]JobInfo, 0, len(jobs))
	for _, j := range jobs {
		out = append(out, s.ownedJobInfo(j))
	}
	s.noteAdded(w, len(jobs), func(i int) job.ID { return jobs[i].Job })
	writeJSON(w, http.StatusOK, out)
	return nil
}

// knownJob parses the {id} path value and checks the job is in the pool.
func (s *Server) knownJob(r *http.Request) (pool.JobStatus, error) {
	id, err := pathDigest(r, "id")
	if err != nil {
		return pool.JobStatus{}, err
	}
	st, err := s.sched.Status(id)
	if err != nil {
		if errors.Is(err, pool.ErrUnknownJob) {
			return st, notFound("unknown_job", "no job %s in this pool", id)
		}
		return st, err
	}
	return st, nil
}

func (s *Server) jobStatus(w http.ResponseWriter, r *http.Request, c call) error {
	st, err := s.knownJob(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.ownedJobInfo(st))
	return nil
}

func (s *Server) jobCanonical(w http.ResponseWriter, r *http.Request, c call) error {
	st, err := s.knownJob(r)
	if err != nil {
		return err
	}
	return s.serveBlob(w, r, st.Job, servedJob)
}

func (s *Server) results(w http.ResponseWriter, r *http.Request, c call) error {
	st, err := s.knownJob(r)
	if err != nil {
		return err
	}
	after, max, wait, refs, err := resultsQuery(r)
	if err != nil {
		return err
	}
	// The merger says with every request whether it fetches the results
	// the devices keep; only its word counts.
	_ = s.sched.MergerFetchesKept(c.peer.ID, st.Job, refs)
	res, err := s.sched.WaitResults(r.Context(), c.peer.ID, st.Job, after, int(max), wait)
	if err != nil {
		return fmt.Errorf("results of job %s: %w", st.Job, err)
	}
	for i, v := range res {
		if refs || v.Ref == nil {
			continue
		}
		if i == 0 { // a merger from before references would fold nothing
			return &apiError{http.StatusConflict, "result_kept", fmt.Sprintf(
				"the result of outcome %d of job %s is kept by the devices that computed it, and this client does not fetch such results (ask with refs=1): upgrade idlepool", v.Seq, st.Job), nil}
		}
		res = res[:i]
		break
	}
	size := 0
	for i, v := range res {
		if size += len(v.Result); size > maxResultsBytes && i > 0 {
			res = res[:i]
			break
		}
	}
	if res == nil {
		res = []pool.Verified{}
	}
	for _, v := range res {
		s.metrics.served.WithLabelValues(servedResult).Add(float64(len(v.Result)))
	}
	writeJSON(w, http.StatusOK, Results{Results: res})
	return nil
}

func (s *Server) ack(w http.ResponseWriter, r *http.Request, c call) error {
	st, err := s.knownJob(r)
	if err != nil {
		return err
	}
	a, err := decodeAck(c.body)
	if err != nil {
		return badRequest("%v", err)
	}
	if err := s.sched.Ack(r.Context(), c.peer.ID, st.Job, a.Upto); err != nil {
		return fmt.Errorf("ack job %s: %w", st.Job, err)
	}
	writeJSON(w, http.StatusOK, struct{}{})
	return nil
}

// cancel is POST /v1/jobs/{id}/cancel (empty body): a device of the job's
// owner withdraws it (pool.Scheduler.Cancel); the answer is the job's
// status. Cancelling again is 200 too; another owner's device gets 403.
func (s *Server) cancel(w http.ResponseWriter, r *http.Request, c call) error {
	st, err := s.knownJob(r)
	if err != nil {
		return err
	}
	if err := decodeEmpty(c.body); err != nil {
		return badRequest("%v", err)
	}
	if err := s.sched.Cancel(r.Context(), c.peer.ID, st.Job); err != nil {
		if errors.Is(err, pool.ErrNotOwner) {
			return &apiError{http.StatusForbidden, "not_owner",
				fmt.Sprintf("only a device of the job's owner %s may cancel job %s; device %s belongs to owner %s", st.Owner, st.Job, c.peer.ID, c.peer.Owner), nil}
		}
		return fmt.Errorf("cancel job %s: %w", st.Job, err)
	}
	if st, err = s.sched.Status(st.Job); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.ownedJobInfo(st))
	return nil
}

func (s *Server) lease(w http.ResponseWriter, r *http.Request, c call) error {
	s.noteQueued(w)
	req, err := decodeLeaseRequest(c.body)
	if err != nil {
		return badRequest("%v", err)
	}
	if _, ok := s.offers.get(c.peer.ID, s.cfg.Now()); !ok {
		return noOffer(c.peer.ID)
	}
	leases, err := s.sched.Lease(r.Context(), c.peer.ID, req.Max)
	if err != nil {
		return fmt.Errorf("lease for peer %s: %w", c.peer.ID, err)
	}
	out := LeaseResponse{Leases: make([]LeaseGrant, 0, len(leases))}
	for _, l := range leases {
		out.Leases = append(out.Leases, LeaseGrant{Lease: l.ID, Job: HexDigest(l.Job), Task: l.Task, Deadline: l.Deadline})
	}
	s.metrics.leases.Add(float64(len(leases)))
	s.noteQueued(w)
	writeJSON(w, http.StatusOK, out)
	return nil
}

// leaseID checks the {lease} path value: 32 lowercase hex digits.
func leaseID(r *http.Request) (string, error) {
	id := r.PathValue("lease")
	ok := len(id) == 32
	for i := 0; ok && i < len(id); i++ {
		ok = id[i] >= '0' && id[i] <= '9' || id[i] >= 'a' && id[i] <= 'f'
	}
	if !ok {
		return "", badRequest("lease %q in the path is not 32 lowercase hex digits", id)
	}
	return id, nil
}

// leaseErr counts an expired lease and wraps err with context.
func (s *Server) leaseErr(op, lease string, err error) error {
	if errors.Is(err, pool.ErrLeaseExpired) {
		s.metrics.expired.Inc()
	}
	return fmt.Errorf("%s lease %s: %w", op, lease, err)
}

func (s *Server) heartbeat(w http.ResponseWriter, r *http.Request, c call) error {
	id, err := leaseID(r)
	if err != nil {
		return err
	}
	if err := decodeEmpty(c.body); err != nil {
		return badRequest("%v", err)
	}
	deadline, err := s.sched.Heartbeat(r.Context(), c.peer.ID, id)
	if err != nil {
		return s.leaseErr("heartbeat", id, err)
	}
	writeJSON(w, http.StatusOK, Deadline{Deadline: deadline})
	return nil
}

func (s *Server) submit(w http.ResponseWriter, r *http.Request, c call) error {
	id, err := leaseID(r)
	if err != nil {
		return err
	}
	sub, err := decodeSubmission(c.body)
	if err != nil {
		s.metrics.submissions.WithLabelValues("refused").Inc()
		return badRequest("%v", err)
	}
	if err := s.sched.Submit(r.Context(), c.peer.ID, id, sub); err != nil {
		s.metrics.submissions.WithLabelValues("refused").Inc()
		return s.leaseErr("submit for", id, err)
	}
	s.metrics.took(sub)
	writeJSON(w, http.StatusOK, struct{}{})
	return nil
}

// resultLost is POST /v1/jobs/{id}/results/{seq}/lost (empty body): the
// job's merger could not fetch outcome seq's result from any of its
// holders, and its task is computed again (pool.Scheduler.ResultLost).
func (s *Server) resultLost(w http.ResponseWriter, r *http.Request, c call) error {
	st, err := s.knownJob(r)
	if err != nil {
		return err
	}
	seq, err := strconv.ParseInt(r.PathValue("seq"), 10, 64)
	if err != nil || seq < 1 {
		return badRequest("outcome %q is not a whole number from 1", r.PathValue("seq"))
	}
	if err := decodeEmpty(c.body); err != nil {
		return badRequest("%v", err)
	}
	if err := s.sched.ResultLost(r.Context(), c.peer.ID, st.Job, seq); err != nil {
		return fmt.Errorf("result %d of job %s lost: %w", seq, st.Job, err)
	}
	writeJSON(w, http.StatusOK, struct{}{})
	return nil
}

// maxHeldElements bounds the elements of the arrays of one held result
// of POST /v1/results/held: twice its job's and digest's 64 numbers.
const maxHeldElements = 2 * 64

// heldResults is POST /v1/results/held: which of the results the calling
// device keeps for mergers it must go on keeping
// (pool.Scheduler.KeepResults).
func (s *Server) heldResults(w http.ResponseWriter, r *http.Request, c call) error {
	// Its results are read one by one: each carries its job and digest
	// as arrays of 32 numbers, 65 elements a result, more than
	// decodeStrict lets a whole body hold.
	var req struct {
		Results json.RawMessage `json:"results"`
	}
	if err := decodeObject(c.body, &req); err != nil {
		return badRequest("%v", err)
	}
	held, err := decodeJSONList[pool.HeldResult](req.Results, "results", "results", pool.MaxHeldQuery, maxHeldElements)
	if err != nil {
		return badRequest("%v", err)
	}
	keep, err := s.sched.KeepResults(c.peer.ID, held)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, KeepResults{Keep: keep})
	return nil
}

func (s *Server) release(w http.ResponseWriter, r *http.Request, c call) error {
	id, err := leaseID(r)
	if err != nil {
		return err
	}
	if err := decodeEmpty(c.body); err != nil {
		return badRequest("%v", err)
	}
	if err := s.sched.Release(r.Context(), c.peer.ID, id); err != nil {
		return s.leaseErr("release", id, err)
	}
	writeJSON(w, http.StatusOK, struct{}{})
	return nil
}

// ledger is GET /v1/ledger: JSON Lines, one entry per line, from seq
// after+1; max 0 (or absent) streams to the end. An error after the first
// line aborts the connection, so a client never mistakes a cut-off
// download for a complete one.
func (s *Server) ledger(w http.ResponseWriter, r *http.Request) error {
	after, max, err := s.ledgerQuery(r, 0, 0, 1<<62)
	if err != nil {
		return err
	}
	next, left := uint64(after), max
	var bw *bufio.Writer
	for {
		n := ledgerPage
		if left > 0 && left < int64(n) {
			n = int(left)
		}
		page, err := s.sched.Ledger(next, n)
		if err != nil {
			if bw == nil {
				return fmt.Errorf("read ledger: %w", err)
			}
			s.log.Error("Ledger download cut off", "after", next, "err", err)
			panic(http.ErrAbortHandler)
		}
		if bw == nil {
			w.Header().Set("Content-Type", "application/jsonl")
			w.Header().Set("X-Content-Type-Options", "nosniff")
			// A client older than batchedLedgerAPI gets entries signed
			// alone: a cache must tell the two answers apart.
			w.Header().Set("Vary", APIHeader)
			bw = bufio.NewWriterSize(w, 64<<10)
		}
		if legacyLedgerClient(r, false) {
			page = s.legacyEntries(page)
		}
		for _, e := range page {
			b, err := e.MarshalJSON()
			if err != nil {
				panic(http.ErrAbortHandler)
			}
			bw.Write(append(b, '\n'))
			next = e.Seq
		}
		if left > 0 {
			left -= int64(len(page))
		}
		if len(page) < n || max > 0 && left <= 0 || r.Context().Err() != nil {
			break
		}
	}
	return bw.Flush()
}

func (s *Server) receipts(w http.ResponseWriter, r *http.Request, c call) error {
	after, max, err := s.ledgerQuery(r, ledgerPage, 1, maxReceipts)
	if err != nil {
		return err
	}
	entries, err := s.sched.PeerLedger(c.peer.ID, uint64(after), int(max))
	if err != nil {
		return fmt.Errorf("receipts of peer %s: %w", c.peer.ID, err)
	}
	if entries == nil {
		entries = []pool.Entry{}
	}
	if legacyLedgerClient(r, true) {
		entries = s.legacyEntries(entries)
	}
	// JSON or CBOR as Accept says, entries signed per batch or alone as
	// the client's API version says (legacyLedgerClient).
	w.Header().Set("Vary", "Accept, "+APIHeader)
	if acceptsCBOR(r) {
		writeReceiptsCBOR(w, entries)
		return nil
	}
	writeReceipts(w, entries)
	return nil
}

// acceptsCBOR reports whether r's Accept header asks for
// pool.EntriesContentType (application/cbor): named with a quality above
// 0 and not below application/json's (RFC 9110, section 12.5.1). Such a
// request is answered in the compact form (writeReceiptsCBOR), any other
// in JSON; wildcards (*/*, application/*) count for JSON, the default.
// A quality that is not a qvalue (0 to 1, at most three decimals:
// section 12.4.2) makes its media range count for nothing.
func acceptsCBOR(r *http.Request) bool {
	qCBOR, qJSON := -1, -1 // in thousandths; -1 when not named
	for _, h := range r.Header.Values("Accept") {
		for _, part := range strings.Split(h, ",") {
			mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err != nil {
				continue
			}
			q := 1000
			if v, ok := params["q"]; ok {
				if q, ok = qvalue(v); !ok {
					continue
				}
			}
			switch mt {
			case pool.EntriesContentType:
				qCBOR = max(qCBOR, q)
			case "application/json":
				qJSON = max(qJSON, q)
			}
		}
	}
	return qCBOR > 0 && qCBOR >= qJSON
}

// qvalue reads an HTTP quality value (RFC 9110, section 12.4.2: "0" or
// "1" followed by up to three decimals, 1 at most) in thousandths, and
// reports whether s is one.
func qvalue(s string) (int, bool) {
	if len(s) == 0 || len(s) > 5 || (s[0] != '0' && s[0] != '1') {
		return 0, false
	}
	q := int(s[0]-'0') * 1000
	if len(s) > 1 {
		if s[1] != '.' {
			return 0, false
		}
		scale := 100
		for _, c := range s[2:] {
			if c < '0' || c > '9' {
				return 0, false
			}
			q += int(c-'0') * scale
			scale /= 10
		}
	}
	return q, q <= 1000
}

// writeReceiptsCBOR writes a 200 answer of es in their compact form
// (pool.AppendEntriesCBOR: each batch's signature once), with Content-Type
// application/cbor, into a buffer sized for it up front (288 bytes of
// keys and fixed-size values an entry, its strings and its path) and
// used again by later answers (receiptBuffers).
func writeReceiptsCBOR(w http.ResponseWriter, es []pool.Entry) {
	n := 64
	for i := range es {
		e := &es[i]
		n += 288 + len(e.Pool) + len(e.Peer) + len(e.Owner) + len(e.Lease) + len(e.Reason)
		if e.Tree != nil {
			n += len(e.Tree.Path) * len(job.Digest{})
		}
	}
	buf := receiptBuffers.Get().(*[]byte)
	body := pool.AppendEntriesCBOR(slices.Grow((*buf)[:0], n), es)
	writeBody(w, http.StatusOK, pool.EntriesContentType, body) // Write copies it or sends it before returning
	if cap(body) <= maxReceiptBuffer {
		*buf = body[:0]
		receiptBuffers.Put(buf)
	}
}

// receiptBuffers holds the buffers of writeReceiptsCBOR's answers: each
// device asks for its receipts every second or so, and a busy node's
// answers were 6% of the bytes it allocated.
var receiptBuffers = sync.Pool{New: func() any { return new([]byte) }}

// maxReceiptBuffer is the largest buffer receiptBuffers keeps (1 MiB):
// one that held a device's long backlog is left to the collector.
const maxReceiptBuffer = 1 << 20

// writeReceipts writes a 200 answer of Receipts{Entries: es}: the bytes
// writeJSON writes, each entry appended by pool.Entry.AppendJSON instead
// of through encoding/json, which re-scans what a Marshaler returns.
func writeReceipts(w http.ResponseWriter, es []pool.Entry) {
	b := make([]byte, 0, 64+1024*len(es))
	b = append(b, `{"entries":[`...)
	for i, e := range es {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = e.AppendJSON(b); err != nil {
			writeJSON(w, http.StatusOK, Receipts{Entries: es}) // its error answer
			return
		}
	}
	writeBody(w, http.StatusOK, "application/json", append(b, "]}\n"...))
}

// query is a request's query, checked by parseQuery.
type query url.Values

// parseQuery parses the query, refusing names other than allowed and
// names given twice.
func parseQuery(r *http.Request, allowed ...string) (query, error) {
	v, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, badRequest("malformed query: %v", err)
	}
	for k, vals := range v {
		if !slices.Contains(allowed, k) {
			return nil, badRequest("unknown query parameter %q", k)
		}
		if len(vals) > 1 {
			return nil, badRequest("query parameter %q given %d times", k, len(vals))
		}
	}
	return query(v), nil
}

// noQuery refuses any query.
func noQuery(r *http.Request) error {
	_, err := parseQuery(r)
	return err
}

// int returns the decimal integer parameter name, def when absent; a value
// outside [lo, hi] or not a number is a 400.
func (q query) int(name string, def, lo, hi int64) (int64, error) {
	s := url.Values(q).Get(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, badRequest("query parameter %s=%q: want an integer from %d to %d", name, s, lo, hi)
	}
	return n, nil
}

// ledgerQuery reads the query of a ledger's pages (GET /v1/ledger, GET
// /v1/receipts): after (a sequence number, default 0), max (default def,
// within lo..hi) and "shard": the shard whose ledger to read
// in a divided pool (ShardRouter routes by it). A coordinator keeps its
// own shard's ledger only: another shard is an error naming both.
func (s *Server) ledgerQuery(r *http.Request, def, lo, hi int64) (after, max int64, err error) {
	q, err := parseQuery(r, "after", "max", "shard")
	if err != nil {
		return 0, 0, err
	}
	if after, err = q.int("after", 0, 0, 1<<62); err != nil {
		return 0, 0, err
	}
	if max, err = q.int("max", def, lo, hi); err != nil {
		return 0, 0, err
	}
	shard, err := q.int("shard", int64(s.cfg.Shard), 0, pool.MaxShards-1)
	if err != nil {
		return 0, 0, err
	}
	if int(shard) != s.cfg.Shard {
		return 0, 0, badRequest("shard %d: this coordinator keeps the ledger of shard %d of %d", shard, s.cfg.Shard, s.cfg.Shards)
	}
	return after, max, nil
}
