package coord

import (
	"errors"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	"idlepool/job"
	"idlepool/offers"
	"idlepool/pool"
)

// maxOfferTTL bounds how far in the future an offer's expiry may lie when
// the coordinator receives it: an offer is soft state that its agent
// re-sends, so a vanished peer drops out of the listing within this bound.
const maxOfferTTL = 10 * time.Minute

// offerClockSlack is how much further an offer's expiry may lie, for a
// device whose clock runs a little ahead of the coordinator's.
const offerClockSlack = time.Minute

// offerBook holds the live capacity offers of a pool's peers, in memory
// and keyed by peer ID: offers are soft state, re-sent by agents, and lost
// on a restart until they are. Expired offers are dropped when read. An
// offerBook is safe for concurrent use; its lock is never held while
// calling the Scheduler (Select takes this one; Lease calls Select
// without the Scheduler's lock).
type offerBook struct {
	mu     sync.Mutex
	offers map[string]offers.Offer
}

func newOfferBook() *offerBook { return &offerBook{offers: map[string]offers.Offer{}} }

// put stores o as its peer's offer, replacing an older one; a replayed
// offer issued before the one held is ignored.
func (b *offerBook) put(o offers.Offer) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if old, ok := b.offers[o.Peer]; ok && old.Issued.After(o.Issued) {
		return
	}
	b.offers[o.Peer] = o
}

// get returns peer's offer if it is live at now.
func (b *offerBook) get(peer string, now time.Time) (offers.Offer, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	o, ok := b.offers[peer]
	if ok && !now.Before(o.Expires) {
		delete(b.offers, peer)
		return offers.Offer{}, false
	}
	return o, ok
}

// live returns the offers live at now, by peer ID, dropping expired ones.
func (b *offerBook) live(now time.Time) []offers.Offer {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]offers.Offer, 0, len(b.offers))
	for id, o := range b.offers {
		if !now.Before(o.Expires) {
			delete(b.offers, id)
			continue
		}
		out = append(out, o)
	}
	sort.Slice(out, func(i, k int) bool { return out[i].Peer < out[k].Peer })
	return out
}

// count returns the number of offers live at now.
func (b *offerBook) count(now time.Time) int { return len(b.live(now)) }

// listing describes a job seeking compute in pool as offers.Listing: its
// manifest's name, description and requirements, its owner, its progress,
// its quorum, who may participate and the planner's cost of task 0.
func listing(poolName string, v pool.JobView, costs *sync.Map) offers.Listing {
	m := v.Job.Manifest
	st := v.Status
	var cost float64
	if c, ok := costs.Load(v.Job.ID); ok {
		cost = c.(float64)
	} else {
		if v.Job.NumTasks() > 0 {
			cost = v.Job.Cost(v.Job.Task(0))
		}
		costs.Store(v.Job.ID, cost)
	}
	return offers.Listing{
		Job: v.Job.ID, Name: m.Name, Description: m.Description, Link: m.Link, Owner: st.Owner, Pool: poolName,
		Requirements: m.Requirements, MemoryMiB: offers.TaskMemoryMiB(m.Requirements, m.Policy),
		TimeLimit: m.Policy.TimeLimit.Duration, CostPerTask: cost,
		TasksLeft: st.Tasks - st.Accepted - st.Failed, TasksDone: st.Accepted + st.Failed,
		Quorum: st.Quorum, Participants: m.Policy.Participants,
	}
}

// selectJobs is the Scheduler's Select hook: the matchmaking of leases. A
// peer is leased tasks only of jobs that offers.Match accepts both ways
// against its live offer, the donor's preferred jobs first and otherwise
// in the Scheduler's fair-share order (offers.PreferJobs). A peer without a live offer is leased nothing: the
// offer is what bounds a lease (memory, GPUs, hours), so nothing may be
// leased before it is known (the lease handler refuses such a peer with
// errNoOffer before the Scheduler is asked).
func (s *Server) selectJobs(p pool.Peer, jobs []pool.JobView) []job.ID {
	now := s.cfg.Now()
	o, ok := s.offers.get(p.ID, now)
	if !ok {
		return nil
	}
	var matched []offers.Listing
	for _, v := range jobs {
		l := listing(s.cfg.Pool, v, &s.taskCosts)
		if ok, _ := offers.Match(o, l, now); ok {
			matched = append(matched, l)
		}
	}
	var ids []job.ID
	for _, l := range offers.PreferJobs(o, matched) {
		ids = append(ids, l.Job)
	}
	return ids
}

// fitsClass is the Scheduler's Fits hook: whether p's live offer
// satisfies the requirements, memory, time limit and hours of every job
// of class c (offers.Fits), so that a lease looks only at the jobs of the
// classes it fits; selectJobs still matches each job (offers.Match). A
// peer without a live offer fits none.
func (s *Server) fitsClass(p pool.Peer, c pool.JobClass) bool {
	now := s.cfg.Now()
	o, ok := s.offers.get(p.ID, now)
	if !ok {
		return false
	}
	mem := offers.TaskMemoryMiB(c.Requirements, job.Policy{MemoryMiB: c.PolicyMemoryMiB})
	return offers.Fits(o, c.Requirements, mem, c.TimeLimit, now)
}

// noOffer is the answer to a lease request of a peer without a live
// offer (409 "no_offer").
func noOffer(peer string) *apiError {
	return &apiError{http.StatusConflict, "no_offer",
		fmt.Sprintf("device %s has no live capacity offer in this pool: publish one (POST /v1/offers) before asking for tasks; "+
			"the pool leases only what a device's offer says it can take", peer), nil}
}

// putOffer is POST /v1/offers: the signed request's body is the peer's
// signed offers.Offer, which must name the requesting peer and this pool,
// verify with the peer's registered key, be live, and expire within
// maxOfferTTL. It replaces the peer's earlier offer. What is kept and
// listed is the offer Redacted: an agent from before holds sends the
// policy's reason in words, which is verified and then replaced by its
// coarse hold, never shown to anyone.
func (s *Server) putOffer(w http.ResponseWriter, _ *http.Request, c call) error {
	var o offers.Offer
	if err := decodeStrict(c.body, &o); err != nil {
		return badRequest("offer: %v", err)
	}
	now := s.cfg.Now()
	switch {
	case o.Peer != c.peer.ID:
		return &apiError{http.StatusForbidden, "not_your_offer",
			fmt.Sprintf("the offer names peer %s but the request is signed by peer %s", o.Peer, c.peer.ID), nil}
	case o.Pool != s.cfg.Pool:
		return badRequest("the offer is for pool %q but this pool is %q", o.Pool, s.cfg.Pool)
	case o.Owner != c.peer.Owner:
		return badRequest("the offer names owner %s but peer %s belongs to owner %s", o.Owner, c.peer.ID, c.peer.Owner)
	case o.Expires.After(now.Add(maxOfferTTL + offerClockSlack)):
		return badRequest("the offer expires %s, more than %v from now: re-send it more often instead",
			o.Expires.UTC().Format(time.RFC3339), maxOfferTTL)
	}
	if err := o.Verify(c.peer.Key, now); err != nil {
		code := "bad_offer"
		if errors.Is(err, offers.ErrExpired) {
			code = "offer_expired"
		}
		return &apiError{http.StatusBadRequest, code, err.Error(), nil}
	}
	if !o.Hold.Known() {
		s.log.Debug("Offer with a reason in words, from an agent before holds: kept with its coarse hold only", "peer", o.Peer)
	}
	o = o.Redacted()     // never keep, list or log what the donor does (DESIGN.md invariant 19)
	o.OwnerProfile = nil // not the peer's to say; listOffers adds the owner's own
	s.offers.put(o)
	s.log.Debug("Offer received", "peer", o.Peer, "state", o.State, "gpus", len(o.Capacity.GPUs), "expires", o.Expires)
	writeJSON(w, http.StatusOK, struct{}{})
	return nil
}

// listOffers is GET /v1/offers: the live offers, by peer ID, each with
// its owner's signed profile when the owner gave one.
func (s *Server) listOffers(w http.ResponseWriter, r *http.Request, _ call) error {
	if err := noQuery(r); err != nil {
		return err
	}
	now := s.cfg.Now()
	live := s.offers.live(now)
	for i := range live {
		live[i].OwnerProfile = s.profiles.get(live[i].Owner)
		live[i].Silent = s.dash.silent(live[i].Peer, now)
	}
	writeJSON(w, http.StatusOK, live)
	return nil
}

// listListings is GET /v1/listings: the jobs seeking compute, oldest
// first, each with its owner's signed profile when the owner gave one.
func (s *Server) listListings(w http.ResponseWriter, r *http.Request, _ call) error {
	if err := noQuery(r); err != nil {
		return err
	}
	views := s.sched.Seeking()
	out := make([]offers.Listing, 0, len(views))
	for _, v := range views {
		l := listing(s.cfg.Pool, v, &s.taskCosts)
		l.OwnerProfile = s.profiles.get(l.Owner)
		out = append(out, l)
	}
	s.noteAdded(w, len(views), func(i int) job.ID { return views[i].Job.ID })
	writeJSON(w, http.StatusOK, out)
	return nil
}
