package desktop

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"idlepool/agent"
	"idlepool/app"
	"idlepool/home"
	"idlepool/pool"
	"idlepool/store"
	"idlepool/worker"
)

// noExec is an executor that is never asked to run anything (the donor's
// pool cannot be reached).
type noExec struct{}

func (noExec) Run(context.Context, worker.Request) (worker.Result, error) {
	return worker.Result{}, errors.New("no executor in this test")
}

var _ pool.Executor = noExec{}

// TestRemoteEngine runs a real donor engine serving its local API, as the
// tray process does, with a pool joined that cannot be reached, and a
// tray instance that counts reloads; the window process's remoteEngine
// reads the donor's status and asks for reloads. Once the donor stops,
// Status is the zero status.
func TestRemoteEngine(t *testing.T) {
	dirs, err := home.Resolve(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := dirs.Create(); err != nil {
		t.Fatal(err)
	}
	local, err := store.OpenLocal(filepath.Join(dirs.Data, "local.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	const url = "http://127.0.0.1:1"
	if err := local.JoinPool(context.Background(), url, ""); err != nil {
		t.Fatal(err)
	}
	dev, owner, err := agent.LoadKeys(dirs, "")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dirs.Data, agent.LocalAPIFile)
	donor, err := agent.NewDonor(agent.DonorConfig{Home: dirs, DeviceKey: dev, OwnerKey: owner,
		Executor: noExec{}, Store: local, Always: true, LocalAPI: sock})
	if err != nil {
		t.Fatal(err)
	}
	inst, err := app.ClaimInstance(dirs.Data, app.TrayInstance, app.Request{Command: app.CommandReload})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served, instDone := make(chan error, 1), make(chan error, 1)
	reloads := make(chan app.Request, 10)
	go func() { served <- donor.Serve(ctx) }()
	go func() {
		instDone <- inst.Serve(ctx, func(r app.Request) error { reloads <- r; return nil })
	}()
	stop := sync.OnceFunc(func() {
		cancel()
		<-served
		<-instDone
	})
	defer stop()

	e := newRemoteEngine(sock, dirs.Data, slog.New(slog.DiscardHandler))
	deadline := time.Now().Add(20 * time.Second)
	for {
		st := e.Status()
		if len(st.Pools) == 1 && st.Pools[0].URL == url {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the remote status is %+v, want the pool %s", st, url)
		}
		time.Sleep(remoteStatusAge / 2)
	}

	e.Reload()
	select {
	case r := <-reloads:
		if r.Command != app.CommandReload {
			t.Errorf("the tray received %v, want reload", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the tray received no reload")
	}

	stop()
	e.Reload() // no tray: logged; the next Status reads afresh
	if st := e.Status(); len(st.Pools) != 0 || st.Decision.State != "" {
		t.Errorf("status with no engine = %+v, want the zero status", st)
	}
}
