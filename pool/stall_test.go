package pool_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"idlepool/identity"
	"idlepool/job"
	"idlepool/pool"
	"idlepool/pool/pooltest"
)

// stallCase is one pool of TestTwoColludersDoNotStallSmallPool.
type stallCase struct {
	name    string
	tasks   int64
	known   bool // every 10th task has a known answer
	trusted bool // the honest owners are established from the start (serve --trusted-owners)
}

// stallRun is what playing a stallCase measured.
type stallRun struct {
	leases       int
	ok, wrong    int // outcomes accepted, and of those with a liar's value
	unverified   []pool.Verified
	status       pool.JobStatus
	trouble      string // the job's Trouble midway
	es           []pool.Entry
	honest, liar []string
	waited       bool // the clock was moved a lease timeout on, nothing else being left
}

// playStall runs c: two honest owners and two colluding liars (each one
// device; the liars return the same wrong bytes for every task) ask for
// one task at a time in turn, honest and liar alternating, until nothing
// is leased any more.
func playStall(t *testing.T, c stallCase) stallRun {
	t.Helper()
	var trusted []string
	if c.trusted {
		for _, o := range []string{"h1", "h2"} {
			trusted = append(trusted, identity.IDOf(pooltest.Key(t, "owner/"+o).Public()))
		}
	}
	h := newHarness(t, pool.NewMemStore(), func(sc *pool.SchedulerConfig) {
		sc.CommitDelay = time.Microsecond
		sc.Trust.TrustedOwners = trusted
	})
	sub := h.Device("submitter", "sub-1")
	var r stallRun
	r.honest = []string{h.Device("h1", "h1-dev"), h.Device("h2", "h2-dev")}
	r.liar = []string{h.Device("m1", "m1-dev"), h.Device("m2", "m2-dev")}
	isLiar := map[string]bool{r.liar[0]: true, r.liar[1]: true}
	pol := pooltest.Policy{Redundancy: 2, Quorum: 2}
	if c.known {
		var parts []string
		for i := int64(0); i < c.tasks; i += 10 {
			parts = append(parts, fmt.Sprintf("%q: %q", fmt.Sprint(i), pool.ReplicaDigest(good(i).Result, false, "")))
		}
		if err := os.WriteFile(filepath.Join(h.Dir, "answers.json"), []byte("{"+strings.Join(parts, ", ")+"}"), 0o600); err != nil {
			t.Fatal(err)
		}
		pol.Verify = "known_answers = \"answers.json\"\n"
	}
	j := h.Job("stall-"+c.name, c.tasks, pol, sub)
	devices := []string{r.honest[0], r.liar[0], r.honest[1], r.liar[1]}
	for round, idle := 0, 0; idle < 2; round++ {
		got := 0
		for k := range devices {
			d := devices[(round+k)%len(devices)]
			ls, err := h.S.Lease(context.Background(), d, 1)
			if errors.Is(err, pool.ErrExcluded) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range ls {
				got++
				r.leases++
				if isLiar[l.Peer] {
					h.Submit(l, bad(l.Task))
				} else {
					h.Submit(l, good(l.Task))
				}
			}
		}
		if got == 0 {
			idle++
		}
		if round == 20 {
			st, _ := h.S.Status(j.ID)
			r.trouble = st.Trouble
		}
		if idle == 2 {
			// Nothing but stalled tasks left: they end unverified once
			// no new owner's device settled them for a lease timeout.
			if st, _ := h.S.Status(j.ID); !st.Complete && !r.waited {
				h.Clock.Advance(job.DefaultLeaseTimeout + time.Second)
				r.waited, idle = true, 0
			}
		}
	}
	r.status, _ = h.S.Status(j.ID)
	for _, v := range h.Results(sub, j.ID) {
		switch v.Status {
		case pool.OutcomeOK:
			r.ok++
			if string(v.Result) != string(good(v.Task).Result) {
				r.wrong++
			}
		case pool.OutcomeUnverified:
			r.unverified = append(r.unverified, v)
		}
	}
	r.es = h.Ledger()
	return r
}

// Found by trying it: two agents of two owners that return the same wrong
// bytes, in a pool with two honest owners (quorum 2, redundancy 2): 0 of
// 300 tasks accepted after 32 leases, for good, with or without trusted
// owners. After a disagreement a task needed three agreeing owners of
// four, it would end unverified only after MaxReplicas replicas, and its
// undecided replicas used up every device's bound on unverified work, so
// that even untouched tasks were never leased again.
//
// Now such a task is stalled: its replicas stop counting toward that
// bound, so every task of the job is computed; the job's status says why
// in words; and, once nothing else was left for a lease timeout (no new
// owner came to settle them), the stalled tasks end unverified (marked
// in the ledger, never folded). Where the job names
// known answers, each liar is caught on one: it computes no more of the
// job, its votes are void, and the honest owners decide every task it
// stalled: the whole job is accepted with the right values and the honest
// devices earn their receipts.
func TestTwoColludersDoNotStallSmallPool(t *testing.T) {
	for _, c := range []stallCase{
		{name: "no known answers", tasks: 120},
		{name: "known answers", tasks: 300, known: true},
		{name: "trusted owners", tasks: 100, trusted: true},
		{name: "trusted owners, known answers", tasks: 100, trusted: true, known: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := playStall(t, c)
			t.Logf("%d leases; %d accepted (%d wrong), %d unverified; midway: %q", r.leases, r.ok, r.wrong, len(r.unverified), r.trouble)
			if !r.status.Complete {
				t.Fatalf("the job stopped after %d leases, not complete: %+v", r.leases, r.status)
			}
			for _, d := range r.honest {
				if n := entriesOf(r.es, pool.KindDeviation, d); n != 0 {
					t.Errorf("honest device %s was marked deviating %d times", d, n)
				}
			}
			// Where nothing tells the liars apart (no known answers, no
			// established owners), a task both of whose first replicas
			// went to them may be accepted with their value (no honest
			// device disagreed: none is marked); otherwise never.
			if r.wrong != 0 && (c.known || c.trusted) {
				t.Errorf("%d tasks were accepted with the liars' value", r.wrong)
			}
			if !c.known {
				const want = "needs a third agreeing owner: 2 owners agree with each other against 2 others, and no other owner of the pool may compute it"
				if !r.waited {
					t.Errorf("the job completed before its stalled tasks waited a lease timeout for a new owner")
				}
				if !strings.Contains(r.trouble, want) || !strings.Contains(r.trouble, "the job names no known answers that could tell which side is right") {
					t.Errorf("status midway says %q, want it to say %q and that nothing can tell the sides apart", r.trouble, want)
				}
				if len(r.unverified) == 0 || r.ok+len(r.unverified) != int(c.tasks) {
					t.Errorf("%d accepted and %d unverified of %d tasks", r.ok, len(r.unverified), c.tasks)
				}
				for _, v := range r.unverified {
					if !strings.Contains(v.Reason, "no digest won") {
						t.Errorf("task %d ended unverified saying %q", v.Task, v.Reason)
						break
					}
				}
				return
			}
			if r.ok != int(c.tasks) {
				t.Errorf("%d of %d tasks accepted; %d unverified (%+v)", r.ok, c.tasks, len(r.unverified), r.status)
			}
			for _, d := range r.honest {
				if n := entriesOf(r.es, pool.KindReceipt, d); n != int(c.tasks) {
					t.Errorf("honest device %s earned %d receipts, want one per task (%d)", d, n, c.tasks)
				}
			}
			for _, d := range r.liar {
				if entriesOf(r.es, pool.KindDeviation, d) == 0 || entriesOf(r.es, pool.KindReceipt, d) != 0 {
					t.Errorf("liar %s: %d deviations, %d receipts", d, entriesOf(r.es, pool.KindDeviation, d), entriesOf(r.es, pool.KindReceipt, d))
				}
			}
		})
	}
}
