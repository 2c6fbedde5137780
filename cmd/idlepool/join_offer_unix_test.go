//go:build unix

package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

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

	live := poll(30*time.Second, func(os []offers.Offer) bool { return len(os) == 1 })
	peer := peerID(t, home) // the key exists once the device has registered
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

// TestJoinSeveralPools: one `idlepool join` process joins two pools,
// shares its workers among them, publishes its offer to each, and
// computes a job submitted to each.
func TestJoinSeveralPools(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts two coordinators and an agent")
	}
	m := writeManifest(t, "pi", piManifest(6, 10000)+"participants = \"owner\"\nredundancy = 1\nquorum = 1\n")
	_, want := runJSON(t, t.TempDir(), m)
	_, urlA := startServe(t, t.TempDir(), "127.0.0.1:0")
	_, urlB := startServe(t, t.TempDir(), "127.0.0.1:0")

	subHome := t.TempDir()
	if out := idlepool(t, subHome, "status", strings.Repeat("0", 64), "--pool", urlA); out.code == 0 {
		t.Fatal("status of an unknown job succeeded") // and creates the owner key
	}
	home := t.TempDir()
	j := startJoin(t, home, urlA, urlB, "--workers", "2", "--owner-key", filepath.Join(subHome, "config", "owner.key"))
	for _, url := range []string{urlA, urlB} {
		out := idlepool(t, subHome, "submit", m, "--pool", url, "--follow", "--json")
		if out.code != 0 {
			t.Fatalf("submit --follow to %s: exit %d\n%s", url, out.code, out.stderr)
		}
		peer := peerID(t, home) // the agent has made its key by now
		if diff := cmp.Diff(want, out.stdout); diff != "" {
			t.Errorf("pool %s (-run +submit):\n%s", url, diff)
		}
		key, _ := identity.Generate()
		owner, _ := identity.Generate()
		c, err := agent.NewClient(url, key, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Register(context.Background(), owner, "operator", ""); err != nil {
			t.Fatal(err)
		}
		live, err := c.Offers(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(live) != 1 || live[0].Peer != peer || live[0].Capacity.Cores < 1 {
			t.Errorf("pool %s lists offers %+v, want one of device %s", url, live, peer)
		}
	}
	b, _ := os.ReadFile(j.stderr)
	for _, line := range []string{"joining " + urlA, "joining " + urlB, "with 1 worker\n"} {
		if !strings.Contains(string(b), line) {
			t.Errorf("join's output lacks %q:\n%s", line, b)
		}
	}
}
