package webpeer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"idlepool/agent"
	"idlepool/coord"
	"idlepool/pool"
	"idlepool/webpeer"
	"idlepool/worker"
)

// patience bounds every wait: long enough for a busy machine, never a
// verdict on speed.
var patience = 3 * time.Minute

// chromium is where Debian's chromium package puts the browser.
const chromium = "/usr/bin/chromium"

// RequireBrowserEnv set to 1 makes the browser tests fail, instead of
// skip, where chromium is missing (CI sets it).
const RequireBrowserEnv = "IDLEPOOL_REQUIRE_BROWSER"

var (
	binPath   string // the idlepool command, built by TestMain
	piWasm    string // examples/pi built for wasip1
	kfoldWasm string // examples/kfold built for wasip1, a program that reads an input file
	coreDir   string // the browser peer's core, built by webpeer.BuildCore
	buildErr  error
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "idlepool-webpeer-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	os.Setenv(worker.PriorityEnv, "normal") // see cmd/idlepool's tests
	// The builds (idlepool, pi.wasm, the core) only where the tests run.
	if browserPresent() || os.Getenv(RequireBrowserEnv) == "1" {
		buildErr = buildAll(dir)
	}
	return m.Run()
}

func buildAll(dir string) error {
	binPath = filepath.Join(dir, "idlepool")
	if out, err := exec.Command("go", "build", "-o", binPath, "../cmd/idlepool").CombinedOutput(); err != nil {
		return fmt.Errorf("build idlepool: %w\n%s", err, out)
	}
	piWasm, kfoldWasm = filepath.Join(dir, "pi.wasm"), filepath.Join(dir, "kfold.wasm")
	for _, p := range []struct{ out, pkg string }{{piWasm, "../examples/pi"}, {kfoldWasm, "../examples/kfold"}} {
		cmd := exec.Command("go", "build", "-o", p.out, p.pkg)
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build %s: %w\n%s", filepath.Base(p.out), err, out)
		}
	}
	coreDir = filepath.Join(dir, "core")
	if err := os.Mkdir(coreDir, 0o755); err != nil {
		return err
	}
	return webpeer.BuildCore("..", coreDir)
}

// needBrowser skips t where chromium is missing, unless the environment
// requires it.
func needBrowser(t *testing.T) {
	t.Helper()
	if !browserPresent() {
		if os.Getenv(RequireBrowserEnv) == "1" {
			t.Fatalf("%s is missing and %s=1: install Debian's chromium package", chromium, RequireBrowserEnv)
		}
		t.Skipf("%s is missing: install Debian's chromium package to run the browser peer's tests (%s=1 makes this a failure)", chromium, RequireBrowserEnv)
	}
	if buildErr != nil {
		t.Fatal(buildErr)
	}
}

func browserPresent() bool {
	_, err := os.Stat(chromium)
	return err == nil
}

// daemon is an idlepool command running in the background.
type daemon struct {
	cmd    *exec.Cmd
	stdout bytes.Buffer
	stderr *os.File
	done   chan struct{}
}

func start(t *testing.T, name, home string, args ...string) *daemon {
	t.Helper()
	errf, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	d := &daemon{stderr: errf, done: make(chan struct{})}
	d.cmd = exec.Command(binPath, append([]string{"--home", home}, args...)...)
	d.cmd.Stdout, d.cmd.Stderr = &syncBuffer{b: &d.stdout}, errf
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.cmd.Wait(); close(d.done) }()
	t.Cleanup(func() {
		d.cmd.Process.Signal(syscall.SIGKILL)
		<-d.done
		if t.Failed() {
			b, _ := os.ReadFile(errf.Name())
			if len(b) > 3000 {
				b = b[len(b)-3000:]
			}
			t.Logf("%s stderr (tail):\n%s", name, b)
		}
		errf.Close()
	})
	return d
}

var deviceLine = regexp.MustCompile(`as device (id[a-z0-9]+)`)

// deviceOf waits for the device ID that `idlepool join` says it joins as.
func deviceOf(t *testing.T, d *daemon) string {
	t.Helper()
	deadline := time.Now().Add(patience) // patience on a busy machine, not a verdict
	for time.Now().Before(deadline) {
		b, _ := os.ReadFile(d.stderr.Name())
		if m := deviceLine.FindSubmatch(b); m != nil {
			return string(m[1])
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("join did not say its device ID")
	return ""
}

// syncBuffer is a bytes.Buffer safe for one writer and readers.
type syncBuffer struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func idlepool(t *testing.T, home string, args ...string) (string, string, int) {
	t.Helper()
	out, stderr, code := idlepoolNoFatal(t, home, args...)
	if code < 0 {
		t.Fatal(stderr)
	}
	return out, stderr, code
}

// idlepoolNoFatal is idlepool for another goroutine than the test's: a
// command that cannot run gives code -1 and says why in the second string.
func idlepoolNoFatal(t *testing.T, home string, args ...string) (string, string, int) {
	ctx, cancel := context.WithTimeout(t.Context(), patience)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, append([]string{"--home", home}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		return "", err.Error(), -1
	}
	return out.String(), errb.String(), code
}

var servingLine = regexp.MustCompile(`serving at (http://127\.0\.0\.1:\d+)`)

// serve starts a coordinator that serves the freshly built core.
func serve(t *testing.T) string {
	t.Helper()
	d := start(t, "serve", t.TempDir(), "serve", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--pool", "lab-web", "--browser-core", coreDir)
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if m := servingLine.FindStringSubmatch(stdoutOf(d)); m != nil {
			return m[1]
		}
		select {
		case <-d.done:
			t.Fatal("serve exited")
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatal("serve printed no URL")
	return ""
}

func stdoutOf(d *daemon) string {
	s := d.cmd.Stdout.(*syncBuffer)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// pageErrors collects a tab's console errors and uncaught exceptions.
type pageErrors struct {
	mu   sync.Mutex
	errs []string
}

func (p *pageErrors) add(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.errs = append(p.errs, s)
}

func (p *pageErrors) list() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.errs...)
}

// browser opens a headless chromium; console errors and uncaught
// exceptions of its pages are collected in errs.
func browser(t *testing.T, errs *pageErrors) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true), chromedp.UserDataDir(t.TempDir()),
		// WebRTC stays on this machine: no STUN, loopback candidates
		// gathered (the page keeps to them for a pool on loopback), and
		// host candidates as addresses, not mDNS names.
		chromedp.Flag("force-webrtc-ip-handling-policy", "default_public_and_private_interfaces"),
		chromedp.Flag("allow-loopback-in-peer-connection", true),
		chromedp.Flag("disable-features", "site-per-process,Translate,BlinkGenPropertyTrees,WebRtcHideLocalIpsWithMdns"))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelA() })
	err := chromedp.Listen(ctx, func(ev any) {
		switch e := ev.(type) {
		case *runtime.EventExceptionThrown:
			errs.add(fmt.Sprintf("exception: %s %v", e.ExceptionDetails.Text, e.ExceptionDetails.Exception))
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError {
				var parts []string
				for _, a := range e.Args {
					parts = append(parts, string(a.Value))
				}
				errs.add("console.error: " + strings.Join(parts, " "))
			}
		}
	})
	if err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// peerResult is a task the tab returned, in window.idlepoolPeer.
type peerResult struct {
	Job   string `json:"job"`
	Task  int64  `json:"task"`
	OK    bool   `json:"ok"`
	Path  string `json:"path"`
	Ended string `json:"ended"` // the kind of its ledger entry, once the tab saw it
}

// allEnded reports whether the tab saw the ledger entry of every task it
// returned, and returned at least n.
func allEnded(s peerState, n int) bool {
	return len(s.Results) >= n && !slices.ContainsFunc(s.Results, func(r peerResult) bool { return r.Ended == "" })
}

// peerState is what join.js keeps in window.idlepoolPeer.
type peerState struct {
	Status   string            `json:"status"`
	Peer     string            `json:"peer"`
	Owner    string            `json:"owner"`
	KeyKind  string            `json:"keyKind"`
	Results  []peerResult      `json:"results"`
	Receipts []json.RawMessage `json:"receipts"`
	Errors   []string          `json:"errors"`
	// Reported are the transfer reports the pool took (POST /v1/work).
	Reported []struct {
		Job string `json:"job"`
		pool.Transfer
	} `json:"reported"`
	Fetches []struct {
		Digest    string   `json:"digest"`
		Path      string   `json:"path"`
		Bytes     int64    `json:"bytes"`
		PeerBytes int64    `json:"peerBytes"`
		Ms        int64    `json:"ms"`
		Peers     []string `json:"peers"`
	} `json:"fetches"`
	Running        map[string]struct{ Task int64 } `json:"running"`
	FirstResultMs  *float64                        `json:"firstResultMs"`
	FirstReceiptMs *float64                        `json:"firstReceiptMs"`
}

func readState(ctx context.Context, t *testing.T) peerState {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[peerState](`window.idlepoolPeer || {}`))
	if err != nil {
		t.Fatalf("read the page's state: %v", err)
	}
	return s
}

// waitState polls the page until ok says its state will do.
func waitState(ctx context.Context, t *testing.T, what string, ok func(peerState) bool) peerState {
	t.Helper()
	deadline := time.Now().Add(patience) // patience on a busy machine, not a verdict
	for {
		s := readState(ctx, t)
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + "\n" + document.body.innerText`))
			t.Fatalf("the browser peer did not get to %s: status %q, errors %v; the page:\n%s", what, s.Status, s.Errors, text)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// writeManifest writes a job of the pi example; writeJob one of program
// with the files named (name -> contents) beside it.
func writeManifest(t *testing.T, text string) string {
	t.Helper()
	return writeJob(t, piWasm, text, nil)
}

func writeJob(t *testing.T, program, text string, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	b, err := os.ReadFile(program)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, filepath.Base(program)), b, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m := filepath.Join(dir, "job.toml")
	if err := os.WriteFile(m, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return m
}

const piJob = `name = "pi-browser"
program = "pi.wasm"

[split]
rule = "range"
tasks = %d

[split.params]
samples = %d

[[merge]]
field = "inside"
rule = "sum"

[[merge]]
field = "samples"
rule = "sum"

[policy]
memory_mib = 256
time_limit = "120s"
redundancy = %d
quorum = %d
`

// waitMetric waits until the coordinator's metric name is above 0.
func waitMetric(t *testing.T, url, name string) {
	t.Helper()
	deadline := time.Now().Add(patience) // patience on a busy machine, not a verdict
	for {
		resp, err := http.Get(url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				if n, err := strconv.ParseFloat(v, 64); err == nil && n > 0 {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the coordinator's %s stayed 0", name)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// kfoldJob is a job whose tasks read an input file: the kfold example
// on a small data set (kfoldData), every task computed by two devices.
const kfoldJob = `name = "kfold-browser"
program = "kfold.wasm"

[inputs]
data = "data.csv"

[split]
rule = "kfold"
k = 5
input = "data"
shuffle = false

[[merge]]
field = "gaussian_nb_correct"
rule = "sum"

[[merge]]
field = "knn5_correct"
rule = "sum"

[[merge]]
field = "test_rows"
rule = "sum"

[policy]
memory_mib = 64
time_limit = "120s"
redundancy = 2
quorum = 2
`

// kfoldData is a data set of two classes in four features, 40 rows.
func kfoldData() string {
	var b strings.Builder
	b.WriteString("f1,f2,f3,f4,label\n")
	for i := range 40 {
		c := i % 2
		fmt.Fprintf(&b, "%d.%d,%d.%d,%d.%d,%d.%d,%d\n", 1+4*c+i%3, i%10, 2+3*c, (i*7)%10, 5-2*c+i%2, (i*3)%10, 1+c, i%7, c)
	}
	return b.String()
}

// ledgerOf fetches and verifies the pool's ledger.
func ledgerOf(t *testing.T, url string) []pool.Entry {
	t.Helper()
	var info coord.PoolInfo
	resp, err := http.Get(url + "/v1/pool")
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	resp, err = http.Get(url + "/v1/ledger")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	entries, err := agent.ReadLedger(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if err := pool.VerifyLedger(entries, info.Key); err != nil {
		t.Fatalf("the pool's ledger does not verify: %v", err)
	}
	return entries
}

// TestBrowserPeerComputesToQuorum runs a pi job of redundancy 2 on one
// native agent and one browser tab of another owner: every task needs
// both, so the browser's results must be byte-identical (and count the
// same work) as the native worker's. The merged result equals `run
// --json`, the browser's receipts are in the pool's verified ledger, and
// the page loads under its Content-Security-Policy without a console
// error.
func TestBrowserPeerComputesToQuorum(t *testing.T) {
	needBrowser(t)
	url := serve(t)
	// The native agent serves its chunks at full speed, not at a donor's
	// default cap of 1 MiB/s (the tab's fetch would take seconds).
	native := t.TempDir()
	if _, stderr, code := idlepool(t, native, "settings", "set", "share_upload=unlimited"); code != 0 {
		t.Fatalf("settings set share_upload=unlimited: exit %d\n%s", code, stderr)
	}
	agentID := deviceOf(t, start(t, "join", native, "join", url, "--workers", "1", "--always"))

	const tasks = 4
	m := writeManifest(t, fmt.Sprintf(piJob, tasks, 200000, 2, 2))
	km := writeJob(t, kfoldWasm, kfoldJob, map[string]string{"data.csv": kfoldData()})
	// The solo runs to compare with go on beside the pool's work.
	solo := func(m string) <-chan [2]string {
		ch := make(chan [2]string, 1)
		home := t.TempDir()
		go func() {
			out, stderr, code := idlepoolNoFatal(t, home, "run", m, "--json")
			if code != 0 {
				out = ""
				stderr = fmt.Sprintf("run --json %s: exit %d\n%s", filepath.Base(filepath.Dir(m)), code, stderr)
			}
			ch <- [2]string{out, stderr}
		}()
		return ch
	}
	piSolo, kfoldSolo := solo(m), solo(km)
	soloResult := func(ch <-chan [2]string) string {
		r := <-ch
		if r[0] == "" {
			t.Fatal(r[1])
		}
		return r[0]
	}
	// The job waits in the pool before the tab opens, so that the time
	// to its first accepted result is the page's own.
	subHome := t.TempDir()
	// The submitter seeds the job's files to the pool's devices while
	// it follows the job (the kfold job below): at full speed too.
	if _, stderr, code := idlepool(t, subHome, "settings", "set", "share_upload=unlimited"); code != 0 {
		t.Fatalf("settings set share_upload=unlimited: exit %d\n%s", code, stderr)
	}
	if _, stderr, code := idlepool(t, subHome, "submit", m, "--pool", url); code != 0 {
		t.Fatalf("submit: exit %d\n%s", code, stderr)
	}

	// The native agent announces the program's chunks once it fetched
	// them: from then on the tab finds it as their holder.
	waitMetric(t, url, "idlepool_coord_tracker_chunks")

	var errs pageErrors
	ctx := browser(t, &errs)
	if err := chromedp.Do(ctx, chromedp.Navigate(url+"/join?start=1&cores=1")); err != nil {
		t.Fatal(err)
	}
	s := waitState(ctx, t, "registering", func(s peerState) bool { return s.Owner != "" })
	t.Logf("browser peer %s of owner %s (%s)", s.Peer, s.Owner, s.KeyKind)
	got, stderr, code := idlepool(t, subHome, "submit", m, "--pool", url, "--follow", "--json")
	if code != 0 {
		s := readState(ctx, t)
		t.Fatalf("submit --follow --json: exit %d\n%s\nthe browser: status %q, results %v, errors %v", code, stderr, s.Status, s.Results, s.Errors)
	}
	if want := soloResult(piSolo); got != want {
		t.Errorf("the pooled result differs from run --json:\nrun:    %s\npooled: %s", want, got)
	}
	// The tab reported how it fetched the job's files before its results,
	// as the native agent did: the owner's data line counts both devices.
	if !strings.Contains(stderr, "of 2 peers direct") {
		t.Errorf("submit --follow's data line does not count the browser's fetches:\n%s", stderr)
	}
	s = waitState(ctx, t, "receipts for its results", func(s peerState) bool { return len(s.Results) >= tasks && len(s.Receipts) >= tasks })
	if s.FirstResultMs != nil && s.FirstReceiptMs != nil {
		t.Logf("first result returned %.0f ms, first receipt seen %.0f ms after the page opened", *s.FirstResultMs, *s.FirstReceiptMs)
	}
	for _, r := range s.Results {
		if !r.OK {
			t.Errorf("the browser's result of task %d failed", r.Task)
		}
	}
	entries := ledgerOf(t, url)
	var mine int
	for _, e := range entries {
		if e.Peer == s.Peer {
			mine++
		}
	}
	if mine < tasks {
		t.Errorf("the ledger has %d receipts of the browser peer %s, want %d (one per task)", mine, s.Peer, tasks)
	}
	if len(s.Receipts) != mine {
		t.Errorf("the page shows %d receipts, the ledger has %d", len(s.Receipts), mine)
	}
	// Each task's row says how it ended once the tab has its receipt, and
	// names the task by its index among the job's tasks.
	s = waitState(ctx, t, "every task's row saying how it ended", func(s peerState) bool { return allEnded(s, tasks) })
	for _, r := range s.Results {
		if r.Ended != pool.KindReceipt {
			t.Errorf("task %d ended as %q, want %q", r.Task, r.Ended, pool.KindReceipt)
		}
	}
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[[][]string](`[...document.querySelectorAll("#tasks tr")].map((tr) => [...tr.cells].map((td) => td.textContent))`))
	if err != nil {
		t.Fatal(err)
	}
	taskCell := regexp.MustCompile(fmt.Sprintf(`^index [0-%d] \(%d tasks\)$`, tasks-1, tasks))
	for _, row := range rows {
		if len(row) != 5 || !taskCell.MatchString(row[2]) || row[4] != "accepted" {
			t.Errorf("the row of a task reads %q, want its index among %d tasks and state accepted", row, tasks)
		}
	}
	var total, fromPeers int64
	fromAgent := false
	for _, f := range s.Fetches {
		t.Logf("file %s fetched via %s in %d ms (%d of %d bytes from devices)", f.Digest[:12], f.Path, f.Ms, f.PeerBytes, f.Bytes)
		total += f.Bytes
		fromPeers += f.PeerBytes
		fromAgent = fromAgent || slices.Contains(f.Peers, agentID)
	}
	conns, _ := chromedp.Run(ctx, chromedp.Evaluate[any](`window.idlepoolP2P.conns()`))
	t.Logf("the tab's connections: %v", conns)
	if !fromAgent {
		t.Errorf("no file of the browser came over a data channel from the native agent %s: %+v", agentID, s.Fetches)
	}
	if fromPeers == 0 {
		t.Errorf("no byte of the browser's files came over a data channel from a device: %+v", s.Fetches)
	} else {
		t.Logf("%d of %d bytes (%.0f%%) of the browser's files came over data channels", fromPeers, total, 100*float64(fromPeers)/float64(total))
	}
	viaPeer := 0
	for _, r := range s.Results {
		if strings.HasPrefix(r.Path, "peer ") {
			viaPeer++
		}
	}
	if viaPeer == 0 {
		t.Errorf("the page shows no task whose files came from a device: %+v", s.Results)
	}
	// The pool took the tab's report of those bytes (POST /v1/work), and
	// its page shows the browser's fetches as direct.
	var reported pool.Transfer
	for _, r := range s.Reported {
		if r.Job == s.Results[0].Job {
			reported = reported.Add(r.Transfer)
		}
	}
	if fromPeers > 0 && reported.Direct != fromPeers {
		t.Errorf("the tab reported %+v for the pi job, want the %d bytes it got from devices as direct", reported, fromPeers)
	}
	if p := dashboardPeer(t, url, s.Peer); p.Kind != "browser" || p.Connection != "direct" {
		t.Errorf("the pool's page shows the browser as %+v, want kind browser and connection direct", p)
	}

	// A job whose tasks read an input file: the tab fetches it (over a
	// data channel where the native agent holds it), checks it against
	// its digest, and computes every task; quorum 2 means its results
	// and work counts equal the native worker's.
	got, stderr, code = idlepool(t, subHome, "submit", km, "--pool", url, "--follow", "--json")
	if code != 0 {
		s := readState(ctx, t)
		t.Fatalf("submit --follow --json of the kfold job: exit %d\n%s\nthe browser: status %q, errors %v", code, stderr, s.Status, s.Errors)
	}
	if want := soloResult(kfoldSolo); got != want {
		t.Errorf("the pooled kfold result differs from run --json:\nrun:    %s\npooled: %s", want, got)
	}
	// The job completes when the pool has both replicas of its last
	// task; the page lists that task once the pool has answered its
	// result, which may be a moment later.
	inputTasks := func(s peerState) int {
		n := 0
		for _, r := range s.Results {
			if r.Job != s.Results[0].Job && r.OK {
				n++
			}
		}
		return n
	}
	s = waitState(ctx, t, "listing the 5 tasks of the job with an input file", func(s peerState) bool { return inputTasks(s) >= 5 })
	if inputTasks := inputTasks(s); inputTasks != 5 {
		t.Errorf("the browser returned %d tasks of the job with an input file, want all 5: %+v, errors %v", inputTasks, s.Results, s.Errors)
	}
	for _, f := range s.Fetches {
		t.Logf("file %s fetched via %s in %d ms (%d of %d bytes from devices)", f.Digest[:12], f.Path, f.Ms, f.PeerBytes, f.Bytes)
	}
	s = waitState(ctx, t, "every task's row saying how it ended", func(s peerState) bool { return allEnded(s, tasks+5) })
	for _, r := range s.Results {
		if r.Ended != pool.KindReceipt {
			t.Errorf("task %d of job %s ended as %q, want %q", r.Task, r.Job[:12], r.Ended, pool.KindReceipt)
		}
	}
	if e := errs.list(); len(e) > 0 {
		t.Errorf("the page logged errors: %v", e)
	}
	if dir := os.Getenv("IDLEPOOL_SCREENSHOTS"); dir != "" {
		screenshot(ctx, t, filepath.Join(dir, "join-done.png"))
		if err := chromedp.Do(ctx, chromedp.Navigate(url+"/")); err != nil {
			t.Fatal(err)
		}
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelectorAll("article.job").length > 0`, chromedp.WithPollingTimeout(patience))); err != nil {
			t.Fatal(err)
		}
		screenshot(ctx, t, filepath.Join(dir, "pool-with-browser.png"))
	}
}

// dashboardPeer returns device id as GET /v1/dashboard shows it.
func dashboardPeer(t *testing.T, url, id string) coord.DashboardPeer {
	t.Helper()
	resp, err := http.Get(url + "/v1/dashboard")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var d coord.Dashboard
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
		t.Fatal(err)
	}
	for _, p := range d.Peers {
		if p.Peer == id {
			return p
		}
	}
	t.Fatalf("the dashboard lacks device %s: %+v", id, d.Peers)
	return coord.DashboardPeer{}
}

// screenshot writes the tab's whole page to path as PNG
// (IDLEPOOL_SCREENSHOTS=DIR).
func screenshot(ctx context.Context, t *testing.T, path string) {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1200, 900)); err != nil {
		t.Fatal(err)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestBrowserTabClosedMidTask closes the tab while it computes a task
// (a tab whose key is the fallback's, the core's Ed25519):
// the page hands its lease back as it closes, so the task is leased
// again at once (not when the lease expires, minutes later) and the job
// finishes on a native agent that joins afterwards.
func TestBrowserTabClosedMidTask(t *testing.T) {
	needBrowser(t)
	url := serve(t)
	var errs pageErrors
	first := browser(t, &errs)
	if err := chromedp.Do(first, chromedp.Navigate("about:blank")); err != nil {
		t.Fatal(err)
	}
	tab, closeTab := chromedp.NewContext(first)
	defer closeTab()
	// This tab signs with the core's Ed25519, the fallback for browsers
	// whose WebCrypto lacks it: registration, leases and the hand-back
	// on closing must work with it too.
	if err := chromedp.Do(tab, chromedp.Navigate(url+"/join?start=1&cores=1&keys=fallback")); err != nil {
		t.Fatal(err)
	}
	s := waitState(tab, t, "registering", func(s peerState) bool { return s.Owner != "" })
	if !strings.Contains(s.KeyKind, "seed") {
		t.Errorf("keys=fallback: the key is kept as %q, want the core's seed", s.KeyKind)
	}
	// With no job in the pool the tab says it waits for work, not that it
	// computes.
	s = waitState(tab, t, "waiting for work", func(s peerState) bool { return strings.Contains(s.Status, "waiting for work") })
	if want := "Ready on 1 core: waiting for work from the pool lab-web"; s.Status != want {
		t.Errorf("the idle tab says %q, want %q", s.Status, want)
	}
	if dir := os.Getenv("IDLEPOOL_SCREENSHOTS"); dir != "" {
		screenshot(tab, t, filepath.Join(dir, "join-waiting.png"))
	}
	// Tasks long enough that the tab is in the middle of one when it
	// closes, whatever the machine's speed.
	m := writeManifest(t, fmt.Sprintf(piJob, 2, 20000000, 1, 1))
	subHome := t.TempDir() // the job's merger: the same home follows it below
	if _, stderr, code := idlepool(t, subHome, "submit", m, "--pool", url); code != 0 {
		t.Fatalf("submit: exit %d\n%s", code, stderr)
	}
	s = waitState(tab, t, "computing a task", func(s peerState) bool { return len(s.Running) > 0 })
	if want := "Computing 1 task for the pool lab-web on 1 core"; s.Status != want {
		t.Errorf("the computing tab says %q, want %q", s.Status, want)
	}
	var held int64
	for _, r := range s.Running {
		held = r.Task
	}
	closeTab()
	start(t, "join", t.TempDir(), "join", url, "--workers", "1", "--always")
	// Within patience (3 minutes), before the lease would expire (5):
	// the tab handed the task back.
	if _, stderr, code := idlepool(t, subHome, "submit", m, "--pool", url, "--follow", "--json"); code != 0 {
		t.Fatalf("submit --follow after the tab closed: exit %d\n%s", code, stderr)
	}
	computed := false
	for _, e := range ledgerOf(t, url) {
		if e.Peer == s.Peer {
			t.Errorf("the closed tab earned a receipt: %+v", e)
		}
		if e.Task == held && e.Peer != "" {
			computed = true
		}
	}
	if !computed {
		t.Errorf("task %d, which the tab held when it closed, has no receipt of another device", held)
	}
}
