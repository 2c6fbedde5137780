package store_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"idlepool/castore"
	"idlepool/job"
	"idlepool/pool"
	"idlepool/pool/pooltest"
	"idlepool/store"
)

// refFixture is a job with one replica (lease "l1") and one outcome (seq
// 1), both by reference, committed to a new coordinator database.
type refFixture struct {
	path  string
	db    *store.DB
	job   job.ID
	ref   *castore.Manifest
	batch *pool.Batch
}

func newRefFixture(t *testing.T) *refFixture {
	t.Helper()
	f := &refFixture{path: filepath.Join(t.TempDir(), "coordinator.db"), job: job.ID(sha256.Sum256([]byte("refs")))}
	f.ref = pooltest.RefOf(t, bytes.Repeat([]byte("x"), 10_000))
	at := time.UnixMilli(1_767_000_000_000)
	peer := pooltest.Device(t, pooltest.Key(t, "owner/bob"), "bob-1")
	peer.Joined = at
	f.batch = &pool.Batch{
		Peers: []pool.Peer{peer},
		Jobs:  []pool.JobRecord{{ID: f.job, Canonical: []byte("c"), Owner: "idalice", Merger: "idalice-1", Order: 1, Added: at}},
		Replicas: []pool.ReplicaRecord{{Lease: "l1", Job: f.job, Peer: peer.ID, Owner: peer.Owner, State: pool.ReplicaReturned,
			Created: at, Deadline: at.Add(time.Minute), Digest: f.ref.SHA256, Ref: f.ref, Version: 1}},
		Outcomes: []pool.OutcomeRecord{{Job: f.job, Digest: f.ref.SHA256,
			Verified: pool.Verified{Seq: 1, Task: 0, Status: pool.OutcomeOK, Ref: f.ref, Holders: []string{peer.ID}}}},
	}
	db, err := store.Open(f.path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	f.db = db
	if err := db.Commit(context.Background(), f.batch); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	return f
}

// exec runs a statement on the fixture's file through a connection of its
// own, as another program would.
func (f *refFixture) exec(t *testing.T, query string, args ...any) {
	t.Helper()
	raw, err := sql.Open("sqlite", f.path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Exec(query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// A stored reference or holders list that is not what Commit writes (not
// JSON, a manifest that does not Validate, holders that are not an
// array) makes Load fail with an error naming the replica or outcome,
// and Replica fail for that replica; nothing panics.
func TestDBCorruptRefs(t *testing.T) {
	ctx := context.Background()
	invalid := `{"sha256":"` + strings.Repeat("00", 32) + `","size":10,"chunkSize":1,"chunks":[]}`
	tests := []struct {
		name, query, value string
		names              string // the record the error must name
		badManifest        bool   // the error wraps castore.ErrBadManifest
	}{
		{"replica ref not JSON", `UPDATE replicas SET ref = ?`, `{"sha256":`, "replica l1", true},
		{"replica ref invalid", `UPDATE replicas SET ref = ?`, invalid, "replica l1", true},
		{"replica ref null JSON", `UPDATE replicas SET ref = ?`, `null`, "replica l1", true},
		{"outcome ref not JSON", `UPDATE outcomes SET ref = ?`, `[]`, "outcome 1 of job", true},
		{"outcome ref invalid", `UPDATE outcomes SET ref = ?`, invalid, "outcome 1 of job", true},
		{"outcome holders not an array", `UPDATE outcomes SET holders = ?`, `"idbob-1"`, "outcome 1 of job", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newRefFixture(t)
			f.exec(t, tc.query, []byte(tc.value))
			_, err := f.db.Load(ctx)
			if err == nil || !strings.Contains(err.Error(), tc.names) {
				t.Fatalf("Load: %v, want an error naming %q", err, tc.names)
			}
			if tc.badManifest != errors.Is(err, castore.ErrBadManifest) {
				t.Errorf("Load: %v; wraps castore.ErrBadManifest: %v, want %v", err, !tc.badManifest, tc.badManifest)
			}
			_, err = f.db.Replica(ctx, "l1")
			if bad := strings.HasPrefix(tc.query, "UPDATE replicas"); bad != (err != nil) {
				t.Errorf("Replica(l1): %v, want an error: %v", err, bad)
			}
		})
	}
}

// Commit refuses a reference that does not Validate, which Load would
// refuse, and stores nothing of its batch.
func TestDBRefusesInvalidRef(t *testing.T) {
	ctx := context.Background()
	f := newRefFixture(t)
	before, err := f.db.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bad := *f.ref
	bad.Size++
	r := f.batch.Replicas[0]
	r.Ref, r.Version, r.Prev = &bad, 2, 1
	if err := f.db.Commit(ctx, &pool.Batch{Replicas: []pool.ReplicaRecord{r}}); !errors.Is(err, castore.ErrBadManifest) ||
		!strings.Contains(err.Error(), "replica l1") {
		t.Fatalf("Commit of a bad ref: %v, want castore.ErrBadManifest naming replica l1", err)
	}
	after, err := f.db.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, after, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("a refused batch changed the store (-before +after):\n%s", diff)
	}
}

// A database written before migration 0005 (result references) opens,
// keeps its replicas and outcomes (without references), and then stores
// references.
func TestDBUpgradeToResultRefs(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "coordinator.db")
	old, err := filepath.Glob(filepath.Join("migrations", "coordinator", "000[1-4]_*.sql"))
	if err != nil || len(old) != 4 {
		t.Fatalf("migrations 0001 to 0004: %v, %v", old, err)
	}
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	// The schema as an idlepool of before 0005 left it, with a job, a
	// returned replica and an unacknowledged outcome.
	type stmt struct {
		query string
		args  []any
	}
	stmts := []stmt{{query: `CREATE TABLE schema_version (
		version INTEGER PRIMARY KEY,
		name    TEXT NOT NULL,
		applied INTEGER NOT NULL DEFAULT (unixepoch())
	)`}}
	for i, name := range old {
		body, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		stmts = append(stmts, stmt{query: string(body)},
			stmt{`INSERT INTO schema_version(version, name) VALUES (?, ?)`, []any{i + 1, filepath.Base(name)}})
	}
	id := job.ID(sha256.Sum256([]byte("old")))
	stmts = append(stmts,
		stmt{`INSERT INTO jobs(id, canonical, owner, merger, ord, added) VALUES (?, ?, 'idalice', 'idalice-1', 1, 1767000000000)`,
			[]any{id[:], []byte("c")}},
		stmt{`INSERT INTO replicas(lease, job, task, peer, owner, state, created, deadline, digest, result, version)
			VALUES ('l1', ?, 0, 'idbob-1', 'idbob', ?, 1767000000000, 1767000060000, ?, ?, 1)`,
			[]any{id[:], pool.ReplicaReturned, make([]byte, 32), []byte("r")}},
		stmt{`INSERT INTO outcomes(job, seq, task, status, digest, result) VALUES (?, 1, 0, ?, ?, ?)`,
			[]any{id[:], pool.OutcomeOK, make([]byte, 32), []byte("r")}})
	for _, q := range stmts {
		if _, err := raw.Exec(q.query, q.args...); err != nil {
			raw.Close()
			t.Fatalf("%s: %v", q.query, err)
		}
	}
	raw.Close()

	db, err := store.Open(path)
	if err != nil {
		t.Fatalf("Open of a database before 0005: %v", err)
	}
	defer db.Close()
	s, err := db.Load(ctx)
	if err != nil {
		t.Fatalf("Load after the upgrade: %v", err)
	}
	if len(s.Replicas) != 1 || string(s.Replicas[0].Result) != "r" || s.Replicas[0].Ref != nil ||
		len(s.Outcomes) != 1 || string(s.Outcomes[0].Result) != "r" || s.Outcomes[0].Ref != nil || s.Outcomes[0].Holders != nil {
		t.Fatalf("after the upgrade: replicas %+v, outcomes %+v", s.Replicas, s.Outcomes)
	}
	ref := pooltest.RefOf(t, bytes.Repeat([]byte("y"), 5000))
	r := s.Replicas[0]
	r.Result, r.Ref, r.Digest, r.Version, r.Prev = nil, ref, ref.SHA256, 2, 1
	o := pool.OutcomeRecord{Job: id, Digest: ref.SHA256, Verified: pool.Verified{Seq: 2, Task: 1, Status: pool.OutcomeOK,
		Ref: ref, Holders: []string{"idbob-1", "idcarol-1"}}}
	if err := db.Commit(ctx, &pool.Batch{Replicas: []pool.ReplicaRecord{r}, Outcomes: []pool.OutcomeRecord{o}}); err != nil {
		t.Fatalf("Commit of references after the upgrade: %v", err)
	}
	s, err = db.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r.Prev = 0
	if diff := cmp.Diff([]pool.ReplicaRecord{r}, s.Replicas, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("replicas (-want +got):\n%s", diff)
	}
	if len(s.Outcomes) != 2 {
		t.Fatalf("outcomes: %+v", s.Outcomes)
	}
	if diff := cmp.Diff(o, s.Outcomes[1], cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("outcome 2 (-want +got):\n%s", diff)
	}
}
