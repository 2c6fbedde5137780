package coord

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/chromedp"
	"github.com/google/go-cmp/cmp"

	"idlepool/offers"
	"idlepool/pool"
	"idlepool/web/webtest"
)

// dashPool is a coordinator with a running job of tasks tasks at quorum
// 2, submitted by alice's device, and two computing devices of two other
// owners, bob and carol.
type dashPool struct {
	ts                *testServer
	alice, bob, carol *testPeer
	job               string
}

func startDashPool(t *testing.T, tasks int) *dashPool {
	t.Helper()
	ts := startServer(t, nil)
	d := &dashPool{ts: ts, alice: newPeer(t, nil), bob: newPeer(t, nil), carol: newPeer(t, nil)}
	for _, p := range []*testPeer{d.alice, d.bob, d.carol} {
		ts.register(t, p, "", http.StatusCreated)
	}
	j := testJob(t, "dashboard sweep", tasks)
	d.job = j.ID.String()
	if a := ts.upload(t, d.alice, programBytes(t, j)); a.status != http.StatusCreated {
		t.Fatalf("upload: %d %s", a.status, a.body)
	}
	if a := ts.do(t, d.alice, "POST", "/v1/jobs", JobRequest{Canonical: j.Canonical}); a.status != http.StatusCreated {
		t.Fatalf("submit: %d %s", a.status, a.body)
	}
	ts.offer(t, d.bob)
	ts.offer(t, d.carol)
	return d
}

// compute has bob and carol compute tasks until n more are accepted:
// each task's result from two owners, the same.
func (d *dashPool) compute(t *testing.T, n int64) {
	t.Helper()
	accepted := func() int64 {
		got, _ := d.dashboard(t)
		return got.Jobs[0].Accepted
	}
	want := accepted() + n
	for have := accepted(); have < want; have = accepted() {
		for _, p := range []*testPeer{d.bob, d.carol} {
			for _, l := range d.ts.leaseSome(t, p, int(want-have)) {
				d.ts.returnResult(t, p, l, fmt.Sprintf(`{"x":%d}`, l.Task))
			}
		}
	}
}

// dashboard fetches GET /v1/dashboard without signing.
func (d *dashPool) dashboard(t *testing.T) (Dashboard, []byte) {
	t.Helper()
	a := d.ts.do(t, nil, "GET", "/v1/dashboard", nil)
	if a.status != http.StatusOK {
		t.Fatalf("GET /v1/dashboard: %d %s", a.status, a.body)
	}
	var out Dashboard
	a.decode(t, &out)
	return out, a.body
}

// TestDashboardData checks GET /v1/dashboard against a pool at work: the
// job's tasks by state, the devices, receipts per owner and the ledger's
// head as `idlepool ledger verify` computes it, without an account and
// without a result or a device's name.
func TestDashboardData(t *testing.T) {
	d := startDashPool(t, 6)
	// bob and carol each hold a lease on task 0 and 1; bob returns his.
	var held []LeaseGrant
	for _, p := range []*testPeer{d.bob, d.carol} {
		ls := d.ts.leaseSome(t, p, 2)
		if p == d.bob {
			for _, l := range ls {
				d.ts.returnResult(t, p, l, fmt.Sprintf(`{"x":%d}`, l.Task))
			}
		} else {
			held = ls
		}
	}
	first, _ := d.dashboard(t)
	if len(first.Jobs) != 1 {
		t.Fatalf("jobs %+v, want the one job", first.Jobs)
	}
	if j := first.Jobs[0]; j.Job != d.job || j.Name != "dashboard sweep" || j.Tasks != 6 || j.States != "ll...." || j.Accepted != 0 {
		t.Errorf("job while computing: %+v, want 6 tasks, states ll....", j)
	}
	// carol holds her two leases; bob returned his, and is ready with
	// none, though his offer says computing as hers does.
	for _, p := range first.Peers {
		want := map[string]int{d.carol.ID(): 2}[p.Peer]
		if p.Leases != want {
			t.Errorf("peer %s holds %d leases on the page, want %d", p.Peer, p.Leases, want)
		}
	}
	for _, l := range held {
		d.ts.returnResult(t, d.carol, l, fmt.Sprintf(`{"x":%d}`, l.Task))
	}
	d.compute(t, 2)

	got, _ := d.dashboard(t)
	if j := got.Jobs[0]; j.States != "dddd.." || j.Accepted != 4 || j.Complete {
		t.Errorf("job after 4 tasks: %+v, want states dddd.. and 4 accepted", j)
	}
	// Both devices fail task 4 the same way: it is decided, failed.
	reason := "worker: task failed: exit-status: exit status 3"
	for _, p := range []*testPeer{d.bob, d.carol} {
		for _, l := range d.ts.leaseSome(t, p, 1) {
			sub := ResultSubmission{Digest: HexDigest(pool.ReplicaDigest(nil, true, reason)), Failed: true, Reason: reason}
			if a := d.ts.do(t, p, "POST", "/v1/leases/"+l.Lease+"/result", sub); a.status != http.StatusOK {
				t.Fatalf("failure of task %d: %d %s", l.Task, a.status, a.body)
			}
		}
	}
	got, body := d.dashboard(t)
	if j := got.Jobs[0]; j.States != "ddddf." || j.Failed != 1 {
		t.Errorf("job after a failed task: %+v, want states ddddf. and 1 failed", j)
	}
	if len(got.Peers) != 3 {
		t.Errorf("peers %+v, want alice, bob and carol", got.Peers)
	}
	for _, p := range got.Peers {
		want := DashboardPeer{Peer: p.Peer, Owner: p.Owner, Kind: "native"}
		if p.Peer != d.alice.ID() {
			want.State = "computing"
		}
		if p != want {
			t.Errorf("peer %+v, want %+v", p, want)
		}
	}
	// 4 accepted tasks and the verified failure, which is a receipt of
	// cost 0, each.
	wantOwners := map[string]int64{d.bob.owner.ID(): 5, d.carol.owner.ID(): 5}
	for _, o := range got.Owners {
		if wantOwners[o.Owner] != o.Receipts {
			t.Errorf("owner %+v, want %d receipts", o, wantOwners[o.Owner])
		}
		delete(wantOwners, o.Owner)
	}
	if len(wantOwners) > 0 {
		t.Errorf("owners %+v lack %v", got.Owners, wantOwners)
	}
	entries := d.ts.downloadLedger(t, "")
	if len(entries) == 0 {
		t.Fatal("the ledger is empty")
	}
	if want := (DashboardLedger{Entries: entries[len(entries)-1].Seq, Head: entries[len(entries)-1].Hash().String()}); got.Ledger != want {
		t.Errorf("ledger %+v, want %+v", got.Ledger, want)
	}
	if err := pool.VerifyLedger(entries, d.ts.key.Public()); err != nil {
		t.Errorf("the ledger does not verify: %v", err)
	}
	// Nothing a device keeps to itself: no result, no device name.
	for _, secret := range []string{`{\"x\"`, `"x":`, "test device"} {
		if strings.Contains(string(body), secret) {
			t.Errorf("the dashboard shows %q: %s", secret, body)
		}
	}

	// A device that registers from a web browser is one.
	browser := newPeer(t, nil)
	req := d.ts.request(t, "POST", "/v1/peers", mustJSON(t, browser.registration("")))
	req.Header.Set("User-Agent", "Mozilla/5.0 (X11; Linux x86_64) Chrome/140.0")
	SignRequest(req, mustJSON(t, browser.registration("")), browser.key, time.Now())
	if a := d.ts.send(t, req); a.status != http.StatusCreated {
		t.Fatalf("register from a browser: %d %s", a.status, a.body)
	}
	got, _ = d.dashboard(t)
	for _, p := range got.Peers {
		if p.Peer == browser.ID() && p.Kind != "browser" {
			t.Errorf("the browser's device is %+v, want kind browser", p)
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPoolPageHeaders checks that the page and its files come with the
// strict Content-Security-Policy, and that no other path is a file.
func TestPoolPageHeaders(t *testing.T) {
	ts := startServer(t, nil)
	for _, path := range []string{"/", "/web/pool.js", "/web/pool.css", "/web/wasi.js", "/web/icon.png"} {
		a := ts.do(t, nil, "GET", path, nil)
		if a.status != http.StatusOK || len(a.body) == 0 {
			t.Errorf("GET %s: %d, %d bytes", path, a.status, len(a.body))
		}
		if got := a.header.Get("Content-Security-Policy"); got != pageCSP {
			t.Errorf("GET %s: Content-Security-Policy %q, want %q", path, got, pageCSP)
		}
		if got := a.header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("GET %s: X-Content-Type-Options %q", path, got)
		}
	}
	for _, path := range []string{"/web/doc.go", "/web/", "/pool.html", "/web/pool.html"} {
		if a := ts.do(t, nil, "GET", path, nil); a.status == http.StatusOK {
			t.Errorf("GET %s: 200, want no file", path)
		}
	}
}

// TestPoolPageInBrowser loads the pool's page in headless Chromium at a
// phone's width while a job runs: its tasks fill in as they are
// computed, with no console error. With IDLEPOOL_SCREENSHOTS=DIR it
// leaves screenshots of the page at a phone's and a desktop's width in
// DIR.
func TestPoolPageInBrowser(t *testing.T) {
	d := startDashPool(t, 40)
	b := webtest.Start(t, 390, 844)
	ctx, cancel := context.WithTimeout(b.Ctx, patience(t)) // a bound on a hang, not a verdict
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(390, 844), chromedp.Navigate(d.ts.URL()+"/")); err != nil {
		t.Fatalf("load the page: %v", err)
	}
	sel := fmt.Sprintf(`article.job[data-job=%q]`, d.job)
	waitFor := func(expr, what string) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(time.Minute))); err != nil {
			t.Fatalf("wait until %s: %v (console: %q)", what, err, b.Errors())
		}
	}
	waitFor(fmt.Sprintf(`document.querySelector(%q)?.dataset.accepted === "0"`, sel), "the page shows the job")
	d.compute(t, 12)
	waitFor(fmt.Sprintf(`document.querySelector(%q)?.dataset.accepted === "12"`, sel), "the page shows 12 tasks done")
	cells, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%q).length`, sel+" .grid i.t-d")))
	if err != nil || cells != 12 {
		t.Errorf("done cells: %d (%v), want 12", cells, err)
	}
	waitFor(`document.querySelectorAll("#owners tbody tr").length === 2`, "the page shows the two owners' receipts")
	head, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("ledger-head").textContent`))
	if err != nil || len(head) != 64 {
		t.Errorf("ledger head on the page: %q (%v)", head, err)
	}
	if dir := os.Getenv("IDLEPOOL_SCREENSHOTS"); dir != "" {
		for _, v := range []struct {
			name string
			w, h int64
		}{{"pool-phone.png", 390, 844}, {"pool-desktop.png", 1280, 900}} {
			if err := chromedp.Do(ctx, chromedp.EmulateViewport(v.w, v.h)); err != nil {
				t.Fatalf("viewport: %v", err)
			}
			png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
			if err != nil {
				t.Fatalf("screenshot: %v", err)
			}
			if err := os.WriteFile(filepath.Join(dir, v.name), png, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if errs := b.Errors(); len(errs) > 0 {
		t.Errorf("console errors: %q", errs)
	}
}

// TestDashboardSilentDevice: a device that stops calling (a closed tab,
// a machine switched off) keeps its offer and leases until they run out,
// but the page no longer shows it as computing once it has been silent
// for over DashboardSilentAfter; a device that calls again is not.
func TestDashboardSilentDevice(t *testing.T) {
	var clock atomic.Int64 // unix nanoseconds
	clock.Store(time.Now().UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	ts := startServer(t, func(c *Config) { c.Now = now })
	bob, carol := newPeer(t, nil), newPeer(t, nil)
	for _, p := range []*testPeer{bob, carol} {
		ts.register(t, p, "", http.StatusCreated)
		ts.offer(t, p)
	}
	peers := func() map[string]DashboardPeer {
		d := &dashPool{ts: ts}
		got, _ := d.dashboard(t)
		out := map[string]DashboardPeer{}
		for _, p := range got.Peers {
			out[p.Peer] = p
		}
		return out
	}
	for id, p := range peers() {
		if p.Silent || p.State != "computing" {
			t.Errorf("device %s just after its offer: %+v, want computing and not silent", id, p)
		}
	}
	clock.Add(int64(DashboardSilentAfter + time.Second))
	ts.offer(t, carol) // carol calls again; bob does not
	got := peers()
	if p := got[bob.ID()]; !p.Silent || p.State != "computing" {
		t.Errorf("bob, silent for over %v: %+v, want silent (its offer's state still computing)", DashboardSilentAfter, p)
	}
	if p := got[carol.ID()]; p.Silent {
		t.Errorf("carol, who just called: %+v, want not silent", p)
	}
	// The live offers say so too (GET /v1/offers), for the owner's
	// progress line; asking is carol's signed request.
	var live []offers.Offer
	ts.do(t, carol, "GET", "/v1/offers", nil).decode(t, &live)
	silent := map[string]bool{}
	for _, o := range live {
		silent[o.Peer] = o.Silent
	}
	if len(live) != 2 || !silent[bob.ID()] || silent[carol.ID()] {
		t.Errorf("GET /v1/offers: %d offers, silent %v; want bob's marked silent and carol's not", len(live), silent)
	}
}

// TestPoolPageLayout loads the pool's page in headless Chromium at
// 1200x900 in a pool with seven finished jobs and one running. Until its
// first answer comes the page says it is loading, not that the pool is
// empty; then it shows the running job and the three newest finished
// ones, folds the other finished jobs into a closed list, shows every
// device within the first screen, and tells a device that is ready for
// work from one that computes. With IDLEPOOL_SCREENSHOTS=DIR it leaves
// both states' screenshots in DIR.
func TestPoolPageLayout(t *testing.T) {
	ts := startServer(t, nil)
	alice, bob, carol := newPeer(t, nil), newPeer(t, nil), newPeer(t, nil)
	for _, p := range []*testPeer{alice, bob, carol} {
		ts.register(t, p, "", http.StatusCreated)
	}
	submit := func(name string, tasks int) {
		t.Helper()
		j := testJob(t, name, tasks)
		if a := ts.upload(t, alice, programBytes(t, j)); a.status != http.StatusCreated {
			t.Fatalf("upload: %d %s", a.status, a.body)
		}
		if a := ts.do(t, alice, "POST", "/v1/jobs", JobRequest{Canonical: j.Canonical}); a.status != http.StatusCreated {
			t.Fatalf("submit %s: %d %s", name, a.status, a.body)
		}
	}
	for i := range 7 {
		submit(fmt.Sprintf("finished %d", i), 1)
	}
	ts.offer(t, bob)
	ts.offer(t, carol)
	d := &dashPool{ts: ts}
	complete := func() int {
		got, _ := d.dashboard(t)
		n := 0
		for _, j := range got.Jobs {
			if j.Complete {
				n++
			}
		}
		return n
	}
	for round := 0; complete() < 7; round++ {
		if round == 100 {
			t.Fatalf("the 7 jobs are not complete after %d rounds of leases", round)
		}
		for _, p := range []*testPeer{bob, carol} {
			for _, l := range ts.leaseSome(t, p, 7) {
				ts.returnResult(t, p, l, fmt.Sprintf(`{"x":%d}`, l.Task))
			}
		}
	}
	submit("running", 2)
	if ls := ts.leaseSome(t, carol, 1); len(ls) != 1 {
		t.Fatalf("carol got %d leases of the running job, want 1", len(ls))
	}

	b := webtest.Start(t, 1200, 900)
	ctx, cancel := context.WithTimeout(b.Ctx, patience(t)) // a bound on a hang, not a verdict
	defer cancel()
	// The first GET /v1/dashboard waits until the loading state is seen.
	if _, err := chromedp.Call(ctx, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: "*/v1/dashboard"}}}); err != nil {
		t.Fatalf("intercept the dashboard: %v", err)
	}
	paused := make(chan fetch.RequestID, 1)
	events := chromedp.Events(ctx, fetch.RequestPaused)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		first := true
		for ev, err := range events {
			if err != nil {
				return // the test is over
			}
			if first {
				first = false
				paused <- ev.RequestID
				continue
			}
			chromedp.Call(ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: ev.RequestID})
		}
	})
	if err := chromedp.Do(ctx, chromedp.Navigate(ts.URL()+"/")); err != nil {
		t.Fatalf("load the page: %v", err)
	}
	var first fetch.RequestID
	select {
	case first = <-paused:
	case <-ctx.Done():
		t.Fatal("the page asked for no dashboard")
	}
	const texts = `({status: document.getElementById("status").textContent,
		jobs: document.getElementById("jobs").textContent,
		devices: document.querySelector("#peers tbody").textContent,
		owners: document.querySelector("#owners tbody").textContent,
		ledger: document.getElementById("ledger-entries").textContent + document.getElementById("ledger-head").textContent,
		command: document.getElementById("ledger-cmd").textContent})`
	loading, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]string](texts))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"status": "Loading…", "jobs": "Loading…", "devices": "Loading…", "owners": "Loading…", "ledger": "Loading…",
		"command": "idlepool ledger verify " + ts.URL()}
	if diff := cmp.Diff(want, loading); diff != "" {
		t.Errorf("the page before its first answer (-want +got):\n%s", diff)
	}
	dir := os.Getenv("IDLEPOOL_SCREENSHOTS")
	shoot := func(name string) {
		t.Helper()
		if dir == "" {
			return
		}
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	shoot("pool-loading.png")
	if _, err := chromedp.Call(ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: first}); err != nil {
		t.Fatalf("let the dashboard through: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelectorAll("article.job").length === 8`, chromedp.WithPollingTimeout(time.Minute))); err != nil {
		t.Fatalf("wait for the jobs: %v (console: %q)", err, b.Errors())
	}
	type layout struct {
		Shown, Folded []string
		Summary       string
		Open, Hidden  bool
		// DevicesFit: every device's row ends within the window.
		DevicesFit bool
		States     map[string]string // device ID -> its state's words
	}
	got, err := chromedp.Run(ctx, chromedp.Evaluate[layout](`(() => {
		const names = (sel) => [...document.querySelectorAll(sel + " article.job h3")].map((h) => h.textContent);
		const older = document.getElementById("older");
		const rows = [...document.querySelectorAll("#peers tbody tr")];
		return {Shown: names("#jobs"), Folded: names("#older-jobs"), Summary: older.querySelector("summary").textContent,
			Open: older.open, Hidden: older.hidden,
			DevicesFit: rows.every((tr) => tr.getBoundingClientRect().bottom <= window.innerHeight),
			States: Object.fromEntries(rows.map((tr) => [tr.cells[0].title, tr.cells[3].textContent]))};
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	wantLayout := layout{
		Shown:      []string{"running", "finished 6", "finished 5", "finished 4"},
		Folded:     []string{"finished 3", "finished 2", "finished 1", "finished 0"},
		Summary:    "4 older finished jobs",
		DevicesFit: true,
		States:     map[string]string{alice.ID(): "no offer", bob.ID(): "ready, waiting for work", carol.ID(): "computing 1 task"},
	}
	if diff := cmp.Diff(wantLayout, got); diff != "" {
		t.Errorf("the page at 1200x900 (-want +got):\n%s", diff)
	}
	shoot("pool-layout.png")
	if errs := b.Errors(); len(errs) > 0 {
		t.Errorf("console errors: %q", errs)
	}
}

// A coordinator that started after a device registered (a restart, a
// take-over, another shard's coordinator) learns the device's kind from
// its next signed request: a browser's is "browser", an agent's
// "native"; a device that made none since shows "".
func TestDashboardKindAfterRestart(t *testing.T) {
	data := t.TempDir()
	ts, stop := runServer(t, func(c *Config) { c.DataDir = data })
	agentDev, browserDev, quiet := newPeer(t, nil), newPeer(t, nil), newPeer(t, nil)
	for _, p := range []*testPeer{agentDev, browserDev, quiet} {
		ts.register(t, p, "", http.StatusCreated)
	}
	stop()
	ts = startServer(t, func(c *Config) { c.DataDir = data })
	ts.offer(t, agentDev)
	req := ts.request(t, "GET", "/v1/receipts", nil)
	req.Header.Set("User-Agent", "Mozilla/5.0 (X11; Linux x86_64) Chrome/140.0")
	SignRequest(req, nil, browserDev.key, time.Now())
	if a := ts.send(t, req); a.status != http.StatusOK {
		t.Fatalf("a browser's signed request: %d %s", a.status, a.body)
	}
	var d Dashboard
	ts.do(t, nil, "GET", "/v1/dashboard", nil).decode(t, &d)
	want := map[string]string{agentDev.ID(): "native", browserDev.ID(): "browser", quiet.ID(): ""}
	for _, p := range d.Peers {
		if w, ok := want[p.Peer]; ok && p.Kind != w {
			t.Errorf("device %s after the restart: kind %q, want %q", p.Peer, p.Kind, w)
		}
		delete(want, p.Peer)
	}
	if len(want) > 0 {
		t.Errorf("the page lacks %v", want)
	}
}
