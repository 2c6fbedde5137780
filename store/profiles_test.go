package store_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"idlepool/identity"
	"idlepool/job"
	"idlepool/pool"
	"idlepool/store"
)

func TestOwnerProfiles(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "coordinator.db")
	db, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	k, err := identity.FromSeed(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	older, _ := identity.NewProfile(k, "Ada", "", t0)
	newer, _ := identity.NewProfile(k, "Ada's lab", "https://example.org/ada", t0.Add(time.Hour))
	for _, step := range []struct {
		p      identity.Profile
		stored bool
	}{{older, true}, {newer, true}, {older, false}, {newer, false}} {
		got, err := db.PutOwnerProfile(ctx, step.p)
		if err != nil || got != step.stored {
			t.Fatalf("PutOwnerProfile(%q) = %v, %v; want %v", step.p.Name, got, err, step.stored)
		}
	}
	forged := newer
	forged.Name = "Bob"
	forged.Issued = t0.Add(2 * time.Hour)
	if _, err := db.PutOwnerProfile(ctx, forged); !errors.Is(err, identity.ErrBadProfile) {
		t.Fatalf("PutOwnerProfile of a forged profile = %v, want ErrBadProfile", err)
	}
	db.Close()
	if db, err = store.Open(path); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	all, err := db.OwnerProfiles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p := all[k.ID()]; len(all) != 1 || p.Name != "Ada's lab" || p.Link != "https://example.org/ada" {
		t.Fatalf("OwnerProfiles after a restart = %+v, want only the newer profile", all)
	}
}

func TestJobNotes(t *testing.T) {
	ctx := context.Background()
	l, _ := openLocal(t)
	id := job.ID(sha256.Sum256([]byte("job")))
	steps := []store.JobNote{
		{Job: id, Pool: "http://p", Name: "pi", Description: "Monte Carlo estimate of pi", Owner: "idowner"},
		{Job: id, OwnerName: "Ada's lab", OwnerLink: "https://example.org/ada"},
		{Job: id, Link: "https://example.org/pi"},
		{Job: id, OwnerName: "Ada"}, // a newer profile without a link
	}
	for _, n := range steps {
		if err := l.NoteJob(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	notes, err := l.JobNotes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := notes[id]
	got.Seen = time.Time{}
	want := store.JobNote{Job: id, Pool: "http://p", Name: "pi", Description: "Monte Carlo estimate of pi",
		Link: "https://example.org/pi", Owner: "idowner", OwnerName: "Ada"}
	if len(notes) != 1 || got != want {
		t.Fatalf("JobNotes = %+v, want %+v", got, want)
	}
}

func TestJobTransfers(t *testing.T) {
	ctx := context.Background()
	l, path := openLocal(t)
	id := job.ID(sha256.Sum256([]byte("job")))
	other := job.ID(sha256.Sum256([]byte("other")))
	if err := l.NoteJob(ctx, store.JobNote{Job: id, Pool: "http://p", Name: "pi"}); err != nil {
		t.Fatal(err)
	}
	for _, tr := range []pool.Transfer{{Direct: 1000, Coordinator: 5}, {Relayed: 300}, {}, {Direct: 24}} {
		if err := l.NoteTransfer(ctx, id, "http://p", tr); err != nil {
			t.Fatal(err)
		}
	}
	// A job noted first by its transfer.
	if err := l.NoteTransfer(ctx, other, "http://q", pool.Transfer{Coordinator: 7}); err != nil {
		t.Fatal(err)
	}
	if err := l.NoteTransfer(ctx, id, "http://p", pool.Transfer{Direct: -1}); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Fatalf("a negative count: err = %v, want one naming it", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, err := store.OpenLocal(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	notes, err := l.JobNotes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := notes[id].Transfer, (pool.Transfer{Direct: 1024, Relayed: 300, Coordinator: 5}); got != want || notes[id].Name != "pi" {
		t.Fatalf("job's note after a reopen = %+v, want transfer %+v and its name kept", notes[id], want)
	}
	if got := notes[other]; got.Transfer != (pool.Transfer{Coordinator: 7}) || got.Pool != "http://q" {
		t.Fatalf("job noted by its transfer = %+v", got)
	}
}
