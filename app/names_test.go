//go:build !darwin || cgo

package app

import (
	"bytes"
	"context"
	"crypto/sha256"
	"strings"
	"testing"
	"time"

	"fyne.io/fyne/v2/test"
	"github.com/google/go-cmp/cmp"

	"idlepool/agent"
	"idlepool/identity"
	"idlepool/job"
	"idlepool/offers"
	"idlepool/store"
)

// TestHistoryShowsJobNames: the History window names the jobs the agent
// noted (their name with a short ID, where it showed only the ID), and
// its details say what the job is, its page and its owner's name beside
// the owner's ID; a job never noted keeps its short ID.
func TestHistoryShowsJobNames(t *testing.T) {
	l := openHistoryStore(t)
	seedHistory(t, l)
	squares := job.ID(sha256.Sum256([]byte("squares")))
	owner := "idk3m9x2qa7hxyzw0000000000000000aa"
	err := l.NoteJob(context.Background(), store.JobNote{Job: squares, Pool: "http://a", Name: "squares",
		Description: "Sums of squares,\nfor the class", Link: "https://example.org/squares",
		Owner: owner, OwnerName: "Ada's lab", OwnerLink: "https://example.org/ada"})
	if err != nil {
		t.Fatal(err)
	}
	u := New(testApp(t), &Deps{Store: l, Engine: &countingEngine{}, Now: func() time.Time { return historyNow }})
	v := testHistory{u.newHistoryView(), newUILoop()}
	v.do = v.loop.do
	v.load()
	v.settle()

	primes := job.ID(sha256.Sum256([]byte("primes"))).String()[:12]
	render := job.ID(sha256.Sum256([]byte("render"))).String()[:12]
	sq := "squares (" + squares.String()[:6] + ")"
	if diff := cmp.Diff([]string{sq, sq, render, render, primes, primes}, v.column(colJob)); diff != "" {
		t.Errorf("job column (-want +got):\n%s", diff)
	}
	v.table.Select(widgetCell(0))
	for _, want := range []string{
		"Job: " + sq,
		"Sums of squares, for the class",
		"Job's page: https://example.org/squares",
		"Job's owner: Ada's lab (idk3m9x2qa…), https://example.org/ada",
		"Job ID: " + squares.String(),
	} {
		if !strings.Contains(v.details.Text, want) {
			t.Errorf("details lack %q:\n%s", want, v.details.Text)
		}
	}
	// Sorting by job sorts by name: primes, render (no name: by ID), squares.
	test.Tap(v.headers[colJob])
	if got := v.column(colJob); got[0] != render || got[len(got)-1] != sq {
		t.Errorf("sorted by job: %q", got)
	}
}

// TestBrowseShowsOwnerNames: the Browse window shows a job's description
// under its name and the owner's signed display name beside its short ID;
// a profile that does not verify is not shown, and names are made one
// plain line.
func TestBrowseShowsOwnerNames(t *testing.T) {
	k, err := identity.FromSeed(bytes.Repeat([]byte{9}, 32))
	if err != nil {
		t.Fatal(err)
	}
	p, err := identity.NewProfile(k, "Ada's lab", "https://example.org/ada", historyNow)
	if err != nil {
		t.Fatal(err)
	}
	forged := p
	forged.Name = "Trusted Org"
	boards := testBoards()
	jobs := boards[0].Jobs
	jobs[0].Listing.Owner, jobs[0].Listing.OwnerProfile = k.ID(), &p
	jobs[0].Listing.Name = "squares\x1b[2J"
	jobs[0].Listing.Link = "https://example.org/squares"
	jobs[1].Listing.Owner, jobs[1].Listing.OwnerProfile = k.ID(), &forged

	l := openHistoryStore(t)
	if err := l.JoinPool(context.Background(), "http://a", ""); err != nil {
		t.Fatal(err)
	}
	u := New(testApp(t), &Deps{Store: l, Engine: &countingEngine{}, Board: func(context.Context) ([]agent.PoolBoard, error) {
		return boards, nil
	}})
	v := testBrowse{u.newBrowseView(), newUILoop(), l, nil, nil}
	v.do = v.loop.do
	v.load()
	v.settle()
	short := offers.ShortID(k.ID())
	if got := v.columns(0)[:2]; !cmp.Equal(got, []string{"squares\uFFFD[2J\nSums of squares.", "Ada's lab\n" + short}) {
		t.Errorf("first row's job and owner: %q", got)
	}
	if got := v.cell(1, 1); got != short {
		t.Errorf("owner of a job whose profile does not verify: %q, want the short ID alone", got)
	}
	v.table.Select(widgetCell(0))
	for _, want := range []string{
		"Job's page: https://example.org/squares",
		"Owner: Ada's lab (" + short + "), https://example.org/ada",
		"Owner ID: " + k.ID(),
	} {
		if !strings.Contains(v.details.Text, want) {
			t.Errorf("details lack %q:\n%s", want, v.details.Text)
		}
	}
	v.table.Select(widgetCell(1))
	if strings.Contains(v.details.Text, "Trusted Org") || !strings.Contains(v.details.Text, "Owner: "+k.ID()+" (no name given)") {
		t.Errorf("details of a job with a forged profile:\n%s", v.details.Text)
	}
}
