//go:build unix

package main

import (
	"context"
	"testing"
	"time"

	"idlepool/agent"
	"idlepool/identity"
	"idlepool/idle"
	"idlepool/offers"
)

// TestJoinOfferGoneAfterKill: `idlepool join` publishes a signed capacity
// offer that the pool lists, and after the agent is killed with -9 (no
// chance to say goodbye) the offer drops out of the listing within its
// lifetime (--offer-ttl).
func TestJoinOfferGoneAfterKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a coordinator and an agent")
	}
	_, url := startServe(t, t.TempDir(), "127.0.0.1:0")
	home := t.TempDir()
	const ttl = 2 * time.Second
	j := startJoin(t, home, url, "--offer-ttl", ttl.String())

	key, err := identity.Generate()
	if err != nil {
		t.Fatal(err)
	}
	owner, err := identity.Generate()
	if err != nil {
		t.Fatal(err)
	}
	c, err := agent.NewClient(url, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.Register(ctx, owner, "operator", ""); err != nil {
		t.Fatal(err)
	}
	poll := func(within time.Duration, ok func([]offers.Offer) bool) []offers.Offer {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			live, err := c.Offers(ctx)
			if err != nil {
				t.Fatalf("offers: %v", err)
			}
			if ok(live) || time.Now().After(deadline) {
				return live
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	peer := peerID(t, home)
	live := poll(30*time.Second, func(os []offers.Offer) bool { return len(os) == 1 })
	if len(live) != 1 || live[0].Peer != peer {
		t.Fatalf("offers listed: %+v, want one of the joined device %s", live, peer)
	}
	o := live[0]
	if o.Pool != "lab-a" || o.State != idle.StateComputing || o.Capacity.Cores < 1 || o.Capacity.OS == "" {
		t.Errorf("offer: pool %q, state %q, %d cores, OS %q; want pool lab-a, computing, cores and the OS",
			o.Pool, o.State, o.Capacity.Cores, o.Capacity.OS)
	}
	if d := o.Expires.Sub(o.Issued); d != ttl {
		t.Errorf("offer valid for %v, want --offer-ttl %v", d, ttl)
	}

	j.kill()
	killed := time.Now()
	if live := poll(ttl+3*time.Second, func(os []offers.Offer) bool { return len(os) == 0 }); len(live) != 0 {
		t.Fatalf("offers still listed %v after kill -9: %+v (lifetime %v)", time.Since(killed).Round(time.Millisecond), live, ttl)
	}
	t.Logf("offer gone %v after kill -9 (lifetime %v)", time.Since(killed).Round(time.Millisecond), ttl)
}
