package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"idlepool/idle"
	"idlepool/job"
	"idlepool/offers"
)

// minOfferGap is the least time between two offers the agent publishes
// when the policy's state changes quickly.
const minOfferGap = time.Second

// PutOffer publishes o, this device's signed capacity offer (POST
// /v1/offers). The pool refuses an offer that names another peer or pool,
// does not verify, has expired or lives longer than it allows
// (*APIError).
func (c *Client) PutOffer(ctx context.Context, o offers.Offer) error {
	body, err := json.Marshal(o)
	if err != nil {
		return fmt.Errorf("encode offer: %w", err)
	}
	_, err = c.do(ctx, http.MethodPost, "/v1/offers", nil, body, true, nil)
	return err
}

// Offers lists the pool's live capacity offers (GET /v1/offers), by peer
// ID.
func (c *Client) Offers(ctx context.Context) ([]offers.Offer, error) {
	var out []offers.Offer
	_, err := c.do(ctx, http.MethodGet, "/v1/offers", nil, nil, true, &out)
	return out, err
}

// Listings lists the pool's jobs seeking compute (GET /v1/listings),
// oldest first.
func (c *Client) Listings(ctx context.Context) ([]offers.Listing, error) {
	var out []offers.Listing
	_, err := c.do(ctx, http.MethodGet, "/v1/listings", nil, nil, true, &out)
	return out, err
}

// OfferSource is what an agent builds its capacity offer from; see
// Config.Offer. Capacity is called with the latest signals the governor
// sampled (zero without a Signaller), so that the GPUs offered are those
// NVML found; Preferences returns the donor's choices (offers.Preferences,
// from the local store). Both are called from one goroutine at a time and
// must return promptly.
type OfferSource interface {
	Capacity(ctx context.Context, sig idle.Signals) idle.Capacity
	Preferences(ctx context.Context) offers.Preferences
}

// offer builds and signs this device's offer to the pool now.
func (a *Agent) offer(ctx context.Context, now time.Time) offers.Offer {
	g := a.gov
	g.mu.Lock()
	d, sig := g.decision, g.signals
	g.mu.Unlock()
	o := offers.Build(offers.Spec{
		Pool: a.poolName, PoolURL: a.cfg.PoolURL, Peer: a.cfg.DeviceKey.ID(), Owner: a.owner,
		Capacity: a.cfg.Offer.Capacity(ctx, sig), State: d.State, Reason: d.Reason,
		Preferences: a.cfg.Offer.Preferences(ctx), Issued: now, TTL: a.cfg.OfferTTL,
	})
	o.Sign(a.cfg.DeviceKey)
	return o
}

// serveOffers publishes this device's signed capacity offer at once and
// then every third of Config.OfferTTL, and again when the policy's state
// changes (at most once a second), until ctx ends; it returns nil then.
// A refused or failed publication is logged and tried again at the next
// turn: the pool treats a device without a live offer as CPU-only, so
// leasing goes on meanwhile.
func (a *Agent) serveOffers(ctx context.Context) error {
	every := a.cfg.OfferTTL / 3
	var (
		last     idle.State
		reported bool // a failure was logged at Warn since the last success
	)
	for {
		o := a.offer(ctx, a.c.PoolNow())
		err := a.c.PutOffer(ctx, o)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil && !reported:
			reported = true
			if ae, ok := errors.AsType[*APIError](err); ok && ae.Status == http.StatusNotFound {
				a.log.Info("The pool takes no capacity offers; it leases this device CPU tasks only", "err", err)
			} else {
				a.log.Warn("Cannot publish the capacity offer, trying again later", "err", err)
			}
		case err == nil:
			if reported {
				a.log.Info("Capacity offer published again")
			}
			reported = false
			a.log.Debug("Capacity offer published", "state", string(o.State), "cores", o.Capacity.Cores,
				"gpus", len(o.Capacity.GPUs), "expires", o.Expires)
		}
		last = o.State
		timer := time.NewTimer(every)
		for changed := false; !changed; {
			_, _, ch := a.gov.pause()
			select {
			case <-ctx.Done():
				timer.Stop()
				return nil
			case <-timer.C:
				changed = true
			case <-a.offerNow:
				timer.Stop()
				changed = true
			case <-ch:
				a.gov.mu.Lock()
				changed = a.gov.decision.State != last
				a.gov.mu.Unlock()
				if changed {
					timer.Stop()
					if err := sleep(ctx, minOfferGap); err != nil {
						return nil
					}
				}
			}
		}
	}
}

// renewOffer asks the offer loop to publish the offer again now, e.g.
// after the donor changed what it accepts.
func (a *Agent) renewOffer() {
	select {
	case a.offerNow <- struct{}{}:
	default:
	}
}

// refusal says why the donor refuses job id now (a refused job, or a
// refused owner, in the local preferences the offer is built from), or ""
// when it does not. The pool matches leases against the last published
// offer; this check makes a refusal take effect before the next renewal.
func (a *Agent) refusal(ctx context.Context, id job.ID) string {
	if a.cfg.Offer == nil {
		return ""
	}
	acc := a.cfg.Offer.Preferences(ctx).Accept(a.cfg.PoolURL)
	if slices.Contains(acc.RefuseJobs, id) {
		return "job " + id.String()[:12] + " is refused"
	}
	if len(acc.RefuseOwners) > 0 {
		if owner := a.jobOwner(ctx, id); owner != "" && slices.Contains(acc.RefuseOwners, owner) {
			return "owner " + owner + " is refused"
		}
	}
	return ""
}
