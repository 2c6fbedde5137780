package coord

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"idlepool/cluster"
	"idlepool/identity"
	"idlepool/job"
	"idlepool/pool"
	"idlepool/web/webtest"
)

// choiceRouter is a router over three shards whose clock is at and
// whose node runs shard here, with queued tasks as given.
func choiceRouter(t *testing.T, at *time.Time, here int, queued ...int64) *ShardRouter {
	t.Helper()
	key, err := identity.Generate()
	if err != nil {
		t.Fatal(err)
	}
	rt, err := NewShardRouter(ShardRouterConfig{Shards: 3, Key: key,
		Target: func(int) (string, bool) { return "", false },
		Now:    func() time.Time { return *at },
		Here:   func(s int) bool { return s == here },
		Public: func(s int) string { return fmt.Sprintf("http://node-of-shard-%d:7420", s) }})
	if err != nil {
		t.Fatal(err)
	}
	for s, n := range queued {
		rt.queued[s].Store(n)
		rt.queuedAt[s].Store(at.UnixMilli())
	}
	return rt
}

// A device's leases come from one shard through a window, the same shard
// whichever node it asks (every router chooses alike), and over many
// windows from every shard in about equal share; a preferred shard with
// no work gives way to this node's shard with work, then to the first of
// the order with work; a device not known goes by the order alone; and
// the node named is the chosen shard's.
func TestShardChoice(t *testing.T) {
	at := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	a, b := choiceRouter(t, &at, 0, 5, 5, 5), choiceRouter(t, &at, 2, 5, 5, 5)
	count := map[int]int{}
	const windows = 600
	for range windows {
		first := a.leaseShard("alice", []int{0, 1, 2})
		for _, rt := range []*ShardRouter{a, b} {
			for range 3 {
				if got := rt.leaseShard("alice", []int{2, 1, 0}); got != first {
					t.Fatalf("at %s alice's shard is %d on one node and %d on another, or moved within the window", at, first, got)
				}
			}
		}
		count[first]++
		at = at.Add(stickWindow)
	}
	for s := range 3 {
		if n := count[s]; n < windows/3*7/10 || n > windows/3*13/10 {
			t.Errorf("alice's shards over %d windows: %v, want about %d each", windows, count, windows/3)
		}
	}

	// Alice's preferred shard now, and a router where it has no work.
	p := a.preferred("alice")
	queued := []int64{5, 5, 5}
	queued[p] = 0
	other := (p + 1) % 3
	dry := choiceRouter(t, &at, other, queued...)
	if got := dry.leaseShard("alice", []int{p, (p + 2) % 3, other}); got != other {
		t.Errorf("alice's shard %d has no work: got shard %d, want this node's %d", p, got, other)
	}
	queued[other] = 0
	dryHere := choiceRouter(t, &at, other, queued...)
	last := (p + 2) % 3
	if got := dryHere.leaseShard("alice", []int{p, other, last}); got != last {
		t.Errorf("neither alice's shard nor this node's has work: got shard %d, want %d", got, last)
	}
	// A shard's word that it has nothing waiting holds queuedStale: then
	// alice's shard is asked again, as one not heard from (a job may
	// have come to it), after the shards known to have work in the order.
	at = at.Add(queuedStale)
	if got := dryHere.leaseShard("alice", []int{p, other, last}); got != p {
		t.Errorf("alice's shard %d said it had no work %s ago: got shard %d, want it asked again", p, queuedStale, got)
	}
	if got := dryHere.queuedNow(p); got != -1 {
		t.Errorf("shard %d's word of no work, %s old: queuedNow %d, want -1 (not heard from)", p, queuedStale, got)
	}
	if got := dryHere.order(); got[0] != last {
		t.Errorf("order %v: want shard %d, which has work, first", got, last)
	}
	if got := a.leaseShard("", []int{2, 0, 1}); got != 2 {
		t.Errorf("an unknown device got shard %d, want the order's first, 2", got)
	}

	w := httptest.NewRecorder()
	a.nameNode(w, 1)
	if got := w.Header().Get(InChargeHeader); got != "http://node-of-shard-1:7420" {
		t.Errorf("node named for shard 1: %q", got)
	}
}

// A job submitted to a shard that had said it had nothing waiting is
// not left standing while another shard's job runs (as a person trying
// a divided pool saw: 25 s untouched): once that word is queuedStale
// old, the device whose shard of the moment it is asks it again, and
// gets its task.
func TestShardRouterAsksADryShardAgain(t *testing.T) {
	const k = 3
	shards := startShards(t, k)
	// The router's clock starts at the real time (it signs the requests
	// it forwards with it, which the shards check against theirs), put
	// back to the start of its window, and moves on by whole windows,
	// and by queuedStale within one, at the test's word.
	var clock atomic.Int64 // unix milliseconds, from the start of a window
	w := stickWindow.Milliseconds()
	clock.Store(time.Now().UnixMilli() / w * w)
	rc, rt := routerAt(t, shards, func() time.Time { return time.UnixMilli(clock.Load()) })
	alice, bob := newPeer(t, nil), newPeer(t, nil)
	rc.register(t, alice, bob)
	for _, sh := range shards {
		sh.offer(t, bob)
	}
	// A job on shard x, and one planned for shard y, bob's shard of the
	// window the clock is at (the clock is moved to such a window).
	var jx, jy *job.Job
	for i := 0; jx == nil || jy == nil; i++ {
		j := testJob(t, fmt.Sprintf("dry-%d", i), 3)
		switch s := cluster.ShardOf(j.ID, k); {
		case jx == nil:
			jx = j
		case jy == nil && s != cluster.ShardOf(jx.ID, k):
			jy = j
		}
	}
	y := cluster.ShardOf(jy.ID, k)
	for rt.preferred(bob.ID()) != y {
		clock.Add(stickWindow.Milliseconds())
	}
	leaseOne := func() job.ID {
		t.Helper()
		resp := rc.work(t, bob, WorkRequest{Lease: 1}, "")
		if len(resp.Leases) != 1 {
			t.Fatalf("bob was leased %d tasks, want 1", len(resp.Leases))
		}
		return job.ID(resp.Leases[0].Job)
	}
	rc.submit(t, alice, jx)
	// Shard y has nothing: it says so, and bob gets x's task.
	if got := leaseOne(); got != jx.ID {
		t.Fatalf("bob leased a task of %s, want one of the only job, %s", got, jx.ID)
	}
	rc.submit(t, alice, jy)
	clock.Add(queuedStale.Milliseconds())
	if got := leaseOne(); got != jy.ID {
		t.Fatalf("bob leased a task of %s, want one of %s on his shard %d, which had said it had none %s ago", got, jy.ID, y, queuedStale)
	}
}

// The pool's page of a divided pool, through a router over three shard
// coordinators, in a browser: each job says its shard, and the ledger
// shows the count of chains and each shard's head on a line of its own.
func TestPoolPageOfADividedPool(t *testing.T) {
	const k = 3
	shards := startShards(t, k)
	rc, _ := routerFor(t, shards)
	alice, bob, carol := newPeer(t, nil), newPeer(t, nil), newPeer(t, nil)
	rc.register(t, alice, bob, carol)
	for _, sh := range shards {
		sh.offer(t, bob)
		sh.offer(t, carol)
	}
	j := testJob(t, "divided page", 2)
	rc.submit(t, alice, j)
	for _, p := range []*testPeer{bob, carol} {
		for _, l := range rc.work(t, p, WorkRequest{Lease: 2}, "").Leases {
			r := []byte(`{"x":1}`)
			sub := ResultSubmission{Digest: HexDigest(pool.ReplicaDigest(r, false, "")), Result: r}
			if a := rc.do(t, p, "POST", "/v1/leases/"+l.Lease+"/result", sub, ""); a.status != http.StatusOK {
				t.Fatalf("result: %d %s", a.status, a.body)
			}
		}
	}
	shard := cluster.ShardOf(j.ID, k)

	b := webtest.Start(t, 1200, 900)
	ctx, cancel := context.WithTimeout(b.Ctx, patience(t)) // a bound on a hang, not a verdict
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(rc.url+"/")); err != nil {
		t.Fatalf("load the page: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById("ledger-entries").textContent.includes("in 3 chains")`,
		chromedp.WithPollingTimeout(patience(t)))); err != nil {
		t.Fatalf("wait for the ledger of 3 chains: %v (console: %q)", err, b.Errors())
	}
	got, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]string](`({
		entries: document.getElementById("ledger-entries").textContent,
		head: document.getElementById("ledger-head").textContent,
		job: document.querySelector("article.job .id")?.textContent ?? ""})`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(got["entries"], "4 entries in 3 chains") {
		t.Errorf("ledger line %q, want 4 entries in 3 chains", got["entries"])
	}
	lines := strings.Split(got["head"], "\n")
	if len(lines) != k {
		t.Fatalf("ledger heads %q: want one line per shard", got["head"])
	}
	for s, l := range lines {
		if !strings.HasPrefix(l, fmt.Sprintf("shard %d: ", s)) {
			t.Errorf("head line %d: %q, want shard %d's", s, l, s)
		}
	}
	if want := fmt.Sprintf("· shard %d", shard); !strings.Contains(got["job"], want) {
		t.Errorf("the job's line %q does not say %q", got["job"], want)
	}
}
