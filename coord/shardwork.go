package coord

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"mime"
	"net/http"
	"slices"
	"sync"
	"time"

	"idlepool/cluster"
	"idlepool/coord/api"
	"idlepool/job"
	"idlepool/pool"
)

// workPart is the part of a POST /v1/work that goes to one shard: its
// results (idx: their places in the device's request), its transfer
// reports and its request for leases.
type workPart struct {
	shard int
	req   WorkRequest
	idx   []int
	ans   shardAnswer
}

// work is POST /v1/work (see ShardRouter): unchanged to one shard when
// every part of it goes there, else checked, split and merged.
func (rt *ShardRouter) work(w http.ResponseWriter, r *http.Request) {
	body, release, ok := rt.readBody(w, r)
	if !ok {
		return
	}
	defer release()
	req, _, err := decodeWork(body, isCBOR(r))
	if err != nil { // shard 0 says what is wrong with it
		rt.write(w, rt.send(r.Context(), r, 0, r.Method, r.URL.RequestURI(), outHeader(r), body))
		return
	}
	k := rt.cfg.Shards
	resShard := make([]int, len(req.Results))
	parts := map[int]*workPart{}
	part := func(s int) *workPart {
		p := parts[s]
		if p == nil {
			p = &workPart{shard: s}
			parts[s] = p
		}
		return p
	}
	for i, res := range req.Results {
		s, err := pool.LeaseShard(res.Lease, k)
		if err != nil {
			s = 0 // no shard minted it: shard 0 answers it as unknown
		}
		resShard[i] = s
		p := part(s)
		p.req.Results = append(p.req.Results, res)
		p.idx = append(p.idx, i)
	}
	// A transfer report goes to its job's shard, which may take a read
	// of the job's placement: only for a device the pool knows (the
	// signature checked first), so that a stranger's request costs no
	// reads.
	peer := "" // the device, once its signature is checked
	unknown := func(t TransferReport) bool { _, ok := rt.cfg.Placements.Known(job.ID(t.Job)); return !ok }
	if rt.cfg.Placements != nil && slices.ContainsFunc(req.Transfers, unknown) {
		if peer, err = rt.checkSignature(r, body); err != nil {
			rt.fail(w, err)
			return
		}
	}
	for _, t := range req.Transfers {
		p := part(rt.transferShard(r.Context(), job.ID(t.Job)))
		p.req.Transfers = append(p.req.Transfers, t)
	}
	order := rt.order()
	leaseShard := -1
	if req.Lease > 0 {
		leaseShard = rt.leaseShard(claimedPeer(r), order)
		part(leaseShard).req.Lease = req.Lease
		rt.nameNode(w, leaseShard)
	}
	if len(parts) <= 1 {
		rt.workWhole(w, r, body, req, parts, leaseShard)
		return
	}
	rt.workSplit.Add(1)
	if peer == "" {
		if peer, err = rt.checkSignature(r, body); err != nil {
			rt.fail(w, err)
			return
		}
	}
	var wg sync.WaitGroup
	for _, p := range parts {
		wg.Go(func() { p.ans = rt.forwardWork(r, p.shard, peer, &p.req) })
	}
	wg.Wait()
	out := WorkResponse{Results: make([]WorkAnswer, len(req.Results)), Leases: []LeaseGrant{}}
	for _, p := range parts {
		resp, failed := workAnswerOf(p.ans)
		for j, i := range p.idx {
			switch {
			case failed != nil:
				out.Results[i] = *failed
				out.Results[i].Lease = req.Results[i].Lease
			case j < len(resp.Results) && resp.Results[j].Lease == req.Results[i].Lease:
				out.Results[i] = resp.Results[j]
			default:
				out.Results[i] = WorkAnswer{Lease: req.Results[i].Lease, Status: http.StatusBadGateway, Code: "internal",
					Error: fmt.Sprintf("shard %d of the pool answered the results out of order: send the result again", p.shard)}
			}
		}
		if p.shard != leaseShard {
			continue
		}
		if failed != nil {
			out.LeaseError = failed
			continue
		}
		out.Leases = append(out.Leases, resp.Leases...)
		out.LeaseError = resp.LeaseError
	}
	if req.Lease > 0 && len(out.Leases) == 0 && out.LeaseError == nil {
		var from int
		if out.Leases, from = rt.moreLeases(r, peer, req.Lease, leaseShard); len(out.Leases) > 0 {
			rt.nameNode(w, from)
		}
	}
	rt.writeWork(w, r, &out)
}

// workWhole sends a work request whose parts all go to one shard there
// unchanged; when it asked for leases and that shard had none, it asks
// the other shards (moreLeases) and adds what they grant to the answer.
func (rt *ShardRouter) workWhole(w http.ResponseWriter, r *http.Request, body []byte, req WorkRequest, parts map[int]*workPart, leaseShard int) {
	shard := 0
	for s := range parts {
		shard = s
	}
	a := rt.send(r.Context(), r, shard, r.Method, r.URL.RequestURI(), outHeader(r), body)
	if req.Lease == 0 || !a.ok() || rt.cfg.Shards == 1 {
		rt.write(w, a)
		return
	}
	var resp WorkResponse
	decode := json.Unmarshal
	if mt, _, _ := mime.ParseMediaType(a.header.Get("Content-Type")); mt == api.CBORContentType {
		decode = api.UnmarshalCBORAnswer
	}
	if decode(a.body, &resp) != nil {
		rt.write(w, a)
		return
	}
	if len(resp.Leases) > 0 || resp.LeaseError != nil {
		rt.write(w, a)
		return
	}
	// The shard checked the device's signature: the device is who it says.
	auth, err := parseAuthorization(r.Header.Get("Authorization"))
	if err != nil {
		rt.write(w, a)
		return
	}
	more, from := rt.moreLeases(r, auth.Peer, req.Lease, shard)
	if len(more) == 0 {
		rt.write(w, a)
		return
	}
	rt.nameNode(w, from)
	resp.Leases = append(resp.Leases, more...)
	for k, vs := range a.header {
		if k != "Content-Type" && k != "Content-Length" {
			w.Header()[k] = vs
		}
	}
	rt.writeWork(w, r, &resp)
}

// moreLeases asks the shards other than tried that may have tasks
// waiting (mayHaveWork: not those that said they had none within
// queuedStale), in order, for n leases of peer (a forwarded work request
// with no results), until one grants some; what it grants is returned
// with the shard that granted it, nothing when none does.
//
// A shard that said it had nothing waiting is not asked again within
// queuedStale: while a pool has no work waiting, every device's request
// for leases was otherwise asked of every shard, K-1 forwards each (most
// of the forwards of a three-node pool's run, in bench-cluster), and
// its cost grew with the shards. The device's own shard of the moment is
// still asked first (leaseShard), whatever it said.
func (rt *ShardRouter) moreLeases(r *http.Request, peer string, n, tried int) ([]LeaseGrant, int) {
	for _, s := range rt.order() {
		if s == tried || !rt.mayHaveWork(s) {
			continue
		}
		if r.Context().Err() != nil {
			return nil, -1
		}
		resp, failed := workAnswerOf(rt.forwardWork(r, s, peer, &WorkRequest{Lease: n}))
		if failed == nil && len(resp.Leases) > 0 {
			return resp.Leases, s
		}
	}
	return nil, -1
}

// absentFor is how long a router takes a job that no placement names
// for absent when a transfer report names it (transferShard).
const absentFor = 10 * time.Second

// maxAbsent bounds the jobs a router remembers as absent; past it, it
// forgets them all.
const maxAbsent = 1 << 12

// transferShard returns the shard to send a transfer report on job id
// to: its job's shard (jobShard), or its ID's when its placement cannot
// be read now. A report is the device's word on how a transfer went:
// one the job's shard misses, or another shard keeps, costs a line of
// the pool's page at most, and the request's results go on. A job that
// no placement names is taken for absent for absentFor (its reports go
// to its ID's shard), so that reports naming jobs that do not exist
// cost a read of the placements once, not at every request.
func (rt *ShardRouter) transferShard(ctx context.Context, id job.ID) int {
	p := rt.cfg.Placements
	if p == nil {
		return cluster.ShardOf(id, rt.cfg.Shards)
	}
	if s, ok := p.Known(id); ok {
		return s
	}
	now := rt.cfg.Now()
	rt.absentMu.Lock()
	at, miss := rt.absent[id]
	rt.absentMu.Unlock()
	if miss && now.Sub(at) < rt.absentFor {
		return cluster.ShardOf(id, rt.cfg.Shards)
	}
	ctx, cancel := context.WithTimeout(ctx, placementTimeout)
	defer cancel()
	s, ok, err := p.Shard(ctx, id)
	switch {
	case err != nil:
		rt.log.Debug("Could not read a job's shard for a transfer report", "job", id.String(), "err", err)
		return cluster.ShardOf(id, rt.cfg.Shards)
	case !ok:
		rt.absentMu.Lock()
		if len(rt.absent) >= maxAbsent {
			clear(rt.absent)
		}
		rt.absent[id] = now
		rt.absentMu.Unlock()
		return cluster.ShardOf(id, rt.cfg.Shards)
	}
	return s
}

// forwardWork sends part, a work request of peer, to shard with the
// router's MAC (ForwardedHeader), asking for a JSON answer.
func (rt *ShardRouter) forwardWork(in *http.Request, shard int, peer string, part *WorkRequest) shardAnswer {
	body, err := api.MarshalCBOR(part)
	if err != nil {
		return shardAnswer{shard: shard, err: err}
	}
	uri := in.URL.RequestURI()
	h := outHeader(in)
	for _, k := range []string{"Authorization", "Content-Encoding", "Accept"} {
		h.Del(k)
	}
	h.Set("Content-Type", api.CBORContentType)
	h.Set("Accept", "application/json")
	req, _ := http.NewRequest(http.MethodPost, uri, nil)
	req.Header = h
	rt.fwd.sign(req, shard, peer, rt.cfg.Now(), body)
	return rt.send(in.Context(), in, shard, http.MethodPost, uri, h, body)
}

// workAnswerOf reads a shard's answer to a forwarded work request: its
// WorkResponse when it took the request, else failed, what answers each
// of its results (the status, code and message of the refusal; 503
// "no_leader" for a shard that did not answer).
func workAnswerOf(a shardAnswer) (resp WorkResponse, failed *WorkAnswer) {
	switch {
	case a.err != nil:
		return resp, &WorkAnswer{Status: http.StatusServiceUnavailable, Code: CodeNoLeader,
			Error: fmt.Sprintf("the coordinator of shard %d of the pool did not answer; try again shortly", a.shard)}
	case a.status == http.StatusOK:
		if err := json.Unmarshal(a.body, &resp); err == nil {
			return resp, nil
		}
		return resp, &WorkAnswer{Status: http.StatusBadGateway, Code: "internal",
			Error: fmt.Sprintf("shard %d of the pool gave an answer that is not a work response; try again", a.shard)}
	}
	var e ErrorBody
	if json.Unmarshal(a.body, &e) != nil || e.Error == "" {
		e = ErrorBody{Code: "internal", Error: fmt.Sprintf("shard %d of the pool answered %d", a.shard, a.status)}
	}
	return resp, &WorkAnswer{Status: a.status, Code: e.Code, Error: e.Error}
}

// writeWork writes out as Server.work does: CBOR when r's Accept
// prefers it, else JSON.
func (rt *ShardRouter) writeWork(w http.ResponseWriter, r *http.Request, out *WorkResponse) {
	w.Header().Set("Vary", "Accept")
	if acceptsCBOR(r) {
		writeWorkCBOR(w, out)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// stickWindow is how long a device's leases come from one shard, its
// preferred shard of the window (ShardRouter.preferred), while that shard
// has work.
const stickWindow = 5 * time.Second

// preferred returns the shard a device's leases come from now: one of
// the K chosen by the FNV-1a hash of its peer ID and the number of the
// stickWindow its clock (Now) is in, so that every node of the pool
// chooses the same shard for the same device at the same time, whoever
// it asks, and over many windows every shard gets its share of every
// device.
//
// Kept to one shard, a device's requests carry results and a request
// for leases of that shard alone, which go to it whole and, once the
// device follows the node this router names (InChargeHeader, from
// ShardRouterConfig.Public), to that shard's node itself, in process:
// no request is forwarded. Moved on at every request, nearly every
// request was split (the router checking the signature, the shards each
// a part: a quarter more CPU per task in all, measured on three nodes);
// kept to one shard until it ran dry, a device left the other shards'
// jobs waiting (two jobs of one owner on two shards, one at a standstill
// until the other ended); kept for a count of requests on each node
// (the router's choice before), a device sent to the node of its shard
// met there a choice of its own and was sent on again.
func (rt *ShardRouter) preferred(peer string) int {
	h := fnv.New64a()
	h.Write([]byte(peer))
	var w [8]byte
	binary.BigEndian.PutUint64(w[:], uint64(rt.cfg.Now().UnixMilli()/stickWindow.Milliseconds()))
	h.Write(w[:])
	return int(h.Sum64() % uint64(rt.cfg.Shards))
}

// leaseShard returns the shard to ask first for peer's leases: its
// preferred shard while that may have work; else a shard of this node's
// (ShardRouterConfig.Here) that may have work, so that a device sent to
// the node of the shard with work stays there; else the first of order
// that may have work; else order[0]. A peer of "" (unknown) gets
// order[0].
func (rt *ShardRouter) leaseShard(peer string, order []int) int {
	may := rt.mayHaveWork
	if peer == "" {
		return order[0]
	}
	if p := rt.preferred(peer); may(p) {
		return p
	}
	if rt.cfg.Here != nil {
		for _, s := range order {
			if rt.cfg.Here(s) && may(s) {
				return s
			}
		}
	}
	for _, s := range order {
		if may(s) {
			return s
		}
	}
	return order[0]
}

// claimedPeer is the device r's Authorization names, unchecked ("" for
// none): enough to choose its shard (leaseShard), whose coordinator
// checks the signature.
func claimedPeer(r *http.Request) string {
	if a, err := parseAuthorization(r.Header.Get("Authorization")); err == nil {
		return a.Peer
	}
	return ""
}

// nameNode names, on w, the node in charge of shard (InChargeHeader,
// from ShardRouterConfig.Public), so that the device sends its next
// requests there; nothing when it is not known.
func (rt *ShardRouter) nameNode(w http.ResponseWriter, shard int) {
	if rt.cfg.Public == nil {
		return
	}
	if u := rt.cfg.Public(shard); u != "" {
		w.Header().Set(InChargeHeader, u)
	}
}
