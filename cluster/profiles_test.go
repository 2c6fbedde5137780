package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/identity"
)

// An owner's profile stored through one node is read on another; an
// older one sent again is not stored, a newer one replaces it, and one
// that does not verify is refused.
func TestProfilesReplicated(t *testing.T) {
	nodes := startNodes(t, testConfigs(t, t.TempDir(), 3))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a := untilOpen(t, "OpenProfiles on node 0", func(ctx context.Context) (*Profiles, error) { return OpenProfiles(ctx, nodes[0].JetStream(), 3) })
	b := untilOpen(t, "OpenProfiles on node 2", func(ctx context.Context) (*Profiles, error) { return OpenProfiles(ctx, nodes[2].JetStream(), 3) })
	if got, err := b.OwnerProfiles(ctx); err != nil || len(got) != 0 {
		t.Fatalf("OwnerProfiles of an empty bucket = %v, %v", got, err)
	}
	owner, err := identity.Generate()
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	mk := func(name string, issued time.Time) identity.Profile {
		p, err := identity.NewProfile(owner, name, "", issued)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	older, newer := mk("Ada's lab", at), mk("Ada's lab, Bristol", at.Add(time.Hour))

	steps := []struct {
		name   string
		via    *Profiles
		p      identity.Profile
		stored bool
		want   string
	}{
		{"first", a, older, true, "Ada's lab"},
		{"the same again", b, older, false, "Ada's lab"},
		{"newer, through another node", b, newer, true, "Ada's lab, Bristol"},
		{"older after newer", a, older, false, "Ada's lab, Bristol"},
	}
	for _, st := range steps {
		stored, err := st.via.PutOwnerProfile(ctx, st.p)
		if err != nil || stored != st.stored {
			t.Fatalf("%s: PutOwnerProfile = %v, %v; want %v", st.name, stored, err, st.stored)
		}
		for i, r := range []*Profiles{a, b} {
			got, err := r.OwnerProfiles(ctx)
			if err != nil {
				t.Fatalf("%s: OwnerProfiles via node %d: %v", st.name, i, err)
			}
			if diff := cmp.Diff(map[string]string{owner.ID(): st.want}, names(got)); diff != "" {
				t.Errorf("%s: profiles via node %d (-want +got):\n%s", st.name, i, diff)
			}
		}
	}

	forged := newer
	forged.Name = "Someone else"
	if _, err := a.PutOwnerProfile(ctx, forged); err == nil {
		t.Error("a profile whose signature does not cover its name was stored")
	}
}

func names(ps map[string]identity.Profile) map[string]string {
	out := map[string]string{}
	for k, p := range ps {
		out[k] = p.Name
	}
	return out
}
