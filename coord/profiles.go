package coord

import (
	"context"
	"fmt"
	"net/http"
	"sync"

	"idlepool/identity"
	"idlepool/pool"
	"idlepool/store"
)

// profileBook holds the owners' signed profiles (identity.Profile) that
// their devices sent when registering, by owner ID: in memory for the
// listings, which are read often, and in the store so that they outlive a
// restart. It is safe for concurrent use.
type profileBook struct {
	store    ProfileStore
	mu       sync.Mutex
	profiles map[string]identity.Profile
}

// ProfileStore keeps the owners' signed profiles: the coordinator's
// SQLite store (store.DB) on a single node, a replicated bucket
// (cluster.Profiles) in a cluster.
type ProfileStore interface {
	// PutOwnerProfile stores p, which verifies, unless the profile
	// stored for its owner was issued at the same time or later; it
	// reports whether p was stored. An error stores nothing.
	PutOwnerProfile(ctx context.Context, p identity.Profile) (bool, error)
	// OwnerProfiles returns every stored profile that verifies, by
	// owner ID.
	OwnerProfiles(ctx context.Context) (map[string]identity.Profile, error)
}

var _ ProfileStore = (*store.DB)(nil)

// loadProfiles reads the profiles in st.
func loadProfiles(ctx context.Context, st ProfileStore) (*profileBook, error) {
	ps, err := st.OwnerProfiles(ctx)
	if err != nil {
		return nil, err
	}
	return &profileBook{store: st, profiles: ps}, nil
}

// get returns owner's profile, or nil when it gave none.
func (b *profileBook) get(owner string) *identity.Profile {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	p, ok := b.profiles[owner]
	if !ok {
		return nil
	}
	return &p
}

// put keeps p when it is newer than the profile held for its owner.
func (b *profileBook) put(p identity.Profile) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if old, ok := b.profiles[p.Owner]; ok && !p.Issued.After(old.Issued) {
		return
	}
	b.profiles[p.Owner] = p
}

// acceptProfile checks the profile a registration of owner carries and
// keeps it (in the store, then in memory) when it is newer than the one
// held. A profile that does not verify, or is another owner's, is refused
// with 400 "bad_profile" saying why.
func (s *Server) acceptProfile(ctx context.Context, owner string, p *identity.Profile) error {
	if p == nil {
		return nil
	}
	if err := p.Verify(); err != nil {
		return &apiError{http.StatusBadRequest, "bad_profile", fmt.Sprintf("the owner profile is refused: %v", err), nil}
	}
	if p.Owner != owner {
		return &apiError{http.StatusBadRequest, "bad_profile",
			fmt.Sprintf("the owner profile is refused: it is the profile of owner %s, but the device registers for owner %s", p.Owner, owner), nil}
	}
	stored, err := s.profiles.store.PutOwnerProfile(ctx, *p)
	if err != nil {
		return fmt.Errorf("store the profile of owner %s: %w", owner, err)
	}
	s.profiles.put(*p)
	if stored {
		s.log.Info("Owner profile stored", "owner", owner, "name", p.Name)
	}
	return nil
}

// ownedJobInfo is jobInfo(st) with its owner's profile, if any, and the
// devices' transfer reports.
func (s *Server) ownedJobInfo(st pool.JobStatus) JobInfo {
	ji := jobInfo(st)
	ji.Transfer = s.transfers.summary(st.Job)
	ji.OwnerProfile = s.profiles.get(st.Owner)
	return ji
}
