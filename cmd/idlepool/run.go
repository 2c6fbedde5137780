package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/term"

	"idlepool/agent"
	"idlepool/job"
	"idlepool/pool"
	"idlepool/worker"
)

// runDoc is what `idlepool run --json` prints: one document with nothing
// time- or machine-dependent in it, so two runs compare byte for byte.
type runDoc struct {
	Job     string         `json:"job"`
	Name    string         `json:"name"`
	Tasks   taskCounts     `json:"tasks"`
	Result  any            `json:"result"`
	Derived map[string]any `json:"derived,omitempty"`
	// DeriveErrors says why a derived value is missing.
	DeriveErrors map[string]string   `json:"derive_errors,omitempty"`
	Outputs      map[string]fileInfo `json:"outputs,omitempty"`
	Failures     []pool.TaskFailure  `json:"failures"`
}

type taskCounts struct {
	Total  int64 `json:"total"`
	OK     int64 `json:"ok"`
	Failed int64 `json:"failed"`
}

type fileInfo struct {
	SHA256 string `json:"sha256"`
	Bytes  int64  `json:"bytes"`
}

func cmdRun(ctx context.Context, g *globals, args []string) error {
	fs := g.flagSet("idlepool run", "Usage: idlepool run MANIFEST [--workers N] [--json] [--verify] [--fresh]\n\nRuns a job on this machine, alone and offline; an interrupted run continues where it stopped.\n\n")
	workers := fs.Int("workers", runtime.NumCPU(), "run `N` tasks at once, each in its own worker process")
	asJSON := fs.Bool("json", false, "print one JSON document with the result on stdout")
	verify := fs.Bool("verify", false, "run every task twice on different worker processes and report disagreements")
	fresh := fs.Bool("fresh", false, "forget an earlier, interrupted run of this job and start over")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return &userError{Msg: "run needs exactly one manifest", Hint: "idlepool run examples/pi/pi.toml", Cause: errUsage}
	}
	if *workers < 1 || *workers > maxWorkers {
		return &userError{Msg: fmt.Sprintf("--workers must be 1..%d, got %d", maxWorkers, *workers), Cause: errUsage}
	}
	m, err := job.LoadManifest(pos[0])
	if err != nil {
		return manifestError(err)
	}
	j, err := job.Plan(m)
	if err != nil {
		return manifestError(err)
	}
	*workers = int(min(int64(*workers), j.NumTasks())) // no idle worker processes
	dirs, err := g.dirs()
	if err != nil {
		return err
	}
	runDir := filepath.Join(dirs.Data, "runs", j.ID.String())
	if *verify {
		// A verified run keeps its own journal: results of a plain run were
		// never checked, so they must not be taken as verified.
		runDir += "-verified"
	}
	if *fresh {
		if err := os.RemoveAll(runDir); err != nil {
			return fmt.Errorf("forget earlier run: %w", err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own executable to start workers: %w", err)
	}
	cache := filepath.Join(dirs.Cache, "wazero")
	wp, err := worker.NewPool(worker.Config{
		Command:  []string{self, "worker", "--cache", cache},
		Slots:    *workers,
		CacheDir: cache,
		Logger:   g.logger(),
	})
	if err != nil {
		return fmt.Errorf("start workers: %w", err)
	}
	defer wp.Close()

	tty := isTerminal(g.stderr)
	fmt.Fprintf(g.stderr, "job %s (%s): %s on %s\n", m.Name, j.ID.String()[:12], plural(j.NumTasks(), "task"), plural(int64(*workers), "worker"))
	prog := &progressPrinter{w: g.stderr, tty: tty}
	cfg := pool.SoloConfig{
		Slots:    *workers,
		Verify:   *verify,
		RunDir:   runDir,
		Progress: prog.update,
		Logger:   g.logger(),
	}
	if !*asJSON && (m.Split.Rule == "grid" || m.Split.Rule == "kfold") {
		cfg.Result = func(t job.Task, result []byte) {
			prog.clear()
			fmt.Fprintf(g.stdout, "task %-4d %s -> %s\n", t.Index, formatParams(m.Split, t.Params), bytes.TrimSpace(result))
		}
	}
	out, err := pool.RunSolo(ctx, j, wp, cfg)
	prog.finish()
	if err != nil && !errors.Is(err, pool.ErrAllFailed) {
		if ctx.Err() != nil {
			return &userError{Msg: "interrupted; finished tasks are saved", Hint: "run the same command again to continue", Cause: err}
		}
		return err
	}
	if perr := printOutcome(g, m, out, *asJSON); perr != nil {
		return perr
	}
	if out.Resumed > 0 {
		fmt.Fprintf(g.stderr, "(%d of %d tasks were taken from the journal of an earlier run)\n", out.Resumed, out.Total)
	}
	return outcomeError(err, out, "fix the program (try one task by hand: it reads its task as JSON on stdin), then run with --fresh")
}

// newRunDoc assembles the document `run --json` prints from a job's
// outcome; `submit --follow --json` and `result --json` print the same
// shape, and for the same job the same "result" bytes.
func newRunDoc(name string, out *pool.Outcome) (runDoc, error) {
	doc := runDoc{
		Job: out.Job.String(), Name: name,
		Tasks:    taskCounts{Total: out.Total, OK: out.OK, Failed: out.Failed},
		Result:   out.Result,
		Failures: out.Failures,
	}
	if doc.Failures == nil {
		doc.Failures = []pool.TaskFailure{}
	}
	doc.DeriveErrors = out.DeriveErrors
	if len(out.Derived) > 0 {
		doc.Derived = map[string]any{}
		for k, v := range out.Derived {
			doc.Derived[k] = jsonFloat(v)
		}
	}
	if len(out.Outputs) > 0 {
		doc.Outputs = map[string]fileInfo{}
		for name, path := range out.Outputs {
			fi, err := hashFile(path)
			if err != nil {
				return doc, err
			}
			doc.Outputs[name] = fi
		}
	}
	return doc, nil
}

// printOutcome prints a job's outcome on stdout: the runDoc as JSON, or
// for people.
func printOutcome(g *globals, m *job.Manifest, out *pool.Outcome, asJSON bool) error {
	name := m.Name
	doc, err := newRunDoc(name, out)
	if err != nil {
		return err
	}
	if asJSON {
		b, err := json.MarshalIndent(doc, "", "  ")
		if err != nil {
			return fmt.Errorf("encode result: %w", err)
		}
		fmt.Fprintf(g.stdout, "%s\n", b)
	} else {
		printHuman(g.stdout, doc, out, rowLabels(m))
	}
	return nil
}

// outcomeError turns a finished job's failures into the command's error:
// every task failed (err is pool.ErrAllFailed; hint says what to do), or
// some did.
func outcomeError(err error, out *pool.Outcome, hint string) error {
	switch {
	case errors.Is(err, pool.ErrAllFailed):
		return &userError{
			Msg:   fmt.Sprintf("every task failed; the first: task %d: %s", out.Failures[0].Index, out.Failures[0].Reason),
			Hint:  hint,
			Cause: err,
		}
	case out.Failed > 0:
		return &userError{Msg: fmt.Sprintf("%d of %d tasks failed; the result leaves them out (see \"failures\")", out.Failed, out.Total)}
	}
	return nil
}

// jsonFloat keeps non-finite derived values printable: JSON has no NaN or
// infinity, so they become strings.
func jsonFloat(v float64) any {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Sprint(v)
	}
	return v
}

func manifestError(err error) error {
	var me *job.ManifestError
	if errors.As(err, &me) {
		hint := "see the manifest format in the README"
		if me.Field == "program" && strings.Contains(me.Msg, "does not exist") {
			hint = "build the program first, e.g. `make examples` for the bundled examples, or GOOS=wasip1 GOARCH=wasm go build -o prog.wasm"
		}
		return &userError{Msg: me.Error(), Hint: hint, Cause: err}
	}
	return err
}

func hashFile(path string) (fileInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return fileInfo{}, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return fileInfo{}, err
	}
	return fileInfo{SHA256: hex.EncodeToString(h.Sum(nil)), Bytes: n}, nil
}

func formatParams(s job.SplitSpec, params map[string]any) string {
	var keys []string
	switch s.Rule {
	case "grid":
		for k := range s.Grid {
			keys = append(keys, k)
		}
	case "kfold":
		keys = []string{"fold"}
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%v", k, params[k])
	}
	return strings.Join(parts, " ")
}

func printHuman(w io.Writer, doc runDoc, out *pool.Outcome, labels map[string]string) {
	fmt.Fprintf(w, "\njob      %s\n", doc.Name)
	fmt.Fprintf(w, "id       %s\n", doc.Job)
	fmt.Fprintf(w, "tasks    %d ok, %d failed, %d total\n", doc.Tasks.OK, doc.Tasks.Failed, doc.Tasks.Total)
	fmt.Fprintln(w)
	if err := printResult(w, doc.Result, labels); err != nil {
		fmt.Fprintf(w, "result   (cannot show: %v; use --json)\n", err)
	}
	if len(out.Derived) > 0 {
		names := make([]string, 0, len(out.Derived))
		for k := range out.Derived {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			fmt.Fprintf(w, "%-16s %.10g\n", k, out.Derived[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(out.DeriveErrors)) {
		fmt.Fprintf(w, "%-16s not computed: %s\n", k, out.DeriveErrors[k])
	}
	names := make([]string, 0, len(out.Outputs))
	for k := range out.Outputs {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Fprintf(w, "output   %s: %s\n", k, out.Outputs[k])
	}
	for i, f := range doc.Failures {
		if i == 10 {
			fmt.Fprintf(w, "         ... and %d more failures\n", len(doc.Failures)-10)
			break
		}
		fmt.Fprintf(w, "failed   task %d: %s\n", f.Index, f.Reason)
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// progressPrinter shows progress on stderr: a live bar on a terminal,
// otherwise a plain line at every tenth of the work (at most every 5 s).
type progressPrinter struct {
	announced bool
	w         io.Writer
	tty       bool
	shown     bool
	last      time.Time
	lastTent  int64
	lastPool  string    // the pool activity printed last, without its counts
	poolAt    time.Time // when it was printed
}

// quietRepeat is how long a followed job may go without any line before
// the pool activity is printed again, unchanged.
const quietRepeat = 30 * time.Second

// activity prints what the pool is doing about a followed job: when the
// donors, whether results wait for a quorum, or the reason it cannot
// progress changed since it was last printed, or when nothing was printed
// for quietRepeat.
func (p *progressPrinter) activity(a agent.Activity) {
	key := fmt.Sprintf("%s\n%s\n%v", a.Donors, a.Stuck, a.Quorum != "") // counts change as results come
	now := time.Now()
	if key == p.lastPool && (now.Sub(p.poolAt) < quietRepeat || now.Sub(p.last) < quietRepeat) {
		return
	}
	p.lastPool, p.poolAt = key, now
	p.clear()
	fmt.Fprintln(p.w, strings.Join(a.Lines(), "\n"))
}

func (p *progressPrinter) update(pr pool.Progress) {
	now := time.Now()
	if !p.announced {
		p.announced = true
		if pr.Resumed > 0 {
			p.clear()
			fmt.Fprintf(p.w, "continuing an earlier run: %d of %d tasks were already done\n", pr.Resumed, pr.Total)
		}
	}
	if p.tty {
		if now.Sub(p.last) < 100*time.Millisecond && pr.Done != pr.Total {
			return
		}
		p.last = now
		const width = 30
		filled := int(float64(width) * float64(pr.Done) / float64(pr.Total))
		bar := strings.Repeat("=", filled) + strings.Repeat(" ", width-filled)
		fmt.Fprintf(p.w, "\r\033[K[%s] %d/%d %3.0f%% %s", bar, pr.Done, pr.Total, 100*float64(pr.Done)/float64(pr.Total), rateLeft(pr))
		p.shown = true
		return
	}
	tenth := 10 * pr.Done / pr.Total
	if tenth == p.lastTent && now.Sub(p.last) < 5*time.Second && pr.Done != pr.Total {
		return
	}
	p.lastTent, p.last = tenth, now
	fmt.Fprintf(p.w, "progress %d/%d tasks (%.0f%%) %s\n", pr.Done, pr.Total, 100*float64(pr.Done)/float64(pr.Total), rateLeft(pr))
}

// rowLabels names the first column of each merge entry's table: the
// group_by field, or "key" for an entry with a "*" field.
func rowLabels(m *job.Manifest) map[string]string {
	labels := map[string]string{}
	for _, ms := range m.Merge {
		switch {
		case ms.GroupBy != "":
			labels[ms.Name] = ms.GroupBy
		case strings.Contains(ms.Field, "*"):
			labels[ms.Name] = "key"
		}
	}
	return labels
}

// maxWorkers bounds --workers: each is a process with its own runtime.
const maxWorkers = 1024

// plural says "1 task", "2 tasks".
func plural(n int64, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

func rateLeft(pr pool.Progress) string {
	s := ""
	if pr.Failed > 0 {
		s = fmt.Sprintf("%d failed, ", pr.Failed)
	}
	if pr.Rate > 0 {
		s += fmt.Sprintf("%.1f tasks/s", pr.Rate)
		if pr.Done < pr.Total && pr.Done-pr.Resumed >= 3 {
			s += fmt.Sprintf(", %s left", pr.Left.Round(time.Second))
		}
	}
	return s
}

// clear removes the live bar before other output is written.
func (p *progressPrinter) clear() {
	if p.tty && p.shown {
		fmt.Fprint(p.w, "\r\033[K")
		p.shown = false
	}
}

func (p *progressPrinter) finish() {
	if p.tty && p.shown {
		fmt.Fprintln(p.w)
		p.shown = false
	}
}
