package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"idlepool/coord/api"
	"idlepool/job"
	"idlepool/pool"
)

// Batching of the hot path (API version 2, POST /v1/work). A donor's task
// loops each ask for one lease and send one result at a time; the client
// gathers the calls that arrive while a request is in flight and sends
// them together as one signed request, so that the coordinator checks one
// signature, parses one body and waits for one group commit for all of
// them. The first caller that finds no request in flight sends (it leads);
// the others wait for their part of the answer. To a coordinator of API
// version 1 every call goes alone to its version 1 endpoint.

// maxWorkResultBytes is the largest result that travels in a batch; a
// larger one goes alone to POST /v1/leases/{lease}/result.
const maxWorkResultBytes = 256 << 10

// workOp is one call waiting for a batch: a result (lease != ""), a
// request for want leases, or both (a result and the next lease of the
// task loop that computed it, SendResultAndLease).
type workOp struct {
	lease string
	sub   pool.Submission
	want  int
	done  chan workDone // buffered: the leader never blocks
	gone  bool          // the caller stopped waiting; guarded by workQueue.mu
}

// workDone is a workOp's part of the answer.
type workDone struct {
	err    error
	leases []pool.Lease
}

// workQueue holds the calls waiting for the next batch.
type workQueue struct {
	mu      sync.Mutex
	ops     []*workOp
	sending bool // a leader is sending
	version int  // the coordinator's API version; 0 until known
	// cborRefused has requests sent in JSON whatever the version says,
	// for a while after a CBOR one was refused whole (sendWork).
	cborRefused refusedFor
}

// refusedFor is the time until which a form of request the pool refused
// (a body in CBOR, a MAC) is not used again: the client goes back to the
// older form for a while, then tries the newer one again. Its zero value
// refuses nothing; it is safe for concurrent use.
type refusedFor struct {
	until atomic.Int64 // unix nanoseconds of the device's clock
}

// refuse notes a refusal at now, for d.
func (r *refusedFor) refuse(now time.Time, d time.Duration) { r.until.Store(now.Add(d).UnixNano()) }

// active reports whether the form is still refused at now.
func (r *refusedFor) active(now time.Time) bool { return now.UnixNano() < r.until.Load() }

// cborRefusedFor is how long the client sends POST /v1/work in JSON after
// a coordinator that says version 8 or later refused one in CBOR whole.
const cborRefusedFor = 10 * time.Minute

// sendWork sends req as POST /v1/work and decodes the answer into out: in
// CBOR to a coordinator of cborWorkAPIVersion or later, else in JSON.
// A CBOR request refused whole (400) is sent again at once in JSON, which
// is then used for cborRefusedFor: the client asks for the version once,
// and the pool may since have gone to an older coordinator (a node of an
// older version taking charge of a cluster being upgraded, or a
// coordinator rolled back), which reads every body as JSON. A request
// wrong in itself is refused in JSON too, and costs one request more. A
// CBOR answer that does not decode is an error (ErrUnavailable: the
// results are sent again) and turns to JSON for cborRefusedFor too.
func (c *Client) sendWork(ctx context.Context, req api.WorkRequest, out *api.WorkResponse) error {
	if !c.work.cborRefused.active(c.clock()) && c.apiVersion(ctx) >= cborWorkAPIVersion {
		err := c.postCBOR(ctx, "/v1/work", req, out)
		ae, refused := errors.AsType[*APIError](err)
		refused = refused && ae.Status == http.StatusBadRequest
		if !refused && !errors.Is(err, errCBORAnswer) {
			return err
		}
		c.work.cborRefused.refuse(c.clock(), cborRefusedFor)
		if !refused {
			return err
		}
		*out = api.WorkResponse{}
	}
	_, err := c.postJSON(ctx, "/v1/work", req, out)
	return err
}

// apiVersion returns the coordinator's API version, asking it once (GET
// /v1/pool); 1 when it cannot be asked now (asked again next time).
func (c *Client) apiVersion(ctx context.Context) int {
	c.work.mu.Lock()
	v := c.work.version
	c.work.mu.Unlock()
	if v != 0 {
		return v
	}
	info, err := c.Pool(ctx)
	if err != nil {
		return 1
	}
	v = max(info.Version, 1)
	c.learnRequestKey(info)
	c.work.mu.Lock()
	c.work.version = v
	c.work.mu.Unlock()
	return v
}

// batched reports whether calls go through POST /v1/work.
func (c *Client) batched(ctx context.Context) bool { return c.apiVersion(ctx) >= 2 }

// leaseWork asks for up to want leases in the next batch.
func (c *Client) leaseWork(ctx context.Context, want int) ([]pool.Lease, error) {
	d, err := c.enqueue(ctx, &workOp{want: min(want, api.MaxLeases)})
	return d.leases, err
}

// resultWork sends a result in the next batch, with a request for up to
// want more leases (0: none).
func (c *Client) resultWork(ctx context.Context, lease string, s pool.Submission, want int) ([]pool.Lease, error) {
	d, err := c.enqueue(ctx, &workOp{lease: lease, sub: s, want: min(want, api.MaxLeases)})
	return d.leases, err
}

// enqueue adds op to the next batch, sends batches while it leads, and
// returns op's part of the answer, or ctx's error once ctx ends (leases
// granted to a call that stopped waiting are handed back). An op with a
// result and a lease request may get leases with its result's error.
func (c *Client) enqueue(ctx context.Context, op *workOp) (workDone, error) {
	op.done = make(chan workDone, 1)
	q := &c.work
	q.mu.Lock()
	q.ops = append(q.ops, op)
	lead := !q.sending
	q.sending = q.sending || lead
	q.mu.Unlock()
	if lead {
		c.lead(ctx)
	}
	select {
	case d := <-op.done:
		return d, d.err
	case <-ctx.Done():
	}
	q.mu.Lock()
	op.gone = true
	var late workDone
	select {
	case late = <-op.done:
	default:
	}
	q.mu.Unlock()
	c.handBack(ctx, late.leases)
	return workDone{}, ctx.Err()
}

// lead sends batches until no call waits. The requests go on when ctx
// ends: they carry other callers' calls too.
func (c *Client) lead(ctx context.Context) {
	ctx = context.WithoutCancel(ctx)
	q := &c.work
	for {
		q.mu.Lock()
		ops := c.takeBatch()
		if len(ops) == 0 {
			q.sending = false
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		c.sendBatch(ctx, ops)
	}
}

// takeBatch removes the next batch from the queue, within the limits of
// POST /v1/work; q.mu is held.
func (c *Client) takeBatch() []*workOp {
	q := &c.work
	var (
		n, results, bytes, want int
	)
	for _, op := range q.ops {
		if op.lease != "" && (results == api.MaxWorkResults || bytes+len(op.sub.Result) > api.MaxWorkResultBytes) {
			break
		}
		if want+op.want > api.MaxLeases {
			break
		}
		if op.lease != "" {
			results++
			bytes += len(op.sub.Result)
		}
		want += op.want
		n++
	}
	ops := append([]*workOp(nil), q.ops[:n]...)
	q.ops = append(q.ops[:0], q.ops[n:]...)
	return ops
}

// transferQueue holds the fetch counts (pool.Transfer) of jobs' files
// not yet reported to the coordinator; they travel on the next POST
// /v1/work, whatever it carries, and are queued again when it fails.
type transferQueue struct {
	mu   sync.Mutex
	jobs map[job.ID]pool.Transfer
	tell func(id job.ID, t pool.Transfer) // OnTransfer
}

// NoteTransfer queues t, bytes of job id's files this device fetched, for
// the coordinator (api.TransferReport); a coordinator of API version 1
// or 2 is never told.
// The function set with OnTransfer is told too.
func (c *Client) NoteTransfer(id job.ID, t pool.Transfer) {
	if t.Zero() {
		return
	}
	q := &c.transfers
	q.mu.Lock()
	if q.jobs == nil {
		q.jobs = map[job.ID]pool.Transfer{}
	}
	q.jobs[id] = q.jobs[id].Add(t)
	tell := q.tell
	q.mu.Unlock()
	if tell != nil {
		tell(id, t)
	}
}

// OnTransfer sets f to be told each fetch count NoteTransfer gets (the
// agent keeps them in the device's store for its history), from the
// goroutine that fetched; nil stops it. f must not block for long.
func (c *Client) OnTransfer(f func(id job.ID, t pool.Transfer)) {
	c.transfers.mu.Lock()
	c.transfers.tell = f
	c.transfers.mu.Unlock()
}

// takeTransfers removes up to api.MaxWorkTransfers reports from the
// queue.
func (c *Client) takeTransfers() []api.TransferReport {
	q := &c.transfers
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []api.TransferReport
	for id, t := range q.jobs {
		if len(out) == api.MaxWorkTransfers {
			break
		}
		out = append(out, api.TransferReport{Job: api.HexDigest(id), Transfer: t})
		delete(q.jobs, id)
	}
	return out
}

// requeueTransfers puts reports that were not delivered back.
func (c *Client) requeueTransfers(ts []api.TransferReport) {
	for _, t := range ts {
		c.NoteTransfer(job.ID(t.Job), t.Transfer)
	}
}

// sendBatch sends ops as one POST /v1/work and hands each its part.
func (c *Client) sendBatch(ctx context.Context, ops []*workOp) {
	var req api.WorkRequest
	if c.apiVersion(ctx) >= 3 { // older coordinators refuse the field
		req.Transfers = c.takeTransfers()
	}
	for _, op := range ops {
		if op.lease != "" {
			req.Results = append(req.Results, api.WorkResult{Lease: op.lease, ResultSubmission: c.wireSubmission(ctx, op.sub)})
		}
		req.Lease += op.want
	}
	var out api.WorkResponse
	err := c.sendWork(ctx, req, &out)
	if err == nil && len(out.Results) != len(req.Results) {
		err = fmt.Errorf("%w: POST /v1/work: %d answers to %d results", ErrUnavailable, len(out.Results), len(req.Results))
	}
	if ae, ok := errors.AsType[*APIError](err); err != nil && !(ok && ae.Status == http.StatusBadRequest) {
		c.requeueTransfers(req.Transfers) // refused as malformed: dropped, or no request would pass
	}
	if ae, ok := errors.AsType[*APIError](err); ok && ae.Status == http.StatusNotFound {
		// The coordinator went back to API version 1: ask again next time.
		c.work.mu.Lock()
		c.work.version = 0
		c.work.mu.Unlock()
		err = fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	leases := make([]pool.Lease, 0, len(out.Leases))
	for _, g := range out.Leases {
		leases = append(leases, pool.Lease{ID: g.Lease, Job: job.ID(g.Job), Task: g.Task, Peer: c.key.ID(), Deadline: c.localTime(g.Deadline)})
	}
	var leaseErr error
	if out.LeaseError != nil {
		leaseErr = workError(http.MethodPost, "/v1/leases", *out.LeaseError)
	}
	var unclaimed []pool.Lease
	c.work.mu.Lock()
	results := 0
	for _, op := range ops {
		var d workDone
		switch {
		case err != nil:
			d.err = err
		case op.lease != "":
			if a := out.Results[results]; a.Status != http.StatusOK {
				d.err = workError(http.MethodPost, "/v1/leases/"+url.PathEscape(op.lease)+"/result", a)
			}
			results++
		case leaseErr != nil:
			d.err = leaseErr
		}
		if err == nil && leaseErr == nil && op.want > 0 {
			// A result's lease request that was refused gets none; its
			// task loop asks again as usual.
			k := min(op.want, len(leases))
			d.leases, leases = leases[:k:k], leases[k:]
		}
		if op.gone {
			unclaimed = append(unclaimed, d.leases...)
			continue
		}
		op.done <- d
	}
	c.work.mu.Unlock()
	c.handBack(ctx, append(unclaimed, leases...))
}

// handBack releases leases nobody waits for any more, so that their
// tasks are leased again at once instead of when they expire.
func (c *Client) handBack(ctx context.Context, leases []pool.Lease) {
	if len(leases) == 0 {
		return
	}
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	for _, l := range leases {
		_ = c.Release(bg, l.ID) // not released: it expires
	}
}

// workError is the *APIError the version 1 endpoint would have answered.
func workError(method, path string, a api.WorkAnswer) error {
	return &APIError{Method: method, Path: path, Status: a.Status, Code: a.Code, Message: a.Error}
}

// ResultsWait is Results as a long poll: when no outcome is ready, the
// coordinator waits up to wait for one before answering (API version 2;
// a coordinator of version 1 answers at once).
func (c *Client) ResultsWait(ctx context.Context, id job.ID, after int64, max int, wait time.Duration) ([]pool.Verified, error) {
	if wait <= 0 || !c.batched(ctx) {
		return c.Results(ctx, id, after, max)
	}
	var out struct {
		Results []pool.Verified `json:"results"`
	}
	q := url.Values{"after": {strconv.FormatInt(after, 10)}, "max": {strconv.Itoa(max)},
		"wait": {strconv.FormatInt(min(wait, pool.MaxResultsWait).Milliseconds(), 10)}}
	if c.refs(ctx) {
		q.Set("refs", "1") // this merger fetches results kept by devices
	}
	_, err := c.do(ctx, http.MethodGet, "/v1/jobs/"+id.String()+"/results", q, nil, true, &out)
	return out.Results, err
}
