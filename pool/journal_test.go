package pool

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"idlepool/job"
)

func readAll(t *testing.T, path string, id job.ID) ([]JournalRecord, error) {
	t.Helper()
	var got []JournalRecord
	j, err := OpenJournal(path, id, func(r JournalRecord) error {
		got = append(got, JournalRecord{Index: r.Index, Status: r.Status, Body: append([]byte(nil), r.Body...)})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return got, j.Close()
}

func TestJournalRoundTripAndTornTail(t *testing.T) {
	id := job.ID{1, 2, 3}
	recs := []JournalRecord{
		{Index: 3, Status: StatusOK, Body: []byte(`{"x":1}`)},
		{Index: 0, Status: StatusFailed, Body: []byte("trap: unreachable")},
		{Index: 7, Status: StatusOK, Body: []byte(`{}`)},
	}
	path := filepath.Join(t.TempDir(), "journal")
	j, err := OpenJournal(path, id, func(JournalRecord) error { t.Fatal("replay of a new journal"); return nil })
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if err := j.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := readAll(t, path, id)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(recs, got); diff != "" {
		t.Fatalf("replayed records differ (-want +got):\n%s", diff)
	}

	// Every cut of the last record (a kill -9 mid-write) loses only that
	// record, and the journal appends cleanly afterwards.
	full, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lastLen := 8 + 9 + len(recs[2].Body)
	for cut := 1; cut < lastLen; cut++ {
		if err := os.WriteFile(path, full[:len(full)-cut], 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := readAll(t, path, id)
		if err != nil {
			t.Fatalf("cut %d: %v", cut, err)
		}
		if diff := cmp.Diff(recs[:2], got); diff != "" {
			t.Fatalf("cut %d: (-want +got):\n%s", cut, diff)
		}
	}
	j, err = OpenJournal(path, id, func(JournalRecord) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Append(recs[2]); err != nil {
		t.Fatal(err)
	}
	j.Close()
	if got, _ := readAll(t, path, id); len(got) != 3 {
		t.Fatalf("after appending to a repaired journal: %d records, want 3", len(got))
	}
}

func TestJournalRefusesForeignOrDamaged(t *testing.T) {
	id := job.ID{9}
	dir := t.TempDir()
	path := filepath.Join(dir, "journal")
	j, err := OpenJournal(path, id, func(JournalRecord) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := j.Append(JournalRecord{Index: int64(i), Status: StatusOK, Body: []byte(`{"a":1}`)}); err != nil {
			t.Fatal(err)
		}
	}
	j.Close()
	good, _ := os.ReadFile(path)

	if _, err := readAll(t, path, job.ID{8}); !errors.Is(err, ErrJournal) {
		t.Errorf("journal of another job: err = %v, want ErrJournal", err)
	}
	damaged := append([]byte(nil), good...)
	damaged[len(journalMagic)+32+8+9+2] ^= 0xff // the first record's body
	os.WriteFile(path, damaged, 0o600)
	if _, err := readAll(t, path, id); !errors.Is(err, ErrJournal) {
		t.Errorf("damaged middle record: err = %v, want ErrJournal", err)
	}
	if after, _ := os.ReadFile(path); len(after) != len(damaged) {
		t.Errorf("a refused journal was truncated from %d to %d bytes", len(damaged), len(after))
	}
	os.WriteFile(path, []byte("not a journal at all, just some text"), 0o600)
	if _, err := readAll(t, path, id); !errors.Is(err, ErrJournal) {
		t.Errorf("foreign file: err = %v, want ErrJournal", err)
	}
}
