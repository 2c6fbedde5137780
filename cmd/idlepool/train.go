package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"

	"idlepool/job"
	"idlepool/pool"
)

// trainFile is a training file (TRAIN.toml): what `idlepool train` turns
// into one job per round. See docs/author.md, "Training".
type trainFile struct {
	Name        string `toml:"name"`
	Description string `toml:"description"`
	// Program is the WebAssembly module that computes a shard's update
	// (params.mode = "grad"), applies the merged update (mode "apply")
	// and makes the first model (mode "init").
	Program string `toml:"program"`
	// Rounds is how many rounds to train unless --rounds says otherwise.
	Rounds int `toml:"rounds"`
	// Shards is how many tasks each round's job has.
	Shards int `toml:"shards"`
	// EvaluateEvery is how often the held-out set is evaluated: after
	// every EvaluateEvery-th round and after the last one (0 or 1: every
	// round).
	EvaluateEvery int `toml:"evaluate_every"`
	// EvaluateShards is how many tasks the evaluation job has, each a
	// slice of the held-out set (0: as many as shards).
	EvaluateShards int `toml:"evaluate_shards"`
	// Model is the first model's file; empty: the program's init mode
	// makes it.
	Model string `toml:"model"`
	// Inputs are the data set's files, the same every round.
	Inputs map[string]string `toml:"inputs"`
	// Params go to every task and to the update step.
	Params map[string]any `toml:"params"`
	// Policy is copied into every round's job ([policy] of a manifest).
	Policy map[string]any `toml:"policy"`
	// Requirements is copied into each round's grad job ([requirements]
	// of a manifest), whose shards are the work a GPU can take (gpu =
	// "optional" with a program that has a GPU path, such as
	// examples/fashion/mlp-gpu.toml); the update step and the evaluation
	// ask for nothing.
	Requirements map[string]any `toml:"requirements"`

	dir  string // the training file's directory
	hash string // SHA-256 of the file's bytes, hex
}

// Bounds of a training file.
const (
	maxTrainRounds = 1_000_000
	maxTrainShards = 4096
)

// loadTrainFile reads and checks a training file.
func loadTrainFile(path string) (*trainFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, &userError{Msg: fmt.Sprintf("read training file: %v", err), Cause: err}
	}
	tf := &trainFile{dir: filepath.Dir(path)}
	dec := toml.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(tf); err != nil {
		var sme *toml.StrictMissingError
		if errors.As(err, &sme) {
			return nil, &userError{Msg: fmt.Sprintf("%s: %s", path, strings.TrimSpace(sme.String())),
				Hint: "a training file has name, description, program, rounds, shards, evaluate_every, evaluate_shards, model, [inputs], [params], [policy] and [requirements] (docs/author.md, Training)", Cause: err}
		}
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, col := de.Position()
			return nil, &userError{Msg: fmt.Sprintf("%s:%d:%d: %s: %s", path, row, col, strings.Join(de.Key(), "."), job.PlainTypeError(de.Error())),
				Hint: "see docs/author.md, Training, for what each key of a training file holds", Cause: err}
		}
		return nil, &userError{Msg: fmt.Sprintf("%s: %v", path, err), Cause: err}
	}
	sum := sha256.Sum256(b)
	tf.hash = hex.EncodeToString(sum[:])
	bad := func(format string, args ...any) error {
		return &userError{Msg: path + ": " + fmt.Sprintf(format, args...), Hint: "see docs/author.md, Training", Cause: errUsage}
	}
	switch {
	case tf.Name == "":
		return nil, bad("name is missing")
	case tf.Program == "":
		return nil, bad("program is missing: the WebAssembly module that computes and applies the updates")
	case tf.Shards < 1 || tf.Shards > maxTrainShards:
		return nil, bad("shards must be 1..%d, got %d", maxTrainShards, tf.Shards)
	case tf.Rounds < 0 || tf.Rounds > maxTrainRounds:
		return nil, bad("rounds must be 0..%d, got %d", maxTrainRounds, tf.Rounds)
	case tf.EvaluateEvery < 0 || tf.EvaluateEvery > maxTrainRounds:
		return nil, bad("evaluate_every must be 1..%d rounds, got %d", maxTrainRounds, tf.EvaluateEvery)
	case tf.EvaluateShards < 0 || tf.EvaluateShards > maxTrainShards:
		return nil, bad("evaluate_shards must be 1..%d, got %d", maxTrainShards, tf.EvaluateShards)
	}
	tf.EvaluateEvery = max(tf.EvaluateEvery, 1)
	if tf.EvaluateShards == 0 {
		tf.EvaluateShards = tf.Shards
	}
	for _, k := range []string{"mode", "round", "shards"} {
		if _, ok := tf.Params[k]; ok {
			return nil, bad("params.%s is set by idlepool train itself; remove it", k)
		}
	}
	for _, k := range []string{"model", "update"} {
		if _, ok := tf.Inputs[k]; ok {
			return nil, bad("inputs.%s is the name of an input idlepool train adds; rename it", k)
		}
	}
	return tf, nil
}

// checkFiles says which file the training file at path names that is
// not there (the program, an input, the first model), in the training
// file's own words, before any job runs.
func (tf *trainFile) checkFiles(path string) error {
	missing := func(key, p, hint string) error {
		if _, err := os.Stat(tf.resolve(p)); err != nil {
			msg := fmt.Sprintf("%s: %s: %v", path, key, err)
			if errors.Is(err, os.ErrNotExist) {
				msg = fmt.Sprintf("%s: %s: file %s does not exist", path, key, tf.resolve(p))
			}
			return &userError{Msg: msg,
				Hint: "a relative path is read from the training file's directory, " + tf.dir + "; " + hint, Cause: err}
		}
		return nil
	}
	if err := missing("program", tf.Program, buildHint(tf.resolve(tf.Program))); err != nil {
		return err
	}
	for _, k := range slices.Sorted(maps.Keys(tf.Inputs)) {
		if err := missing("inputs."+k, tf.Inputs[k], "the Fashion-MNIST examples' data set is unpacked into bin/fashion-mnist by `make train-fashion`"); err != nil {
			return err
		}
	}
	if tf.Model != "" {
		return missing("model", tf.Model, "model names the first model's file; without it the program's init mode makes one")
	}
	return nil
}

// buildHint says how to build the missing program at path: a bundled
// example's by its make target (from the checkout), another by building
// it.
func buildHint(path string) string {
	sep := string(filepath.Separator)
	if i := strings.LastIndex(path, sep+"examples"+sep); i >= 0 && strings.HasSuffix(path, ".wasm") {
		return fmt.Sprintf("build it first: from the checkout, `make %s`", filepath.ToSlash(path[i+1:]))
	}
	return "build it first (GOOS=wasip1 GOARCH=wasm go build, or examples/build-guest.sh for C and Rust)"
}

// resolve makes p absolute, relative to the training file's directory.
func (tf *trainFile) resolve(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	abs, err := filepath.Abs(filepath.Join(tf.dir, p))
	if err != nil {
		return filepath.Join(tf.dir, p)
	}
	return abs
}

// manifest writes the manifest of one job of the training to path: mode
// "grad" (shards tasks, the update summed by vector-sum), "eval"
// (evaluate_shards tasks, the held-out counts summed by vector-sum) or
// "apply" and "init" (one task; the model, a base64 string, through
// concat into an output file, byte for byte). extra are inputs beside
// the data set.
func (tf *trainFile) manifest(path, mode string, round int, extra map[string]string) error {
	params := map[string]any{}
	for k, v := range tf.Params {
		params[k] = v
	}
	params["mode"] = mode
	params["round"] = round
	params["shards"] = tf.Shards
	if mode == "eval" {
		params["shards"] = tf.EvaluateShards
	}
	inputs := map[string]string{}
	if mode != "init" {
		for k, v := range tf.Inputs {
			inputs[k] = tf.resolve(v)
		}
	}
	for k, v := range extra {
		inputs[k] = v
	}
	tasks := 1
	merge := []map[string]any{{"name": "model", "rule": job.RuleConcat, "field": "model"}}
	switch mode {
	case "apply":
		merge = append(merge, map[string]any{"name": "loss", "rule": job.RuleSum, "field": "loss"})
	case "grad":
		tasks = tf.Shards
		merge = []map[string]any{{"name": "update", "rule": job.RuleVectorSum, "field": "update"}}
	case "eval":
		tasks = tf.EvaluateShards
		merge = []map[string]any{{"name": "evaluation", "rule": job.RuleVectorSum, "field": "eval"}}
	}
	m := map[string]any{
		"name":        fmt.Sprintf("%s-%s-%d", tf.Name, mode, round),
		"description": fmt.Sprintf("%s: round %d, %s", tf.Name, round, mode),
		"program":     tf.resolve(tf.Program),
		"split":       map[string]any{"rule": "range", "tasks": tasks, "params": params},
		"merge":       merge,
	}
	if len(inputs) > 0 {
		m["inputs"] = inputs
	}
	if len(tf.Policy) > 0 {
		m["policy"] = tf.Policy
	}
	if len(tf.Requirements) > 0 && mode == "grad" {
		m["requirements"] = tf.Requirements
	}
	b, err := toml.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode round manifest: %w", err)
	}
	return writeFileAtomic(path, b)
}

// lineage is the training's record, lineage.json in its directory: every
// finished round's jobs and model, so that anyone can recompute and check
// any round, and a restarted `idlepool train` goes on from the last one.
type lineage struct {
	Name string `json:"name"`
	// TrainFile is the SHA-256 of the training file the rounds come from.
	TrainFile string `json:"train_file"`
	// Init is the job that made the first model, or "" when the training
	// file gave it.
	Init   string       `json:"init,omitempty"`
	Model0 string       `json:"model0"` // SHA-256 of the first model
	Rounds []trainRound `json:"rounds"`
}

// trainRound is one finished round.
type trainRound struct {
	Round int    `json:"round"`
	Job   string `json:"job"`   // the round's job: the shards' updates, merged
	Apply string `json:"apply"` // the update step's job
	// Evaluation is the job that evaluated the new model on the held-out
	// set; "" for a round after which it was not evaluated
	// (evaluate_every).
	Evaluation string `json:"evaluation,omitempty"`
	Model      string `json:"model"` // SHA-256 of the model after the round
	// Loss is the mean training loss of the round's batch under the
	// model before the round, as the update step computed it. Accuracy
	// is the share of the held-out set that the model after the round
	// classifies right and TestLoss its mean loss there, from the
	// evaluation's exact sums; nil for a round after which it was not
	// evaluated, or when the program has no held-out set.
	Loss     float64  `json:"loss"`
	Accuracy *float64 `json:"accuracy,omitempty"`
	TestLoss *float64 `json:"test_loss,omitempty"`
	// Seconds is the round's wall time when it was computed and Timing
	// how it splits (see roundTiming); not part of the lineage's
	// meaning.
	Seconds float64      `json:"seconds,omitempty"`
	Timing  *roundTiming `json:"timing,omitempty"`
}

// trainDoc is what `idlepool train --json` prints.
type trainDoc struct {
	Name    string   `json:"name"`
	Dir     string   `json:"dir"`
	Model   string   `json:"model"`  // path of the last model
	SHA256  string   `json:"sha256"` // its digest
	Plot    string   `json:"plot"`
	PNG     string   `json:"png"` // the plot as a PNG picture
	Lineage *lineage `json:"lineage"`
	// Timing is the mean split of the lineage's rounds that have one
	// (timingSummary); absent when none has.
	Timing *timingSummary `json:"timing,omitempty"`
}

func cmdTrain(ctx context.Context, g *globals, args []string) error {
	fs := g.flagSet("idlepool train", "Usage: idlepool train TRAIN.toml [--rounds N] [--pool URL] [--dir DIR] [--workers N] [--json]\n\nTrains a model round by round: each round is one job whose tasks compute the shards' exact updates,\nthen the training's program applies the merged update. Alone and offline, or on a pool with --pool.\nA killed run goes on from its last finished round when started again.\n\n")
	rounds := fs.Int("rounds", 0, "train until round `N` (default: the training file's rounds)")
	dirFlag := fs.String("dir", "", "keep the models, the lineage and the plot in `DIR` (default: NAME.train beside the training file)")
	workers := fs.Int("workers", runtime.NumCPU(), "alone: run `N` tasks at once")
	asJSON := fs.Bool("json", false, "print one JSON document with the lineage on stdout")
	pc := poolFlags(fs)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return &userError{Msg: "train needs exactly one training file", Hint: "idlepool train examples/fashion/softmax.toml", Cause: errUsage}
	}
	if *workers < 1 || *workers > maxWorkers {
		return &userError{Msg: fmt.Sprintf("--workers must be 1..%d, got %d", maxWorkers, *workers), Cause: errUsage}
	}
	tf, err := loadTrainFile(pos[0])
	if err != nil {
		return err
	}
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == "rounds" })
	if !set {
		*rounds = tf.Rounds
	}
	if *rounds < 0 || *rounds > maxTrainRounds {
		return &userError{Msg: fmt.Sprintf("--rounds must be 0..%d, got %d", maxTrainRounds, *rounds), Cause: errUsage}
	}
	dir := *dirFlag
	if dir == "" {
		dir = filepath.Join(tf.dir, tf.Name+".train")
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs // the round manifests name the models by absolute paths
	}
	if err := tf.checkFiles(pos[0]); err != nil {
		return err
	}
	t := &trainer{g: g, tf: tf, dir: dir, workers: *workers, pc: pc, clock: &taskClock{now: time.Now}}
	if err := t.open(); err != nil {
		return err
	}
	if err := t.train(ctx, *rounds); err != nil {
		return err
	}
	return t.report(*asJSON)
}

// trainer runs the rounds of one training.
type trainer struct {
	g       *globals
	tf      *trainFile
	dir     string
	workers int
	pc      *poolConn
	lin     lineage
	clock   *taskClock // the tasks' time, alone
}

func (t *trainer) modelPath(round int) string {
	return filepath.Join(t.dir, "models", fmt.Sprintf("round-%04d.bin", round))
}
func (t *trainer) jobPath(name string) string { return filepath.Join(t.dir, "jobs", name) }

// open creates or reads the training's directory.
func (t *trainer) open() error {
	for _, d := range []string{"models", "jobs"} {
		if err := os.MkdirAll(filepath.Join(t.dir, d), 0o755); err != nil {
			return fmt.Errorf("training directory: %w", err)
		}
	}
	b, err := os.ReadFile(filepath.Join(t.dir, "lineage.json"))
	switch {
	case errors.Is(err, os.ErrNotExist):
		t.lin = lineage{Name: t.tf.Name, TrainFile: t.tf.hash, Rounds: []trainRound{}}
		return nil
	case err != nil:
		return fmt.Errorf("read lineage: %w", err)
	}
	if err := json.Unmarshal(b, &t.lin); err != nil {
		return &userError{Msg: fmt.Sprintf("%s: %v", filepath.Join(t.dir, "lineage.json"), err),
			Hint: "the lineage file is damaged; move the directory away to train from the start", Cause: err}
	}
	if t.lin.TrainFile != t.tf.hash && len(t.lin.Rounds) == 0 {
		// No round finished under the old file (its round 1 failed, say
		// on a misspelt param): there is nothing to keep, so the fixed
		// file trains here from the start, its first model made anew.
		fmt.Fprintf(t.g.stderr, "training %s: no round finished under the earlier training file; starting again (%s)\n", t.tf.Name, t.dir)
		t.lin = lineage{Name: t.tf.Name, TrainFile: t.tf.hash, Rounds: []trainRound{}}
		return nil
	}
	if t.lin.TrainFile != t.tf.hash {
		return &userError{Msg: fmt.Sprintf("%s holds a training of another training file (the file changed since)", t.dir),
			Hint: "train into a new directory (--dir DIR), or move this one away", Cause: errUsage}
	}
	// The last model must be the one the lineage names.
	last, want := 0, t.lin.Model0
	if n := len(t.lin.Rounds); n > 0 {
		last, want = t.lin.Rounds[n-1].Round, t.lin.Rounds[n-1].Model
	}
	if got, err := fileDigestHex(t.modelPath(last)); err != nil || got != want {
		return &userError{Msg: fmt.Sprintf("the model of round %d (%s) is missing or not the one the lineage names", last, t.modelPath(last)),
			Hint: "move the training directory away to train from the start", Cause: errUsage}
	}
	return nil
}

// train runs rounds until round upto is finished.
func (t *trainer) train(ctx context.Context, upto int) error {
	if t.lin.Model0 == "" {
		if err := t.firstModel(ctx); err != nil {
			return err
		}
	}
	done := len(t.lin.Rounds)
	if done > 0 {
		fmt.Fprintf(t.g.stderr, "training %s: rounds 1..%d already finished (%s)\n", t.tf.Name, done, filepath.Join(t.dir, "lineage.json"))
	}
	for k := done + 1; k <= upto; k++ {
		start := time.Now()
		r, err := t.round(ctx, k, k%t.tf.EvaluateEvery == 0 || k == upto)
		if err != nil {
			return err
		}
		r.Seconds = math.Round(time.Since(start).Seconds()*100) / 100
		tm := r.Timing
		tm.DriverSeconds = max(0, math.Round((r.Seconds-tm.Grad.Seconds-tm.Apply.Seconds-tm.Eval.Seconds)*1000)/1000)
		if tasks := tm.taskSeconds(); tasks > 0 && r.Seconds > 0 {
			tm.OverheadShare = math.Round(max(0, 1-tasks/r.Seconds)*1000) / 1000
		}
		t.lin.Rounds = append(t.lin.Rounds, r)
		if err := t.saveLineage(); err != nil {
			return err
		}
		t.forgetRuns(r.Job, r.Apply, r.Evaluation)
		if err := t.plot(); err != nil { // to look at while it trains
			return err
		}
		fmt.Fprintf(t.g.stderr, "round %d/%d: loss %.4f, held-out accuracy %s%s (%.1fs%s)\n", k, upto, r.Loss, accuracyWords(r.Accuracy), testLossWords(r.TestLoss), r.Seconds, tm.words())
	}
	t.trimInputs()
	return t.plot()
}

// trimInputs removes from the home's store of inputs the files that no
// run links any more, now that the rounds' run directories are gone:
// the data set stayed there from round to round, linked by each round's
// run, and leaves with the training's last round. Alone only.
func (t *trainer) trimInputs() {
	if t.pc.url != "" {
		return
	}
	dirs, err := t.g.dirs()
	if err != nil {
		return
	}
	if err := pool.TrimInputStore(filepath.Join(dirs.Data, "inputs"), filepath.Join(dirs.Data, "runs")); err != nil {
		t.g.logger().Warn("Cannot trim the store of inputs", "err", err)
	}
}

// firstModel takes the training file's model or runs the init job.
func (t *trainer) firstModel(ctx context.Context) error {
	dst := t.modelPath(0)
	if t.tf.Model != "" {
		b, err := os.ReadFile(t.tf.resolve(t.tf.Model))
		if err != nil {
			return &userError{Msg: fmt.Sprintf("read the first model: %v", err), Cause: err}
		}
		if err := writeFileAtomic(dst, b); err != nil {
			return err
		}
	} else {
		man := t.jobPath("init.toml")
		if err := t.tf.manifest(man, "init", 0, nil); err != nil {
			return err
		}
		doc, err := t.runJob(ctx, man)
		if err != nil {
			return &userError{Msg: "the first model (mode init): " + userMessage(err), Hint: hintOf(err), Cause: err}
		}
		model, _, err := applyOutcome(doc)
		if err != nil {
			return fmt.Errorf("the first model: %w", err)
		}
		if err := writeFileAtomic(dst, model); err != nil {
			return err
		}
		t.lin.Init = doc.Job
		defer t.forgetRuns(doc.Job)
	}
	sum, err := fileDigestHex(dst)
	if err != nil {
		return err
	}
	t.lin.Model0 = sum
	return t.saveLineage()
}

// round runs round k: the shards' job, the update step and, if
// evaluate, the evaluation of the new model on the held-out set.
func (t *trainer) round(ctx context.Context, k int, evaluate bool) (trainRound, error) {
	prev := t.modelPath(k - 1)
	man := t.jobPath(fmt.Sprintf("round-%04d.toml", k))
	if err := t.tf.manifest(man, "grad", k, map[string]string{"model": prev}); err != nil {
		return trainRound{}, err
	}
	var tm roundTiming
	doc, err := t.timedJob(ctx, man, &tm.Grad)
	if err != nil {
		return trainRound{}, t.roundError(k, "the shards' updates", err)
	}
	upd, err := json.Marshal(doc.Result)
	if err != nil {
		return trainRound{}, fmt.Errorf("round %d: encode the merged update: %w", k, err)
	}
	updPath := t.jobPath(fmt.Sprintf("update-%04d.json", k))
	if err := writeFileAtomic(updPath, upd); err != nil {
		return trainRound{}, err
	}
	aman := t.jobPath(fmt.Sprintf("apply-%04d.toml", k))
	if err := t.tf.manifest(aman, "apply", k, map[string]string{"model": prev, "update": updPath}); err != nil {
		return trainRound{}, err
	}
	adoc, err := t.timedJob(ctx, aman, &tm.Apply)
	if err != nil {
		return trainRound{}, t.roundError(k, "the update step", err)
	}
	model, loss, err := applyOutcome(adoc)
	if err != nil {
		return trainRound{}, t.roundError(k, "the update step", err)
	}
	if len(model) != fileSize(prev) {
		return trainRound{}, t.roundError(k, "the update step", fmt.Errorf("the new model has %d bytes, the old one %d", len(model), fileSize(prev)))
	}
	// The new model waits in jobs/ until the round is over: a round whose
	// evaluation fails (a model that diverged) leaves no model in models/.
	next := t.jobPath(fmt.Sprintf("model-%04d.bin", k))
	if err := writeFileAtomic(next, model); err != nil {
		return trainRound{}, err
	}
	sum := sha256.Sum256(model)
	r := trainRound{Round: k, Job: doc.Job, Apply: adoc.Job, Model: hex.EncodeToString(sum[:]), Loss: loss, Timing: &tm}
	if evaluate {
		if err := t.evaluate(ctx, &r, next); err != nil {
			return trainRound{}, err
		}
	}
	if err := os.Rename(next, t.modelPath(k)); err != nil {
		return trainRound{}, fmt.Errorf("round %d: %w", k, err)
	}
	return r, nil
}

// evaluate runs the evaluation job of round r's new model, the file
// model: its tasks count, each over its slice of the held-out set, the
// examples the model classifies right and sum their loss in fixed point,
// and vector-sum merges them exactly, so the figures are the same for any
// number of tasks. The merged counts go to jobs/evaluation-K.json.
func (t *trainer) evaluate(ctx context.Context, r *trainRound, model string) error {
	k := r.Round
	man := t.jobPath(fmt.Sprintf("eval-%04d.toml", k))
	if err := t.tf.manifest(man, "eval", k, map[string]string{"model": model}); err != nil {
		return err
	}
	doc, err := t.timedJob(ctx, man, &r.Timing.Eval)
	if err != nil {
		return t.roundError(k, "the evaluation", err)
	}
	b, err := json.Marshal(doc.Result)
	if err != nil {
		return fmt.Errorf("round %d: encode the merged evaluation: %w", k, err)
	}
	if err := writeFileAtomic(t.jobPath(fmt.Sprintf("evaluation-%04d.json", k)), b); err != nil {
		return err
	}
	acc, loss, err := heldOut(b)
	if err != nil {
		return t.roundError(k, "the evaluation", err)
	}
	r.Evaluation, r.Accuracy, r.TestLoss = doc.Job, acc, loss
	return nil
}

// evalLossScale is the fixed point of an eval task's summed loss: units
// of 2^-32.
const evalLossScale = 0x1p-32

// heldOut reads the merged evaluation, {"evaluation": {"count": TASKS,
// "sum": [RIGHT, EXAMPLES, LOSS]}}: the accuracy RIGHT ÷ EXAMPLES and the
// mean loss LOSS·2^-32 ÷ EXAMPLES, each one correctly rounded division
// of exact integers, so the figures are the same bits for any number of
// eval tasks. No examples (the program has no held-out set) gives nil
// figures.
func heldOut(merged []byte) (acc, loss *float64, err error) {
	const want = `want {"eval": [examples right, examples, summed loss in units of 2^-32]} from each task`
	var m struct {
		Evaluation struct {
			Sum []int64 `json:"sum"`
		} `json:"evaluation"`
	}
	if err := json.Unmarshal(merged, &m); err != nil {
		return nil, nil, fmt.Errorf("the merged evaluation: %w (%s)", err, want)
	}
	s := m.Evaluation.Sum
	if len(s) != 3 || s[0] < 0 || s[1] < s[0] || s[2] < 0 {
		return nil, nil, fmt.Errorf("the merged evaluation is %v (%s)", s, want)
	}
	if s[1] == 0 {
		return nil, nil, nil
	}
	n := float64(s[1])
	a, l := float64(s[0])/n, float64(s[2])*evalLossScale/n
	return &a, &l, nil
}

// timedJob runs one job with runJob and records its wall time and the
// time its tasks ran here in jt.
func (t *trainer) timedJob(ctx context.Context, manifest string, jt *jobTiming) (*runDoc, error) {
	start, busy := time.Now(), t.clock.Busy()
	doc, err := t.runJob(ctx, manifest)
	jt.Seconds, jt.TaskSeconds = secs(time.Since(start)), secs(t.clock.Busy()-busy)
	return doc, err
}

// forgetRuns removes the run directories (journal, input snapshot) of
// jobs the lineage records: their results are in the models, and each
// links the data set. Alone only; a pool's merges are left as
// submit leaves them.
func (t *trainer) forgetRuns(jobs ...string) {
	if t.pc.url != "" {
		return
	}
	dirs, err := t.g.dirs()
	if err != nil {
		return
	}
	for _, id := range jobs {
		if _, err := job.ParseDigest(id); err == nil { // never a path from elsewhere
			os.RemoveAll(filepath.Join(dirs.Data, "runs", id))
		}
	}
}

// roundError says which round and step failed, and where the last good
// model is: in round 1 the first model, which nothing has checked yet (a
// model file of the wrong size fails there).
func (t *trainer) roundError(k int, step string, err error) error {
	if errors.Is(err, context.Canceled) {
		return &userError{Msg: fmt.Sprintf("interrupted in round %d; finished rounds and tasks are saved", k), Hint: "run the same command again to continue", Cause: err}
	}
	last := fmt.Sprintf("the last good model is %s (round %d)", t.modelPath(k-1), k-1)
	if k == 1 {
		last = fmt.Sprintf("no round has finished; the first model is %s", t.modelPath(0))
	}
	return &userError{
		Msg:   fmt.Sprintf("round %d: %s failed: %s", k, step, userMessage(err)),
		Hint:  last + "; " + hintOf(err),
		Cause: err,
	}
}

func userMessage(err error) string {
	var ue *userError
	if errors.As(err, &ue) {
		return ue.Msg
	}
	return err.Error()
}

func hintOf(err error) string {
	var ue *userError
	if errors.As(err, &ue) && ue.Hint != "" {
		return ue.Hint
	}
	return "fix the training file or the program and run the same command again"
}

// runJob computes one job with the machinery of `idlepool run` (alone) or
// of `idlepool submit --follow` (on a pool) and returns its document.
// Any failed task fails the job: a round without all its shards is not
// the round.
func (t *trainer) runJob(ctx context.Context, manifest string) (*runDoc, error) {
	var out bytes.Buffer
	sub := *t.g
	sub.stdout = &out
	args := []string{manifest, "--json"}
	var err error
	if t.pc.url != "" {
		args = append(args, "--follow", "--pool", t.pc.url)
		if t.pc.invite != "" {
			args = append(args, "--invite", t.pc.invite)
		}
		if t.pc.ownerKey != "" {
			args = append(args, "--owner-key", t.pc.ownerKey)
		}
		err = cmdSubmit(ctx, &sub, args)
	} else {
		args = append(args, "--workers", strconv.Itoa(t.workers))
		sub.tasks = t.clock
		err = cmdRun(ctx, &sub, args)
	}
	if err != nil {
		return nil, trainHint(err, manifest)
	}
	doc, err := decodeRunDoc(out.Bytes())
	if err != nil {
		return nil, err
	}
	if len(doc.Failures) > 0 {
		f := doc.Failures[0]
		return nil, fmt.Errorf("task %d: %s", f.Index, reasonLine(f.Reason))
	}
	return doc, nil
}

// trainHint makes the hint of a job's failure speak of the training:
// where the program's own failure points at the program, it names the
// round's manifest for `idlepool task` and the training file's [params],
// where a misspelt key reaches the program as a missing one.
func trainHint(err error, manifest string) error {
	ue, ok := err.(*userError)
	if !ok {
		return err
	}
	const generic = "fix the program (`idlepool task MANIFEST --index N`"
	if i := strings.Index(ue.Hint, generic); i >= 0 {
		c := *ue
		c.Hint = ue.Hint[:i] + "check the training file's [params] (a misspelt key reaches the program as a missing one) or fix the program (`idlepool task " +
			manifest + " --index N`" + ue.Hint[i+len(generic):]
		return &c
	}
	return err
}

// decodeRunDoc reads a job's --json document with its numbers as
// written (json.Number), so that a merged integer sum beyond 2^53 goes on
// to the update step and the evaluation exactly.
func decodeRunDoc(b []byte) (*runDoc, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var doc runDoc
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("read the job's result: %w", err)
	}
	return &doc, nil
}

// applyOutcome reads the update step's (or the init step's) result: the
// model's bytes, decoded from the base64 the concat entry wrote to its
// output file, and the loss.
func applyOutcome(doc *runDoc) (model []byte, loss float64, err error) {
	const want = `want {"model": "base64 of the model file", "loss": number}`
	out, ok := doc.Outputs["model"]
	if !ok {
		return nil, 0, fmt.Errorf("the update step returned no model (%s)", want)
	}
	text, err := os.ReadFile(out.Path)
	if err != nil {
		return nil, 0, fmt.Errorf("read the new model: %w", err)
	}
	model, err = base64.StdEncoding.DecodeString(string(bytes.TrimSpace(text)))
	if err != nil || len(model) == 0 {
		return nil, 0, fmt.Errorf("the update step's model is not the base64 of a model file (%s)", want)
	}
	b, err := json.Marshal(doc.Result)
	if err != nil {
		return nil, 0, err
	}
	var r struct {
		Loss struct{ Sum float64 } `json:"loss"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, 0, fmt.Errorf("the update step's result: %w (%s)", err, want)
	}
	return model, r.Loss.Sum, nil
}

// accuracyLine sums up the held-out accuracy of rounds: the last one
// measured and the best, with their rounds; "" when none was measured.
func accuracyLine(rounds []trainRound) string {
	var last, best *trainRound
	for i := range rounds {
		r := &rounds[i]
		if r.Accuracy == nil {
			continue
		}
		last = r
		if best == nil || *r.Accuracy > *best.Accuracy {
			best = r
		}
	}
	if last == nil {
		return ""
	}
	return fmt.Sprintf("held-out accuracy: %s after round %d (best %s after round %d)", accuracyWords(last.Accuracy), last.Round, accuracyWords(best.Accuracy), best.Round)
}

// testLossWords shows a round's mean held-out loss after its accuracy,
// or nothing when it was not measured.
func testLossWords(loss *float64) string {
	if loss == nil {
		return ""
	}
	return fmt.Sprintf(" (loss %.4f)", *loss)
}

// accuracyWords shows a round's held-out accuracy, or that it was not
// measured after that round.
func accuracyWords(acc *float64) string {
	if acc == nil {
		return "not measured"
	}
	return fmt.Sprintf("%.2f%%", 100**acc)
}

func (t *trainer) saveLineage() error {
	b, err := json.MarshalIndent(t.lin, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(t.dir, "lineage.json"), append(b, '\n'))
}

// report prints the table (or the JSON document) of the finished rounds.
func (t *trainer) report(asJSON bool) error {
	last := 0
	if n := len(t.lin.Rounds); n > 0 {
		last = t.lin.Rounds[n-1].Round
	}
	model := t.modelPath(last)
	sum, err := fileDigestHex(model)
	if err != nil {
		return err
	}
	if asJSON {
		b, err := json.MarshalIndent(trainDoc{Name: t.tf.Name, Dir: t.dir, Model: model, SHA256: sum, Plot: t.plotPath(), PNG: t.pngPath(),
			Lineage: &t.lin, Timing: summarize(t.lin.Rounds)}, "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintf(t.g.stdout, "%s\n", b)
		return nil
	}
	w := t.g.stdout
	fmt.Fprintf(w, "%-6s %-10s %-9s %-10s %-12s %s\n", "round", "loss", "accuracy", "test loss", "job", "apply")
	for _, r := range t.lin.Rounds {
		acc, tl := "-", "-"
		if r.Accuracy != nil {
			acc = accuracyWords(r.Accuracy)
		}
		if r.TestLoss != nil {
			tl = fmt.Sprintf("%.4f", *r.TestLoss)
		}
		fmt.Fprintf(w, "%-6d %-10.4f %-9s %-10s %-12s %s\n", r.Round, r.Loss, acc, tl, r.Job[:12], r.Apply[:12])
	}
	if line := accuracyLine(t.lin.Rounds); line != "" {
		fmt.Fprintln(w, line)
	}
	fmt.Fprintf(w, "model: %s (sha256 %s)\nlineage: %s\nplot: %s and %s\n", model, sum[:16], filepath.Join(t.dir, "lineage.json"), t.plotPath(), t.pngPath())
	printTiming(w, summarize(t.lin.Rounds))
	return nil
}

func fileDigestHex(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func fileSize(path string) int {
	st, err := os.Stat(path)
	if err != nil {
		return -1
	}
	return int(st.Size())
}

// writeFileAtomic writes b to path through a temporary file and a rename,
// synced, so that a kill leaves the old file or the new one.
func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err = errors.Join(err, f.Sync(), f.Close()); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return os.Rename(tmp, path)
}
