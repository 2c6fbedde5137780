package coord

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/idle"
	"idlepool/job"
	"idlepool/offers"
)

// requirementsJob is testJob with a [requirements] table and a policy
// memory_mib.
func requirementsJob(t *testing.T, name string, tasks int, requirements string) *job.Job {
	t.Helper()
	dir := t.TempDir()
	prog := append([]byte("\x00asm\x01\x00\x00\x00"), name...)
	if err := os.WriteFile(filepath.Join(dir, "prog.wasm"), prog, 0o600); err != nil {
		t.Fatal(err)
	}
	manifest := fmt.Sprintf(`name = %q
description = "a test job"
program = "prog.wasm"

[split]
rule = "range"
tasks = %d

[[merge]]
field = "x"
rule = "sum"

[policy]
redundancy = 1
quorum = 1
memory_mib = 256
task_cost = 1.5

[requirements]
%s
`, name, tasks, requirements)
	m, err := job.ParseManifest("test.toml", dir, []byte(manifest))
	if err != nil {
		t.Fatal(err)
	}
	j, err := job.Plan(m)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// testOffer is p's signed offer to pool "test", valid for ttl from now,
// with GPUs.
func testOffer(p *testPeer, now time.Time, ttl time.Duration, gpus ...idle.GPUOffer) offers.Offer {
	o := offers.Offer{
		Owner: p.owner.ID(), Pool: "test",
		Capacity: idle.Capacity{OS: "linux", Arch: "amd64", LogicalCPUs: 8, Cores: 4, MemoryTotalMiB: 16384, MemoryMiB: 8192,
			GPUs: append([]idle.GPUOffer{}, gpus...), Schedule: idle.Schedule{}, TimeZone: "UTC"},
		State:  idle.StateComputing,
		Accept: offers.Accept{GPUPrograms: len(gpus) > 0},
		Issued: now, Expires: now.Add(ttl),
	}
	o.Sign(p.key)
	return o
}

// TestOffersAndMatchmaking: peers publish signed offers; the pool lists
// the live ones and the jobs seeking compute, leases a GPU job only to
// the peer that offers a GPU, a CPU job to all, and forgets an offer once
// it expires.
func TestOffersAndMatchmaking(t *testing.T) {
	clock := &fakeClock{now: time.Now().UTC().Truncate(time.Millisecond)}
	ts := startServer(t, func(c *Config) { c.Now = clock.Now })
	owner, cpu, gpu, plain := newPeer(t, nil), newPeer(t, nil), newPeer(t, nil), newPeer(t, nil)
	do := func(p *testPeer, method, path string, v any) answer {
		t.Helper()
		var body []byte
		if v != nil {
			body, _ = json.Marshal(v)
		}
		req := ts.request(t, method, path, body)
		SignRequest(req, body, p.key, clock.Now())
		return ts.send(t, req)
	}
	for _, p := range []*testPeer{owner, cpu, gpu, plain} {
		if a := do(p, "POST", "/v1/peers", p.registration("")); a.status != http.StatusCreated {
			t.Fatalf("register: %d %s", a.status, a.body)
		}
	}
	cpuJob := requirementsJob(t, "cpu-job", 3, "")
	gpuJob := requirementsJob(t, "gpu-job", 3, "gpu = true\ngpu_memory_mib = 8000")
	for _, j := range []*job.Job{cpuJob, gpuJob} {
		b, err := os.ReadFile(j.Program.Path)
		if err != nil {
			t.Fatal(err)
		}
		req := ts.request(t, "PUT", "/v1/blobs/"+j.Program.SHA256.String(), b)
		SignRequest(req, b, owner.key, clock.Now())
		ts.send(t, req)
		if a := do(owner, "POST", "/v1/jobs", JobRequest{Canonical: j.Canonical}); a.status != http.StatusCreated {
			t.Fatalf("submit: %d %s", a.status, a.body)
		}
	}

	now := clock.Now()
	rtx := idle.GPUOffer{UUID: "GPU-1", Name: "RTX 4090", ComputeCapability: "8.9", MemoryTotalMiB: 24000, MemoryMiB: 12000}
	cpuOffer, gpuOffer := testOffer(cpu, now, time.Minute), testOffer(gpu, now, time.Minute, rtx)
	cpuOffer.Capacity.CPUTimeShare = 0.5 // API version 5: listed as signed
	cpuOffer.Sign(cpu.key)

	// Offers the pool refuses.
	tampered := cpuOffer
	tampered.Capacity.Cores = 64
	other := testOffer(gpu, now, time.Minute)
	other.Pool = "elsewhere"
	other.Sign(gpu.key)
	tooLong := testOffer(cpu, now, time.Hour)
	expired := testOffer(cpu, now.Add(-2*time.Minute), time.Minute)
	for _, tc := range []struct {
		name   string
		by     *testPeer
		offer  any
		status int
		code   string
	}{
		{"another peer's offer", gpu, cpuOffer, http.StatusForbidden, "not_your_offer"},
		{"changed after signing", cpu, tampered, http.StatusBadRequest, "bad_offer"},
		{"another pool", gpu, other, http.StatusBadRequest, "bad_request"},
		{"expiry too far", cpu, tooLong, http.StatusBadRequest, "bad_request"},
		{"expired", cpu, expired, http.StatusBadRequest, "offer_expired"},
		{"not an offer", cpu, map[string]any{"peer": cpu.ID(), "cores": 3}, http.StatusBadRequest, "bad_request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := do(tc.by, "POST", "/v1/offers", tc.offer)
			if a.status != tc.status || a.errorBody(t).Code != tc.code {
				t.Errorf("status %d %s, want %d %s", a.status, a.body, tc.status, tc.code)
			}
		})
	}

	for _, x := range []struct {
		p *testPeer
		o offers.Offer
	}{{cpu, cpuOffer}, {gpu, gpuOffer}} {
		if a := do(x.p, "POST", "/v1/offers", x.o); a.status != http.StatusOK {
			t.Fatalf("offer of %s: %d %s", x.p.ID(), a.status, a.body)
		}
	}
	var live []offers.Offer
	do(owner, "GET", "/v1/offers", nil).decode(t, &live)
	want := []offers.Offer{cpuOffer, gpuOffer}
	slices.SortFunc(want, func(a, b offers.Offer) int { return strings.Compare(a.Peer, b.Peer) })
	if diff := cmp.Diff(want, live); diff != "" {
		t.Errorf("GET /v1/offers (-want +got):\n%s", diff)
	}

	var listings []offers.Listing
	do(cpu, "GET", "/v1/listings", nil).decode(t, &listings)
	wantListings := []offers.Listing{
		{Job: cpuJob.ID, Name: "cpu-job", Description: "a test job", Owner: owner.owner.ID(), Pool: "test",
			MemoryMiB: 256, CostPerTask: 1.5, TasksLeft: 3, Quorum: 1, Participants: "open"},
		{Job: gpuJob.ID, Name: "gpu-job", Description: "a test job", Owner: owner.owner.ID(), Pool: "test",
			Requirements: job.Requirements{GPU: job.GPURequired, GPUMemoryMiB: 8000},
			MemoryMiB:    256, CostPerTask: 1.5, TasksLeft: 3, Quorum: 1, Participants: "open"},
	}
	for i := range wantListings {
		wantListings[i].TimeLimit = listings[i].TimeLimit // the policy's default
	}
	if diff := cmp.Diff(wantListings, listings); diff != "" {
		t.Errorf("GET /v1/listings (-want +got):\n%s", diff)
	}

	leased := func(p *testPeer) map[string]int {
		t.Helper()
		var lr LeaseResponse
		if a := do(p, "POST", "/v1/leases", LeaseRequest{Max: 10}); a.status != http.StatusOK {
			t.Fatalf("lease: %d %s", a.status, a.body)
		} else {
			a.decode(t, &lr)
		}
		n := map[string]int{}
		for _, l := range lr.Leases {
			switch job.ID(l.Job) {
			case cpuJob.ID:
				n["cpu"]++
			case gpuJob.ID:
				n["gpu"]++
			}
		}
		return n
	}
	if diff := cmp.Diff(map[string]int{"cpu": 3}, leased(cpu)); diff != "" {
		t.Errorf("CPU-only peer's leases (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{"gpu": 3}, leased(gpu)); diff != "" {
		t.Errorf("GPU peer's leases (-want +got):\n%s", diff)
	}

	// A peer without an offer is leased nothing: the offer bounds a lease.
	cpuJob2 := requirementsJob(t, "cpu-job-2", 1, "")
	gpuJob2 := requirementsJob(t, "gpu-job-2", 1, "gpu = true")
	for _, j := range []*job.Job{gpuJob2, cpuJob2} {
		b, _ := os.ReadFile(j.Program.Path)
		req := ts.request(t, "PUT", "/v1/blobs/"+j.Program.SHA256.String(), b)
		SignRequest(req, b, owner.key, clock.Now())
		ts.send(t, req)
		if a := do(owner, "POST", "/v1/jobs", JobRequest{Canonical: j.Canonical}); a.status != http.StatusCreated {
			t.Fatalf("submit: %d %s", a.status, a.body)
		}
	}
	leaseIDs := func(p *testPeer) []job.ID {
		t.Helper()
		var lr LeaseResponse
		do(p, "POST", "/v1/leases", LeaseRequest{Max: 10}).decode(t, &lr)
		var ids []job.ID
		for _, l := range lr.Leases {
			ids = append(ids, job.ID(l.Job))
		}
		return ids
	}
	if a := do(plain, "POST", "/v1/leases", LeaseRequest{Max: 10}); a.status != http.StatusConflict || a.errorBody(t).Code != "no_offer" ||
		!strings.Contains(a.errorBody(t).Error, "POST /v1/offers") {
		t.Errorf("peer without an offer: %d %s, want 409 no_offer naming POST /v1/offers", a.status, a.body)
	}
	if diff := cmp.Diff([]job.ID{cpuJob2.ID}, leaseIDs(cpu)); diff != "" {
		t.Errorf("CPU peer: leases of (-want +got):\n%s", diff)
	}

	// Past their expiry the offers are gone, and the GPU peer is leased
	// nothing until it offers again.
	clock.Advance(time.Minute)
	do(owner, "GET", "/v1/offers", nil).decode(t, &live)
	if len(live) != 0 {
		t.Errorf("offers after expiry: %v", live)
	}
	if a := do(gpu, "POST", "/v1/leases", LeaseRequest{Max: 10}); a.status != http.StatusConflict || a.errorBody(t).Code != "no_offer" {
		t.Errorf("peer whose offer expired: %d %s, want 409 no_offer", a.status, a.body)
	}
	// A fresh offer brings it back.
	if a := do(gpu, "POST", "/v1/offers", testOffer(gpu, clock.Now(), time.Minute, rtx)); a.status != http.StatusOK {
		t.Fatalf("fresh offer: %d %s", a.status, a.body)
	}
	if diff := cmp.Diff([]job.ID{gpuJob2.ID}, leaseIDs(gpu)); diff != "" {
		t.Errorf("GPU peer with a fresh offer: leases of (-want +got):\n%s", diff)
	}

	resp, err := ts.client.Get(ts.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "\nidlepool_coord_offers_live 1\n") {
		t.Errorf("metrics lack idlepool_coord_offers_live 1")
	}
}

// TestLeaseFitsDonorHours: on the coordinator's clock, a device is leased
// a task only while what is left of its offered hours covers the task's
// time limit (10 min by default).
func TestLeaseFitsDonorHours(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 3, 3, 6, 49, 0, 0, time.UTC)} // a Tuesday
	ts := startServer(t, func(c *Config) { c.Now = clock.Now })
	owner, donor := newPeer(t, nil), newPeer(t, nil)
	do := func(p *testPeer, method, path string, v any) answer {
		t.Helper()
		var body []byte
		if v != nil {
			body, _ = json.Marshal(v)
		}
		req := ts.request(t, method, path, body)
		SignRequest(req, body, p.key, clock.Now())
		return ts.send(t, req)
	}
	for _, p := range []*testPeer{owner, donor} {
		if a := do(p, "POST", "/v1/peers", p.registration("")); a.status != http.StatusCreated {
			t.Fatalf("register: %d %s", a.status, a.body)
		}
	}
	j := requirementsJob(t, "night-job", 3, "")
	b, err := os.ReadFile(j.Program.Path)
	if err != nil {
		t.Fatal(err)
	}
	req := ts.request(t, "PUT", "/v1/blobs/"+j.Program.SHA256.String(), b)
	SignRequest(req, b, owner.key, clock.Now())
	ts.send(t, req)
	if a := do(owner, "POST", "/v1/jobs", JobRequest{Canonical: j.Canonical}); a.status != http.StatusCreated {
		t.Fatalf("submit: %d %s", a.status, a.body)
	}
	nights, err := idle.ParseSchedule("Mon-Fri 22:00-07:00")
	if err != nil {
		t.Fatal(err)
	}
	o := testOffer(donor, clock.Now(), 10*time.Minute)
	o.Capacity.Schedule = nights
	o.Sign(donor.key)
	if a := do(donor, "POST", "/v1/offers", o); a.status != http.StatusOK {
		t.Fatalf("offer: %d %s", a.status, a.body)
	}
	leases := func() int {
		t.Helper()
		var lr LeaseResponse
		a := do(donor, "POST", "/v1/leases", LeaseRequest{Max: 1})
		if a.status != http.StatusOK {
			t.Fatalf("lease: %d %s", a.status, a.body)
		}
		a.decode(t, &lr)
		return len(lr.Leases)
	}
	if n := leases(); n != 1 {
		t.Errorf("11 min before the hours end: %d leases, want 1", n)
	}
	clock.Advance(9*time.Minute + 41*time.Second) // 06:58:41, 79 s left
	if n := leases(); n != 0 {
		t.Errorf("79 s before the hours end: %d leases of a task that may run 10 min, want 0", n)
	}
}

// TestOfferReasonInWordsIsNotListed: an agent from before holds signs its
// offer with the policy's reason in words in "reason". The pool takes it
// (its signature verifies as signed) but keeps and lists only the coarse
// hold the words stand for, unsigned: no other device reads which program
// runs or when the owner was active. An offer with a hold is listed as
// signed.
func TestOfferReasonInWordsIsNotListed(t *testing.T) {
	clock := &fakeClock{now: time.Now().UTC().Truncate(time.Millisecond)}
	ts := startServer(t, func(c *Config) { c.Now = clock.Now })
	donor, reader := newPeer(t, nil), newPeer(t, nil)
	do := func(p *testPeer, method, path string, v any) answer {
		t.Helper()
		var body []byte
		if v != nil {
			body, _ = json.Marshal(v)
		}
		req := ts.request(t, method, path, body)
		SignRequest(req, body, p.key, clock.Now())
		return ts.send(t, req)
	}
	for _, p := range []*testPeer{donor, reader} {
		if a := do(p, "POST", "/v1/peers", p.registration("")); a.status != http.StatusCreated {
			t.Fatalf("register: %d %s", a.status, a.body)
		}
	}
	for _, tc := range []struct {
		state   idle.State
		reason  string
		want    idle.Hold
		signed  bool
		secrets []string
	}{
		{idle.StatePaused, "paused: fakegame is running", idle.HoldOwner, false, []string{"fakegame"}},
		{idle.StateWaiting, "waiting: you were active 14 s ago; starting after 5 min idle", idle.HoldOwner, false, []string{"active", "14 s"}},
		{idle.StateWaiting, "waiting: outside your hours (next window Mon 22:00)", idle.HoldHours, false, []string{"Mon 22:00", "next window"}},
		{idle.StateWaiting, "waiting: on battery (43%)", idle.HoldBattery, false, []string{"43%"}},
		{idle.StateWaiting, "waiting: CPU at 91 °C, ceiling 85 °C", idle.HoldLimit, false, []string{"91 °C", "ceiling"}},
		{idle.StateComputing, "computing on 3 of 4 cores", idle.HoldNone, false, []string{"3 of 4"}},
		{idle.StateWaiting, string(idle.HoldBattery), idle.HoldBattery, true, nil},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			clock.Advance(time.Second) // a later offer replaces the earlier one
			o := testOffer(donor, clock.Now(), time.Minute)
			o.State, o.Hold = tc.state, idle.Hold(tc.reason)
			o.Sign(donor.key)
			if a := do(donor, "POST", "/v1/offers", o); a.status != http.StatusOK {
				t.Fatalf("offer: %d %s", a.status, a.body)
			}
			a := do(reader, "GET", "/v1/offers", nil)
			for _, s := range tc.secrets {
				if strings.Contains(string(a.body), s) {
					t.Errorf("GET /v1/offers says %q: %s", s, a.body)
				}
			}
			var live []offers.Offer
			a.decode(t, &live)
			if len(live) != 1 {
				t.Fatalf("%d offers listed, want 1", len(live))
			}
			if got := live[0]; got.Hold != tc.want || got.State != tc.state || (got.Sig != nil) != tc.signed {
				t.Errorf("listed state %q hold %q signed %v, want %q %q %v", got.State, got.Hold, got.Sig != nil, tc.state, tc.want, tc.signed)
			}
		})
	}
}
