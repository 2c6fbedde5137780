package pool_test

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// TestFoldProgressRate checks the rate and the time left a Folder
// reports, on an injected clock: counted from the first finished task,
// not from the start, so that a minute of start-up (the program
// compiling) does not make a three-minute run promise forty.
func TestFoldProgressRate(t *testing.T) {
	const tasks = 1000
	j := foldJob(t, tasks)
	start := time.Date(2026, 12, 5, 23, 30, 0, 0, time.UTC)
	now := start
	var got []pool.Progress
	f, err := pool.OpenFolder(j, pool.FoldConfig{Dir: t.TempDir(), Now: func() time.Time { return now },
		Progress: func(p pool.Progress) { got = append(got, p) }})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fold := func(i int) {
		t.Helper()
		if err := f.Fold(pool.JournalRecord{Index: int64(i), Status: pool.StatusOK, Body: []byte(`{"x":1}`)}); err != nil {
			t.Fatal(err)
		}
	}
	// A minute of start-up, then two workers' first tasks 10 ms apart,
	// then one task every 100 ms: 10 tasks a second.
	now = now.Add(time.Minute)
	fold(0)
	now = now.Add(10 * time.Millisecond)
	fold(1)
	if p := got[len(got)-1]; p.Rate != 0 || p.Left != 0 || p.Elapsed != time.Minute+10*time.Millisecond {
		t.Fatalf("after the first two tasks: rate %v, left %v, elapsed %v; want unknown, unknown, 1m0.01s", p.Rate, p.Left, p.Elapsed)
	}
	// Tasks 1 to 3 end within 250 ms of the first, so the rate is
	// counted from task 3 on, and given from a second after it.
	for i := 2; i < 100; i++ {
		now = now.Add(100 * time.Millisecond)
		fold(i)
		p := got[len(got)-1]
		span := time.Duration(i-3) * 100 * time.Millisecond
		if span < time.Second {
			if p.Rate != 0 || p.Left != 0 {
				t.Fatalf("task %d, %v after the anchor: rate %v, left %v; want unknown", i, span, p.Rate, p.Left)
			}
			continue
		}
		if math.Abs(p.Rate-10) > 1e-9 {
			t.Fatalf("task %d: rate %v tasks/s, want 10", i, p.Rate)
		}
		if want := time.Duration(tasks-1-i) * 100 * time.Millisecond; (p.Left - want).Abs() > time.Millisecond {
			t.Fatalf("task %d: %v left, want %v", i, p.Left, want)
		}
	}
	// The rest in one burst: the last report has a rate and nothing left.
	for i := 100; i < tasks; i++ {
		fold(i)
	}
	if p := got[len(got)-1]; p.Done != tasks || p.Left != 0 || p.Rate <= 10 {
		t.Fatalf("at the end: %+v", p)
	}

	// A run too short for a rate gives its mean at its last task.
	short := foldJob(t, 3)
	got = nil
	now = start
	g, err := pool.OpenFolder(short, pool.FoldConfig{Dir: t.TempDir(), Now: func() time.Time { return now },
		Progress: func(p pool.Progress) { got = append(got, p) }})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for i := range 3 {
		now = now.Add(100 * time.Millisecond)
		if err := g.Fold(pool.JournalRecord{Index: int64(i), Status: pool.StatusOK, Body: []byte(`{"x":1}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if p := got[1]; p.Rate != 0 {
		t.Fatalf("second of three tasks: rate %v, want unknown", p.Rate)
	}
	if p := got[2]; math.Abs(p.Rate-10) > 1e-9 || p.Left != 0 {
		t.Fatalf("last of three tasks, 300 ms in: rate %v, left %v; want the mean 10 tasks/s, nothing left", p.Rate, p.Left)
	}
}
