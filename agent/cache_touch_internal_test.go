package agent

import (
	"crypto/sha256"
	"os"
	"path/filepath"
	"testing"
	"time"

	"idlepool/job"
)

// A job's time of use is written when it is first used and then at most
// once a minute, however many tasks use it: the least recently used job
// is still the one that goes first, to the minute.
func TestCacheWritesTimeOfUseOncePerMinute(t *testing.T) {
	at := time.Date(2026, 12, 4, 3, 0, 0, 0, time.UTC)
	c := NewCache(CacheConfig{Dir: t.TempDir(), Now: func() time.Time { return at }})
	id := job.ID(sha256.Sum256([]byte("touched job")))
	files := filepath.Join(c.dir, "jobs", id.String(), jobFilesName)
	if err := os.MkdirAll(filepath.Dir(files), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(files, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	used := func() time.Time {
		t.Helper()
		st, err := os.Stat(files)
		if err != nil {
			t.Fatal(err)
		}
		return st.ModTime().UTC()
	}
	first := at
	c.touch(id)
	for _, step := range []struct {
		after time.Duration
		want  time.Time
	}{
		{0, first},
		{10 * time.Second, first},
		{59 * time.Second, first},
		{61 * time.Second, first.Add(61 * time.Second)},
		{62 * time.Second, first.Add(61 * time.Second)},
		{-time.Hour, first.Add(-time.Hour)}, // a clock set back: written again
	} {
		at = first.Add(step.after)
		c.touch(id)
		if got := used(); !got.Equal(step.want) {
			t.Fatalf("used at +%s: time of use %s, want %s", step.after, got, step.want)
		}
	}
}
