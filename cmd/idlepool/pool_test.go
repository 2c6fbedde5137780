package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/agent"
	"idlepool/identity"
	"idlepool/pool"
	"idlepool/store"
)

// The pool tests run a coordinator (`idlepool serve`), agents (`idlepool
// join`) and a submitter (`idlepool submit --follow`) as separate
// processes talking HTTP on 127.0.0.1, each with its own --home (its own
// device and owner keys), and check the merged result against `idlepool
// run` byte for byte.

// daemon is a long-running idlepool process (serve or join).
type daemon struct {
	t      *testing.T
	name   string
	cmd    *exec.Cmd
	stdout string // file
	stderr string // file
	done   chan struct{}
}

// startDaemon starts `idlepool --home home args...`.
func startDaemon(t *testing.T, name, home string, args ...string) *daemon {
	t.Helper()
	logs := t.TempDir()
	d := &daemon{t: t, name: name, stdout: filepath.Join(logs, "stdout"), stderr: filepath.Join(logs, "stderr"), done: make(chan struct{})}
	out, err := os.Create(d.stdout)
	if err != nil {
		t.Fatal(err)
	}
	errf, err := os.Create(d.stderr)
	if err != nil {
		t.Fatal(err)
	}
	shareCompiled(t, home)
	d.cmd = exec.Command(binPath, append([]string{"--home", home}, args...)...)
	d.cmd.Stdout, d.cmd.Stderr = out, errf
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		d.cmd.Wait()
		out.Close()
		errf.Close()
		close(d.done)
	}()
	t.Cleanup(func() {
		d.kill()
		if t.Failed() {
			b, _ := os.ReadFile(d.stderr)
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			t.Logf("%s stderr (tail):\n%s", d.name, b)
		}
	})
	return d
}

// kill sends SIGKILL and waits for the process to end.
func (d *daemon) kill() {
	select {
	case <-d.done:
		return
	default:
	}
	d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.done
}

// stop sends SIGTERM and waits (bounded) for a clean exit.
func (d *daemon) stop() {
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
		if code := d.cmd.ProcessState.ExitCode(); code != 0 {
			d.t.Errorf("%s exited %d after SIGTERM", d.name, code)
		}
	case <-time.After(time.Until(patient(d.t))):
		d.t.Errorf("%s did not stop after SIGTERM", d.name)
		d.kill()
	}
}

var servingLine = regexp.MustCompile(`idlepool: pool (\S+) serving at (http://127\.0\.0\.1:\d+)\n`)

// startServe starts a coordinator (with the extra flags) and returns it
// with its URL, read from the line it prints once it listens.
func startServe(t *testing.T, data, listen string, extra ...string) (*daemon, string) {
	t.Helper()
	d := startDaemon(t, "serve", t.TempDir(), append([]string{"serve", "--listen", listen, "--data", data, "--pool", "lab-a"}, extra...)...)
	var m [][]byte
	if !d.awaitStdout(patient(t), func(b []byte) bool { m = servingLine.FindSubmatch(b); return m != nil }) {
		select {
		case <-d.done:
			errb, _ := os.ReadFile(d.stderr)
			t.Fatalf("serve exited: %s", errb)
		default:
			t.Fatal("serve printed no URL")
		}
	}
	return d, string(m[2])
}

// awaitStdout waits until found accepts what d has printed on stdout so
// far, and reports whether it did before d exited or deadline passed.
func (d *daemon) awaitStdout(deadline time.Time, found func(stdout []byte) bool) bool {
	return d.await(d.stdout, deadline, found)
}

// awaitStderr is awaitStdout for what d printed on stderr.
func (d *daemon) awaitStderr(deadline time.Time, found func(stderr []byte) bool) bool {
	return d.await(d.stderr, deadline, found)
}

func (d *daemon) await(file string, deadline time.Time, found func([]byte) bool) bool {
	for {
		if b, _ := os.ReadFile(file); found(b) {
			return true
		}
		select {
		case <-d.done:
			return false
		default:
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond) // polling a file another process writes
	}
}

// startJoin starts an agent of the device in home. It computes --always:
// the owner's policy would wait on a test machine (no input source, busy
// CPUs); the policy's own tests are in package agent and idle.
func startJoin(t *testing.T, home, url string, extra ...string) *daemon {
	t.Helper()
	return startDaemon(t, "join "+filepath.Base(home), home, append([]string{"join", url, "--workers", "1", "--always"}, extra...)...)
}

// peerID returns the device ID of the device in home, waiting
// for a device that is starting to write its key.
func peerID(t *testing.T, home string) string {
	t.Helper()
	deadline := patient(t)
	for {
		k, err := identity.Load(filepath.Join(home, "config", "device.key"))
		if err == nil {
			return k.ID()
		}
		if !errors.Is(err, os.ErrNotExist) || time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fetchLedger fetches the pool's ledger over plain HTTP, as anyone can.
func fetchLedger(t *testing.T, url string) []pool.Entry {
	t.Helper()
	var all []pool.Entry
	for {
		resp, err := http.Get(fmt.Sprintf("%s/v1/ledger?after=%d", url, len(all)))
		if err != nil {
			t.Fatal(err)
		}
		page, err := agent.ReadLedger(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			return all
		}
		all = append(all, page...)
	}
}

// history runs `idlepool history --json` in home.
func history(t *testing.T, home string) []store.DaySummary {
	t.Helper()
	out := idlepool(t, home, "history", "--json")
	if out.code != 0 {
		t.Fatalf("history: exit %d: %s", out.code, out.stderr)
	}
	var days []store.DaySummary
	if err := json.Unmarshal([]byte(out.stdout), &days); err != nil {
		t.Fatalf("history --json: %v\n%s", err, out.stdout)
	}
	return days
}

// checkLedgerAndHistories verifies the pool's ledger with `ledger verify`,
// checks that no replica has two entries and every task of the jobs (ID ->
// number of tasks) has at least quorum receipts, and that each agent's
// history (once no contribution is pending) counts exactly its receipts
// and their cost.
func checkLedgerAndHistories(t *testing.T, url string, jobs map[string]int64, quorum int, agentHomes []string) {
	t.Helper()
	out := idlepool(t, t.TempDir(), "ledger", "verify", url)
	if out.code != 0 || !strings.HasPrefix(out.stdout, "ledger ok: ") {
		t.Fatalf("ledger verify: exit %d\nstdout %s\nstderr %s", out.code, out.stdout, out.stderr)
	}
	entries := fetchLedger(t, url)
	if want := fmt.Sprintf("ledger ok: %s, head %s\n", entriesText(len(entries)), entries[len(entries)-1].Hash()); out.stdout != want {
		t.Errorf("ledger verify printed %q, want %q", out.stdout, want)
	}
	type replica struct {
		job  string
		task int64
		peer string
	}
	type task struct {
		job  string
		task int64
	}
	seen := map[replica]uint64{}
	receipts := map[task]int{}
	type tally struct {
		receipts, others int64
		cost             float64
	}
	perPeer := map[string]*tally{}
	for _, e := range entries {
		k := replica{e.Job.String(), e.Task, e.Peer}
		if s, dup := seen[k]; dup {
			t.Errorf("ledger entries %d and %d both name task %d of job %.12s and peer %s", s, e.Seq, e.Task, e.Job, e.Peer)
		}
		seen[k] = e.Seq
		if perPeer[e.Peer] == nil {
			perPeer[e.Peer] = &tally{}
		}
		if e.Kind == pool.KindReceipt {
			receipts[task{e.Job.String(), e.Task}]++
			perPeer[e.Peer].receipts++
			perPeer[e.Peer].cost += e.Cost
		} else {
			perPeer[e.Peer].others++
		}
	}
	for id, n := range jobs {
		for i := range n {
			if got := receipts[task{id, i}]; got < quorum {
				t.Errorf("task %d of job %.12s has %d receipts, want at least %d", i, id, got, quorum)
			}
		}
	}
	for _, home := range agentHomes {
		id := peerID(t, home)
		want := perPeer[id]
		if want == nil {
			want = &tally{}
		}
		var got store.DaySummary
		for deadline := patient(t); ; {
			got = store.DaySummary{}
			for _, d := range history(t, home) {
				got.Pending += d.Pending
				got.Confirmed += d.Confirmed
				got.Rejected += d.Rejected
				got.ConfirmedCost += d.ConfirmedCost
			}
			if got.Pending == 0 && got.Confirmed == want.receipts {
				break
			}
			if time.Now().After(deadline) {
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
		// Receipts credit fractions of a unit (the work a task took), whose
		// sums the history (SQLite) and this loop round differently.
		if got.Pending != 0 || got.Confirmed != want.receipts || math.Abs(got.ConfirmedCost-want.cost) > 1e-9*max(1, want.cost) || got.Rejected < want.others {
			t.Errorf("agent %s: history %+v, ledger: %d receipts worth %v, %d other entries", id, got, want.receipts, want.cost, want.others)
		}
	}
}

func TestPoolMatchesRun(t *testing.T) {
	t.Parallel() // long: runs beside the package's other long tests
	tests := []struct {
		name, program, manifest string
		tasks                   int64
	}{
		{"pi", "pi", piManifest(40, 20000), 40},
		{"ising", "ising", `name = "ising-small"
program = "prog.wasm"
[split]
rule = "grid"
[split.params]
L = 8
burnin = 20
sweeps = 100
[split.grid]
T = [1.5, 2.3, 3.0]
rep = [0, 1]
[[merge]]
field = "energy"
rule = "stats"
group_by = "T"
[[merge]]
field = "chi"
rule = "stats"
group_by = "T"
[policy]
time_limit = "60s"
`, 6},
	}
	_, url := startServe(t, t.TempDir(), "127.0.0.1:0")
	// Four agents of three owners: the last two are devices of one person
	// and share an owner key, so they never both count toward one task.
	shared := filepath.Join(t.TempDir(), "owner.key")
	if _, err := identity.LoadOrCreate(shared); err != nil {
		t.Fatal(err)
	}
	var homes []string
	for i := range 4 {
		home := filepath.Join(t.TempDir(), fmt.Sprintf("agent%d", i))
		homes = append(homes, home)
		var extra []string
		if i >= 2 {
			extra = []string{"--owner-key", shared}
		}
		startJoin(t, home, url, extra...)
	}
	jobs := map[string]int64{}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := writeManifest(t, tc.program, tc.manifest)
			r, want := runJSON(t, t.TempDir(), m)
			jobs[r.Job] = tc.tasks
			out := idlepool(t, t.TempDir(), "submit", m, "--pool", url, "--follow", "--json")
			if out.code != 0 {
				t.Fatalf("submit --follow: exit %d\n%s", out.code, out.stderr)
			}
			if diff := cmp.Diff(want, out.stdout); diff != "" {
				t.Fatalf("submit --follow --json differs from run --json (-run +submit):\n%s", diff)
			}
		})
	}
	checkLedgerAndHistories(t, url, jobs, 2, homes)
	// The two devices of one owner never both earn a receipt for one task:
	// agreement must come from distinct owners.
	owners := map[string]map[string]bool{}
	for _, e := range fetchLedger(t, url) {
		if e.Kind != "receipt" {
			continue
		}
		k := fmt.Sprintf("%s/%d", e.Job, e.Task)
		if owners[k] == nil {
			owners[k] = map[string]bool{}
		}
		if owners[k][e.Owner] {
			t.Errorf("task %s has two receipts of owner %s", k, e.Owner)
		}
		owners[k][e.Owner] = true
	}

	// A downloaded copy verifies on its own, given the pool's key; a copy
	// with one cost changed does not.
	resp, err := http.Get(url + "/v1/pool")
	if err != nil {
		t.Fatal(err)
	}
	var info struct{ Key []byte }
	err = json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	key := identity.EncodePublic(info.Key)
	entries := fetchLedger(t, url)
	var text strings.Builder
	for _, e := range entries {
		b, _ := json.Marshal(e)
		text.Write(append(b, '\n'))
	}
	good := writeFile(t, text.String())
	if out := idlepool(t, t.TempDir(), "ledger", "verify", good, "--key", key); out.code != 0 || !strings.HasPrefix(out.stdout, "ledger ok: ") {
		t.Errorf("verify a downloaded copy: exit %d\n%s%s", out.code, out.stdout, out.stderr)
	}
	if out := idlepool(t, t.TempDir(), "ledger", "verify", "--pool", url); out.code != 0 || !strings.HasPrefix(out.stdout, "ledger ok: ") {
		t.Errorf("verify --pool: exit %d\n%s%s", out.code, out.stdout, out.stderr)
	}
	entries[3].Cost += 1
	text.Reset()
	for _, e := range entries {
		b, _ := json.Marshal(e)
		text.Write(append(b, '\n'))
	}
	bad := writeFile(t, text.String())
	if out := idlepool(t, t.TempDir(), "ledger", "verify", bad, "--key", key); out.code != 1 || !strings.Contains(out.stderr, "entry 4") {
		t.Errorf("verify a copy with a changed cost: exit %d, stderr %q; want exit 1 naming entry 4", out.code, out.stderr)
	}
}

func TestPoolSurvivesKills(t *testing.T) {
	t.Parallel() // long: runs beside the package's other long tests
	m := writeManifest(t, "pi", piManifest(40, 1500000)+"lease_timeout = \"3s\"\n")
	r, want := runJSON(t, t.TempDir(), m)

	data := t.TempDir()
	co, url := startServe(t, data, "127.0.0.1:0")
	listen := strings.TrimPrefix(url, "http://")
	var homes []string
	var agents []*daemon
	for i := range 3 {
		home := filepath.Join(t.TempDir(), fmt.Sprintf("agent%d", i))
		homes = append(homes, home)
		agents = append(agents, startJoin(t, home, url))
	}
	subHome := t.TempDir()
	sub := startDaemon(t, "submit", subHome, "submit", m, "--pool", url, "--follow", "--json")

	// status reads the job's status (from the submitting device): tasks
	// decided, and leases held now.
	jobID := ""
	status := func() (decided, leased int64) {
		if jobID == "" {
			matches, _ := filepath.Glob(filepath.Join(subHome, "data", "merges", "*"))
			if len(matches) != 1 {
				return 0, 0
			}
			jobID = filepath.Base(matches[0])
		}
		out := idlepool(t, subHome, "status", jobID, "--pool", url, "--json")
		var st struct{ Accepted, Failed, Leased int64 }
		if out.code != 0 || json.Unmarshal([]byte(out.stdout), &st) != nil {
			return -1, 0
		}
		return st.Accepted + st.Failed, st.Leased
	}
	// waitFor waits until at least n tasks are decided and, if busy, every
	// agent holds a lease (so the next kill hits one in the middle of a task).
	waitFor := func(what string, n int64, busy bool) {
		t.Helper()
		deadline := patient(t)
		for {
			decided, leased := status()
			if decided >= n && (!busy || leased >= int64(len(agents))) {
				t.Logf("%s: %d tasks decided, %d leases held", what, decided, leased)
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("waiting for %s: %d tasks decided (want %d), %d leased", what, decided, n, leased)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	waitFor("kill -9 of an agent", 5, true)
	agents[0].kill() // kill -9 while it computes: its lease must expire and be leased again
	waitFor("kill -9 of the coordinator", 15, false)
	co.kill()
	time.Sleep(500 * time.Millisecond) // everyone notices it is gone
	startServe(t, data, listen)
	agents[0] = startJoin(t, homes[0], url) // it sends what it had not had acknowledged

	// The submitter followed the job across the coordinator's restart;
	// kill it too, and let `result` continue its merge from its journal.
	waitFor("kill -9 of the submitter", 25, false)
	sub.kill()
	out := idlepool(t, subHome, "result", jobID, "--pool", url, "--json")
	if out.code != 0 {
		t.Fatalf("result: exit %d\n%s", out.code, out.stderr)
	}
	if diff := cmp.Diff(want, out.stdout); diff != "" {
		t.Fatalf("result after the kills differs from run --json (-run +result):\n%s", diff)
	}
	if !strings.Contains(out.stderr, "were taken from the journal of an earlier follow") {
		t.Errorf("result did not continue from the journal; stderr:\n%s", out.stderr)
	}
	checkLedgerAndHistories(t, url, map[string]int64{r.Job: 40}, 2, homes)
	for _, a := range agents {
		a.stop()
	}
	for _, home := range homes {
		noStrayWorkers(t, home)
	}
}

func TestOwnerDevicesComputeWithoutReceipts(t *testing.T) {
	t.Parallel()
	m := writeManifest(t, "pi", piManifest(8, 10000)+"participants = \"owner\"\n")
	_, want := runJSON(t, t.TempDir(), m)
	_, url := startServe(t, t.TempDir(), "127.0.0.1:0")

	// The submitting device's owner key is shared by two more devices.
	subHome := t.TempDir()
	if out := idlepool(t, subHome, "status", strings.Repeat("0", 64), "--pool", url); out.code == 0 {
		t.Fatal("status of an unknown job succeeded")
	}
	ownerKey := filepath.Join(subHome, "config", "owner.key")
	var homes []string
	for i := range 2 {
		home := filepath.Join(t.TempDir(), fmt.Sprintf("device%d", i))
		homes = append(homes, home)
		startJoin(t, home, url, "--owner-key", ownerKey)
	}
	out := idlepool(t, subHome, "submit", m, "--pool", url, "--follow", "--json")
	if out.code != 0 {
		t.Fatalf("submit --follow: exit %d\n%s", out.code, out.stderr)
	}
	if diff := cmp.Diff(want, out.stdout); diff != "" {
		t.Fatalf("(-run +submit):\n%s", diff)
	}
	if entries := fetchLedger(t, url); len(entries) != 0 {
		t.Errorf("the ledger has %d entries; the owner's own devices earn none", len(entries))
	}
	var computed int64
	for _, home := range homes {
		for _, d := range history(t, home) {
			if d.Pending != 0 || d.Confirmed != 0 {
				t.Errorf("device %s: %+v, want only rejected (own job) contributions", filepath.Base(home), d)
			}
			computed += d.Rejected
		}
	}
	if computed < 8 {
		t.Errorf("the owner's devices computed %d replicas, want at least 8", computed)
	}
}

func TestPoolCommandsExplainMistakes(t *testing.T) {
	home := t.TempDir()
	tests := []struct {
		name string
		args []string
		code int
		want string // in stderr
	}{
		{"join without URL", []string{"join"}, 2, "join needs a pool URL"},
		{"join bad URL", []string{"join", "127.0.0.1:1"}, 2, "hint: a pool URL looks like"},
		{"submit without pool", []string{"submit", "x.toml"}, 2, "no pool given"},
		{"status blank job", []string{"status", " ", "--pool", "http://127.0.0.1:1"}, 2, `" " is not a job ID`},
		{"status by name unreachable", []string{"status", "nope", "--pool", "http://127.0.0.1:1"}, 1, "cannot reach the pool"},
		{"submit unreachable", []string{"submit", writeManifest(t, "pi", piManifest(2, 10)), "--pool", "http://127.0.0.1:1", "--wait", "0"}, 1, "cannot reach the pool"},
		{"ledger without source", []string{"ledger", "verify"}, 2, "ledger verify needs one ledger file or pool URL"},
		{"ledger damaged file", []string{"ledger", "verify", writeFile(t, "{\"seq\":1}\n"), "--key", identity.EncodePublic(make([]byte, 32))}, 1, "ledger does not verify"},
		{"serve bad listen", []string{"serve", "--listen", "nowhere", "--data", t.TempDir()}, 2, "listen address"},
		{"serve idle-within zero", []string{"serve", "--idle-within", "0s", "--data", t.TempDir()}, 2, "--idle-within 0s: want a positive duration"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := idlepool(t, home, tc.args...)
			if out.code != tc.code || !strings.Contains(out.stderr, tc.want) {
				t.Fatalf("exit %d (want %d), stderr:\n%s\nwant it to contain %q", out.code, tc.code, out.stderr, tc.want)
			}
		})
	}
	if out := idlepool(t, home, "history"); out.code != 0 || !strings.Contains(out.stdout, "no contributions yet") {
		t.Errorf("history of a new device: exit %d, %q", out.code, out.stdout)
	}
}

func writeFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestJoinAgainWithoutURL(t *testing.T) {
	// `idlepool join URL/` records the pool (its URL without the slash);
	// a later plain `idlepool join` joins it again.
	_, url := startServe(t, t.TempDir(), "127.0.0.1:0")
	home := t.TempDir()
	waitStderr := func(d *daemon, want string) {
		t.Helper()
		deadline := patient(t)
		for {
			b, _ := os.ReadFile(d.stderr)
			if strings.Contains(string(b), want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s printed no %q:\n%s", d.name, want, b)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	first := startJoin(t, home, url+"/")
	waitStderr(first, "joining "+url+" as device")
	first.stop()
	again := startDaemon(t, "join again", home, "join", "--workers", "1", "--always")
	waitStderr(again, "joining "+url+" as device")
	waitStderr(again, "with 1 worker\n")
	again.stop()
}

// TestFinishedJobAndCancel: a job queued in pool B, merged to the end
// through pool A and then submitted to pool B again is withdrawn from B
// (its result comes from the merge journal); `cancel` withdraws a job by the 12-digit ID idlepool
// prints (twice is fine), and another owner's device is refused with 403;
// `status` and `result` take the 12-digit ID too.
func TestFinishedJobAndCancel(t *testing.T) {
	t.Parallel()
	m := writeManifest(t, "pi", piManifest(4, 10000))
	_, urlA := startServe(t, t.TempDir(), "127.0.0.1:0")
	_, urlB := startServe(t, t.TempDir(), "127.0.0.1:0")
	for i := range 2 {
		startJoin(t, filepath.Join(t.TempDir(), fmt.Sprintf("donor%d", i)), urlA)
	}
	owner := t.TempDir()
	if out := idlepool(t, owner, "submit", m, "--pool", urlB); out.code != 0 {
		t.Fatalf("submit to pool B: exit %d\n%s", out.code, out.stderr)
	}
	first := idlepool(t, owner, "submit", m, "--pool", urlA, "--follow", "--json")
	if first.code != 0 {
		t.Fatalf("submit to pool A: exit %d\n%s", first.code, first.stderr)
	}
	second := idlepool(t, owner, "submit", m, "--pool", urlB, "--follow", "--json")
	if second.code != 0 || !strings.Contains(second.stderr, "not submitted to pool") || !strings.Contains(second.stderr, "withdrawn from pool") {
		t.Fatalf("submit of a finished job to pool B: exit %d\n%s", second.code, second.stderr)
	}
	if diff := cmp.Diff(first.stdout, second.stdout); diff != "" {
		t.Errorf("result from the journal (-pool A +pool B):\n%s", diff)
	}
	var jobs []json.RawMessage
	stranger := t.TempDir()
	if out := idlepool(t, stranger, "jobs", "--pool", urlB, "--json"); out.code != 0 {
		t.Fatalf("jobs: exit %d\n%s", out.code, out.stderr)
	} else {
		var doc struct {
			Jobs []json.RawMessage `json:"jobs"`
		}
		if err := json.Unmarshal([]byte(out.stdout), &doc); err != nil {
			t.Fatal(err)
		}
		jobs = doc.Jobs
	}
	if len(jobs) != 0 {
		t.Errorf("pool B lists %d jobs, want none: the finished job must not stay queued there", len(jobs))
	}

	// A job nobody computes in pool B, cancelled by its 12-digit ID.
	other := writeManifest(t, "pi", piManifest(3, 10000))
	sub := idlepool(t, owner, "submit", other, "--pool", urlB)
	if sub.code != 0 {
		t.Fatalf("submit: exit %d\n%s", sub.code, sub.stderr)
	}
	short := strings.TrimSpace(sub.stdout)[:12]
	if out := idlepool(t, owner, "status", short, "--pool", urlB); out.code != 0 || !strings.Contains(out.stdout, "state    running") ||
		!strings.Contains(out.stdout, "stalled  nothing is leased until a donor joins") {
		t.Errorf("status by a 12-digit ID, in a pool without donors: exit %d\n%s%s", out.code, out.stdout, out.stderr)
	}
	if out := idlepool(t, stranger, "cancel", short, "--pool", urlB); out.code != 1 ||
		!strings.Contains(out.stderr, "idlepool: pool lab-a refused to cancel job "+short+": this device does not belong to the job's owner") ||
		!strings.Contains(out.stderr, "hint: only a device of the job's owner may cancel it") {
		t.Errorf("cancel by another owner: exit %d\n%s", out.code, out.stderr)
	}
	for range 2 {
		if out := idlepool(t, owner, "cancel", short, "--pool", urlB); out.code != 0 || !strings.Contains(out.stdout, "cancelled in pool lab-a") {
			t.Errorf("cancel: exit %d\n%s%s", out.code, out.stdout, out.stderr)
		}
	}
	if out := idlepool(t, owner, "status", short, "--pool", urlB); !strings.Contains(out.stdout, "state    cancelled") {
		t.Errorf("status after cancel: exit %d\n%s%s", out.code, out.stdout, out.stderr)
	}
	if out := idlepool(t, owner, "result", short, "--pool", urlB); out.code != 1 || !strings.Contains(out.stderr, "cancelled in the pool by its owner") {
		t.Errorf("result of a cancelled job: exit %d\n%s", out.code, out.stderr)
	}
	if out := idlepool(t, owner, "help"); !strings.Contains(out.stdout, "ledger verify FILE [--key KEY]") || !strings.Contains(out.stdout, "cancel JOB --pool URL") {
		t.Errorf("help lacks ledger verify's --key or cancel:\n%s", out.stdout)
	}
}

// TestJobByName: status, result and cancel take a job's name when it
// names one job of the pool, or one of this owner's jobs; a name that
// several jobs have is refused with their IDs, oldest first, and so is an
// unknown name, with a hint; a hex prefix is still an ID's.
func TestJobByName(t *testing.T) {
	t.Parallel()
	_, url := startServe(t, t.TempDir(), "127.0.0.1:0") // no donors: the jobs stay queued
	owner, stranger, nobody := t.TempDir(), t.TempDir(), t.TempDir()
	submit := func(home string, tasks int) string {
		t.Helper()
		out := idlepool(t, home, "submit", writeManifest(t, "pi", piManifest(tasks, 1000)), "--pool", url)
		if out.code != 0 {
			t.Fatalf("submit: exit %d\n%s", out.code, out.stderr)
		}
		return strings.TrimSpace(out.stdout)
	}
	first := submit(owner, 3) // every manifest here is named "pi"
	if out := idlepool(t, nobody, "status", "pi", "--pool", url); out.code != 0 || !strings.Contains(out.stdout, "id       "+first) {
		t.Errorf("status by the name of one job: exit %d\n%s%s", out.code, out.stdout, out.stderr)
	}

	second := submit(owner, 4)
	out := idlepool(t, nobody, "status", "pi", "--pool", url)
	i, j := strings.Index(out.stderr, first[:12]+" (running, 0 of 3 tasks accepted)"), strings.Index(out.stderr, second[:12]+" (running, 0 of 4 tasks accepted)")
	if out.code != 2 || !strings.Contains(out.stderr, `2 jobs in pool lab-a are named "pi", oldest first: `) || i < 0 || j < i ||
		!strings.Contains(out.stderr, "hint: give the job ID (its first 6 or more digits) instead") {
		t.Errorf("status by a name two jobs have: exit %d\n%s", out.code, out.stderr)
	}

	// Of several jobs with the name, the owner's own are taken.
	theirs := submit(stranger, 5)
	if out := idlepool(t, stranger, "status", "pi", "--pool", url); out.code != 0 || !strings.Contains(out.stdout, "id       "+theirs) {
		t.Errorf("status by a name three jobs have, one of them this owner's: exit %d\n%s%s", out.code, out.stdout, out.stderr)
	}
	out = idlepool(t, owner, "status", "pi", "--pool", url)
	if out.code != 2 || !strings.Contains(out.stderr, `2 jobs of yours in pool lab-a are named "pi"`) || strings.Contains(out.stderr, theirs[:12]) {
		t.Errorf("status by a name three jobs have, two of them this owner's: exit %d\n%s", out.code, out.stderr)
	}
	if out := idlepool(t, stranger, "cancel", "pi", "--pool", url); out.code != 0 || !strings.Contains(out.stdout, "job pi ("+theirs[:12]+") cancelled in pool lab-a") {
		t.Errorf("cancel by name: exit %d\n%s%s", out.code, out.stdout, out.stderr)
	}
	if out := idlepool(t, stranger, "result", "pi", "--pool", url); out.code != 1 || !strings.Contains(out.stderr, "cancelled in the pool by its owner") {
		t.Errorf("result by name of the job cancelled: exit %d\n%s", out.code, out.stderr)
	}

	out = idlepool(t, nobody, "status", "pi-quick", "--pool", url)
	if out.code != 2 || !strings.Contains(out.stderr, `pool lab-a has no job named "pi-quick"`) ||
		!strings.Contains(out.stderr, "hint: the pool's page ("+url+" in a browser) lists its newest jobs by name, finished ones too; a job ID's first 6 or more hex digits work too") {
		t.Errorf("status by an unknown name: exit %d\n%s", out.code, out.stderr)
	}
	// A name of hex digits is the job it names while no ID starts with
	// it, and refused once one does: a job whose ID was made to start
	// with another's name is never taken for it.
	named := func(name string) string {
		t.Helper()
		m := strings.Replace(piManifest(6, 1000), `name = "pi"`, `name = "`+name+`"`, 1)
		out := idlepool(t, owner, "submit", writeManifest(t, "pi", m), "--pool", url)
		if out.code != 0 {
			t.Fatalf("submit %s: exit %d\n%s", name, out.code, out.stderr)
		}
		return strings.TrimSpace(out.stdout)
	}
	noID := "decade"
	for _, id := range []string{first, second, theirs} {
		if strings.HasPrefix(id, noID) {
			t.Fatalf("job %s starts with %s: pick another name", id, noID)
		}
	}
	decade := named(noID)
	if out := idlepool(t, nobody, "status", noID, "--pool", url); out.code != 0 || !strings.Contains(out.stdout, "id       "+decade) {
		t.Errorf("status by a name of hex digits no ID starts with: exit %d\n%s%s", out.code, out.stdout, out.stderr)
	}
	named(first[:6])
	if out := idlepool(t, nobody, "status", first[:6], "--pool", url); out.code != 2 ||
		!strings.Contains(out.stderr, first[:6]+" is both the name of a job in pool lab-a and the start of a job's ID ("+first[:12]+")") {
		t.Errorf("status by a name that starts another job's ID: exit %d\n%s%s", out.code, out.stdout, out.stderr)
	}
	if out := idlepool(t, nobody, "status", strings.ToUpper(second[:8]), "--pool", url); out.code != 0 || !strings.Contains(out.stdout, "id       "+second) {
		t.Errorf("status by 8 hex digits: exit %d\n%s%s", out.code, out.stdout, out.stderr)
	}
}
