package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/idle"
	"idlepool/job"
	"idlepool/offers"
)

// TestJobsAndOffers browses a real coordinator's listings as a donor: a
// CPU job matches, a GPU job does not and says why, choices made by ID
// prefix and owner prefix show in the next listing, the pool is known
// afterwards without --pool, and an operator lists the (no) live offers.
func TestJobsAndOffers(t *testing.T) {
	srv, url := startServe(t, t.TempDir(), "127.0.0.1:0")
	defer srv.stop()
	submitter, donor := t.TempDir(), t.TempDir()
	submit := func(manifest string) string {
		out := idlepool(t, submitter, "submit", manifest, "--pool", url)
		if out.code != 0 {
			t.Fatalf("submit: exit %d\n%s", out.code, out.stderr)
		}
		// stdout is the job's ID alone; stderr says what to do next.
		id := strings.TrimSpace(out.stdout)
		if !jobIDLine.MatchString(out.stdout) || out.stdout != id+"\n" {
			t.Errorf("submit's stdout %q, want the job ID alone", out.stdout)
		} else if hint := fmt.Sprintf("follow it with `idlepool --home %s status %s --pool %s`; merge its result with `idlepool --home %[1]s result %[2]s --pool %[3]s`\n",
			submitter, id[:12], url); !strings.Contains(out.stderr, hint) {
			t.Errorf("submit's stderr lacks %q:\n%s", hint, out.stderr)
		}
		return id
	}
	cpuID := submit(writeManifest(t, "pi", piManifest(4, 100)))
	gpuID := submit(writeManifest(t, "pi", strings.Replace(piManifest(3, 100), `name = "pi"`, `name = "render"`, 1)+
		"[requirements]\ngpu = true\ngpu_memory_mib = 8192\nmemory_mib = 1024\n"))

	type verdict struct {
		Name  string
		Match bool
		Why   []string
	}
	browse := func(args ...string) (jobsDoc, []verdict) {
		t.Helper()
		out := idlepool(t, donor, append([]string{"jobs", "--json"}, args...)...)
		if out.code != 0 {
			t.Fatalf("jobs --json: exit %d\n%s", out.code, out.stderr)
		}
		var doc jobsDoc
		if err := json.Unmarshal([]byte(out.stdout), &doc); err != nil {
			t.Fatalf("jobs --json is not one JSON document: %v\n%s", err, out.stdout)
		}
		var vs []verdict
		for _, j := range doc.Jobs {
			vs = append(vs, verdict{j.Listing.Name, j.Match, j.Why})
		}
		return doc, vs
	}

	doc, got := browse("--pool", url)
	want := []verdict{
		{"pi", true, []string{}},
		{"render", false, []string{"needs a GPU with 8 GiB; this machine offers none", offers.ReasonGPUPrograms}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("jobs (-want +got):\n%s", diff)
	}
	if len(doc.Pools) != 1 || doc.Pools[0].Name != "lab-a" || doc.Pools[0].Offer == nil || doc.Jobs[0].Listing.Job.String() != cpuID {
		t.Errorf("pools %+v, first job %s; want pool lab-a with this machine's offer, job %s", doc.Pools, doc.Jobs[0].Listing.Job, cpuID)
	}

	// The submitter's own machine never matches its owner's jobs: the pool
	// never leases them to it.
	if out := idlepool(t, submitter, "jobs", "--pool", url); !strings.Contains(out.stdout, "✗ "+offers.ReasonOwnJob) || strings.Contains(out.stdout, "✓ matches") {
		t.Errorf("jobs on the owner's own machine:\n%s%s", out.stdout, out.stderr)
	}

	// The table, as a person reads it.
	out := idlepool(t, donor, "jobs")
	for _, s := range []string{"ID", "JOB", "THIS MACHINE", cpuID[:12], "✓ matches", "✗ needs a GPU with 8 GiB; this machine offers none (+1 more)", "1 of 2 jobs match this machine"} {
		if !strings.Contains(out.stdout, s) {
			t.Errorf("jobs table lacks %q:\n%s", s, out.stdout)
		}
	}

	// Choices by prefix; the pool is known now (its key was pinned).
	owner := doc.Jobs[0].Listing.Owner
	for _, args := range [][]string{{"refuse", cpuID[:10]}, {"accept", "owner:" + owner[:10]}, {"gpu-programs", "on", "--pool", url}} {
		if out := idlepool(t, donor, append([]string{"jobs"}, args...)...); out.code != 0 {
			t.Fatalf("jobs %v: exit %d\n%s", args, out.code, out.stderr)
		}
	}
	doc, got = browse()
	want = []verdict{
		{"render", false, []string{"needs a GPU with 8 GiB; this machine offers none"}},
		{"pi", false, []string{"you refused this job"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("jobs after choosing (-want +got):\n%s", diff)
	}
	a := doc.Pools[0].Offer.Accept
	if !a.GPUPrograms || !cmp.Equal(a.PreferOwners, []string{owner}) || len(a.RefuseJobs) != 1 || a.RefuseJobs[0].String() != cpuID {
		t.Errorf("offer accepts %+v; want GPU programs, owner %s preferred, job %s refused", a, owner, cpuID)
	}
	_ = gpuID

	// Mistakes are explained.
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"jobs", "accept", "zz"}, 2, `"zz" is not a job ID`},
		{[]string{"jobs", "refuse", "0123456789", "--pool", url}, 2, "no job listed in " + url + " starts with 0123456789"},
		{[]string{"jobs", "weight", "2"}, 2, "weight needs --pool URL"},
		{[]string{"jobs", "weight", "-1", "--pool", url}, 2, `weight takes a number of 0 or more`},
		{[]string{"jobs", "nonsense"}, 2, `unknown subcommand "nonsense"`},
	} {
		if out := idlepool(t, donor, tc.args...); out.code != tc.code || !strings.Contains(out.stderr, tc.want) {
			t.Errorf("%v: exit %d (want %d), stderr:\n%s\nwant it to contain %q", tc.args, out.code, tc.code, out.stderr, tc.want)
		}
	}
	if out := idlepool(t, t.TempDir(), "jobs"); out.code != 2 || !strings.Contains(out.stderr, "knows no pools yet") {
		t.Errorf("jobs on a new machine: exit %d\n%s", out.code, out.stderr)
	}

	// The operator's view: no agent publishes an offer here.
	out = idlepool(t, donor, "offers", "--pool", url, "--json")
	if out.code != 0 || strings.TrimSpace(out.stdout) != "[]" {
		t.Errorf("offers --json: exit %d, %q\n%s", out.code, out.stdout, out.stderr)
	}
	out = idlepool(t, filepath.Join(t.TempDir(), "operator"), "offers", "--pool", url)
	if out.code != 0 || !strings.Contains(out.stdout, "no live offers in pool lab-a") {
		t.Errorf("offers: exit %d, %q\n%s", out.code, out.stdout, out.stderr)
	}
}

// TestPrintOffers checks the operator's table of live offers.
func TestPrintOffers(t *testing.T) {
	o := gpuTestOffer()
	var b strings.Builder
	printOffers(&b, "lab", []offers.Offer{o}, o.Expires.Add(-75*time.Second))
	for _, s := range []string{"PEER", "idpeer0123…", "linux/amd64", "7 of 8", "8 GiB", "RTX 4070 (9.0 GiB)", "waiting (outside its hours)", "in 1 min 15 s", "1 offer in pool lab: 0 computing, 1 waiting, 0 paused."} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("offers table lacks %q:\n%s", s, b.String())
		}
	}
}

func gpuTestOffer() offers.Offer {
	var o offers.Offer
	o.Peer, o.Owner, o.Pool = "idpeer0123456789", "idowner", "lab"
	o.Capacity.OS, o.Capacity.Arch, o.Capacity.LogicalCPUs, o.Capacity.Cores, o.Capacity.MemoryMiB = "linux", "amd64", 8, 7, 8192
	o.Capacity.GPUs = []idle.GPUOffer{{UUID: "GPU-1", Name: "RTX 4070", MemoryTotalMiB: 12282, MemoryMiB: 9211}}
	o.State, o.Hold = "waiting", idle.HoldHours
	o.Expires = time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	return o
}

// TestPrintJobs checks the donor's table: a POOL column only with several
// pools, the first reason with a count of the others, the summary and the
// GPU opt-in hint on a machine that has a GPU.
func TestPrintJobs(t *testing.T) {
	l := offers.Listing{Name: "render", Owner: "idowner0123456789", Pool: "lab", MemoryMiB: 1536, TasksLeft: 7, TasksDone: 3, Quorum: 2}
	l.Requirements.GPU, l.Requirements.GPUMemoryMiB, l.Requirements.GPUComputeCapability = job.GPURequired, 8192, "8.0"
	cpu := offers.Listing{Name: "pi", Owner: "idx", Pool: "farm", MemoryMiB: 256, TasksLeft: 1}
	cpu.Job[0] = 0xab
	opt := offers.Listing{Name: "mc", Owner: "idx", Pool: "farm", MemoryMiB: 256, TasksLeft: 2}
	opt.Requirements.GPU = job.GPUOptional
	opt.Job[0] = 0xcd
	doc := jobsDoc{
		Pools: []poolDoc{{URL: "http://a", Name: "lab"}, {URL: "http://b", Name: "farm"}},
		Jobs: []jobMatchDoc{
			{PoolURL: "http://b", Listing: cpu, Match: true, Why: []string{}},
			{PoolURL: "http://b", Listing: opt, Match: true, Why: []string{}},
			{PoolURL: "http://a", Listing: l, Why: []string{offers.ReasonGPUPrograms, "outside this machine's hours (next: Mon 22:00)"}},
		},
	}
	c := gpuTestOffer().Capacity
	var b strings.Builder
	printJobs(&b, doc, c)
	want := `ID            JOB     OWNER        POOL  NEEDS                           TASKS LEFT  DONE  QUORUM  THIS MACHINE
ab0000000000  pi      idx          farm  CPU, 256 MiB RAM                1           0     0       ✓ matches
cd0000000000  mc      idx          farm  CPU or GPU, 256 MiB RAM         2           0     0       ✓ matches
  uses a GPU if you allow one
000000000000  render  idowner012…  lab   GPU 8 GiB cc 8.0+, 1.5 GiB RAM  7           3     2       ✗ ` + offers.ReasonGPUPrograms + ` (+1 more)
  needs a GPU

2 of 3 jobs match this machine, which offers 7 cores, 8 GiB memory, RTX 4070 with 9.0 GiB, any time.
Choose: idlepool jobs accept|refuse ID (or owner:OWNER); --json shows every reason.
GPU programs: idlepool jobs gpu-programs on [--pool URL] allows them.
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}

	b.Reset()
	printJobs(&b, jobsDoc{Pools: []poolDoc{{URL: "http://a", Name: "lab"}, {URL: "http://c", Error: "cannot reach"}}}, c)
	if got := b.String(); got != "no jobs seek compute in pool lab (http://a) right now\n" {
		t.Errorf("no jobs: %q", got)
	}
}

// TestJobsChoices sets and shows the donor's choices without a pool.
func TestJobsChoices(t *testing.T) {
	home := t.TempDir()
	id := strings.Repeat("ab", 32)
	for _, args := range [][]string{
		{"refuse", id},
		{"accept", "owner:idk3m9x2qaaaaaaaaaaaaaaaaaaaaaaaaa"},
		{"limits", "memory=2048", "time=30m"},
		{"gpu-programs", "on", "--pool", "http://a"},
		{"weight", "3", "--pool", "http://a"},
		{"weight", "1", "--pool", "http://b"},
	} {
		if out := idlepool(t, home, append([]string{"jobs"}, args...)...); out.code != 0 {
			t.Fatalf("jobs %v: exit %d\n%s", args, out.code, out.stderr)
		}
	}
	out := idlepool(t, home, "jobs", "choices")
	for _, s := range []string{"every pool", "refused jobs      " + id, "preferred owners  idk3m9x2qa", "per task          at most 2 GiB, at most 30 min",
		"http://a\n  share             weight 3: 75% of this machine\n  GPU programs      allowed"} {
		if !strings.Contains(out.stdout, s) {
			t.Errorf("choices lack %q:\n%s", s, out.stdout)
		}
	}
	out = idlepool(t, home, "jobs", "choices", "--json")
	var p offers.Preferences
	if err := json.Unmarshal([]byte(out.stdout), &p); err != nil {
		t.Fatalf("choices --json: %v\n%s", err, out.stdout)
	}
	if len(p.Global.RefuseJobs) != 1 || p.Global.RefuseJobs[0].String() != id || len(p.Pools) != 2 || p.Pools[0].Weight != 3 || !p.Pools[0].GPUPrograms {
		t.Errorf("choices --json: %+v", p)
	}
	if out := idlepool(t, home, "jobs", "clear", id); out.code != 0 {
		t.Fatalf("clear: exit %d\n%s", out.code, out.stderr)
	}
	if out := idlepool(t, home, "jobs", "choices"); strings.Contains(out.stdout, id) {
		t.Errorf("job still listed after clear:\n%s", out.stdout)
	}
	if out := idlepool(t, home, "jobs", "limits", "memory=lots"); out.code != 2 || !strings.Contains(out.stderr, "memory takes MiB") {
		t.Errorf("bad limit: exit %d\n%s", out.code, out.stderr)
	}
}
