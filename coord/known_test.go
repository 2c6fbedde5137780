package coord

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"idlepool/job"
	"idlepool/pool"
)

// knownJob plans a job of tasks tasks whose [verify] table has extra and
// known_answers naming answers (task index → result).
func knownJob(t *testing.T, name string, tasks int, extra string, answers map[int64]string) *job.Job {
	t.Helper()
	dir := t.TempDir()
	prog := append([]byte("\x00asm\x01\x00\x00\x00"), name...)
	if err := os.WriteFile(filepath.Join(dir, "prog.wasm"), prog, 0o600); err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for i, r := range answers {
		m[fmt.Sprint(i)] = job.Digest(sha256.Sum256([]byte(r))).String()
	}
	b, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(dir, "answers.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	manifest := fmt.Sprintf(`name = %q
program = "prog.wasm"
[split]
rule = "range"
tasks = %d
[[merge]]
field = "x"
rule = "sum"
[policy]
redundancy = 2
quorum = 2
[verify]
known_answers = "answers.json"
%s`, name, tasks, extra)
	mf, err := job.ParseManifest("test.toml", dir, []byte(manifest))
	if err != nil {
		t.Fatal(err)
	}
	j, err := job.Plan(mf)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// submitKnown submits j with its known answers beside it, as the agent's
// Submit does: the pool names the answers among the missing files, keeps
// them, and the job's ID is the one it has without them.
func (ts *testServer) submitKnown(t *testing.T, owner *testPeer, j *job.Job) {
	t.Helper()
	d := HexDigest(j.KnownAnswers.SHA256)
	req := JobRequest{Canonical: j.Canonical, KnownAnswers: &d}
	a := ts.do(t, owner, "POST", "/v1/jobs", req)
	if a.status != http.StatusConflict {
		t.Fatalf("first submit: %d %s, want 409 missing_files", a.status, a.body)
	}
	missing := a.errorBody(t).Missing
	for _, d := range []HexDigest{HexDigest(j.Program.SHA256), d} {
		if !slices.Contains(missing, d) {
			t.Fatalf("missing %v does not name %s", missing, job.Digest(d))
		}
	}
	ts.upload(t, owner, programBytes(t, j))
	answers, err := os.ReadFile(j.KnownAnswers.Path)
	if err != nil {
		t.Fatal(err)
	}
	ts.upload(t, owner, answers)
	var created JobCreated
	a = ts.do(t, owner, "POST", "/v1/jobs", req)
	if a.status != http.StatusCreated {
		t.Fatalf("submit: %d %s", a.status, a.body)
	}
	a.decode(t, &created)
	if job.Digest(created.Job) != j.ID {
		t.Fatalf("job created as %s, want %s", job.Digest(created.Job), j.ID)
	}
}

// leaseSome leases at most max tasks to p.
func (ts *testServer) leaseSome(t *testing.T, p *testPeer, max int) []LeaseGrant {
	t.Helper()
	a := ts.do(t, p, "POST", "/v1/leases", LeaseRequest{Max: max})
	if a.status != http.StatusOK {
		t.Fatalf("lease for %s: %d %s", p.ID(), a.status, a.body)
	}
	var lr LeaseResponse
	a.decode(t, &lr)
	return lr.Leases
}

// returnResult submits result for lease l of p.
func (ts *testServer) returnResult(t *testing.T, p *testPeer, l LeaseGrant, result string) {
	t.Helper()
	r := []byte(result)
	sub := ResultSubmission{Digest: HexDigest(pool.ReplicaDigest(r, false, "")), Result: r}
	if a := ts.do(t, p, "POST", "/v1/leases/"+l.Lease+"/result", sub); a.status != http.StatusOK {
		t.Fatalf("result of task %d from %s: %d %s", l.Task, p.ID(), a.status, a.body)
	}
}

// TestKnownAnswerCatchesTrustedLiar, over real HTTP: a device earns trust
// (trust_after = 1), then computes tasks alone and lies on each; its
// lies are held back. The job's last task has an answer its owner knows;
// the device's wrong answer to it is a deviation at once, though no other
// device computed that task, and every result it held becomes suspect and
// is computed again by two other owners: the merge gets only right
// results and the liar's receipts for the held ones are revoked. The
// known-answers file is never served, and a lease of the known task looks
// like any other.
func TestKnownAnswerCatchesTrustedLiar(t *testing.T) {
	ts := startServer(t, nil)
	owner, liar, honest1, honest2 := newPeer(t, nil), newPeer(t, nil), newPeer(t, nil), newPeer(t, nil)
	for _, p := range []*testPeer{owner, liar, honest1, honest2} {
		ts.register(t, p, "", http.StatusCreated)
		ts.offer(t, p)
	}
	const tasks, right, wrong = 6, `{"x":1}`, `{"x":666}`
	j := knownJob(t, "known", tasks, "min_quorum = 1\ntrust_after = 1\nspot_check = 0.000000001\n", map[int64]string{tasks - 1: right})
	ts.submitKnown(t, owner, j)

	// Peers fetch the program by digest; the answers are refused as absent.
	if a := ts.do(t, honest1, "GET", "/v1/blobs/"+j.Program.SHA256.String(), nil); a.status != http.StatusOK {
		t.Errorf("program blob: %d", a.status)
	}
	a := ts.do(t, liar, "GET", "/v1/blobs/"+j.KnownAnswers.SHA256.String(), nil)
	if a.status != http.StatusNotFound || a.errorBody(t).Code != "unknown_blob" {
		t.Errorf("known-answers blob: %d %s, want 404 unknown_blob", a.status, a.body)
	}
	// Nor its chunks: their list would let a peer fetch the file by
	// chunk (GET /v1/chunks/{digest}).
	a = ts.do(t, liar, "GET", "/v1/blobs/"+j.KnownAnswers.SHA256.String()+"/chunks", nil)
	if a.status != http.StatusNotFound || a.errorBody(t).Code != "unknown_blob" {
		t.Errorf("known-answers blob's chunks: %d %s, want 404 unknown_blob", a.status, a.body)
	}

	// Task 0, computed by two owners, makes both trusted.
	l := ts.leaseSome(t, liar, 1)
	h := ts.leaseSome(t, honest1, 1)
	if len(l) != 1 || len(h) != 1 || l[0].Task != 0 || h[0].Task != 0 {
		t.Fatalf("leases %+v %+v, want task 0 for both", l, h)
	}
	ts.returnResult(t, liar, l[0], right)
	ts.returnResult(t, honest1, h[0], right)

	// The liar, trusted, computes the rest alone and lies; the leases of
	// the known task and the others carry the same fields.
	var shapes []string
	for i := int64(1); i < tasks; i++ {
		ls := ts.leaseSome(t, liar, 1)
		if len(ls) != 1 || ls[0].Task != i {
			t.Fatalf("liar's lease %d: %+v", i, ls)
		}
		raw, _ := json.Marshal(ls[0])
		var fields map[string]any
		json.Unmarshal(raw, &fields)
		keys := make([]string, 0, len(fields))
		for k := range fields {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		shapes = append(shapes, strings.Join(keys, ","))
		ts.returnResult(t, liar, ls[0], wrong)
	}
	if len(slices.Compact(slices.Clone(shapes))) != 1 {
		t.Errorf("lease shapes differ: %v", shapes)
	}

	// Caught on the known task: no other device computed it, yet the
	// liar's replica is a deviation already.
	var caught bool
	for _, e := range ts.downloadLedger(t, "") {
		if e.Kind == pool.KindDeviation && e.Peer == liar.ID() && e.Task == tasks-1 {
			caught = true
		}
	}
	if !caught {
		t.Fatalf("no deviation of the liar on the known task %d", tasks-1)
	}

	// The honest devices compute whatever the pool wants, with the right
	// result, until the job is complete.
	for round := 0; round < 50; round++ {
		var st JobInfo
		ts.do(t, owner, "GET", "/v1/jobs/"+j.ID.String(), nil).decode(t, &st)
		if st.Complete {
			break
		}
		for _, p := range []*testPeer{honest1, honest2} {
			for _, g := range ts.leaseSome(t, p, 8) {
				ts.returnResult(t, p, g, right)
			}
		}
	}
	var res Results
	ts.do(t, owner, "GET", "/v1/jobs/"+j.ID.String()+"/results", nil).decode(t, &res)
	if len(res.Results) != tasks {
		t.Fatalf("%d results, want %d: %+v", len(res.Results), tasks, res.Results)
	}
	for _, v := range res.Results {
		if v.Status != pool.OutcomeOK || string(v.Result) != right {
			t.Errorf("task %d: %s %q, want ok %s", v.Task, v.Status, v.Result, right)
		}
	}
	revoked := map[int64]bool{}
	for _, e := range ts.downloadLedger(t, "") {
		if e.Kind == pool.KindRevocation && e.Peer == liar.ID() {
			revoked[e.Task] = true
		}
	}
	for i := int64(1); i < tasks-1; i++ {
		if !revoked[i] {
			t.Errorf("the liar's receipt for held task %d was not revoked (revoked: %v)", i, revoked)
		}
	}
}

// TestKnownAnswerWithoutTrust: in a job replicated as usual, a replica
// that returns other bytes than the known answer deviates even when a
// colluding second owner returns the same bytes, and the task is decided
// by honest owners.
func TestKnownAnswerWithoutTrust(t *testing.T) {
	ts := startServer(t, nil)
	owner, liar1, liar2, honest1, honest2 := newPeer(t, nil), newPeer(t, nil), newPeer(t, nil), newPeer(t, nil), newPeer(t, nil)
	for _, p := range []*testPeer{owner, liar1, liar2, honest1, honest2} {
		ts.register(t, p, "", http.StatusCreated)
		ts.offer(t, p)
	}
	const right, wrong = `{"x":1}`, `{"x":666}`
	j := knownJob(t, "collude", 1, "", map[int64]string{0: right})
	ts.submitKnown(t, owner, j)
	l1, l2 := ts.leaseSome(t, liar1, 1), ts.leaseSome(t, liar2, 1)
	if len(l1) != 1 || len(l2) != 1 {
		t.Fatalf("leases %+v %+v", l1, l2)
	}
	ts.returnResult(t, liar1, l1[0], wrong)
	ts.returnResult(t, liar2, l2[0], wrong) // two owners agree, on a wrong answer
	for _, p := range []*testPeer{honest1, honest2} {
		for _, g := range ts.leaseSome(t, p, 1) {
			ts.returnResult(t, p, g, right)
		}
	}
	var res Results
	ts.do(t, owner, "GET", "/v1/jobs/"+j.ID.String()+"/results", nil).decode(t, &res)
	if len(res.Results) != 1 || string(res.Results[0].Result) != right {
		t.Fatalf("results %+v, want the known answer", res.Results)
	}
	kinds := map[string]string{}
	for _, e := range ts.downloadLedger(t, "") {
		kinds[e.Peer] = e.Kind
	}
	want := map[string]string{liar1.ID(): pool.KindDeviation, liar2.ID(): pool.KindDeviation,
		honest1.ID(): pool.KindReceipt, honest2.ID(): pool.KindReceipt}
	for p, k := range want {
		if kinds[p] != k {
			t.Errorf("ledger kinds %v, want %v", kinds, want)
			break
		}
	}
}

// TestKnownAnswersSurviveRestart: after a coordinator restart the job
// still has its known answers (kept in its record), their file is still
// refused to peers, and a wrong answer is still caught on the spot.
func TestKnownAnswersSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	useDir := func(c *Config) { c.DataDir = dir }
	ts, stop := runServer(t, useDir)
	owner, liar := newPeer(t, nil), newPeer(t, nil)
	for _, p := range []*testPeer{owner, liar} {
		ts.register(t, p, "", http.StatusCreated)
	}
	j := knownJob(t, "restart", 1, "", map[int64]string{0: `{"x":1}`})
	ts.submitKnown(t, owner, j)
	stop()

	ts = startServer(t, useDir)
	ts.offer(t, liar)
	if a := ts.do(t, liar, "GET", "/v1/blobs/"+j.KnownAnswers.SHA256.String(), nil); a.status != http.StatusNotFound {
		t.Errorf("known-answers blob after a restart: %d, want 404", a.status)
	}
	l := ts.leaseSome(t, liar, 1)
	if len(l) != 1 {
		t.Fatalf("liar's leases %+v", l)
	}
	ts.returnResult(t, liar, l[0], `{"x":666}`)
	caught := false
	for _, e := range ts.downloadLedger(t, "") {
		caught = caught || e.Kind == pool.KindDeviation && e.Peer == liar.ID()
	}
	if !caught {
		t.Errorf("after a restart a wrong answer to a known task was not caught")
	}
}
