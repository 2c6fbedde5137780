package agent_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"idlepool/agent"
	"idlepool/identity"
	"idlepool/idle"
	"idlepool/job"
	"idlepool/offers"
)

// TestOwnerProfilesAndJobNotes runs a job of an owner who named itself
// on a donor over a real coordinator: the donor's Now (Status) shows the
// running task's job and its owner's name, its local store notes the
// job's name, description, link and owner for the history, and a name
// the donor's owner gives while its agent runs reaches the pool's offers
// without a restart.
func TestOwnerProfilesAndJobNotes(t *testing.T) {
	coordinator := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	url := coordinator.url
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The job's owner names itself before submitting.
	sub := newDevice(t, nil)
	p, err := identity.NewProfile(sub.owner, "Ada's lab", "https://example.org/ada", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := identity.SaveProfile(agent.OwnerProfilePath(sub.dirs), p); err != nil {
		t.Fatal(err)
	}
	c, err := agent.NewClient(url, sub.key, httpClient(t))
	if err != nil {
		t.Fatal(err)
	}
	c.UseOwnerProfile(sub.dirs, quietLogger(t))
	if _, err := agent.PoolKey(ctx, c, sub.dirs.Config); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Register(ctx, sub.owner, "submitter", ""); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "prog.wasm"), []byte("\x00asm\x01\x00\x00\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := job.ParseManifest("job.toml", dir, []byte(`name = "squares"
description = "Sums of squares, for the class"
link = "https://example.org/squares"
program = "prog.wasm"
[split]
rule = "range"
tasks = 2
[[merge]]
field = "square"
rule = "sum"
[policy]
redundancy = 1
quorum = 1
lease_timeout = "1m"
`))
	if err != nil {
		t.Fatal(err)
	}
	j, err := job.Plan(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Submit(ctx, j); err != nil {
		t.Fatal(err)
	}

	donor := newDevice(t, nil)
	exec := &fakeExec{Block: make(chan struct{})}
	a, err := agent.New(agent.Config{
		PoolURL: url, Home: donor.dirs, DeviceKey: donor.key, OwnerKey: donor.owner, Slots: 1,
		Executor: exec, Store: donor.local, HTTP: httpClient(t), Offer: testOffers{settings: idle.Defaults()},
		OfferTTL: 900 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, IdlePoll: 50 * time.Millisecond,
		ReceiptPoll: 50 * time.Millisecond, Logger: quietLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	actx, stop := context.WithCancel(ctx)
	ra := &runningAgent{Agent: a, dev: donor, stop: stop, done: make(chan error, 1)}
	go func() { ra.done <- a.Serve(actx) }()
	defer ra.Stop(t)

	// While a task runs, the status names its job and the job's owner.
	waitLong(t, "a task running", func() bool { return len(a.Status().Running) > 0 })
	rt := a.Status().Running[0]
	if rt.JobName != "squares" || rt.Owner != sub.owner.ID() || rt.OwnerName != "Ada's lab" {
		t.Errorf("running task %+v, want job squares of owner %s named Ada's lab", rt, sub.owner.ID())
	}

	// The donor's owner names itself while the agent runs: the pool shows
	// it in the offers within an offer period.
	dp, err := identity.NewProfile(donor.owner, "Bob's gaming PC", "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := identity.SaveProfile(agent.OwnerProfilePath(donor.dirs), dp); err != nil {
		t.Fatal(err)
	}
	waitLong(t, "the donor's new name in the pool's offers", func() bool {
		list, err := c.Offers(ctx)
		return err == nil && len(list) == 1 && offers.OwnerName(list[0].Owner, list[0].OwnerProfile) == "Bob's gaming PC"
	})
	close(exec.Block)

	waitLong(t, "the job noted in the donor's store", func() bool {
		notes, err := donor.local.JobNotes(ctx)
		return err == nil && notes[j.ID].Name != ""
	})
	notes, err := donor.local.JobNotes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := notes[j.ID]
	if n.Name != "squares" || n.Description != "Sums of squares, for the class" || n.Link != "https://example.org/squares" ||
		n.Owner != sub.owner.ID() || n.OwnerName != "Ada's lab" || n.OwnerLink != "https://example.org/ada" || n.Pool != url {
		t.Errorf("job note %+v, want the manifest's name, description and link and the owner's name and link", n)
	}
}

// waitLong polls cond until it holds, failing the test after 2 minutes
// (generous: the machine may be busy).
func waitLong(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 2 minutes", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRegisterWithOldCoordinator: a coordinator from before owner profiles
// refuses the unknown "profile" field; the device registers without it
// instead of not at all.
func TestRegisterWithOldCoordinator(t *testing.T) {
	var withProfile, without atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		if bytes.Contains(b, []byte(`"profile"`)) {
			withProfile.Add(1)
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"error": "unknown field \"profile\"", "code": "bad_request"}`)
			return
		}
		without.Add(1)
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"peer": "idpeer", "owner": "idowner"}`)
	}))
	defer srv.Close()
	dev := newDevice(t, nil)
	p, err := identity.NewProfile(dev.owner, "Ada's lab", "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := identity.SaveProfile(agent.OwnerProfilePath(dev.dirs), p); err != nil {
		t.Fatal(err)
	}
	c, err := agent.NewClient(srv.URL, dev.key, srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	c.UseOwnerProfile(dev.dirs, quietLogger(t))
	if _, err := c.Register(context.Background(), dev.owner, "device", ""); err != nil {
		t.Fatalf("Register with an old coordinator: %v", err)
	}
	if withProfile.Load() != 1 || without.Load() != 1 {
		t.Errorf("registrations with and without the profile: %d, %d; want 1 and 1", withProfile.Load(), without.Load())
	}
}
