package pool_test

import (
	"bytes"
	"context"
	"encoding/gob"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"idlepool/pool"
	"idlepool/pool/pooltest"
)

// imageRoundTrip encodes m's image as a snapshot is stored and builds a
// MemStore from the decoded bytes.
func imageRoundTrip(t *testing.T, m *pool.MemStore) *pool.MemStore {
	t.Helper()
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(m.Image()); err != nil {
		t.Fatalf("encode image: %v", err)
	}
	var img pool.MemImage
	if err := gob.NewDecoder(&buf).Decode(&img); err != nil {
		t.Fatalf("decode image: %v", err)
	}
	out, err := pool.NewMemStoreFrom(context.Background(), &img)
	if err != nil {
		t.Fatalf("NewMemStoreFrom: %v", err)
	}
	return out
}

// The Store contract holds for a MemStore rebuilt from the image of
// another at every reopening: everything round-trips, and every
// compare-and-set (ledger chain, outcome numbers, versions) goes on
// from where the image left off.
func TestMemStoreImageConformance(t *testing.T) {
	pooltest.StoreConformance(t, func(t *testing.T) (pool.Store, func(pool.Store) pool.Store) {
		return pool.NewMemStore(), func(s pool.Store) pool.Store { return imageRoundTrip(t, s.(*pool.MemStore)) }
	})
}

// A scheduler moved to a MemStore rebuilt from an image, three times in
// the middle of a job, loses and duplicates nothing.
func TestMemStoreImageRestart(t *testing.T) {
	h := pooltest.NewHarness(t, pool.NewMemStore(), nil)
	h.Reopen = func(s pool.Store) pool.Store { return imageRoundTrip(t, s.(*pool.MemStore)) }
	pooltest.RunRestart(h)
}

// An image does not change while its store goes on committing (it
// shares bytes with the store), and an image whose ledger does not hang
// together is refused.
func TestMemStoreImageStable(t *testing.T) {
	ctx := context.Background()
	m := pool.NewMemStore()
	h := pooltest.NewHarness(t, m, nil)
	h.Reopen = func(s pool.Store) pool.Store {
		img := s.(*pool.MemStore).Image()
		var before bytes.Buffer
		if err := gob.NewEncoder(&before).Encode(img); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			var after bytes.Buffer
			if err := gob.NewEncoder(&after).Encode(img); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(before.Bytes(), after.Bytes()) {
				t.Error("an image changed after its store committed more")
			}
		})
		return s
	}
	pooltest.RunRestart(h)
	img := m.Image()
	if len(img.Ledger) < 2 {
		t.Fatalf("the job left %d ledger entries, want some", len(img.Ledger))
	}
	if _, err := pool.NewMemStoreFrom(ctx, m.Image()); err != nil {
		t.Fatalf("a good image: %v", err)
	}
	for name, spoil := range map[string]func(*pool.MemImage){
		"entry missing": func(img *pool.MemImage) { img.Ledger = append(img.Ledger[:1:1], img.Ledger[2:]...) },
		"head differs":  func(img *pool.MemImage) { img.LedgerHash[0] ^= 1 },
		"last changed":  func(img *pool.MemImage) { img.Ledger[len(img.Ledger)-1].Cost++ },
		"replica twice": func(img *pool.MemImage) { img.Replicas = append(img.Replicas, img.Replicas[0]) },
	} {
		img := imageRoundTrip(t, m).Image()
		spoil(img)
		if _, err := pool.NewMemStoreFrom(ctx, img); !errors.Is(err, pool.ErrConflict) {
			t.Errorf("%s: NewMemStoreFrom = %v, want ErrConflict", name, err)
		}
	}
	if d := cmp.Diff(m.Image(), imageRoundTrip(t, m).Image()); d != "" {
		t.Errorf("round trip (-want +got):\n%s", d)
	}
}
