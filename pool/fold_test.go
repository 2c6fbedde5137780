package pool_test

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"idlepool/job"
	"idlepool/pool"
)

func foldJob(t *testing.T, tasks int) *job.Job {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "prog.wasm"), []byte("\x00asm\x01\x00\x00\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	text := fmt.Sprintf(`name = "fold"
program = "prog.wasm"
[split]
rule = "range"
tasks = %d
[[merge]]
field = "x"
rule = "stats"
[[merge]]
name = "rows"
rule = "collect"
[derive]
mean = "x.mean"
`, tasks)
	m, err := job.ParseManifest("fold.toml", dir, []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	j, err := job.Plan(m)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// outcomeOf folds recs (in order) into a Folder in dir, closing and
// reopening it after every record index in breaks, and returns what
// matters of the outcome: result and derived JSON, failures, and output
// file digests.
func outcomeOf(t *testing.T, j *job.Job, dir string, recs []pool.JournalRecord, breaks map[int]bool) string {
	t.Helper()
	open := func() *pool.Folder {
		f, err := pool.OpenFolder(j, pool.FoldConfig{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	f := open()
	for i, rec := range recs {
		if err := f.Fold(rec); err != nil {
			t.Fatal(err)
		}
		if breaks[i] {
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			f = open()
		}
	}
	if !f.Complete() {
		t.Fatal("not complete after folding every task")
	}
	out, err := f.Finish()
	if err != nil {
		t.Fatal(err)
	}
	outputs := map[string]string{}
	for name, path := range out.Outputs {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		outputs[name] = fmt.Sprintf("%x", sha256.Sum256(b))
	}
	b, err := json.Marshal(map[string]any{"result": out.Result, "derived": out.Derived, "failures": out.Failures,
		"ok": out.OK, "failed": out.Failed, "outputs": outputs})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestFolderOrderAndInterruptionsDoNotMatter(t *testing.T) {
	const n = 50
	j := foldJob(t, n)
	var recs []pool.JournalRecord
	for i := range int64(n) {
		rec := pool.JournalRecord{Index: i, Status: pool.StatusOK, Body: fmt.Appendf(nil, `{"x": %d.25}`, i*i)}
		switch i % 17 {
		case 5:
			rec = pool.JournalRecord{Index: i, Status: pool.StatusFailed, Body: []byte("trap: boom")}
		case 9:
			rec.Body = []byte(`{"y": 1}`) // no "x": the merge rules refuse it
		}
		recs = append(recs, rec)
	}
	want := outcomeOf(t, j, t.TempDir(), recs, nil)

	rng := rand.New(rand.NewPCG(1, 2))
	tests := []struct {
		name   string
		order  func([]pool.JournalRecord) []pool.JournalRecord
		breaks map[int]bool
	}{
		{"reversed", func(r []pool.JournalRecord) []pool.JournalRecord {
			out := append([]pool.JournalRecord(nil), r...)
			for a, b := 0, len(out)-1; a < b; a, b = a+1, b-1 {
				out[a], out[b] = out[b], out[a]
			}
			return out
		}, nil},
		{"shuffled with interruptions", func(r []pool.JournalRecord) []pool.JournalRecord {
			out := append([]pool.JournalRecord(nil), r...)
			rng.Shuffle(len(out), func(a, b int) { out[a], out[b] = out[b], out[a] })
			return out
		}, map[int]bool{3: true, 20: true, 21: true, 40: true}},
		{"duplicates count once", func(r []pool.JournalRecord) []pool.JournalRecord {
			out := append([]pool.JournalRecord(nil), r[:25]...)
			out = append(out, r[:25]...) // again, also across the reopening
			return append(out, r[25:]...)
		}, map[int]bool{24: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := outcomeOf(t, j, t.TempDir(), tc.order(recs), tc.breaks)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("outcome differs (-in order +%s):\n%s", tc.name, diff)
			}
		})
	}
	if !strings.Contains(want, "malformed result") || !strings.Contains(want, "trap: boom") {
		t.Errorf("failures are missing from the outcome: %s", want)
	}
}

func TestFolderRefusesTasksOutOfRange(t *testing.T) {
	j := foldJob(t, 3)
	f, err := pool.OpenFolder(j, pool.FoldConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, i := range []int64{-1, 3} {
		if err := f.Fold(pool.JournalRecord{Index: i, Status: pool.StatusOK, Body: []byte(`{"x":1}`)}); err == nil {
			t.Errorf("task %d of 3 was folded", i)
		}
	}
	if done, failed := f.Count(); done != 0 || failed != 0 {
		t.Errorf("count = %d, %d after refusals", done, failed)
	}
}
