package store_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/job"
	"idlepool/pool"
	"idlepool/pool/pooltest"
	"idlepool/store"
)

// A job acknowledged past its stored outcomes (a damaged database) holds
// no other job back: the jobs after it are folded, at the first
// compaction, and the error names the damaged one.
func TestCompactDamagedJobHoldsNoneBack(t *testing.T) {
	ctx := context.Background()
	db, _ := compactDB(t, 8192, 8192)
	at := time.UnixMilli(1_767_000_000_000)
	bad := job.ID(sha256.Sum256([]byte("damaged job")))
	good := job.ID(sha256.Sum256([]byte("healthy job")))
	peer := pooltest.Device(t, pooltest.Key(t, "owner/bob"), "bob-1")
	b := &pool.Batch{Peers: []pool.Peer{peer}, Jobs: []pool.JobRecord{
		{ID: bad, Canonical: []byte("c"), Owner: peer.Owner, Merger: peer.ID, Order: 1, Added: at},
		{ID: good, Canonical: []byte("d"), Owner: peer.Owner, Merger: peer.ID, Order: 2, Added: at}}}
	b.Outcomes = append(b.Outcomes, pool.OutcomeRecord{Job: bad, Verified: pool.Verified{Seq: 1, Task: 0, Status: pool.OutcomeOK}})
	for task := range int64(100) {
		b.Outcomes = append(b.Outcomes, pool.OutcomeRecord{Job: good, Verified: pool.Verified{Seq: task + 1, Task: task, Status: pool.OutcomeOK}})
	}
	b.Acks = []pool.AckRecord{{Job: bad, Prev: 0, Upto: 2}, {Job: good, Prev: 0, Upto: 100}}
	if err := db.Commit(ctx, b); err != nil {
		t.Fatal(err)
	}
	c, err := db.Compact(ctx, at)
	if !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), fmt.Sprintf("%x", bad[:])) {
		t.Errorf("Compact: %v, want ErrCorrupt naming the damaged job", err)
	}
	if c.Outcomes != 100 {
		t.Errorf("compaction folded %d outcomes, want the healthy job's 100", c.Outcomes)
	}
	s := mustLoad(t, db)
	if len(s.Summaries) != 1 || s.Summaries[0].Job != good || len(s.Outcomes) != 1 {
		t.Errorf("Load: summaries %+v and %d outcomes, want the healthy job's summary and the damaged job's outcome", s.Summaries, len(s.Outcomes))
	}
}

// A summary that lost one of its ranges (a page lost to a recovery) does
// not keep the coordinator from starting: Load hands over every outcome
// instead, and the next compaction folds the job again from its first.
func TestCompactDamagedSummaryRefolded(t *testing.T) {
	ctx := context.Background()
	db, path := compactDB(t, 8192, 8192)
	h := pooltest.NewHarness(t, db, nil)
	alice := h.Device("alice", "alice-1")
	bob, carol := h.Device("bob", "bob-1"), h.Device("carol", "carol-1")
	j := h.Job("j", 6, pooltest.Policy{LeaseTimeout: time.Hour}, alice)
	lb, lc := h.Lease(bob, 6), h.Lease(carol, 6)
	for _, i := range []int{0, 2, 4} { // three ranges
		h.Submit(lb[i], pooltest.Good(lb[i].Task))
		h.Submit(lc[i], pooltest.Good(lc[i].Task))
	}
	if err := h.S.Ack(ctx, alice, j.ID, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Compact(ctx, farFuture); err != nil {
		t.Fatal(err)
	}
	raw, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Exec(`DELETE FROM outcome_ranges WHERE task_from = 2`); err != nil {
		t.Fatal(err)
	}
	if s := mustLoad(t, db); len(s.Summaries) != 0 || len(s.Outcomes) != 3 {
		t.Errorf("Load with a damaged summary: %d summaries, %d outcomes; want none and all 3", len(s.Summaries), len(s.Outcomes))
	}
	h.Restart()
	if st, err := h.S.Status(j.ID); err != nil || st.Accepted != 3 || st.Acked != 3 {
		t.Errorf("status after a restart on a damaged summary: %+v, %v", st, err)
	}
	// The store opened again: its first compaction checks every summary.
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	db.Close()
	db, err = store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if c, err := db.Compact(ctx, farFuture); err != nil || c.Outcomes != 3 {
		t.Errorf("compaction after the damage: %+v, %v; want the job's 3 outcomes folded again", c, err)
	}
	s := mustLoad(t, db)
	if len(s.Summaries) != 1 || len(s.Summaries[0].Decided) != 3 || len(s.Outcomes) != 0 {
		t.Errorf("after compacting again: summaries %+v, %d outcomes", s.Summaries, len(s.Outcomes))
	}
}

// A cancelled job's replicas leave Load once settled: the job leases
// nothing more, so they are done although their tasks are undecided.
func TestCompactCancelledJobLeavesLoad(t *testing.T) {
	ctx := context.Background()
	db, _ := compactDB(t, 8192, 64)
	h := pooltest.NewHarness(t, db, nil)
	alice := h.Device("alice", "alice-1")
	bob, carol := h.Device("bob", "bob-1"), h.Device("carol", "carol-1")
	j := h.Job("j", 400, pooltest.Policy{LeaseTimeout: time.Hour}, alice)
	for range 4 {
		for _, l := range h.Lease(bob, 100) {
			h.Submit(l, pooltest.Good(l.Task))
		}
		h.Lease(carol, 100)
	}
	if err := h.S.Cancel(ctx, alice, j.ID); err != nil {
		t.Fatal(err)
	}
	h.Clock.Advance(24 * time.Hour)
	if _, err := db.Compact(ctx, h.Clock.Now().Add(-10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if s := mustLoad(t, db); len(s.Replicas) != 0 {
		t.Errorf("a day after its job was cancelled, Load returns %d of its replicas (the first %s)", len(s.Replicas), s.Replicas[0].State)
	}
}

// copyDB copies the SQLite database at from, with its WAL, to to.
func copyDB(t *testing.T, from, to string) {
	t.Helper()
	for _, sfx := range []string{"", "-wal", "-shm"} {
		in, err := os.Open(from + sfx)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.Create(to + sfx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.Copy(out, in)
		in.Close()
		if err := errors.Join(err, out.Close()); err != nil {
			t.Fatal(err)
		}
	}
}

// A random workload (jobs at quorum 2, one adaptive, one with known
// answers; good and wrong results, failures, timeouts, leases left out,
// acknowledgements in random steps, a cancel) runs while compactions go
// on in the background, in chunks of a few rows. At each restart the
// store is compacted once more, and a scheduler started on a copy of it
// is compared with one started on a copy whose compaction tables were
// emptied, which reads every row: the jobs' status, what the scheduler
// holds, and the tasks every device is leased next must be the same.
func TestCompactedRestartMatchesFullRead(t *testing.T) {
	for seed := range uint64(6) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { compactedRestarts(t, seed, 1) })
	}
	// Two compactions at once conflict (ErrConflict) and change nothing.
	for seed := range uint64(2) {
		t.Run(fmt.Sprintf("two compactors %d", seed), func(t *testing.T) { compactedRestarts(t, 100+seed, 2) })
	}
}

func compactedRestarts(t *testing.T, seed uint64, compactors int) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 99))
	db, path := compactDB(t, int64(1+rng.IntN(7)), int64(1+rng.IntN(9)))
	h := pooltest.NewHarness(t, db, nil)
	alice := h.Device("alice", "alice-1")
	devs := []string{h.Device("bob", "bob-1"), h.Device("carol", "carol-1"), h.Device("dave", "dave-1"), h.Device("eve", "eve-1")}
	var jobs []*job.Job
	for i := range 3 {
		jobs = append(jobs, h.Job(fmt.Sprintf("j%d", i), int64(30+rng.IntN(40)), pooltest.Policy{LeaseTimeout: time.Minute}, alice))
	}
	jobs = append(jobs, h.Job("adaptive", 80, pooltest.Policy{LeaseTimeout: time.Minute, Verify: "min_quorum = 1\ntrust_after = 2\n"}, alice))
	var answers []string
	for i := int64(0); i < 60; i += 7 {
		answers = append(answers, fmt.Sprintf("%q: %q", fmt.Sprint(i), pool.ReplicaDigest(pooltest.Good(i).Result, false, "")))
	}
	if err := os.WriteFile(filepath.Join(h.Dir, "answers.json"), []byte("{"+strings.Join(answers, ", ")+"}"), 0o600); err != nil {
		t.Fatal(err)
	}
	jobs = append(jobs, h.Job("known", 60, pooltest.Policy{LeaseTimeout: time.Minute, Verify: "known_answers = \"answers.json\"\n"}, alice))
	acked := map[job.ID]int64{}
	var pending []pool.Lease
	submit := func(l pool.Lease) {
		var sub pool.Submission
		switch x := rng.IntN(10); {
		case x < 6:
			sub = pooltest.Good(l.Task)
		case x < 7:
			sub = pooltest.Bad(l.Task)
		case x < 8:
			sub = pooltest.Failure("boom")
		default:
			sub = pooltest.Timeout()
		}
		h.S.Submit(ctx, l.Peer, l.ID, sub) // refused when expired, decided or cancelled meanwhile
	}
	var stopCompacting func()
	startCompacting := func() {
		d := h.Store.(*store.DB)
		stop, done := make(chan struct{}), make(chan struct{}, compactors)
		for range compactors {
			go func() {
				defer func() { done <- struct{}{} }()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					case <-time.After(200 * time.Microsecond):
					}
					before := farFuture
					if i%2 == 0 {
						before = h.Clock.Now().Add(-30 * time.Second)
					}
					if _, err := d.Compact(ctx, before); err != nil && !(compactors > 1 && errors.Is(err, pool.ErrConflict)) {
						t.Errorf("Compact while serving: %v", err)
						return
					}
				}
			}()
		}
		stopCompacting = func() {
			close(stop)
			for range compactors {
				<-done
			}
		}
	}
	type view struct {
		Jobs   []pool.JobStatus
		Leased map[string][]string
		Held   pool.Footprint
	}
	look := func(p string) view {
		d, err := store.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		h2 := &pooltest.Harness{T: t, Store: d, Clock: h.Clock, Blobs: h.Blobs, Key: h.Key, Dir: h.Dir, Peers: h.Peers}
		h2.Start()
		defer h2.Stop()
		v := view{Jobs: h2.S.Jobs(), Leased: map[string][]string{}, Held: h2.S.Footprint()}
		for i := range v.Jobs {
			v.Jobs[i].Trouble = ""
		}
		v.Held.Visited = 0
		for _, dv := range devs {
			ls, err := h2.S.Lease(ctx, dv, 50)
			if err != nil {
				v.Leased[dv] = []string{err.Error()}
			}
			for _, l := range ls {
				v.Leased[dv] = append(v.Leased[dv], fmt.Sprintf("%s/%d", l.Job.String()[:6], l.Task))
			}
			sort.Strings(v.Leased[dv])
		}
		return v
	}
	restart := func(step int) {
		stopCompacting()
		if err := h.Stop(); err != nil {
			t.Fatal(err)
		}
		before := farFuture
		if rng.IntN(2) == 0 {
			before = h.Clock.Now().Add(-time.Duration(rng.IntN(180)) * time.Second)
		}
		if _, err := h.Store.(*store.DB).Compact(ctx, before); err != nil {
			t.Fatalf("step %d: Compact: %v", step, err)
		}
		h.Store.(*store.DB).Close()
		compacted, full := filepath.Join(t.TempDir(), "c.db"), filepath.Join(t.TempDir(), "f.db")
		copyDB(t, path, compacted)
		copyDB(t, path, full)
		raw, err := sql.Open("sqlite", "file:"+full)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{"DELETE FROM replica_mark", "DELETE FROM replicas_open", "DELETE FROM outcome_ranges", "DELETE FROM outcome_summaries"} {
			if _, err := raw.Exec(q); err != nil {
				t.Fatal(err)
			}
		}
		raw.Close()
		if diff := cmp.Diff(look(full), look(compacted)); diff != "" {
			t.Fatalf("step %d (mark held back from %v): a restart on the compacted store differs (-full +compacted):\n%s", step, before, diff)
		}
		db, err := store.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Stop(); db.Close() }) // the scheduler's last batch first
		h.Store = db
		h.Start()
		startCompacting()
	}
	startCompacting()
	for step := range 60 {
		for _, i := range rng.Perm(len(devs)) {
			ls, _ := h.S.Lease(ctx, devs[i], rng.IntN(4))
			for _, l := range ls {
				if rng.IntN(4) == 0 {
					pending = append(pending, l)
				} else {
					submit(l)
				}
			}
		}
		rng.Shuffle(len(pending), func(i, k int) { pending[i], pending[k] = pending[k], pending[i] })
		n := rng.IntN(len(pending) + 1)
		for _, l := range pending[:n] {
			submit(l)
		}
		pending = pending[n:]
		h.Clock.Advance(time.Duration(rng.IntN(50)) * time.Second)
		for _, j := range jobs {
			if rng.IntN(3) != 0 {
				continue
			}
			vs, err := h.S.Results(ctx, alice, j.ID, acked[j.ID], 1000)
			if err != nil {
				t.Fatal(err)
			}
			if len(vs) > 0 {
				upto := vs[rng.IntN(len(vs))].Seq
				if err := h.S.Ack(ctx, alice, j.ID, upto); err != nil {
					t.Fatal(err)
				}
				acked[j.ID] = upto
			}
		}
		if step == 25 {
			if err := h.S.Cancel(ctx, alice, jobs[2].ID); err != nil {
				t.Fatal(err)
			}
		}
		if step%7 == 6 {
			restart(step)
		}
	}
	stopCompacting()
}
