package coord

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"idlepool/identity"
	"idlepool/job"
	"idlepool/offers"
)

// TestOwnerProfiles: a device registers with its owner's signed profile;
// the pool refuses a profile that does not verify or is another owner's,
// keeps the newest of an owner's profiles across a restart, and shows it
// (signed, so that donors check it) in the listings, the offers and the
// job's status, with the job's link.
func TestOwnerProfiles(t *testing.T) {
	data := t.TempDir()
	ts, stop := runServer(t, func(c *Config) { c.DataDir = data })
	owner, donor, other := newPeer(t, nil), newPeer(t, nil), newPeer(t, nil)
	t0 := time.Now().UTC().Add(-time.Hour)
	profile := func(p *testPeer, name, link string, at time.Time) *identity.Profile {
		t.Helper()
		pr, err := identity.NewProfile(p.owner, name, link, at)
		if err != nil {
			t.Fatal(err)
		}
		return &pr
	}
	register := func(ts *testServer, p *testPeer, pr *identity.Profile) answer {
		reg := p.registration("")
		reg.Profile = pr
		return ts.do(t, p, "POST", "/v1/peers", reg)
	}

	// Refused: edited after signing, another owner's, a bad name.
	edited := profile(owner, "Ada's lab", "", t0)
	edited.Name = "Bob's lab"
	badName := profile(owner, "Ada", "", t0)
	badName.Name = "Ada\x1b[2J"
	for _, tc := range []struct {
		name string
		pr   *identity.Profile
		want string
	}{
		{"edited", edited, "signature"},
		{"another owner's", profile(other, "Mallory", "", t0), "profile of owner " + other.owner.ID()},
		{"control character", badName, "control character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := register(ts, owner, tc.pr)
			if e := a.errorBody(t); a.status != http.StatusBadRequest || e.Code != "bad_profile" || !strings.Contains(e.Error, tc.want) {
				t.Fatalf("register with a bad profile: %d %+v, want 400 bad_profile saying %q", a.status, e, tc.want)
			}
		})
	}

	newer := profile(owner, "Ada's lab", "https://example.org/ada", t0.Add(time.Minute))
	if a := register(ts, owner, newer); a.status != http.StatusCreated {
		t.Fatalf("register: %d %s", a.status, a.body)
	}
	// An older profile sent again (a device with a stale copy) changes nothing.
	if a := register(ts, owner, profile(owner, "Ada", "", t0)); a.status != http.StatusOK {
		t.Fatalf("register again: %d %s", a.status, a.body)
	}
	if a := register(ts, donor, profile(donor, "Bob's gaming PC", "", t0)); a.status != http.StatusCreated {
		t.Fatalf("register donor: %d %s", a.status, a.body)
	}

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "prog.wasm"), []byte("\x00asm\x01\x00\x00\x00"), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := job.ParseManifest("test.toml", dir, []byte(`name = "ising"
description = "2D Ising model sweep"
link = "https://example.org/ising"
program = "prog.wasm"
[split]
rule = "range"
tasks = 2
[[merge]]
field = "x"
rule = "sum"
[policy]
redundancy = 1
quorum = 1
`))
	if err != nil {
		t.Fatal(err)
	}
	j, err := job.Plan(m)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(j.Program.Path)
	ts.upload(t, owner, b)
	if a := ts.do(t, owner, "POST", "/v1/jobs", JobRequest{Canonical: j.Canonical}); a.status != http.StatusCreated {
		t.Fatalf("submit: %d %s", a.status, a.body)
	}
	stop()

	// After a restart on the same data, the pool still shows them.
	ts = startServer(t, func(c *Config) { c.DataDir = data })
	ts.offer(t, donor)
	var ls []offers.Listing
	ts.do(t, donor, "GET", "/v1/listings", nil).decode(t, &ls)
	if len(ls) != 1 {
		t.Fatalf("listings = %+v, want the one job", ls)
	}
	l := ls[0]
	if l.Name != "ising" || l.Description != "2D Ising model sweep" || l.Link != "https://example.org/ising" {
		t.Errorf("listing names %q %q %q, want the manifest's name, description and link", l.Name, l.Description, l.Link)
	}
	if got, want := l.OwnerText(), "Ada's lab ("+offers.ShortID(owner.owner.ID())+")"; got != want {
		t.Errorf("listing's owner = %q, want %q", got, want)
	}
	if got := offers.OwnerLink(l.Owner, l.OwnerProfile); got != "https://example.org/ada" {
		t.Errorf("listing's owner link = %q", got)
	}

	var os_ []offers.Offer
	ts.do(t, owner, "GET", "/v1/offers", nil).decode(t, &os_)
	if len(os_) != 1 || offers.OwnerName(os_[0].Owner, os_[0].OwnerProfile) != "Bob's gaming PC" {
		t.Fatalf("offers = %+v, want the donor's with its owner's name", os_)
	}
	if err := os_[0].Verify(donor.key.Public(), ts.cfg.Now()); err != nil {
		t.Errorf("the listed offer no longer verifies with the profile added: %v", err)
	}

	var info JobInfo
	ts.do(t, donor, "GET", "/v1/jobs/"+j.ID.String(), nil).decode(t, &info)
	if offers.OwnerName(info.Owner, info.OwnerProfile) != "Ada's lab" {
		t.Errorf("job status owner profile = %+v, want Ada's lab", info.OwnerProfile)
	}
}
