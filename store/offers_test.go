package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/job"
	"idlepool/offers"
	"idlepool/store"
)

func TestPreferences(t *testing.T) {
	ctx := context.Background()
	l, path := openLocal(t)

	empty, err := l.Preferences(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(offers.Preferences{Global: offers.PoolPreferences{Weight: 1}}, empty); diff != "" {
		t.Errorf("empty store (-want +got):\n%s", diff)
	}

	a, b := "http://a:7420", "http://b:7420"
	j1, j2 := job.ID{1}, job.ID{2}
	steps := []struct {
		name string
		do   func() error
	}{
		{"add a", func() error { return l.AddPool(ctx, a, "lab") }},
		{"add a again without a name", func() error { return l.AddPool(ctx, a, "") }},
		{"weight a", func() error { return l.SetPoolWeight(ctx, a, 3) }},
		{"GPU a", func() error { return l.SetGPUPrograms(ctx, a, true) }},
		{"limits a", func() error { return l.SetTaskLimits(ctx, a, 2048, 30*time.Minute) }},
		{"refuse j1 in a", func() error { return l.RefuseJob(ctx, a, j1) }},
		{"accept j1 in a instead", func() error { return l.AcceptJob(ctx, a, j1) }},
		{"refuse j2 everywhere", func() error { return l.RefuseJob(ctx, "", j2) }},
		{"refuse owner in b (b becomes known)", func() error { return l.RefuseOwner(ctx, b, "idbad") }},
		{"prefer owner everywhere", func() error { return l.AcceptOwner(ctx, "", "idfriend") }},
		{"refuse owner idmeh, then clear", func() error {
			if err := l.RefuseOwner(ctx, b, "idmeh"); err != nil {
				return err
			}
			return l.ClearOwner(ctx, b, "idmeh")
		}},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
	}
	want := offers.Preferences{
		Global: offers.PoolPreferences{Weight: 1, AcceptOwners: []string{"idfriend"}, RefuseJobs: []job.ID{j2}},
		Pools: []offers.PoolPreferences{
			{URL: a, Name: "lab", Weight: 3, GPUPrograms: true, MaxMemoryMiB: 2048, MaxTaskTime: 30 * time.Minute, AcceptJobs: []job.ID{j1}},
			{URL: b, Weight: 1, RefuseOwners: []string{"idbad"}},
		},
	}
	got, err := l.Preferences(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Preferences (-want +got):\n%s", diff)
	}
	if w := got.Accept(a).Weight; w != 0.75 {
		t.Errorf("share of a = %v, want 0.75", w)
	}

	// Kept across a reopen; forgetting a pool drops its choices.
	l.Close()
	l2, err := store.OpenLocal(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if err := l2.ForgetPool(ctx, b); err != nil {
		t.Fatal(err)
	}
	got, err = l2.Preferences(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want.Pools = want.Pools[:1]
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("after reopen and ForgetPool(b) (-want +got):\n%s", diff)
	}
}

func TestPreferencesErrors(t *testing.T) {
	ctx := context.Background()
	l, _ := openLocal(t)
	tests := []struct {
		name string
		err  error
	}{
		{"negative weight", l.SetPoolWeight(ctx, "http://a", -1)},
		{"weight of every pool", l.SetPoolWeight(ctx, "", 1)},
		{"negative limits", l.SetTaskLimits(ctx, "", -1, 0)},
		{"empty owner", l.RefuseOwner(ctx, "", "")},
		{"empty URL", l.AddPool(ctx, "", "x")},
	}
	for _, tc := range tests {
		if tc.err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
	if p, err := l.Preferences(ctx); err != nil || len(p.Pools) != 0 {
		t.Errorf("after refused changes: %+v, %v; want no pools", p, err)
	}
}
