package pool_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"idlepool/pool"
	"idlepool/pool/pooltest"
)

// probeConfig is one pool of the spot-check probe.
type probeConfig struct {
	Honest, Colluders int // devices, each of its own owner
	Tasks             int64
	SpotCheck         float64
	Seed              uint64
}

// probeResult is what the probe measured: tasks the colluders lied on,
// and those of them folded into the merge with the wrong value.
type probeResult struct {
	Lied, Folded int
	Friends      int // friend devices (each of a new owner) the cheater used
	// Lies and Kept count lies and folded lies by cluster: the lies one
	// check of the liar decides together (see designEffect).
	Lies, Kept map[int]float64
}

// stated is the docs' bound on the share of lies folded
// (docs/operator.md, "What verification lets through"): the first check of
// a lie lands on one of the k−1 friends with probability c = (k−1)/(n−1),
// n−1 being the owners that may check besides the liar's; otherwise the
// split is settled by further drawn owners, and the lie wins only if two
// more friends are drawn before two more honest owners (impossible for
// k = 2).
func (c probeConfig) stated() float64 {
	friends, honest := float64(c.Colluders-1), float64(c.Honest)
	first := friends / (friends + honest)
	return first + (1-first)*race(friends, honest-1)
}

// race is the chance that drawing without replacement from a of one kind
// and b of another yields two of the first kind before two of the second.
func race(a, b float64) float64 {
	if a < 2 {
		return 0
	}
	n := a + b
	// AA, ABA, BAA
	return a/n*(a-1)/(n-1) + 2*a/n*b/(n-1)*(a-1)/(n-2)
}

// runProbe plays the cheater of the issue against the real scheduler in
// a pool of honest devices (each of its own owner) and an adaptive job (a
// device with trust_after agreed results computes tasks alone, a share
// spot_check of them is checked). The cheater has one lying device L and
// k−1 friend devices, each of another owner. Whenever L is leased a task,
// a friend asks for work right after it (for as many tasks as it may
// hold, keeping those of L's tasks it is handed and handing the others
// back), and L holds its result while others ask a few times: a task a
// friend was handed meanwhile is checked, and L answers it honestly. L
// lies on every other fresh task (one past every index the cheater was
// handed: nobody computed it before) while it is trusted, as its receipts
// tell; a friend handed one of L's tasks after L answered returns the
// same bytes. Friends never lie otherwise, and one whose owner was marked
// deviating (which bars it from the tasks others started) is replaced by
// a device of a new owner: owners cost nothing here. The probe counts the
// tasks L lied on and those folded into the merge with the wrong value.
func runProbe(t *testing.T, c probeConfig) probeResult {
	t.Helper()
	h := newHarness(t, pool.NewMemStore(), func(sc *pool.SchedulerConfig) {
		sc.CommitDelay = time.Microsecond
		sc.Trust.Secret = fmt.Appendf(nil, "probe %d", c.Seed)
		sc.Trust.ExcludeAfter = math.MaxInt32 // sanctions off: each lie is measured, not the liar
	})
	ctx := context.Background()
	sub := h.Device("submitter", "sub-1")
	var honest []string
	for i := range c.Honest {
		honest = append(honest, h.Device(fmt.Sprintf("h%d", i), fmt.Sprintf("h%d-1", i)))
	}
	liar := h.Device("liar", "liar-1")
	friends := make([]string, c.Colluders-1)
	newFriends := 0
	newFriend := func() string {
		newFriends++
		return h.Device(fmt.Sprintf("friend%d", newFriends), fmt.Sprintf("friend%d-1", newFriends))
	}
	for i := range friends {
		friends[i] = newFriend()
	}
	verify := fmt.Sprintf("min_quorum = 1\nspot_check = %v\ntrust_after = 5\n", c.SpotCheck)
	j := h.Job(fmt.Sprintf("probe-%d-%d", c.Colluders, c.Seed), c.Tasks, pooltestPolicy(verify), sub)
	rng := rand.New(rand.NewPCG(c.Seed, 2))

	type held struct {
		lease   pool.Lease
		checked bool // a friend was handed it too
		fresh   bool
		age     int
	}
	const window = 3 // requests of others the liar waits before it answers
	var (
		pending   *held
		friendOf  = map[int64][]pool.Lease{} // friends' leases of the liar's pending task
		answered  = map[int64]pool.Submission{}
		lied      = map[int64]bool{}
		clusterOf = map[int64]int{}
		cluster   = 0
		frontier  = int64(-1)
	)
	receipted := func(lease string) bool {
		es, err := h.S.PeerLedger(liar, 0, 10000)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			if e.Lease == lease && e.Kind == pool.KindReceipt {
				return true
			}
		}
		return false
	}
	submit := func(l pool.Lease, s pool.Submission) {
		if err := h.S.Submit(ctx, l.Peer, l.ID, s); err != nil && !errors.Is(err, pool.ErrTaskDecided) {
			t.Fatalf("submit task %d: %v", l.Task, err)
		}
	}
	// trusted tells whether the liar computes tasks alone now, as it can
	// tell from its receipts: trust_after agreed results since it was
	// last caught.
	trusted := func() bool {
		es, err := h.S.PeerLedger(liar, 0, 10000)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range es {
			switch e.Kind {
			case pool.KindReceipt:
				n++
			case pool.KindDeviation, pool.KindRevocation:
				n = 0
			}
		}
		return n >= 5
	}
	deviated := func(d string) bool {
		es, err := h.S.PeerLedger(d, 0, 10000)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			if e.Kind == pool.KindDeviation && e.Job == j.ID {
				return true
			}
		}
		return false
	}
	answer := func() {
		a := good(pending.lease.Task)
		lie := !pending.checked && pending.fresh && trusted()
		if lie {
			a, lied[pending.lease.Task] = bad(pending.lease.Task), true
		}
		answered[pending.lease.Task] = a
		submit(pending.lease, a)
		if lie {
			// Lies are decided in clusters: those computed alone wait for
			// the liar's next check, which releases them all or catches
			// them all. A lie without a receipt at once was checked.
			clusterOf[pending.lease.Task] = cluster
			if !receipted(pending.lease.ID) {
				cluster++
			}
		}
		for _, l := range friendOf[pending.lease.Task] {
			submit(l, a)
		}
		delete(friendOf, pending.lease.Task)
		pending = nil
	}
	// friendAsks: friend i asks for work, for as many as drain tasks.
	friendAsks := func(i, drain int) {
		if deviated(friends[i]) {
			friends[i] = newFriend()
		}
		ls, err := h.S.Lease(ctx, friends[i], drain)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			switch a, ok := answered[l.Task]; {
			case ok:
				submit(l, a) // the liar's task, answered: agree
			case pending != nil && l.Task == pending.lease.Task:
				pending.checked = true
				friendOf[l.Task] = append(friendOf[l.Task], l)
			default:
				if err := h.S.Release(ctx, l.Peer, l.ID); err != nil { // it only looked
					t.Fatal(err)
				}
			}
		}
	}
	devices := append(append([]string{}, honest...), liar)
	idle := 0
	for step := 0; idle < 50*(len(devices)+len(friends)); step++ {
		if pending != nil {
			if pending.age++; pending.age >= window {
				answer()
			}
		}
		// The friends ask as often as any device, and right after the liar.
		if r := rng.IntN(len(devices) + len(friends)); r >= len(devices) {
			friendAsks(r-len(devices), 1)
			continue
		}
		d := devices[rng.IntN(len(devices))]
		if d == liar && pending != nil {
			continue // it computes one task at a time
		}
		ls, err := h.S.Lease(ctx, d, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(ls) == 0 {
			if st, _ := h.S.Status(j.ID); st.Complete {
				break
			}
			idle++
			continue
		}
		idle = 0
		l := ls[0]
		if d != liar {
			submit(l, good(l.Task))
			continue
		}
		pending = &held{lease: l, fresh: l.Task > frontier}
		frontier = max(frontier, l.Task)
		for i := range friends {
			friendAsks(i, 32)
		}
	}
	if pending != nil {
		answer()
	}
	st, _ := h.S.Status(j.ID)
	if !st.Complete {
		t.Fatalf("the job did not complete: %+v", st)
	}
	r := probeResult{Lies: map[int]float64{}, Kept: map[int]float64{}}
	for task := range lied {
		r.Lies[clusterOf[task]]++
	}
	for _, v := range h.Results(sub, j.ID) {
		if v.Status == pool.OutcomeOK && string(v.Result) != string(good(v.Task).Result) {
			r.Folded++
			r.Kept[clusterOf[v.Task]]++
			if !lied[v.Task] {
				t.Errorf("task %d folded a wrong value the probe did not return", v.Task)
			}
		}
	}
	r.Lied, r.Friends = len(lied), newFriends
	return r
}

// probeSeeds is how many pools of each size TestSpotChecksCannotBeSeenComing
// plays: IDLEPOOL_PROBE_SEEDS, default 3.
func probeSeeds(t *testing.T) uint64 {
	if s := os.Getenv("IDLEPOOL_PROBE_SEEDS"); s != "" {
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil || n == 0 {
			t.Fatalf("IDLEPOOL_PROBE_SEEDS=%q: want a number of seeds, at least 1", s)
		}
		return n
	}
	return 3
}

// Found by trying it: the second replica of a task chosen for a spot
// check was leased at once, to whoever asked next, so a cheater with a
// second device of another owner learnt which tasks were checked (its
// second device was handed exactly those) and lied only on the others: a
// probe merged 55 to 120 wrong results of 300. (This probe, on that code:
// 41 of 62 lies folded with one friend, 76 of 82 with two.) Now a check is
// leased only after the checked result came back, after a secret random
// delay, to an owner the pool draws, never to the device that asked right
// after, and a split is settled by drawn owners too. The probe can no
// longer tell, and the share of its lies folded into the merge stays
// within the stated bound (probeConfig.stated: 1/9 for k = 2 colluding
// devices among 10 owners, 0.267 for k = 3 among 11): the lower end of a
// 95% Wilson interval over the lies of 3 pools each, counted by the
// clusters one check decides together, is below it.
// IDLEPOOL_PROBE_SEEDS=10 plays more pools.
func TestSpotChecksCannotBeSeenComing(t *testing.T) {
	if testing.Short() {
		t.Skip("the probe plays whole jobs; skipped in -short mode")
	}
	seeds := probeSeeds(t)
	for _, k := range []int{2, 3} {
		t.Run(fmt.Sprintf("k=%d", k), func(t *testing.T) {
			total := probeResult{Lies: map[int]float64{}, Kept: map[int]float64{}}
			c := probeConfig{Honest: 8, Colluders: k, Tasks: 300, SpotCheck: 0.25}
			for seed := uint64(1); seed <= seeds; seed++ {
				c.Seed = seed
				r := runProbe(t, c)
				t.Logf("seed %d: %d tasks lied on, %d folded; %d friend owners used", seed, r.Lied, r.Folded, r.Friends)
				total.Lied += r.Lied
				total.Folded += r.Folded
				for k, n := range r.Lies {
					total.Lies[int(seed)<<20|k] = n
				}
				for k, n := range r.Kept {
					total.Kept[int(seed)<<20|k] = n
				}
			}
			// Lies decided by one check fold or not together: the
			// interval counts clusters (Kish's design effect).
			lies, kept := map[int64]float64{}, map[int64]float64{}
			for k, n := range total.Lies {
				lies[int64(k)] = n
			}
			for k, n := range total.Kept {
				kept[int64(k)] = n
			}
			p, lo, hi := shareDeff(int64(total.Folded), int64(total.Lied), designEffect(lies, kept))
			t.Logf("k=%d: %d of %d lies folded, %.3f (95%% CI %.3f–%.3f); stated bound %.3f; detection per lie %.3f",
				k, total.Folded, total.Lied, p, lo, hi, c.stated(), 1-p)
			if total.Lied < 20 {
				t.Fatalf("the probe lied on %d tasks only: too few to measure", total.Lied)
			}
			if lo > c.stated() {
				t.Errorf("%d of %d lies folded (%.3f, 95%% CI %.3f–%.3f), above the stated bound %.3f", total.Folded, total.Lied, p, lo, hi, c.stated())
			}
		})
	}
}

// pooltestPolicy is quorum 2, redundancy 2 with a [verify] table.
func pooltestPolicy(verify string) pooltest.Policy {
	return pooltest.Policy{Redundancy: 2, Quorum: 2, Verify: verify}
}
