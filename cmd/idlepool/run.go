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
	"strconv"
	"strings"
	"sync"
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

	// EntryFailures lists results that one collect entry alone could not
	// take (the first ten); those tasks are not failures.
	EntryFailures []job.EntryFailure `json:"entry_failures,omitempty"`
}

type taskCounts struct {
	Total  int64 `json:"total"`
	OK     int64 `json:"ok"`
	Failed int64 `json:"failed"`
}

// fileInfo describes an output file (a collect or concat entry's) in
// --json: its SHA-256 in hex, its size in bytes and its absolute path on
// this machine, the one member of the document that depends on where the
// home directory is.
type fileInfo struct {
	SHA256 string `json:"sha256"`
	Bytes  int64  `json:"bytes"`
	Path   string `json:"path"`
}

func cmdRun(ctx context.Context, g *globals, args []string) error {
	fs := g.flagSet("idlepool run", "Usage: idlepool run MANIFEST [--workers N] [--json] [--verify] [--fresh] [--cpu-only]\n\nRuns a job on this machine, alone and offline; an interrupted run continues where it stopped.\nPrograms that use a GPU get one of those NVML finds, all its memory, unless --cpu-only.\n\n")
	workers := fs.Int("workers", runtime.NumCPU(), "run `N` tasks at once, each in its own worker process")
	asJSON := fs.Bool("json", false, "print one JSON document with the result on stdout")
	verify := fs.Bool("verify", false, "run every task twice on different worker processes and report disagreements")
	fresh := fs.Bool("fresh", false, "forget an earlier, interrupted run of this job and start over")
	cpuOnly := fs.Bool("cpu-only", false, "give tasks no GPU (by default each task may use one of the GPUs NVML finds)")
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
		return manifestError(err, "run")
	}
	j, err := job.Plan(m)
	if err != nil {
		return manifestError(err, "run")
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
		Slots:  *workers,
		Verify: *verify,
		RunDir: runDir,
		// Runs of jobs that name the same file (a training's rounds and
		// their data set) keep one copy of it.
		InputStore: filepath.Join(dirs.Data, "inputs"),
		Progress:   prog.update,
		Logger:     g.logger(),
	}
	if !*asJSON && (m.Split.Rule == "grid" || m.Split.Rule == "kfold") {
		cfg.Result = func(t job.Task, result []byte) {
			prog.clear()
			fmt.Fprintf(g.stdout, "task %-4d %s -> %s\n", t.Index, formatParams(m.Split, t.Params), bytes.TrimSpace(result))
		}
	}
	gpus, gpuNames, noGPU := soloGPUs(g, *cpuOnly)
	fmt.Fprint(g.stderr, gpuLine(gpuNames, m.Requirements.GPU, noGPU))
	// unmatched are the fields of [verify.tolerance] that the first
	// result seen does not have; written once, before RunSolo returns.
	var unmatched []job.UnmatchedTolerance
	if m.Verify.Rule == job.RuleTolerance {
		// A tolerance naming no field of the results is most likely a
		// typo; its numbers are then compared exactly.
		var once sync.Once
		show := cfg.Result
		cfg.Result = func(t job.Task, result []byte) {
			once.Do(func() {
				unmatched = m.Verify.UnmatchedTolerances(result)
				if len(unmatched) > 0 {
					prog.clear()
					shown := bytes.TrimSpace(result)
					if len(shown) > 200 {
						shown = append(shown[:200:200], "…"...)
					}
					fmt.Fprintf(g.stderr, "warning: [verify.tolerance] %s: no such field in task %d's result (%s); numbers there are compared exactly\n",
						unmatchedWords(unmatched), t.Index, shown)
				}
			})
			if show != nil {
				show(t, result)
			}
		}
	}
	stopMeter := meterRun(ctx, wp, gpus)
	var exec pool.Executor = newGPUExecutor(wp, gpus, *workers)
	if g.tasks != nil {
		exec = g.tasks.wrap(exec)
	}
	out, err := pool.RunSolo(ctx, j, exec, cfg)
	prog.finish()
	used := stopMeter()
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
	if line := energyLine(used, out); line != "" {
		fmt.Fprintln(g.stderr, line)
	}
	if *verify && err == nil && out.Failed == 0 {
		fmt.Fprintf(g.stderr, "verified: every task was computed twice, on two worker processes, and the results agreed %s\n", verifyRuleWords(m.Verify, unmatched))
	}
	if rerr := retryError(err, out, *asJSON); rerr != nil {
		return rerr
	}
	return outcomeError(err, out, "run", *asJSON)
}

// retryError explains a run whose failures include some that depend on
// this machine (pool.TaskFailure.Retry): its last line says which tasks
// the next run of the same command computes again. It is nil when there
// are none. asJSON says which output the message points to.
func retryError(err error, out *pool.Outcome, asJSON bool) error {
	var causes []string
	tasks := map[string][]int64{}
	n := 0
	for _, f := range out.Failures {
		if f.Retry == "" {
			continue
		}
		if tasks[f.Retry] == nil {
			causes = append(causes, f.Retry)
		}
		tasks[f.Retry] = append(tasks[f.Retry], f.Index)
		n++
	}
	if n == 0 {
		return nil
	}
	parts := make([]string, len(causes))
	for i, c := range causes {
		parts[i] = fmt.Sprintf("%s %s on this machine (%s)", plural(int64(len(tasks[c])), "task"), c, taskList(tasks[c]))
	}
	them := "them"
	if n == 1 {
		them = "it"
	}
	msg := fmt.Sprintf("%d of %d tasks failed; the result leaves them out (%s)", out.Failed, out.Total, seeFailures(asJSON))
	if int64(n) == out.Failed {
		msg = fmt.Sprintf("%d of %d tasks did not finish on this machine; the result leaves %s out for now", n, out.Total, them)
	}
	return &userError{
		Msg:   msg,
		Hint:  strings.Join(parts, ", ") + "; run the same command again to retry " + them + " (only " + them + ")",
		Cause: err,
	}
}

// seeFailures points to where the output lists the failed tasks: the
// "failures" of --json, the "failed" lines of the plain output.
func seeFailures(asJSON bool) string {
	if asJSON {
		return `see "failures"`
	}
	return `see the "failed" lines`
}

// seeEntryFailures points to where the output lists the tasks a merge
// entry wrote no row for: the "entry_failures" of --json, the "no row"
// lines of the plain output.
func seeEntryFailures(asJSON bool) string {
	if asJSON {
		return `see "entry_failures"`
	}
	return `see the "no row" lines`
}

// taskList shows task indexes as "task 3" or "tasks 3, 7, 9, …".
func taskList(idx []int64) string {
	if len(idx) == 1 {
		return fmt.Sprintf("task %d", idx[0])
	}
	var parts []string
	for i, x := range idx {
		if i == 5 {
			parts = append(parts, "…")
			break
		}
		parts = append(parts, fmt.Sprint(x))
	}
	return "tasks " + strings.Join(parts, ", ")
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
	doc.EntryFailures = out.EntryFailures
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
// every task failed (err is pool.ErrAllFailed), some did, a collect entry
// could not write some rows, or a derived value is missing. The hint
// follows what the first failure points at (the data, the program, the
// merge entries, a limit); command is "run" or "submit", for its wording,
// and asJSON says which output the message points to.
func outcomeError(err error, out *pool.Outcome, command string, asJSON bool) error {
	switch {
	case errors.Is(err, pool.ErrAllFailed):
		return &userError{
			Msg:   fmt.Sprintf("every task failed; the first: task %d: %s", out.Failures[0].Index, reasonLine(out.Failures[0].Reason)),
			Hint:  failureHint(out.Failures[0].Reason, command),
			Cause: err,
		}
	case out.Failed > 0:
		return &userError{
			Msg:  fmt.Sprintf("%d of %d tasks failed; the result leaves them out (%s); the first: task %d: %s", out.Failed, out.Total, seeFailures(asJSON), out.Failures[0].Index, reasonLine(out.Failures[0].Reason)),
			Hint: failureHint(out.Failures[0].Reason, command),
		}
	case len(out.EntryFailures) > 0:
		f := out.EntryFailures[0]
		return &userError{
			Msg:  fmt.Sprintf("merge %q wrote no row for some tasks (%s); the first: task %d: %s", f.Entry, seeEntryFailures(asJSON), f.Task, f.Problem),
			Hint: "the other merge entries have every task; to get all rows, list the columns: fields = [\"a\", \"b\"] in that [[merge]] entry",
		}
	case len(out.DeriveErrors) > 0:
		name := slices.Sorted(maps.Keys(out.DeriveErrors))[0]
		return &userError{
			Msg:  fmt.Sprintf("derived value %s not computed: %s", name, out.DeriveErrors[name]),
			Hint: "the results did not give that value (a key of a \"*\" field no result had, or a mean of no values); the merged result above shows what they gave",
		}
	}
	return nil
}

// reasonLine is a failed task's reason for a one-line message: its first
// line, with the program's log when that is one line, else where the end
// of the log is shown.
func reasonLine(reason string) string {
	first := pool.ReasonSummary(reason)
	rest := strings.TrimPrefix(reason, first)
	if rest == "" {
		return first
	}
	if log, ok := strings.CutPrefix(rest, "\nprogram log:\n"); ok && !strings.Contains(log, "\n") {
		return first + "; program log: " + log
	}
	return first + " (the end of its log is shown with the failures)"
}

// failureHint says what to do about a failed task, by what its reason
// points at.
func failureHint(reason, command string) string {
	again := "then run again (a changed manifest or input is a new job)"
	switch command {
	case "submit":
		again = "then submit again (a changed manifest or input is a new job)"
	case "task":
		again = "then try the task again (a changed manifest or input is a new job)"
	}
	switch pool.CauseOf(reason) {
	case pool.CauseData:
		return "the program says its input data is wrong (exit status 65) at the place named above: fix the data, " + again
	case pool.CauseResult:
		return "the program's result does not have what the [[merge]] entries read: make their field names match what the program prints, " + again
	case pool.CauseTimeLimit:
		if command == "submit" {
			return "raise policy.time_limit in the manifest if the task needs longer (the pool tried it on several devices; a program that never ends needs fixing instead), " + again
		}
		return "raise policy.time_limit in the manifest if the task needs longer (a busy machine makes tasks slower; --workers N runs fewer at once), " + again
	case pool.CauseMemory:
		return fmt.Sprintf("raise policy.memory_mib in the manifest (at most %d) if the task needs more, ", job.MaxMemoryMiB) + again
	case pool.CauseModule:
		return "the worker cannot run the program as it was built (the reason above says why): build it as a WASI command, GOOS=wasip1 GOARCH=wasm go build (docs/author.md, \"The program ABI\"), " + strings.Replace(again, "manifest or input", "program", 1)
	case pool.CauseMachine:
		if command == "submit" {
			return "a worker process died under the task, which says more about that machine than the program"
		}
		return "a worker process died under the task, which says more about this machine than the program: run the same command again to compute it again"
	}
	switch command {
	case "submit":
		return "fix the program (`idlepool task MANIFEST --index N` runs one task here and shows its input, output and log), then submit again (a changed program is a new job)"
	case "task":
		return "fix the program: the stdin and stderr above are what it read and wrote; then try the task again (a changed program is a new job)"
	}
	return "fix the program (`idlepool task MANIFEST --index N` runs one task and shows its input, output and log), then run again (a changed program is a new job)"
}

// jsonFloat keeps non-finite derived values printable: JSON has no NaN or
// infinity, so they become strings.
func jsonFloat(v float64) any {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Sprint(v)
	}
	return v
}

// manifestError explains a manifest that cannot be run for people: every
// problem of it, a hint that follows the first, and for a WebAssembly
// program given in its place, a manifest that runs it. command is the
// command that read it ("run", "submit", "task"), for the hint.
func manifestError(err error, command string) error {
	var me *job.ManifestError
	if errors.As(err, &me) {
		msg := me.Error()
		if list, ok := errors.AsType[job.ManifestErrors](err); ok {
			msg = fmt.Sprintf("%s has %d problems:", me.File, len(list))
			for _, e := range list {
				msg += "\n  " + e.Error()
			}
		}
		hint := "see the manifest format in docs/author.md (\"The manifest\")"
		switch {
		case errors.Is(err, job.ErrProgramNotManifest):
			return &userError{Msg: me.File + " is " + me.Msg, Hint: programHint(me.File, command), Cause: err}
		case errors.Is(err, job.ErrNotManifest):
			return &userError{Msg: me.File + " is " + me.Msg, Hint: "give the job's manifest, the TOML file that names its program (docs/author.md, \"The manifest\")", Cause: err}
		case me.Field == "program" && strings.Contains(me.Msg, "does not exist"):
			hint = "build the program first, e.g. `make examples` for the bundled examples, or GOOS=wasip1 GOARCH=wasm go build -o prog.wasm; a relative path is read from the manifest's directory"
		case errors.Is(err, job.ErrInputData):
			hint = "the data file is at fault, not the manifest: correct it at that line (docs/author.md, \"Split rules\", says what a CSV record may hold)"
		case strings.HasPrefix(me.Field, "inputs.") && strings.Contains(me.Msg, "does not exist"):
			hint = "a relative path is read from the manifest's directory"
		case strings.HasPrefix(me.Field, "derive."):
			hint = "a [derive] name is a [[merge]] entry's name and one of the values its rule gives (docs/author.md, \"Merge rules\")"
		}
		return &userError{Msg: msg, Hint: hint, Cause: err}
	}
	return err
}

// programHint says how to run the WebAssembly program at path: with the
// manifest of the same name beside it, if there is one, or else with a
// manifest such as the one it shows, the least that runs a program.
func programHint(path, command string) string {
	name := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	manifest := filepath.Join(filepath.Dir(path), name+".toml")
	line := func(m string) string {
		switch command {
		case "submit":
			return "idlepool submit " + m + " --pool URL"
		case "task":
			return "idlepool task " + m + " --index 0"
		}
		return "idlepool " + command + " " + m
	}
	if fi, err := os.Stat(manifest); err == nil && fi.Mode().IsRegular() {
		return fmt.Sprintf("its manifest may be the one beside it: %s", line(manifest))
	}
	return fmt.Sprintf("run it with a manifest such as this one, saved as %s, then %s (docs/author.md, \"The manifest\"):\n%s",
		manifest, line(manifest), minimalManifest(filepath.Base(path), name))
}

// minimalManifest is the least manifest that runs the program file
// beside it: a few tasks that differ only in their seed, every result
// kept as a line of JSON, and where the program's parameters would go.
func minimalManifest(program, name string) string {
	return fmt.Sprintf(`name = %s
program = %s

[split]
rule = "range"   # 4 tasks, each with its own seed
tasks = 4
# [split.params]  # constants every task reads on stdin, e.g.
# samples = 1000

[[merge]]
rule = "collect" # every task's JSON result, one line each`, strconv.Quote(name), strconv.Quote(program))
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
	return fileInfo{SHA256: hex.EncodeToString(h.Sum(nil)), Bytes: n, Path: path}, nil
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

// failureLogs is how many failed tasks printHuman shows with the end of
// their program's log; the others get their first line.
const failureLogs = 3

func printHuman(w io.Writer, doc runDoc, out *pool.Outcome, labels map[string][]string) {
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
			fmt.Fprintf(w, "%-16s %s\n", k, numberText(out.Derived[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(out.DeriveErrors)) {
		fmt.Fprintf(w, "%-16s not computed: %s\n", k, out.DeriveErrors[k])
	}
	for _, f := range doc.EntryFailures {
		fmt.Fprintf(w, "no row   task %d: %s\n", f.Task, f.Problem) // Problem names the entry
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
		again := ""
		if f.Retry != "" {
			again = " (the next run tries it again)"
		}
		first, log, _ := strings.Cut(f.Reason, "\n")
		switch {
		case log != "" && i < failureLogs:
			fmt.Fprintf(w, "failed   task %d: %s%s\n", f.Index, first, again)
			// The end of the program's log (pool.RunTask), indented
			// under the failure.
			for l := range strings.SplitSeq(log, "\n") {
				fmt.Fprintf(w, "%s\n", strings.TrimRight("           "+l, " "))
			}
		case log != "":
			fmt.Fprintf(w, "failed   task %d: %s%s (its log: --json)\n", f.Index, first, again)
		default:
			fmt.Fprintf(w, "failed   task %d: %s%s\n", f.Index, first, again)
		}
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
	key := fmt.Sprintf("%s\n%s\n%v\n%s", a.Donors, a.Stuck, a.Quorum != "", a.Timeouts) // counts change as results come; timeouts are news
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
		fmt.Fprintf(p.w, "\r\033[K[%s] %d/%d %3.0f%%%s", bar, pr.Done, pr.Total, 100*float64(pr.Done)/float64(pr.Total), rateLeft(pr))
		p.shown = true
		return
	}
	tenth := 10 * pr.Done / pr.Total
	if tenth == p.lastTent && now.Sub(p.last) < 5*time.Second && pr.Done != pr.Total {
		return
	}
	p.lastTent, p.last = tenth, now
	fmt.Fprintf(p.w, "progress %d/%d tasks (%.0f%%)%s\n", pr.Done, pr.Total, 100*float64(pr.Done)/float64(pr.Total), rateLeft(pr))
}

// rowLabels names the first columns of each merge entry's table: the
// group_by fields, or "key" for an entry with a "*" field.
func rowLabels(m *job.Manifest) map[string][]string {
	labels := map[string][]string{}
	for _, ms := range m.Merge {
		switch {
		case len(ms.GroupBy) > 0:
			labels[ms.Name] = slices.Clone(ms.GroupBy)
		case strings.Contains(ms.Field, "*"):
			labels[ms.Name] = []string{"key"}
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

// rateLeft is what a progress line says after the count: failures, the
// rate and the time left where they are known, with a space before it
// ("" when nothing is known).
func rateLeft(pr pool.Progress) string {
	var parts []string
	if pr.Failed > 0 {
		parts = append(parts, fmt.Sprintf("%d failed", pr.Failed))
	}
	if pr.Rate > 0 {
		parts = append(parts, fmt.Sprintf("%.1f tasks/s", pr.Rate))
		switch {
		case pr.Done >= pr.Total || pr.Left <= 0:
		case pr.Left < time.Second:
			parts = append(parts, "under a second left") // not "0s left" while tasks remain
		default:
			parts = append(parts, fmt.Sprintf("%s left", pr.Left.Round(time.Second)))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " " + strings.Join(parts, ", ")
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

// verifyRuleWords says how --verify compared a task's two results,
// naming only the fields of [verify.tolerance] the results have (those
// not in unmatched).
func verifyRuleWords(v job.Verify, unmatched []job.UnmatchedTolerance) string {
	if v.Rule != job.RuleTolerance || len(v.Tolerances) == 0 {
		return "byte for byte"
	}
	var fields []string
	for _, f := range slices.Sorted(maps.Keys(v.Tolerances)) {
		if !slices.ContainsFunc(unmatched, func(u job.UnmatchedTolerance) bool { return u.Field == f }) {
			fields = append(fields, f)
		}
	}
	if len(fields) == 0 {
		return "byte for byte (no field of [verify.tolerance] is in the results)"
	}
	return "within [verify.tolerance] for " + strings.Join(fields, ", ") + ", and byte for byte elsewhere"
}

// unmatchedWords names the fields of [verify.tolerance] that a result
// does not have, each with the field it most likely meant.
func unmatchedWords(unmatched []job.UnmatchedTolerance) string {
	parts := make([]string, len(unmatched))
	for i, u := range unmatched {
		parts[i] = u.Field
		if u.Closest != "" {
			parts[i] += fmt.Sprintf(" (did you mean %q?)", u.Closest)
		}
	}
	return strings.Join(parts, ", ")
}
