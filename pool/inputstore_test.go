package pool_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"idlepool/job"
	"idlepool/pool"
)

// storeJob plans a job of dir/prog.wasm with the input data = dir/data.bin,
// its task params naming round (so that each round is another job).
func storeJob(t *testing.T, dir string, round int) *job.Job {
	t.Helper()
	text := "name = \"s\"\nprogram = \"prog.wasm\"\n[inputs]\ndata = \"data.bin\"\n[split]\nrule = \"range\"\ntasks = 1\n[split.params]\nround = " +
		string(rune('0'+round)) + "\n[[merge]]\nfield = \"x\"\nrule = \"sum\"\n"
	m, err := job.ParseManifest("s.toml", dir, []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	j, err := job.Plan(m)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// TestInputStoreLinksAndTrims: a second job naming the same input links
// the store's file instead of copying it; a store file removed under a
// run being prepared (another process trimming) falls back to a checked
// copy; TrimInputStore removes exactly the files no run directory links.
func TestInputStoreLinksAndTrims(t *testing.T) {
	dir, runs := t.TempDir(), t.TempDir()
	store := filepath.Join(t.TempDir(), "inputs")
	if err := os.WriteFile(filepath.Join(dir, "prog.wasm"), []byte("\x00asm\x01\x00\x00\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("fashion "), 1<<14)
	if err := os.WriteFile(filepath.Join(dir, "data.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	prepare := func(round int) string {
		t.Helper()
		j := storeJob(t, dir, round)
		run := filepath.Join(runs, j.ID.String())
		if _, _, err := pool.PrepareStoredInputs(j, run, store); err != nil {
			t.Fatal(err)
		}
		return filepath.Join(run, "input", "data")
	}
	stat := func(p string) os.FileInfo {
		t.Helper()
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	a, b := prepare(1), prepare(2)
	if !os.SameFile(stat(a), stat(b)) {
		t.Fatal("the second job copied the input the store had")
	}
	blobs, _ := os.ReadDir(store)
	if len(blobs) != 2 { // the program and the input
		t.Fatalf("store holds %d files, want 2", len(blobs))
	}
	// Another process trims the store between two runs' preparations.
	for _, e := range blobs {
		os.Chmod(filepath.Join(store, e.Name()), 0o600)
		if err := os.Remove(filepath.Join(store, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	c := prepare(3)
	if got, err := os.ReadFile(c); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("after the store lost the file: %v", err)
	}
	// Runs 1 and 2 are forgotten: their files leave the store, run 3's stay.
	for _, p := range []string{a, b} {
		if err := os.RemoveAll(filepath.Dir(filepath.Dir(p))); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(store, "stray"), []byte("x"), 0o400); err != nil {
		t.Fatal(err)
	}
	if err := pool.TrimInputStore(store, runs); err != nil {
		t.Fatal(err)
	}
	left, _ := os.ReadDir(store)
	if len(left) != 2 {
		t.Fatalf("after trimming the store holds %d files, want run 3's program and input", len(left))
	}
	for _, e := range left {
		st, _ := e.Info()
		if !os.SameFile(st, stat(c)) && !os.SameFile(st, stat(filepath.Join(filepath.Dir(filepath.Dir(c)), "program.wasm"))) {
			t.Errorf("the store keeps %s, which run 3 does not link", e.Name())
		}
	}
}
