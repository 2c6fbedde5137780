package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"idlepool/idle"
	"idlepool/job"
	"idlepool/offers"
)

// minOfferGap is the least time between two offers the agent publishes
// when the policy's state changes quickly.
const minOfferGap = time.Second

// cpuTimeAPIVersion is the coordinator API version from which an offer's
// capacity may say its CPU time share (api.APIVersion): an older
// coordinator refuses the field.
const cpuTimeAPIVersion = 5

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
// ID, each offers.Offer.Redacted: a pool from before holds passes on the
// reason in words of an agent from before them, which this device does not
// need to read.
func (c *Client) Offers(ctx context.Context) ([]offers.Offer, error) {
	var out []offers.Offer
	_, err := c.do(ctx, http.MethodGet, "/v1/offers", nil, nil, true, &out)
	for i := range out {
		out[i] = out[i].Redacted()
	}
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
	c := a.cfg.Offer.Capacity(ctx, sig)
	if c.CPUTimeShare != 0 && a.c.apiVersion(ctx) < cpuTimeAPIVersion {
		c.CPUTimeShare = 0 // the pool would refuse the offer
	}
	o := offers.Build(offers.Spec{
		Pool: a.poolName, PoolURL: a.cfg.PoolURL, Peer: a.cfg.DeviceKey.ID(), Owner: a.owner,
		Capacity: c, State: d.State, Hold: d.Hold,
		Preferences: a.cfg.Offer.Preferences(ctx), Issued: now, TTL: a.cfg.OfferTTL,
	})
	o.Sign(a.cfg.DeviceKey)
	return o
}

// CodeNoOffer is the code of the pool's answer to a lease request of a
// device whose capacity offer it does not hold (409, docs/api.md).
const CodeNoOffer = "no_offer"

// serveOffers publishes this device's signed capacity offer at once and
// then every third of Config.OfferTTL, and again when the policy's state
// changes (at most once a second) or the slots found the pool without it
// (offerLost), until ctx ends; it returns nil then. Each success opens
// the slots' gate (waitOffered). A refused or failed publication is
// logged and tried again with backoff (at most every turn); a pool that
// takes no offers at all (404, from before offers) opens the gate too.
func (a *Agent) serveOffers(ctx context.Context) error {
	every := a.cfg.OfferTTL / 3
	var (
		last     idle.State
		reported bool // a failure was logged at Warn since the last success
		fails    = backoff{Base: 100 * time.Millisecond, Max: min(a.cfg.MaxBackoff, every)}
	)
	for {
		a.refreshProfile(ctx)
		o := a.offer(ctx, a.c.PoolNow())
		err := a.c.PutOffer(ctx, o)
		wait := every
		ae, _ := errors.AsType[*APIError](err)
		switch {
		case ctx.Err() != nil:
			return nil
		case ae != nil && ae.Status == http.StatusNotFound:
			if !reported {
				a.log.Info("The pool takes no capacity offers; leasing without one", "err", err)
			}
			reported = true
			a.markOffered()
		case err != nil:
			if !reported {
				a.log.Warn("Cannot publish the capacity offer, trying again; nothing is leased until the pool has it", "err", err)
			}
			reported = true
			wait = min(wait, fails.after(err))
		default:
			if reported {
				a.log.Info("Capacity offer published again")
			}
			reported = false
			fails.reset()
			a.markOffered()
			a.log.Debug("Capacity offer published", "state", string(o.State), "cores", o.Capacity.Cores,
				"gpus", len(o.Capacity.GPUs), "expires", o.Expires)
		}
		last = o.State
		timer := time.NewTimer(wait)
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

// waitOffered returns once the pool holds this device's offer (as far as
// the agent knows), or with ctx's error.
func (a *Agent) waitOffered(ctx context.Context) error {
	a.mu.Lock()
	ch := a.offered
	a.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// markOffered opens the slots' gate: the pool holds the offer.
func (a *Agent) markOffered() {
	a.mu.Lock()
	defer a.mu.Unlock()
	select {
	case <-a.offered:
	default:
		close(a.offered)
	}
}

// offerLost closes the slots' gate and asks the offer loop to publish the
// offer now: the pool answered that it holds none (it restarted, or the
// offer expired).
func (a *Agent) offerLost() {
	a.mu.Lock()
	select {
	case <-a.offered:
		a.offered = make(chan struct{})
	default:
	}
	a.mu.Unlock()
	a.renewOffer()
}

// machineOffer is the OfferSource of an agent configured without one:
// this machine under idle.Defaults, no GPUs, the default preferences.
type machineOffer struct {
	once sync.Once
	m    idle.Machine
}

// Capacity implements OfferSource.
func (o *machineOffer) Capacity(ctx context.Context, _ idle.Signals) idle.Capacity {
	o.once.Do(func() { o.m, _ = idle.ReadMachine(ctx) }) // a part it cannot read stays zero
	return idle.NewCapacity(o.m, idle.Defaults(), idle.Reading[[]idle.GPU]{})
}

// Preferences implements OfferSource.
func (o *machineOffer) Preferences(context.Context) offers.Preferences { return offersDefault }

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
