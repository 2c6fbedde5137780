package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"idlepool/job"
	"idlepool/pool"
	"idlepool/worker"
)

// cmdTask runs one task of a job, as `run` would, and shows what went in
// and what came out: the task's stdin and seed, its input files, the
// program's stdout and stderr, and the result's digest, the one pools
// compare and known answers hold.
func cmdTask(ctx context.Context, g *globals, args []string) error {
	fs := g.flagSet("idlepool task", "Usage: idlepool task MANIFEST [--index N] [--cpu-only]\n\nRuns one task of a job on this machine, in the sandbox and with the limits of `idlepool run`,\nand shows its input (stdin, seed, files), the program's stdout and stderr, and the digest\nof its result: the SHA-256 that pools compare and known answers hold.\n\n")
	index := fs.Int64("index", 0, "run task `N` (0 is the first)")
	cpuOnly := fs.Bool("cpu-only", false, "give the task no GPU (by default a program that uses one gets one of the GPUs NVML finds)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return &userError{Msg: "task needs exactly one manifest", Hint: "idlepool task examples/pi/quick.toml --index 3", Cause: errUsage}
	}
	m, err := job.LoadManifest(pos[0])
	if err != nil {
		return manifestError(err, "task")
	}
	j, err := job.Plan(m)
	if err != nil {
		return manifestError(err, "task")
	}
	n := j.NumTasks()
	if *index < 0 || *index >= n {
		return &userError{Msg: fmt.Sprintf("--index %d is out of range: job %s has %s, 0 to %d", *index, m.Name, plural(n, "task"), n-1), Cause: errUsage}
	}
	dirs, err := g.dirs()
	if err != nil {
		return err
	}
	// The task's own copy of the program and inputs, as a run makes one.
	if err := os.MkdirAll(filepath.Join(dirs.Cache, "tasks"), 0o700); err != nil {
		return fmt.Errorf("prepare the task: %w", err)
	}
	dir, err := os.MkdirTemp(filepath.Join(dirs.Cache, "tasks"), j.ID.String()[:12]+"-")
	if err != nil {
		return fmt.Errorf("prepare the task: %w", err)
	}
	defer os.RemoveAll(dir)
	program, inputDir, err := pool.PrepareInputs(j, dir)
	if err != nil {
		return err
	}
	t := j.Task(*index)
	req := pool.TaskRequest(j, t, program, inputDir)
	printTaskInput(g.stdout, j, t, req)
	if t.Chunk != nil {
		path, err := pool.WriteChunk(j, inputDir, *t.Chunk)
		if err != nil {
			return err
		}
		if err := printChunk(g.stdout, path, m.Split.Input, *t.Chunk); err != nil {
			return err
		}
	}

	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own executable to start a worker: %w", err)
	}
	cache := filepath.Join(dirs.Cache, "wazero")
	wp, err := worker.NewPool(worker.Config{
		Command:  []string{self, "worker", "--cache", cache},
		Slots:    1,
		CacheDir: cache,
		Logger:   g.logger(),
	})
	if err != nil {
		return fmt.Errorf("start a worker: %w", err)
	}
	defer wp.Close()
	gpus, gpuNames, noGPU := soloGPUs(g, *cpuOnly)
	fmt.Fprint(g.stderr, gpuLine(gpuNames, m.Requirements.GPU, noGPU))
	fmt.Fprintf(g.stderr, "running task %d of job %s (%s) in a worker process\n", t.Index, m.Name, j.ID.String()[:12])
	rec := &lastResult{exec: newGPUExecutor(wp, gpus, 1)}
	out, err := pool.RunTask(ctx, rec, req, g.logger())
	if err != nil {
		if ctx.Err() != nil {
			return &userError{Msg: "interrupted", Cause: err}
		}
		return err
	}
	w := g.stdout
	showBytes(w, "stdout", rec.last.Stdout, maxShownOutput)
	showBytes(w, "stderr", rec.last.Stderr, maxShownOutput)
	failed := out.Status != pool.StatusOK
	var digest job.Digest
	if failed {
		digest = pool.ReplicaDigest(nil, true, string(out.Body))
		fmt.Fprintf(w, "result   failed: %s\n", out.Body)
		fmt.Fprintf(w, "digest   %s (of the failure: replicas that fail alike agree)\n", digest)
	} else {
		digest = pool.ReplicaDigest(out.Body, false, "")
		fmt.Fprintf(w, "result   ok\n")
		fmt.Fprintf(w, "digest   %s (SHA-256 of stdout: what pools compare)\n", digest)
	}
	if known, ok := j.KnownAnswer(t.Index); ok {
		if known == digest {
			fmt.Fprintln(w, "known    the digest is the known answer's")
		} else {
			fmt.Fprintf(w, "known    the known answer is %s: this result differs\n", known)
		}
	}
	if failed {
		return &userError{Msg: fmt.Sprintf("task %d failed: %s", t.Index, out.Body), Hint: failureHint(string(out.Body), "task")}
	}
	return nil
}

// lastResult is an executor that keeps the last worker result it
// returned, so that the task command shows the program's stdout and
// stderr beside the outcome pool.RunTask makes of them. Not safe for
// concurrent use.
type lastResult struct {
	exec pool.Executor
	last worker.Result
}

func (r *lastResult) Run(ctx context.Context, req worker.Request) (worker.Result, error) {
	res, err := r.exec.Run(ctx, req)
	r.last = res
	return res, err
}

// How much of a task's bytes the task command prints: what is cut is
// counted, and the SHA-256 covers all of it.
const (
	maxShownStdin  = 4 << 10
	maxShownOutput = 16 << 10
	maxShownChunk  = 1 << 10
	maxShownHex    = 256
)

// printTaskInput prints what a task is given: the job, the index, the
// seed, the limits, stdin, and the input files it sees.
func printTaskInput(w io.Writer, j *job.Job, t job.Task, req worker.Request) {
	fmt.Fprintf(w, "job      %s (%s)\n", j.Manifest.Name, j.ID)
	fmt.Fprintf(w, "task     %d of %d (0 to %d)\n", t.Index, j.NumTasks(), j.NumTasks()-1)
	fmt.Fprintf(w, "seed     %s (seed_hex; seed %d)\n", job.Seed64Hex(t.Seed), job.Seed64(t.Seed))
	fmt.Fprintf(w, "limits   memory %d MiB, time %s, stdout %d MiB\n", req.MemoryLimitMiB, req.Timeout, req.MaxStdoutBytes>>20)
	showBytes(w, "stdin", req.Stdin, maxShownStdin)
	for _, name := range slices.Sorted(maps.Keys(t.Inputs)) {
		if name == "chunk" {
			continue // printChunk
		}
		ref := j.Inputs[name]
		fmt.Fprintf(w, "input    %s: %s, %d bytes, sha256 %s\n", name, t.Inputs[name], ref.Size, ref.SHA256)
	}
}

// printChunk prints the piece of the split input a chunks task reads:
// where it is, and its first bytes.
func printChunk(w io.Writer, path, input string, c job.Chunk) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("read the task's chunk: %w", err)
	}
	defer f.Close()
	head := make([]byte, max(maxShownChunk, maxShownHex))
	k, err := io.ReadFull(f, head)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return fmt.Errorf("read the task's chunk: %w", err)
	}
	fmt.Fprintf(w, "chunk    bytes %d to %d of input %s, %d bytes, at %s (named by its SHA-256)\n",
		c.Offset, c.Offset+c.Length, input, c.Length, job.ChunkPath(c.SHA256))
	showHead(w, head[:k], c.Length, maxShownChunk)
	return nil
}

// showBytes prints b under label: "(empty)", or its size and then the
// bytes themselves, text as it is and binary data as a hex dump, cut
// after at most limit bytes (text) or maxShownHex (binary). Binary data
// and cut text come with the SHA-256 of all of b.
func showBytes(w io.Writer, label string, b []byte, limit int) {
	if len(b) == 0 {
		fmt.Fprintf(w, "%-8s (empty)\n", label)
		return
	}
	sum := sha256.Sum256(b)
	switch {
	case !isText(b[:min(len(b), limit)]):
		fmt.Fprintf(w, "%-8s %d bytes, binary, sha256 %s:\n", label, len(b), hex.EncodeToString(sum[:]))
	case len(b) > limit:
		fmt.Fprintf(w, "%-8s %d bytes, sha256 %s:\n", label, len(b), hex.EncodeToString(sum[:]))
	default:
		fmt.Fprintf(w, "%-8s %d bytes:\n", label, len(b))
	}
	showHead(w, b, int64(len(b)), limit)
}

// showHead prints head, the start of size bytes: text as it is, binary
// data as a hex dump, then what was left out.
func showHead(w io.Writer, head []byte, size int64, limit int) {
	if isText(head[:min(len(head), limit)]) {
		shown := head[:min(len(head), limit)]
		for len(shown) > 0 && !utf8.Valid(shown) { // cut inside a character
			shown = shown[:len(shown)-1]
		}
		fmt.Fprintf(w, "%s", shown)
		if len(shown) > 0 && shown[len(shown)-1] != '\n' {
			fmt.Fprintln(w)
		}
		if left := size - int64(len(shown)); left > 0 {
			fmt.Fprintf(w, "… (%d more bytes)\n", left)
		}
		return
	}
	shown := head[:min(len(head), maxShownHex)]
	fmt.Fprint(w, hexDump(shown))
	if left := size - int64(len(shown)); left > 0 {
		fmt.Fprintf(w, "… (%d more bytes)\n", left)
	}
}

// isText reports whether b reads as text: UTF-8 (a character cut at the
// end aside) with no control characters but tab, line feed and carriage
// return.
func isText(b []byte) bool {
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if r == utf8.RuneError && size <= 1 {
			return !utf8.FullRune(b) // a character cut at the end is text
		}
		if r < 0x20 && r != '\t' && r != '\n' && r != '\r' || r == 0x7f {
			return false
		}
		b = b[size:]
	}
	return true
}

// hexDump formats b as `hexdump -C` does: offset, 16 bytes in hex, and
// those that are printable ASCII.
func hexDump(b []byte) string {
	var s strings.Builder
	for off := 0; off < len(b); off += 16 {
		line := b[off:min(off+16, len(b))]
		fmt.Fprintf(&s, "%08x  ", off)
		for i := range 16 {
			if i < len(line) {
				fmt.Fprintf(&s, "%02x ", line[i])
			} else {
				s.WriteString("   ")
			}
			if i == 7 {
				s.WriteByte(' ')
			}
		}
		s.WriteString(" |")
		for _, c := range line {
			if c < 0x20 || c > 0x7e {
				c = '.'
			}
			s.WriteByte(c)
		}
		s.WriteString("|\n")
	}
	return s.String()
}
