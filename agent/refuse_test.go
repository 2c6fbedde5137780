package agent_test

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"idlepool/agent"
	"idlepool/idle"
	"idlepool/job"
	"idlepool/offers"
)

// changingOffers is an agent.OfferSource whose donor preferences change
// while the agent runs, as `idlepool jobs refuse` changes them in the
// local store.
type changingOffers struct {
	mu    sync.Mutex
	prefs offers.Preferences
}

func (o *changingOffers) Capacity(_ context.Context, sig idle.Signals) idle.Capacity {
	m := idle.Machine{OS: runtime.GOOS, Arch: runtime.GOARCH, CPUModel: "test CPU", LogicalCPUs: 4, MemoryTotalMiB: 8192, TimeZone: "UTC"}
	return idle.NewCapacity(m, idle.Defaults(), sig.GPUs)
}

func (o *changingOffers) Preferences(context.Context) offers.Preferences {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.prefs
}

func (o *changingOffers) refuse(id job.ID) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.prefs.Global.RefuseJobs = append(o.prefs.Global.RefuseJobs, id)
}

// TestRefusedJobIsHandedBack refuses a job after the agent published an
// offer that accepts everything (and that stays valid for ten minutes):
// the pool still leases the job to it, and the agent hands every such task
// back without running it and renews its offer at once.
func TestRefusedJobIsHandedBack(t *testing.T) {
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	dev := newDevice(t, nil)
	src := &changingOffers{}
	exec := &fakeExec{}
	a, err := agent.New(agent.Config{
		PoolURL: co.url, Home: dev.dirs, DeviceKey: dev.key, OwnerKey: dev.owner, Slots: 1,
		Executor: exec, Store: dev.local, HTTP: httpClient(t), Offer: src, OfferTTL: 10 * time.Minute,
		MaxBackoff: 200 * time.Millisecond, IdlePoll: 50 * time.Millisecond, ReceiptPoll: 50 * time.Millisecond,
		Logger: quietLogger(t).With("side", "agent"),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Serve(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent Serve: %v", err)
		}
	}()

	sub := newSubmitter(t, co.url, nil)
	waitOffers(t, sub.c, 10*time.Second, func(os []offers.Offer) bool { return len(os) == 1 })
	j := planJob(t, "refused", 4, "")
	src.refuse(j.ID)
	if err := sub.c.Submit(ctx, j); err != nil {
		t.Fatalf("submit: %v", err)
	}
	waitOffers(t, sub.c, 10*time.Second, func(os []offers.Offer) bool {
		return len(os) == 1 && slices.Contains(os[0].Accept.RefuseJobs, j.ID)
	})
	time.Sleep(300 * time.Millisecond) // a lease granted just before the renewal is handed back too
	if n := exec.Runs(); n != 0 {
		t.Fatalf("the agent ran %d tasks of a job its owner refused", n)
	}
	st, err := sub.c.Status(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st.Accepted != 0 || st.Leased != 0 {
		t.Fatalf("refused job: %d accepted, %d leased; want none", st.Accepted, st.Leased)
	}
}

// waitOffers polls the pool's offer listing until ok holds, at most for
// within, and returns the last listing.
func waitOffers(t *testing.T, c *agent.Client, within time.Duration, ok func([]offers.Offer) bool) []offers.Offer {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		live, err := c.Offers(context.Background())
		if err != nil {
			t.Fatalf("offers: %v", err)
		}
		if ok(live) {
			return live
		}
		if time.Now().After(deadline) {
			t.Fatalf("offer listing after %v: %+v", within, live)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
