package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"idlepool/job"
	"idlepool/pool"
)

var digestLine = regexp.MustCompile(`(?m)^digest   ([0-9a-f]{64}) `)

// TestTaskCommand: `idlepool task` runs one task of a job in a worker
// process and prints its input, its output and the digest of its result,
// which is the digest of the result a solo run journaled for that task.
func TestTaskCommand(t *testing.T) {
	m := writeManifest(t, "pi", piManifest(8, 20000))
	home := t.TempDir()
	r, _ := runJSON(t, home, m)
	id, err := job.ParseDigest(r.Job)
	if err != nil {
		t.Fatal(err)
	}
	// The results `run` verified and merged, from its journal.
	results := map[int64][]byte{}
	jl, err := pool.OpenJournal(filepath.Join(home, "data", "runs", r.Job, "journal"), id, func(rec pool.JournalRecord) error {
		if rec.Status == pool.StatusOK {
			results[rec.Index] = rec.Body
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	jl.Close()
	if len(results) != 8 {
		t.Fatalf("the run journaled %d results, want 8", len(results))
	}

	for _, i := range []int64{0, 5, 7} {
		out := idlepool(t, home, "task", m, "--index", fmt.Sprint(i))
		if out.code != 0 {
			t.Fatalf("task --index %d: exit %d\nstdout:\n%s\nstderr:\n%s", i, out.code, out.stdout, out.stderr)
		}
		d := digestLine.FindStringSubmatch(out.stdout)
		want := sha256.Sum256(results[i])
		if d == nil || d[1] != hex.EncodeToString(want[:]) {
			t.Errorf("task --index %d printed digest %v, want %x, the digest of the run's result %q\n%s", i, d, want, results[i], out.stdout)
		}
		seed := job.Seed64Hex(job.TaskSeed(id, i))
		for _, s := range []string{
			fmt.Sprintf("task     %d of 8 (0 to 7)\n", i),
			fmt.Sprintf("seed     %s (seed_hex; seed %d)\n", seed, job.Seed64(job.TaskSeed(id, i))),
			"limits   memory 256 MiB, time 1m0s, stdout 16 MiB\n",
			fmt.Sprintf(`{"index":%d,"inputs":{},"job":"%s","params":{"samples":20000},`, i, r.Job),
			"stdout   " + fmt.Sprint(len(results[i])) + " bytes:\n" + string(results[i]),
			"stderr   (empty)\nresult   ok\n",
		} {
			if !strings.Contains(out.stdout, s) {
				t.Errorf("task --index %d: output lacks %q:\n%s", i, s, out.stdout)
			}
		}
	}

	out := idlepool(t, home, "task", m, "--index", "8")
	if want := "idlepool: --index 8 is out of range: job pi has 8 tasks, 0 to 7\n"; out.code != 2 || out.stderr != want {
		t.Errorf("--index 8: exit %d, stderr %q; want 2, %q", out.code, out.stderr, want)
	}
	noStrayWorkers(t, home)
}

// TestTaskCommandFailure: a task that fails shows what the program wrote
// on stderr and exits non-zero with the failure.
func TestTaskCommandFailure(t *testing.T) {
	m := writeManifest(t, "fail", "name = \"f\"\nprogram = \"prog.wasm\"\n[split]\nrule = \"range\"\ntasks = 2\n[[merge]]\nrule = \"collect\"\n")
	home := t.TempDir()
	out := idlepool(t, home, "task", m, "--index", "1")
	if out.code != 1 {
		t.Fatalf("exit %d, want 1\nstdout:\n%s\nstderr:\n%s", out.code, out.stdout, out.stderr)
	}
	reason := "worker: task failed: exit-status: exit status 1\nprogram log:\nfail: this program always fails"
	for _, s := range []string{
		"stdout   (empty)\n",
		"stderr   32 bytes:\nfail: this program always fails\n",
		"result   failed: " + reason + "\n",
	} {
		if !strings.Contains(out.stdout, s) {
			t.Errorf("output lacks %q:\n%s", s, out.stdout)
		}
	}
	want := pool.ReplicaDigest(nil, true, reason)
	if d := digestLine.FindStringSubmatch(out.stdout); d == nil || d[1] != want.String() {
		t.Errorf("digest %v, want %s, the pool's digest of that failure", d, want)
	}
	if !strings.Contains(out.stderr, "idlepool: task 1 failed: "+reason+"\n") {
		t.Errorf("stderr %q lacks the failure", out.stderr)
	}
	noStrayWorkers(t, home)
}

// TestTaskCommandChunk: a chunks task's piece of binary input is shown as
// a hex dump of its first bytes, and what was left out is counted.
func TestTaskCommandChunk(t *testing.T) {
	m := writeManifest(t, "params", "name = \"c\"\nprogram = \"prog.wasm\"\n[inputs]\nb = \"b.bin\"\n"+
		"[split]\nrule = \"chunks\"\ninput = \"b\"\nformat = \"lines\"\nchunk_bytes = 1000\n[[merge]]\nrule = \"collect\"\n")
	data := make([]byte, 299, 300)
	for i := range data {
		data[i] = byte(i % 250) // no line break: one row
		if data[i] == '\n' {
			data[i] = 0
		}
	}
	data = append(data, '\n')
	if err := os.WriteFile(filepath.Join(filepath.Dir(m), "b.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	out := idlepool(t, t.TempDir(), "task", m)
	if out.code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", out.code, out.stdout, out.stderr)
	}
	sum := sha256.Sum256(data)
	for _, s := range []string{
		fmt.Sprintf("chunk    bytes 0 to 300 of input b, 300 bytes, at /input/chunks/%x (named by its SHA-256)\n", sum),
		"00000000  00 01 02 03 04 05 06 07  08 09 00 0b 0c 0d 0e 0f  |................|\n",
		"00000040  40 41 42 43 44 45 46 47  48 49 4a 4b 4c 4d 4e 4f  |@ABCDEFGHIJKLMNO|\n",
		"000000f0  f0 f1 f2 f3 f4 f5 f6 f7  f8 f9 00 01 02 03 04 05  |................|\n… (44 more bytes)\n",
	} {
		if !strings.Contains(out.stdout, s) {
			t.Errorf("output lacks %q:\n%s", s, out.stdout)
		}
	}
}

// TestWrongFileGivenAsManifest: a WebAssembly program given where a
// manifest belongs is named for what it is, with a manifest that runs it,
// by every command that reads a manifest; that manifest runs.
func TestWrongFileGivenAsManifest(t *testing.T) {
	dir := t.TempDir()
	prog := filepath.Join(dir, "prog.wasm")
	b, err := os.ReadFile(wasm["params"])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(prog, b, 0o644); err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	var hint string
	for _, args := range [][]string{{"run", prog}, {"submit", prog, "--pool", "http://127.0.0.1:9"}, {"task", prog}} {
		out := idlepool(t, home, args...)
		want := "idlepool: " + prog + " is a WebAssembly program, not a job manifest\nhint: run it with a manifest such as this one, saved as " +
			filepath.Join(dir, "prog.toml") + ", then idlepool " + args[0] + " " + filepath.Join(dir, "prog.toml")
		if out.code != 1 || !strings.HasPrefix(out.stderr, want) {
			t.Errorf("%s: exit %d, stderr\n%s\nwant exit 1 and it to start with\n%s", args[0], out.code, out.stderr, want)
		}
		hint = out.stderr
	}
	manifest := hint[strings.Index(hint, "name = "):]
	if want := "name = \"prog\"\nprogram = \"prog.wasm\"\n"; !strings.HasPrefix(manifest, want) {
		t.Fatalf("the hint's manifest %q does not start with %q", manifest, want)
	}
	if err := os.WriteFile(filepath.Join(dir, "prog.toml"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	if r, _ := runJSON(t, home, filepath.Join(dir, "prog.toml")); r.Tasks.OK != 4 {
		t.Errorf("the hint's manifest ran %+v tasks, want 4 ok", r.Tasks)
	}
	// With a manifest of its name beside it, that one is named.
	out := idlepool(t, home, "run", prog)
	if want := "hint: its manifest may be the one beside it: idlepool run " + filepath.Join(dir, "prog.toml") + "\n"; !strings.HasSuffix(out.stderr, want) {
		t.Errorf("stderr %q, want it to end with %q", out.stderr, want)
	}
	// A native program is no manifest either.
	out = idlepool(t, home, "run", binPath)
	if want := "idlepool: " + binPath + " is a native program or library (ELF), not a job manifest\n"; out.code != 1 || !strings.HasPrefix(out.stderr, want) {
		t.Errorf("run %s: exit %d, stderr %q; want 1 and %q", binPath, out.code, out.stderr, want)
	}
}

// TestManifestProblemsAtOnce: run lists every problem of a manifest, with
// its line, and the key a misspelt one most likely is.
func TestManifestProblemsAtOnce(t *testing.T) {
	m := writeManifest(t, "params", "name = \"sweep\"\n[split]\nrule = \"range\"\ntasks = \"ten\"\n[[merge]]\nfield = \"x\"\nrul = \"sum\"\n")
	out := idlepool(t, t.TempDir(), "run", m)
	want := "idlepool: " + m + " has 3 problems:\n" +
		"  " + m + ":4:9: split.tasks: want an integer, got a TOML string\n" +
		"  " + m + ":7:1: merge.rul: unknown field; did you mean \"rule\"?\n" +
		"  " + m + ": program: missing: the path of the .wasm program, e.g. program = \"pi.wasm\"\n" +
		"hint: see the manifest format in docs/author.md (\"The manifest\")\n"
	if out.code != 1 || out.stderr != want {
		t.Errorf("exit %d, stderr\n%s\nwant 1 and\n%s", out.code, out.stderr, want)
	}
}

// TestPoolURLServesHTML: a pool URL where another web server answers
// with an HTML page (its 404) is said to be no coordinator, with what it
// served, instead of the page.
func TestPoolURLServesHTML(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, "<!DOCTYPE html>\n<html>\n<head><title>Page Not Found</title></head>\n<body><h1>Oops</h1></body>\n</html>\n")
	}))
	defer srv.Close()
	m := writeManifest(t, "pi", piManifest(2, 10))
	home := t.TempDir()
	want := "idlepool: GET " + srv.URL + "/v1/pool served 404 Not Found, an HTML page titled \"Page Not Found\" (text/html; charset=utf-8), " +
		"where an idlepool coordinator's JSON API was expected\nhint: check the pool URL: it is the address `idlepool serve` printed, such as http://10.0.0.5:7420\n"
	for _, args := range [][]string{{"submit", m}, {"status", "0123456789ab"}, {"offers"}} {
		out := idlepool(t, home, append(args, "--pool", srv.URL)...)
		if out.code != 1 || out.stderr != want {
			t.Errorf("%s: exit %d, stderr\n%s\nwant 1 and\n%s", args[0], out.code, out.stderr, want)
		}
	}
}
