package main

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/agent"
	"idlepool/home"
	"idlepool/pool"
	"idlepool/store"
)

// TestTailBackups runs the same job twice on a real pool of three agents
// of three owners, one of them slow (it computes at 5% of a core, as a
// donor's cpu_time setting makes it), which takes a task before the
// others join: once as the pool runs by default, once with `serve
// --no-backups`. With backups the slow device's task is decided by a
// backup replica on a fast device while the slow one still computes: its
// lease ends cancelled (it heard "task decided"), it earns nothing for
// it, and the job does not wait for it. Without backups the job waits
// for the slow device, whose replica is agreed. Both results are byte for
// byte `idlepool run`'s. The wall times are logged, not judged: what
// shows the job finished sooner is that it did not wait for the slow
// replica (docs/operator.md, "A job's tail"). The two pools run side by
// side.
func TestTailBackups(t *testing.T) {
	t.Parallel() // mostly waits on its processes
	// 2*10^7 samples a task: the slow device's replica (compiling the
	// program, then computing, at 5% of a core) lasts about 20 times a
	// fast device's whatever the size; larger tasks only burn the CPU the
	// package's other tests share.
	m := writeManifest(t, "pi", piManifest(8, 20_000_000)+"lease_timeout = \"10m\"\n")
	solo := make(chan runOut, 1)
	go func() { solo <- idlepool(t, t.TempDir(), "run", m, "--json", "--workers", "2") }()

	type outcome struct {
		stdout      string
		took        time.Duration
		slowStates  map[string]int // the slow device's replicas by their final state
		slowReceipt int            // receipts the slow device earned
	}
	pooled := func(t *testing.T, extra ...string) outcome {
		data := t.TempDir()
		co, url := startServe(t, data, "127.0.0.1:0", extra...)
		slow := filepath.Join(t.TempDir(), "slow")
		ownCompiled(t, slow)
		if out := idlepool(t, slow, "settings", "set", "idle_for=0", "max_other_cpu=100%", "max_temperature=0",
			"pause_for_games=false", "cpu_time=5%"); out.code != 0 {
			t.Fatalf("settings set: exit %d\n%s", out.code, out.stderr)
		}
		startDaemon(t, "join slow", slow, "join", url, "--workers", "1")
		dirs, err := home.Resolve(slow)
		if err != nil {
			t.Fatal(err)
		}
		sock := filepath.Join(dirs.Data, agent.LocalAPIFile)
		start := time.Now()
		followed := make(chan runOut, 1)
		go func() { followed <- idlepool(t, t.TempDir(), "submit", m, "--pool", url, "--follow", "--json") }()
		deadline := patient(t)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			st, _ := agent.ReadStatus(ctx, sock)
			cancel()
			if len(st.Running) > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the slow device took no task: %+v", st)
			}
			time.Sleep(20 * time.Millisecond)
		}
		for i := range 2 {
			startJoin(t, filepath.Join(t.TempDir(), "fast"+string(rune('a'+i))), url)
		}
		var out runOut
		select {
		case out = <-followed:
		case <-time.After(time.Until(deadline)):
			t.Fatalf("%v: the job did not finish", extra)
		}
		if out.code != 0 {
			t.Fatalf("%v: submit --follow: exit %d\n%s", extra, out.code, out.stderr)
		}
		o := outcome{stdout: out.stdout, took: time.Since(start), slowStates: map[string]int{}}
		id := peerID(t, slow)
		for _, e := range fetchLedger(t, url) {
			if e.Peer == id && e.Kind == pool.KindReceipt {
				o.slowReceipt++
			}
		}
		co.stop()
		db, err := store.Open(filepath.Join(data, "coordinator.db"))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		snap, err := db.Load(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range snap.Replicas {
			if r.Peer == id {
				o.slowStates[r.State]++
			}
		}
		return o
	}

	// The two pools run at once: the one without backups mostly waits
	// for its slow device, while the other computes. (Not as parallel
	// subtests: those would wait for slots behind the package's other
	// parallel tests, and run last.)
	var (
		with, without outcome
		wg            sync.WaitGroup
	)
	wg.Go(func() { with = pooled(t) })
	wg.Go(func() { without = pooled(t, "--no-backups") })
	wg.Wait()
	if t.Failed() {
		return
	}
	t.Logf("job done with backups in %s (slow device's replicas %v, %d receipts), without in %s (%v, %d receipts)",
		with.took.Round(time.Millisecond), with.slowStates, with.slowReceipt,
		without.took.Round(time.Millisecond), without.slowStates, without.slowReceipt)

	r := <-solo
	if r.code != 0 {
		t.Fatalf("run --json: exit %d\n%s", r.code, r.stderr)
	}
	for name, o := range map[string]outcome{"with backups": with, "without": without} {
		if diff := cmp.Diff(r.stdout, o.stdout); diff != "" {
			t.Errorf("%s: submit --follow --json differs from run --json (-run +submit):\n%s", name, diff)
		}
	}
	if with.slowStates["cancelled"] == 0 || with.slowStates["agreed"] != 0 {
		t.Errorf("with backups the slow device's replicas ended %v: want its task decided by a backup (cancelled), none agreed", with.slowStates)
	}
	if with.slowReceipt != 0 {
		t.Errorf("with backups the slow device earned %d receipts, want none", with.slowReceipt)
	}
	if without.slowStates["agreed"] == 0 || without.slowStates["cancelled"] != 0 {
		t.Errorf("without backups the slow device's replicas ended %v: want the job to have waited for it (agreed)", without.slowStates)
	}
}
