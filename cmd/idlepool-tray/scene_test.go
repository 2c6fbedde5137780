package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"idlepool/agent"
	"idlepool/coord"
	"idlepool/energy"
	"idlepool/home"
	"idlepool/identity"
	"idlepool/idle"
	"idlepool/job"
	"idlepool/pool"
	"idlepool/store"
)

// scene sets up what a donor who has used the app for a while sees: a
// pool on 127.0.0.1 with jobs seeking compute (one this machine cannot
// run), the pool joined, the owner's pause on (so that nothing computes
// while the screenshots are taken) and three weeks of contributions:
// confirmed, pending and rejected ones, with the energy each task added
// and a night tariff. It returns the home directory.
func scene(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := coord.New(ctx, coord.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Pool: "lab-a"})
	if err != nil {
		cancel()
		t.Fatalf("start coordinator: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	url := srv.URL()

	// A job owner, who gave its identity a name, submits two jobs.
	ownerDirs, err := home.Resolve(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := ownerDirs.Create(); err != nil {
		t.Fatal(err)
	}
	dev, owner := mustKey(t), mustKey(t)
	c, err := agent.NewClient(url, dev, nil)
	if err != nil {
		t.Fatal(err)
	}
	profile, err := identity.NewProfile(owner, "Ada's physics lab", "https://example.org/ada-lab", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := identity.SaveProfile(agent.OwnerProfilePath(ownerDirs), profile); err != nil {
		t.Fatal(err)
	}
	c.UseOwnerProfile(ownerDirs, nil)
	if _, err := agent.PoolKey(ctx, c, ownerDirs.Config); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Register(ctx, owner, "workstation", ""); err != nil {
		t.Fatal(err)
	}
	var submitted []*job.Job
	for _, j := range []struct{ name, desc, extra string }{
		{"ising-sweep", "2D Ising model: susceptibility over 64 temperatures", "[policy]\nmemory_mib = 256\ntime_limit = \"10m\"\n"},
		{"protein-fold-gpu", "Folding ensemble on CUDA GPUs", "[requirements]\ngpu = true\ngpu_memory_mib = 8192\n"},
	} {
		pj := planJob(t, j.name, j.desc, j.extra)
		if err := c.Submit(ctx, pj); err != nil {
			t.Fatalf("submit %s: %v", j.name, err)
		}
		submitted = append(submitted, pj)
	}

	// The donor's machine.
	h := t.TempDir()
	dirs, err := home.Resolve(h)
	if err != nil {
		t.Fatal(err)
	}
	if err := dirs.Create(); err != nil {
		t.Fatal(err)
	}
	l, err := store.OpenLocal(filepath.Join(dirs.Data, "local.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.JoinPool(ctx, url, ""); err != nil {
		t.Fatal(err)
	}
	if err := l.AddPool(ctx, url, "lab-a"); err != nil {
		t.Fatal(err)
	}
	const other = "http://10.0.0.7:7420" // a pool joined earlier, left since
	if err := l.AddPool(ctx, other, "home-lab"); err != nil {
		t.Fatal(err)
	}
	s := idle.Defaults()
	s.Schedule, err = idle.ParseSchedule("Mon-Fri 18:00-08:00; Sat,Sun")
	if err != nil {
		t.Fatal(err)
	}
	s.PauseFor = []string{"steam", "obs"}
	s.PausedUntil = time.Now().Add(3 * time.Hour).Truncate(time.Minute)
	if s.Tariff, err = energy.ParseTariff("EUR 0.34 23-7=0.18"); err != nil {
		t.Fatal(err)
	}
	s.EnergyDayKWh = 2
	if err := l.SaveSettings(ctx, s); err != nil {
		t.Fatal(err)
	}
	// What happened lately, as the donor's event log says it (the Now
	// window shows it).
	at := time.Now().Add(-5 * time.Hour)
	events := agent.NewEventLog(filepath.Join(dirs.Data, agent.EventsFile), 0, func() time.Time { return at })
	for _, e := range []struct {
		ago   time.Duration
		words string
	}{
		{5 * time.Hour, "joined pool home-lab (" + other + ")"},
		{4*time.Hour + 40*time.Minute, "paused: steam is running"},
		{4*time.Hour + 5*time.Minute, "pause over; now computing on 6 of 8 cores"},
		{3*time.Hour + 50*time.Minute, "result of task 16 of job ising-sweep (" + submitted[0].ID.String()[:12] + ") rejected by pool lab-a: deviation: a majority of owners agreed on other bytes"},
		{3*time.Hour + 30*time.Minute, "pool home-lab unreachable (retrying)"},
		{3*time.Hour + 20*time.Minute, "task 7 of job ising-sweep abandoned: pool unreachable since " + time.Now().Add(-3*time.Hour-30*time.Minute).Format("15:04")},
		{3*time.Hour + 10*time.Minute, "left pool home-lab"},
	} {
		at = time.Now().Add(-e.ago)
		if err := events.Addf("%s", e.words); err != nil {
			t.Fatal(err)
		}
	}
	// What the agent noted of the jobs it computed: their names and their
	// owners' (the third one, of a pool left since, from another owner).
	older := job.ID(sha256.Sum256([]byte("climate-ensemble")))
	for _, n := range []store.JobNote{
		{Job: submitted[0].ID, Pool: url, Name: "ising-sweep", Description: "2D Ising model: susceptibility over 64 temperatures",
			Owner: owner.ID(), OwnerName: profile.Name, OwnerLink: profile.Link},
		{Job: submitted[1].ID, Pool: url, Name: "protein-fold-gpu", Description: "Folding ensemble on CUDA GPUs",
			Owner: owner.ID(), OwnerName: profile.Name, OwnerLink: profile.Link},
		{Job: older, Pool: other, Name: "climate-ensemble", Description: "Regional climate model, 200 members",
			Owner: mustKey(t).ID(), OwnerName: "Grace's group"},
	} {
		if err := l.NoteJob(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	jobIDs := []job.ID{submitted[0].ID, submitted[1].ID, older}
	key := mustKey(t)
	now := time.Now()
	for i := range 60 {
		day := now.AddDate(0, 0, -(i % 21)).Add(-time.Duration(i) * time.Minute)
		res := fmt.Appendf(nil, `{"task":%d}`, i)
		pu := url
		if i%4 == 3 || i < 3 { // the pending ones are another pool's, whose receipts are late
			pu = other
		}
		c := store.Contribution{Pool: pu, Job: jobIDs[i%3], Task: int64(i),
			Lease: fmt.Sprintf("lease-%d", i), Digest: sha256.Sum256(res), Result: res, Cost: 1.5 + float64(i%5), Created: day}
		if err := l.AddPending(ctx, c); err != nil {
			t.Fatal(err)
		}
		// Every result was handed in long ago (the newest wait for their
		// receipts), so that the agent has nothing to send again.
		if err := l.MarkAcknowledged(ctx, c.Lease); err != nil {
			t.Fatal(err)
		}
		// What the task added: the CPU's counter where it was readable
		// (most days), an estimate on the others; the GPU job's GPU too.
		u := energy.Usage{Start: day.Add(-12 * time.Minute), End: day,
			CPU: energy.Figure{Joules: 9000 + float64(i%7)*1500, How: energy.Measured}}
		if i%9 == 4 {
			u.CPU.How = energy.Estimated
		}
		if i%3 == 1 {
			u.GPUs = []energy.GPUFigure{{UUID: "GPU-5e3a12ab-77c1-4d8e-9a0f-13b2c4d5e6f7", Figure: energy.Figure{Joules: 85000 + float64(i%5)*4000, How: energy.Measured}}}
		}
		if err := l.AddEnergy(ctx, store.TaskEnergy{Lease: c.Lease, Pool: pu, Job: c.Job, Task: c.Task, Usage: u}); err != nil {
			t.Fatal(err)
		}
		switch {
		case i < 3: // pending
		case i%11 == 5:
			if err := l.Reject(ctx, c.Lease, "deviated from the quorum: result digest differs from 2 other replicas"); err != nil {
				t.Fatal(err)
			}
		default:
			e := pool.Entry{Seq: uint64(i + 1), Kind: pool.KindReceipt, Pool: "lab-a", Job: c.Job, Task: c.Task, Peer: "iddonor",
				Owner: "idowner", Lease: c.Lease, Digest: c.Digest, Cost: c.Cost, Time: day.UnixMilli()}
			e.Sig = key.Sign(e.Canonical(false))
			if err := l.Confirm(ctx, c.Lease, e); err != nil {
				t.Fatal(err)
			}
		}
	}
	return h
}

func mustKey(t *testing.T) *identity.Key {
	t.Helper()
	k, err := identity.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// planJob plans a job of 40 tasks with a stand-in program (an empty
// WebAssembly module) and the extra manifest text.
func planJob(t *testing.T, name, desc, extra string) *job.Job {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "prog.wasm"), []byte("\x00asm\x01\x00\x00\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	text := fmt.Sprintf("name = %q\ndescription = %q\nprogram = \"prog.wasm\"\n[split]\nrule = \"range\"\ntasks = 40\n[[merge]]\nfield = \"x\"\nrule = \"sum\"\n%s",
		name, desc, strings.TrimSpace(extra)+"\n")
	m, err := job.ParseManifest("job.toml", dir, []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	j, err := job.Plan(m)
	if err != nil {
		t.Fatal(err)
	}
	return j
}
