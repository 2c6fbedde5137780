package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/pelletier/go-toml/v2"

	"idlepool/identity"
	"idlepool/job"
)

// fashionDir is where Debian's dataset-fashion-mnist puts the data set
// (.ci/run installs it).
const fashionDir = "/usr/share/datasets/fashion-mnist"

// fashionSubset writes the first n training and m test examples of
// Fashion-MNIST as IDX files into dir and returns dir.
func fashionSubset(t *testing.T, dir string, n, m int) string {
	t.Helper()
	if _, err := os.Stat(filepath.Join(fashionDir, "train-images-idx3-ubyte.gz")); err != nil {
		t.Skipf("Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist): %v", err)
	}
	cut := func(name string, header, rowBytes, rows int) {
		f, err := os.Open(filepath.Join(fashionDir, name+".gz"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		z, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, header+rowBytes*rows)
		if _, err := io.ReadFull(z, b); err != nil {
			t.Fatal(err)
		}
		binary.BigEndian.PutUint32(b[4:], uint32(rows))
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cut("train-images-idx3-ubyte", 16, 784, n)
	cut("train-labels-idx1-ubyte", 8, 1, n)
	cut("t10k-images-idx3-ubyte", 16, 784, m)
	cut("t10k-labels-idx1-ubyte", 8, 1, m)
	return dir
}

var (
	fashionOnce sync.Once
	fashionData string
)

// smallFashion is a subset shared by the tests: 240 training examples
// (two batches of 120) and 100 test examples.
func smallFashion(t *testing.T) string {
	t.Helper()
	fashionOnce.Do(func() {
		dir, err := os.MkdirTemp("", "fashion-subset-")
		if err != nil {
			t.Fatal(err)
		}
		fashionData = dir
	})
	if _, err := os.Stat(filepath.Join(fashionData, "t10k-labels-idx1-ubyte")); err != nil {
		fashionSubset(t, fashionData, 240, 100)
	}
	return fashionData
}

// writeTrainFile writes a training file for the fashion program over
// data into a new directory, with the program beside it, and returns its
// path. params replaces [params]; extra is added at the top.
func writeTrainFile(t *testing.T, program, data string, shards int, extra, params string) string {
	t.Helper()
	dir := t.TempDir()
	b, err := os.ReadFile(wasm[program])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "prog.wasm"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if params == "" {
		params = "features = 784\nclasses = 10\nbatch = 120\nlr = 0.01\n"
	}
	text := fmt.Sprintf(`name = "small"
program = "prog.wasm"
rounds = 3
shards = %d
%s
[inputs]
train_images = %q
train_labels = %q
test_images = %q
test_labels = %q

[params]
%s`, shards, extra,
		filepath.Join(data, "train-images-idx3-ubyte"), filepath.Join(data, "train-labels-idx1-ubyte"),
		filepath.Join(data, "t10k-images-idx3-ubyte"), filepath.Join(data, "t10k-labels-idx1-ubyte"), params)
	path := filepath.Join(dir, "train.toml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// trainOut is the part of `train --json` the tests read.
type trainOut struct {
	Model   string
	SHA256  string
	Plot    string
	PNG     string
	Lineage struct {
		Rounds []struct {
			Round                  int
			Job, Apply, Evaluation string
			Model                  string
			Loss                   float64
			Accuracy               *float64
			TestLoss               *float64 `json:"test_loss"`
			Seconds                float64
			Timing                 *roundTiming
		}
	}
	Timing *timingSummary
}

func trainJSON(t *testing.T, home string, args ...string) (trainOut, runOut) {
	t.Helper()
	out := idlepool(t, home, append([]string{"train", "--json", "--workers", "2"}, args...)...)
	if out.code != 0 {
		t.Fatalf("train %v: exit %d\nstderr:\n%s", args, out.code, out.stderr)
	}
	var doc trainOut
	if err := json.Unmarshal([]byte(out.stdout), &doc); err != nil {
		t.Fatalf("train --json: %v\n%s", err, out.stdout)
	}
	return doc, out
}

// TestTrainShardInvariant trains 3 rounds of the softmax example on a
// subset of Fashion-MNIST with 1, 3 and 8 shards: the models are the same
// bytes (the fixed-point update and the vector-sum merge are exact), the
// loss falls, and the lineage names every round's jobs. The held-out set
// is evaluated by as many tasks as shards (evaluate_shards' default),
// each a slice of it: every round's accuracy and held-out loss are the
// same bits for 1, 3 and 8 evaluation tasks.
func TestTrainShardInvariant(t *testing.T) {
	t.Parallel() // mostly waits on its subprocesses
	data := smallFashion(t)
	models := make([]string, 3)
	figures := make([][]string, 3)
	var wg sync.WaitGroup
	for i, shards := range []int{1, 3, 8} {
		wg.Go(func() {
			doc, out := trainJSON(t, t.TempDir(), writeTrainFile(t, "fashion", data, shards, "", ""))
			models[i] = doc.SHA256
			rs := doc.Lineage.Rounds
			if len(rs) != 3 || rs[2].Model != doc.SHA256 || rs[2].Loss >= rs[0].Loss || rs[0].Job == "" || rs[0].Apply == "" {
				t.Errorf("%d shards: lineage %+v", shards, rs)
			}
			for _, r := range rs {
				if r.Evaluation == "" || r.Accuracy == nil || r.TestLoss == nil || *r.Accuracy <= 0 || *r.TestLoss <= 0 {
					t.Errorf("%d shards: round %d was not evaluated: %+v", shards, r.Round, r)
					continue
				}
				figures[i] = append(figures[i], fmt.Sprintf("round %d: accuracy %x, held-out loss %x", r.Round, math.Float64bits(*r.Accuracy), math.Float64bits(*r.TestLoss)))
			}
			var man struct{ Split struct{ Tasks int } }
			if b, err := os.ReadFile(filepath.Join(filepath.Dir(doc.Model), "..", "jobs", "eval-0003.toml")); err != nil {
				t.Error(err)
			} else if err := toml.Unmarshal(b, &man); err != nil || man.Split.Tasks != shards {
				t.Errorf("%d shards: the evaluation job has %d tasks (%v), want %d", shards, man.Split.Tasks, err, shards)
			}
			if !strings.Contains(out.stderr, "round 3/3: loss ") {
				t.Errorf("%d shards: no progress line for round 3:\n%s", shards, out.stderr)
			}
			svg, err := os.ReadFile(doc.Plot)
			if err != nil || !bytes.HasPrefix(svg, []byte("<svg")) || !bytes.Contains(svg, []byte("<polyline")) {
				t.Errorf("%d shards: plot %s: %v", shards, doc.Plot, err)
			}
			if f, err := os.Open(doc.PNG); err != nil {
				t.Errorf("%d shards: %v", shards, err)
			} else {
				if _, err := png.Decode(f); err != nil {
					t.Errorf("%d shards: %s: %v", shards, doc.PNG, err)
				}
				f.Close()
			}
			checkTiming(t, doc, true)
		})
	}
	wg.Wait()
	if models[0] != models[1] || models[0] != models[2] {
		t.Fatalf("models after 3 rounds with 1, 3 and 8 shards differ: %v", models)
	}
	for i := range figures[1:] {
		if diff := cmp.Diff(figures[0], figures[i+1]); diff != "" {
			t.Errorf("held-out figures of 1 evaluation task (-) and of %d (+):\n%s", []int{3, 8}[i], diff)
		}
	}
}

// TestTrainEvaluatesEveryN: with evaluate_every = 2 the update step
// measures the held-out accuracy after round 2 and after the last round
// (3) only; round 1 has none in the lineage (not a stale or zero figure),
// says so on stderr, and is left out of the plot's accuracy panel. The
// data set's one copy leaves the home's store of inputs at the end.
func TestTrainEvaluatesEveryN(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	doc, out := trainJSON(t, home, writeTrainFile(t, "fashion", smallFashion(t), 2, "evaluate_every = 2", ""))
	rs := doc.Lineage.Rounds
	if len(rs) != 3 || rs[0].Accuracy != nil || rs[1].Accuracy == nil || rs[2].Accuracy == nil || *rs[2].Accuracy <= 0 {
		t.Fatalf("lineage %+v: want an accuracy after rounds 2 and 3 only", rs)
	}
	if !strings.Contains(out.stderr, "round 1/3: loss ") || !strings.Contains(out.stderr, "held-out accuracy not measured") {
		t.Errorf("stderr does not say that round 1's accuracy was not measured:\n%s", out.stderr)
	}
	svg, err := os.ReadFile(doc.Plot)
	if err != nil {
		t.Fatal(err)
	}
	lines := regexp.MustCompile(`points="([^"]*)"`).FindAllStringSubmatch(string(svg), -1)
	if len(lines) != 2 || len(strings.Fields(lines[0][1])) != 3 || len(strings.Fields(lines[1][1])) != 2 {
		t.Errorf("plot lines %q: want 3 loss points and 2 accuracy points", lines)
	}
	// The rounds linked one copy of the data set from the home's store
	// of inputs; with the last round it leaves the store.
	if left, err := os.ReadDir(filepath.Join(home, "data", "inputs")); err != nil || len(left) != 0 {
		t.Errorf("the store of inputs holds %d files after the training (%v), want none", len(left), err)
	}
}

// checkTiming checks the split of each round's time in a train --json
// document: the parts are not negative and add up to the round's wall
// time; alone, tasks ran for some of it.
func checkTiming(t *testing.T, doc trainOut, alone bool) {
	t.Helper()
	if doc.Timing == nil || doc.Timing.Rounds != len(doc.Lineage.Rounds) || doc.Timing.RoundsPerHour <= 0 {
		t.Errorf("timing summary %+v for %d rounds", doc.Timing, len(doc.Lineage.Rounds))
	}
	for _, r := range doc.Lineage.Rounds {
		tm := r.Timing
		if tm == nil {
			t.Errorf("round %d has no timing", r.Round)
			continue
		}
		parts := tm.Grad.Seconds + tm.Apply.Seconds + tm.Eval.Seconds + tm.DriverSeconds
		evaluated := r.Evaluation != ""
		ok := tm.Grad.Seconds > 0 && tm.Apply.Seconds > 0 && (tm.Eval.Seconds > 0) == evaluated && tm.DriverSeconds >= 0 && math.Abs(parts-r.Seconds) < 0.02 &&
			tm.Grad.TaskSeconds <= tm.Grad.Seconds && tm.Apply.TaskSeconds <= tm.Apply.Seconds && tm.Eval.TaskSeconds <= tm.Eval.Seconds &&
			tm.OverheadShare >= 0 && tm.OverheadShare < 1
		if alone {
			ok = ok && tm.Grad.TaskSeconds > 0 && tm.Apply.TaskSeconds > 0 && (tm.Eval.TaskSeconds > 0) == evaluated && tm.OverheadShare > 0
		} else {
			ok = ok && tm.taskSeconds() == 0
		}
		if !ok {
			t.Errorf("round %d (%.2fs): timing %+v", r.Round, r.Seconds, *tm)
		}
	}
}

// TestTrainPlotPNG draws the PNG plot of 60 made-up rounds whose loss
// falls and whose accuracy rises: a 720×560 picture with a red line that
// starts high in the upper panel and a blue one that starts low in the
// lower panel. IDLEPOOL_PLOT_DIR=DIR also writes it there to look at.
func TestTrainPlotPNG(t *testing.T) {
	var rounds []trainRound
	for k := 1; k <= 60; k++ {
		f := float64(k-1) / 59
		acc := 0.1 + 0.75*math.Sqrt(f)
		rounds = append(rounds, trainRound{Round: k, Loss: 2.3 - 1.9*math.Sqrt(f), Accuracy: &acc})
	}
	b, err := trainPNG("made-up", rounds)
	if err != nil {
		t.Fatal(err)
	}
	if dir := os.Getenv("IDLEPOOL_PLOT_DIR"); dir != "" {
		os.WriteFile(filepath.Join(dir, "training.png"), b, 0o644)
		os.WriteFile(filepath.Join(dir, "training.svg"), []byte(trainSVG("made-up", rounds)), 0o644)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if got := img.Bounds().Size(); got != image.Pt(720, 560) {
		t.Fatalf("size %v, want 720×560", got)
	}
	// The first round's column: where its line is in each panel.
	lossTop, accTop := pngTop+20, pngTop+20+pngPanelH+pngPanelGap
	find := func(want color.RGBA, x, y0, y1 int) int {
		for y := y0; y <= y1; y++ {
			if color.RGBAModel.Convert(img.At(x, y)) == want {
				return y
			}
		}
		return -1
	}
	if y := find(color.RGBA{0xc0, 0x39, 0x2b, 0xff}, pngLeft+1, lossTop-2, lossTop+pngPanelH); y < 0 || y > lossTop+3 {
		t.Errorf("the loss line at round 1 is at y %d, want the top of its panel (%d)", y, lossTop)
	}
	if y := find(color.RGBA{0x24, 0x71, 0xa3, 0xff}, pngLeft+1, accTop, accTop+pngPanelH+2); y < accTop+pngPanelH-3 {
		t.Errorf("the accuracy line at round 1 is at y %d, want the bottom of its panel (%d)", y, accTop+pngPanelH)
	}
	// Text was drawn: dark pixels left of the panels (the axis labels).
	dark := 0
	for y := range 560 {
		for x := range pngLeft - 4 {
			if r, _, _, _ := img.At(x, y).RGBA(); r < 0x4000 {
				dark++
			}
		}
	}
	if dark < 200 {
		t.Errorf("%d dark pixels beside the panels: no axis labels", dark)
	}
	// The last round's label stays inside the picture, four digits too:
	// no text in the last columns (the panels end 30 pixels before).
	late := slices.Clone(rounds)
	for i := range late {
		late[i].Round += 940
	}
	if b, err = trainPNG("made-up", late); err != nil {
		t.Fatal(err)
	}
	if img, err = png.Decode(bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
	for y := range 560 {
		for x := 720 - 8; x < 720; x++ {
			if r, _, _, _ := img.At(x, y).RGBA(); r < 0x4000 {
				t.Fatalf("text at (%d, %d), at the picture's right edge: the label \"round 1000\" is cut off", x, y)
			}
		}
	}
	if svg := trainSVG("made-up", late); !strings.Contains(svg, `text-anchor="end">round 1000<`) {
		t.Errorf("the SVG's last round label does not end at the panel's edge:\n%s", svg)
	}
}

// TestTrainResumesAfterKill kills the driver (SIGKILL) once round 1 is
// finished and runs it again: it does not compute round 1 again and ends
// with the model of an uninterrupted run.
func TestTrainResumesAfterKill(t *testing.T) {
	t.Parallel() // mostly waits on its subprocesses
	data := smallFashion(t)
	train := writeTrainFile(t, "fashion", data, 2, "", "")
	want, _ := trainJSON(t, t.TempDir(), train, "--dir", filepath.Join(t.TempDir(), "ref"))

	home, dir := t.TempDir(), filepath.Join(t.TempDir(), "state")
	shareCompiled(t, home)
	cmd := exec.CommandContext(t.Context(), binPath, "--home", home, "train", train, "--dir", dir, "--workers", "2")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stderr)
	killed := false
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "round 1/3:") {
			cmd.Process.Signal(syscall.SIGKILL)
			killed = true
			break
		}
	}
	go io.Copy(io.Discard, stderr)
	cmd.Wait()
	if !killed {
		t.Fatal("the driver never finished round 1")
	}
	// The plots show the finished round while it trains.
	for _, p := range []string{"training.svg", "training.png"} {
		if b, err := os.ReadFile(filepath.Join(dir, p)); err != nil || !bytes.Contains(b, []byte("svg")) && !bytes.HasPrefix(b, []byte("\x89PNG")) {
			t.Errorf("after round 1: %s: %v", p, err)
		}
	}
	got, out := trainJSON(t, home, train, "--dir", dir)
	if !strings.Contains(out.stderr, "rounds 1..1 already finished") || strings.Contains(out.stderr, "small-grad-1 ") {
		t.Errorf("the second run did not go on from round 2:\n%s", out.stderr)
	}
	if got.SHA256 != want.SHA256 {
		t.Errorf("model after a kill and a resume %s, uninterrupted %s", got.SHA256, want.SHA256)
	}
}

// TestTrainBadInput: each mistake stops the training with a message that
// names the round and what is wrong, and keeps the last good model.
func TestTrainBadInput(t *testing.T) {
	t.Parallel()
	data := smallFashion(t)
	badModel := filepath.Join(t.TempDir(), "bad.bin")
	if err := os.WriteFile(badModel, make([]byte, 100), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name          string
		program       string
		extra, params string
		want          []string
		lastGoodRound int
	}{
		{"model of the wrong size", "fashion", fmt.Sprintf("model = %q", badModel), "",
			[]string{"round 1: the shards' updates failed", "model: 100 bytes, want 188416"}, 0},
		{"data set of another shape", "fashion", "", "features = 780\nclasses = 10\nbatch = 120\nlr = 0.01\n",
			[]string{"round 1: the shards' updates failed", "train_images: 28×28 = 784 pixels per image, the training declares features = 780"}, 0},
		{"apply program fails", "badapply", "", "x = 1\n",
			[]string{"round 2: the update step failed", "the optimizer state is corrupt"}, 1},
		{"learning rate diverges", "fashion", "evaluate_every = 2", "features = 784\nclasses = 10\nbatch = 120\nlr = 1e300\n",
			[]string{"round 2: the shards' updates failed", "the model diverged"}, 1},
		{"learning rate diverges on the held-out set", "fashion", "", "features = 784\nclasses = 10\nbatch = 120\nlr = 1e300\n",
			[]string{"round 1: the evaluation failed", "held-out example", "the model diverged (a smaller lr may help)"}, 0},
		{"misspelt param", "fashion", "", "features = 784\nclasses = 10\nbacth = 120\nlr = 0.01\n",
			[]string{"round 1: the shards' updates failed", "got batch 0", "check the training file's [params]"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "state")
			out := idlepool(t, t.TempDir(), "train", writeTrainFile(t, tc.program, data, 2, tc.extra, tc.params), "--dir", dir, "--workers", "2")
			if out.code != 1 {
				t.Fatalf("exit %d, want 1\n%s", out.code, out.stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(out.stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, out.stderr)
				}
			}
			good := filepath.Join(dir, "models", fmt.Sprintf("round-%04d.bin", tc.lastGoodRound))
			says := "the last good model is " + good
			if tc.lastGoodRound == 0 { // nothing has checked the first model yet
				says = "no round has finished; the first model is " + good
			}
			if !strings.Contains(out.stderr, says) {
				t.Errorf("stderr lacks %q:\n%s", says, out.stderr)
			}
			if strings.Contains(out.stderr, "MANIFEST") {
				t.Errorf("the hint names no manifest of the training's:\n%s", out.stderr)
			}
			if _, err := os.Stat(good); err != nil {
				t.Errorf("last good model: %v", err)
			}
			if _, err := os.Stat(filepath.Join(dir, "models", fmt.Sprintf("round-%04d.bin", tc.lastGoodRound+1))); err == nil {
				t.Errorf("a model of the failed round %d was written", tc.lastGoodRound+1)
			}
		})
	}
}

// TestTrainFixedFileStartsAgain: a training whose round 1 failed (a
// misspelt param) trains in the same directory once the file is fixed,
// as the failure's hint says; a directory with a finished round keeps
// refusing another file.
func TestTrainFixedFileStartsAgain(t *testing.T) {
	t.Parallel()
	data := smallFashion(t)
	dir, home := filepath.Join(t.TempDir(), "state"), t.TempDir()
	bad := writeTrainFile(t, "fashion", data, 2, "", "features = 784\nclasses = 10\nbacth = 120\nlr = 0.01\n")
	if out := idlepool(t, home, "train", bad, "--rounds", "1", "--dir", dir); out.code != 1 || !strings.Contains(out.stderr, "round 1: the shards' updates failed") {
		t.Fatalf("the misspelt param: exit %d, want 1 and round 1 failed:\n%s", out.code, out.stderr)
	}
	fixed := writeTrainFile(t, "fashion", data, 2, "", "")
	out := idlepool(t, home, "train", fixed, "--rounds", "1", "--dir", dir)
	if out.code != 0 || !strings.Contains(out.stderr, "starting again") {
		t.Fatalf("the fixed file in the same directory: exit %d, want 0 and \"starting again\":\n%s", out.code, out.stderr)
	}
	other := writeTrainFile(t, "fashion", data, 2, "", "features = 784\nclasses = 10\nbatch = 120\nlr = 0.02\n")
	if out := idlepool(t, home, "train", other, "--rounds", "2", "--dir", dir); out.code == 0 || !strings.Contains(out.stderr, "holds a training of another training file") {
		t.Errorf("another file over a finished round: exit %d, want a refusal:\n%s", out.code, out.stderr)
	}
}

// TestTrainMissingFile: a program, an input or a first model that the
// training file names and that is not there is named in the training
// file's words before any job runs.
func TestTrainMissingFile(t *testing.T) {
	t.Parallel()
	data := smallFashion(t)
	for _, tc := range []struct{ name, key, old, new, extra string }{
		{"input", "inputs.train_images", "train-images-idx3-ubyte", "train-images-idx3-ubyte.missing", ""},
		{"program", "program", `"prog.wasm"`, `"prog-missing.wasm"`, ""},
		{"model", "model", "", "", `model = "start.bin"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			train := writeTrainFile(t, "fashion", data, 2, tc.extra, "")
			b, err := os.ReadFile(train)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(train, bytes.Replace(b, []byte(tc.old), []byte(tc.new), 1), 0o644); err != nil {
				t.Fatal(err)
			}
			out := idlepool(t, t.TempDir(), "train", train, "--dir", filepath.Join(t.TempDir(), "state"))
			want := train + ": " + tc.key + ": file "
			if out.code != 1 || !strings.Contains(out.stderr, want) || !strings.Contains(out.stderr, "does not exist") {
				t.Errorf("exit %d, want 1 and %q ... does not exist:\n%s", out.code, want, out.stderr)
			}
			if strings.Contains(out.stderr, "job ") {
				t.Errorf("a job ran before the missing file was named:\n%s", out.stderr)
			}
		})
	}
}

// TestTrainPoolMatchesSolo trains 3 rounds on a pool of 3 agents of 2
// owners (two devices share an owner key) and alone, side by side: the
// models are the same bytes, and so are the rounds' job IDs and held-out
// figures (the pool computes the evaluation's 3 tasks in parallel).
func TestTrainPoolMatchesSolo(t *testing.T) {
	t.Parallel() // mostly waits on the pool
	data := smallFashion(t)
	train := writeTrainFile(t, "fashion", data, 3, "", "")
	var (
		solo, pooled trainOut
		out          runOut
		wg           sync.WaitGroup
	)
	// Not as parallel subtests: those would wait for slots behind the
	// package's other parallel tests, and run last.
	wg.Go(func() {
		solo, _ = trainJSON(t, t.TempDir(), train, "--dir", filepath.Join(t.TempDir(), "solo"))
	})
	wg.Go(func() {
		_, url := startServe(t, t.TempDir(), "127.0.0.1:0")
		shared := filepath.Join(t.TempDir(), "owner.key")
		if _, err := identity.LoadOrCreate(shared); err != nil {
			t.Error(err)
			return
		}
		for i := range 3 {
			var extra []string
			if i >= 1 {
				extra = []string{"--owner-key", shared}
			}
			startJoin(t, filepath.Join(t.TempDir(), fmt.Sprintf("agent%d", i)), url, extra...)
		}
		pooled, out = trainJSON(t, t.TempDir(), train, "--pool", url, "--dir", filepath.Join(t.TempDir(), "pooled"))
	})
	wg.Wait()
	if t.Failed() {
		return
	}
	if pooled.SHA256 != solo.SHA256 {
		t.Fatalf("pooled model %s, solo model %s\n%s", pooled.SHA256, solo.SHA256, out.stderr)
	}
	for i, r := range pooled.Lineage.Rounds {
		if s := solo.Lineage.Rounds[i]; r.Job != s.Job || r.Apply != s.Apply || r.Evaluation != s.Evaluation || r.Model != s.Model ||
			r.Accuracy == nil || s.Accuracy == nil || *r.Accuracy != *s.Accuracy || r.TestLoss == nil || s.TestLoss == nil || *r.TestLoss != *s.TestLoss {
			t.Errorf("round %d: pooled %+v, solo %+v", r.Round, r, s)
		}
	}
}

// trainCheck skips a long training test unless IDLEPOOL_TRAIN_CHECK is
// set (make train-check, docs/building.md).
func trainCheck(t *testing.T) {
	t.Helper()
	if os.Getenv("IDLEPOOL_TRAIN_CHECK") == "" {
		t.Skip("long: run with IDLEPOOL_TRAIN_CHECK=1 (make train-check)")
	}
}

// startPoisoner starts testdata/liar (built into bin) on the pool url in
// poison mode: it computes every task it is leased honestly, then returns
// the update changed by mode. It returns the path of its log.
func startPoisoner(t *testing.T, bin, url, mode string) string {
	t.Helper()
	log := filepath.Join(t.TempDir(), "poisoner.log")
	logf, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	p := exec.Command(bin, "-pool", url, "-dir", t.TempDir(), "-honest", "0", "-poison", mode)
	p.Stderr = logf
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Process.Kill()
		p.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(log)
			t.Logf("poisoner %s's log:\n%s", mode, b)
		}
	})
	return log
}

// TestTrainPoolRefusesPoison: real processes. Beside three honest donors
// of three owners, a donor of its own owner returns a poisoned update
// (its honest update negated, scaled by 4, or random numbers, each in
// turn) for every shard of a training round it is leased (the first
// model and the update step it computes honestly). Each poisoned update
// is a disagreement like any other: it is outvoted, its device gets a
// deviation in the ledger and no receipt for it, and the pooled round's
// job and model are byte for byte the solo run's.
//
// Three poisoners of three owners beside two honest donors, tried first,
// were not outvoted: each task drew four different answers within its
// six replicas and failed as unverified, so the round stopped (keeping
// the last good model) rather than take a poisoned update.
func TestTrainPoolRefusesPoison(t *testing.T) {
	trainCheck(t)
	t.Parallel()
	liarBin := liarBinary(t)
	data := smallFashion(t)
	train := writeTrainFile(t, "fashion", data, 6, "", "")
	solo, _ := trainJSON(t, t.TempDir(), train, "--rounds", "2", "--dir", filepath.Join(t.TempDir(), "solo"))

	_, url := startServe(t, t.TempDir(), "127.0.0.1:0")
	logs := map[string]string{"cycle": startPoisoner(t, liarBin, url, "cycle")}
	// The training starts with the poisoner alone in the pool: it computes
	// the first model (honestly: it has no update), so it has compiled
	// the program before the honest donors join, which would otherwise
	// often decide every shard while it compiles.
	cmd := exec.CommandContext(t.Context(), binPath, "--home", t.TempDir(), "train", train, "--json", "--workers", "2",
		"--rounds", "2", "--pool", url, "--dir", filepath.Join(t.TempDir(), "pooled"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for deadline := patient(t); ; time.Sleep(50 * time.Millisecond) {
		if b, _ := os.ReadFile(logs["cycle"]); bytes.Contains(b, []byte(": honest\n")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the poisoner never computed the first model")
		}
	}
	for i := range 3 {
		startJoin(t, filepath.Join(t.TempDir(), fmt.Sprintf("honest%d", i)), url)
	}
	if err := <-done; err != nil {
		t.Fatalf("train --pool: %v\n%s", err, stderr.String())
	}
	var pooled trainOut
	if err := json.Unmarshal(stdout.Bytes(), &pooled); err != nil {
		t.Fatalf("train --json: %v\n%s", err, stdout.String())
	}
	if pooled.SHA256 != solo.SHA256 {
		t.Fatalf("pooled model %s, solo model %s\n%s", pooled.SHA256, solo.SHA256, stderr.String())
	}
	for i, r := range pooled.Lineage.Rounds {
		if s := solo.Lineage.Rounds[i]; r.Job != s.Job || r.Model != s.Model {
			t.Errorf("round %d: pooled %+v, solo %+v", r.Round, r, s)
		}
	}
	deviations, receipts := map[string]int{}, map[string]bool{}
	for _, e := range fetchLedger(t, url) {
		switch e.Kind {
		case "deviation":
			deviations[e.Peer]++
		case "receipt":
			receipts[e.Lease] = true
		}
	}
	poisoned := 0
	for mode, log := range logs {
		b, _ := os.ReadFile(log)
		dev := regexp.MustCompile(`liar: device (\S+) `).FindSubmatch(b)
		lies := regexp.MustCompile(`lease ([0-9a-f]+): lie`).FindAllSubmatch(b, -1)
		if dev == nil || len(lies) == 0 {
			t.Logf("poisoner %s returned no poisoned update", mode)
			continue
		}
		poisoned++
		devs := deviations[string(dev[1])]
		if devs == 0 {
			t.Errorf("poisoner %s returned %d poisoned updates and has no deviation in the ledger", mode, len(lies))
		}
		for _, l := range lies {
			if receipts[string(l[1])] {
				t.Errorf("poisoner %s earned a receipt for its poisoned update (lease %s)", mode, l[1])
			}
		}
		t.Logf("poisoner %s: %d poisoned updates, %d deviations", mode, len(lies), devs)
	}
	if poisoned == 0 {
		t.Fatal("no poisoner returned a poisoned update: nothing was tested")
	}
}

// TestTrainMLPShardInvariant trains 3 rounds of the perceptron example
// (a hidden layer of 32 units) with 1 and 5 shards: the same model bytes,
// and the loss falls.
func TestTrainMLPShardInvariant(t *testing.T) {
	trainCheck(t)
	t.Parallel()
	data := smallFashion(t)
	params := "features = 784\nclasses = 10\nhidden = 32\nseed = 3\nbatch = 120\nlr = 0.003\n"
	models := make([]string, 2)
	var wg sync.WaitGroup
	for i, shards := range []int{1, 5} {
		wg.Go(func() {
			doc, _ := trainJSON(t, t.TempDir(), writeTrainFile(t, "fashion", data, shards, "", params))
			models[i] = doc.SHA256
			if rs := doc.Lineage.Rounds; len(rs) != 3 || rs[2].Loss >= rs[0].Loss {
				t.Errorf("%d shards: lineage %+v", shards, rs)
			}
		})
	}
	wg.Wait()
	if models[0] != models[1] {
		t.Fatalf("models after 3 rounds with 1 and 5 shards differ: %v", models)
	}
}

// TestTrainPoolResumesAfterKill trains on a pool, kills the driver
// (SIGKILL) once round 1 is finished and runs it again: it goes on from
// round 2 without submitting round 1 again and ends with the solo run's
// model.
func TestTrainPoolResumesAfterKill(t *testing.T) {
	trainCheck(t)
	t.Parallel()
	data := smallFashion(t)
	train := writeTrainFile(t, "fashion", data, 2, "", "")
	solo, _ := trainJSON(t, t.TempDir(), train, "--dir", filepath.Join(t.TempDir(), "solo"))

	_, url := startServe(t, t.TempDir(), "127.0.0.1:0")
	for i := range 2 {
		startJoin(t, filepath.Join(t.TempDir(), fmt.Sprintf("agent%d", i)), url)
	}
	home, dir := t.TempDir(), filepath.Join(t.TempDir(), "state")
	shareCompiled(t, home)
	cmd := exec.CommandContext(t.Context(), binPath, "--home", home, "train", train, "--pool", url, "--dir", dir)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stderr)
	killed := false
	var before []string
	for sc.Scan() {
		before = append(before, sc.Text())
		if strings.HasPrefix(sc.Text(), "round 1/3:") {
			cmd.Process.Signal(syscall.SIGKILL)
			killed = true
			break
		}
	}
	go io.Copy(io.Discard, stderr)
	cmd.Wait()
	if !killed {
		t.Fatalf("the driver never finished round 1:\n%s", strings.Join(before, "\n"))
	}
	got, out := trainJSON(t, home, train, "--pool", url, "--dir", dir)
	if !strings.Contains(out.stderr, "rounds 1..1 already finished") || strings.Contains(out.stderr, "job small-grad-1 (") ||
		!strings.Contains(out.stderr, "job small-grad-2 (") {
		t.Errorf("the second run did not go on from round 2:\n%s", out.stderr)
	}
	if got.SHA256 != solo.SHA256 {
		t.Errorf("model after a kill and a resume on the pool %s, solo %s\n%s", got.SHA256, solo.SHA256, out.stderr)
	}
	for i, r := range got.Lineage.Rounds {
		if s := solo.Lineage.Rounds[i]; r.Job != s.Job || r.Model != s.Model {
			t.Errorf("round %d: resumed on the pool %+v, solo %+v", r.Round, r, s)
		}
	}
}

// TestTrainTimingSummary: the mean split of the rounds with a timing, the
// rounds an hour, and the words under the table, alone and on a pool.
func TestTrainTimingSummary(t *testing.T) {
	alone := []trainRound{
		{Round: 1}, // finished before timing was recorded
		{Round: 2, Seconds: 10, Timing: &roundTiming{Grad: jobTiming{6, 5}, Apply: jobTiming{2.5, 1.5}, Eval: jobTiming{1, 0.5}, DriverSeconds: 0.5}},
		{Round: 3, Seconds: 8, Timing: &roundTiming{Grad: jobTiming{4, 3}, Apply: jobTiming{3.5, 2}, DriverSeconds: 0.5}}, // not evaluated
	}
	s := summarize(alone)
	want := timingSummary{Rounds: 2, Seconds: 18, RoundsPerHour: 400,
		Mean: roundTiming{Grad: jobTiming{5, 4}, Apply: jobTiming{3, 1.75}, Eval: jobTiming{0.5, 0.25}, DriverSeconds: 0.5, OverheadShare: 0.333}}
	if s == nil || *s != want {
		t.Fatalf("summary %+v, want %+v", s, want)
	}
	var b strings.Builder
	printTiming(&b, s)
	if got := b.String(); !strings.Contains(got, "2 rounds in 18.0s (400 rounds an hour)") ||
		!strings.Contains(got, "shards' job 5.00s (tasks running 4.00s), update step 3.00s (tasks running 1.75s), evaluation 0.50s (tasks running 0.25s), driver 0.50s; no task running 33% of the time") {
		t.Errorf("alone:\n%s", got)
	}
	pooled := []trainRound{{Round: 1, Seconds: 10, Timing: &roundTiming{Grad: jobTiming{Seconds: 6}, Apply: jobTiming{Seconds: 2.9}, Eval: jobTiming{Seconds: 1}, DriverSeconds: 0.1}}}
	b.Reset()
	printTiming(&b, summarize(pooled))
	if got := b.String(); strings.Contains(got, "tasks running") || !strings.Contains(got, "shards' job 6.00s, update step 2.90s, evaluation 1.00s (each: submitted") {
		t.Errorf("on a pool:\n%s", got)
	}
	if summarize(alone[:1]) != nil {
		t.Error("a summary of rounds without timing")
	}
}

// TestTrainAccuracyLine: the table ends with the last measured held-out
// accuracy and the best, skipping rounds without one; nothing when no
// round has one.
func TestTrainAccuracyLine(t *testing.T) {
	acc := func(v float64) *float64 { return &v }
	rounds := []trainRound{{Round: 1, Accuracy: acc(0.5)}, {Round: 2, Accuracy: acc(0.8712)}, {Round: 3}, {Round: 4, Accuracy: acc(0.87)}, {Round: 5}}
	if got, want := accuracyLine(rounds), "held-out accuracy: 87.00% after round 4 (best 87.12% after round 2)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := accuracyLine(rounds[2:3]); got != "" {
		t.Errorf("no measured round: got %q", got)
	}
}

// TestDecodeRunDocKeepsIntegers: a job's merged integer sums beyond 2^53
// reach the update step and the evaluation as written, not rounded to
// the nearest float64.
func TestDecodeRunDocKeepsIntegers(t *testing.T) {
	doc, err := decodeRunDoc([]byte(`{"job": "x", "result": {"update": {"count": 2, "sum": [1152921504606846977, -9007199254740993]}}, "failures": []}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(doc.Result)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"update":{"count":2,"sum":[1152921504606846977,-9007199254740993]}}`; string(b) != want {
		t.Errorf("merged result %s, want %s", b, want)
	}
}

// TestTrainFileRequirements: a training file's [requirements] (the GPU
// variant of the perceptron, examples/fashion/mlp-gpu.toml) goes into each
// round's grad job, whose shards a GPU can take, and into none of the
// other jobs; without it the grad job asks for nothing.
// TestTrainFileUnknownKey: a misspelt key of a training file is named,
// with every key a training file may have.
func TestTrainFileUnknownKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.toml")
	if err := os.WriteFile(path, []byte("name = \"t\"\nprogram = \"p.wasm\"\nshards = 2\nevaluate_evry = 5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := loadTrainFile(path)
	ue, ok := err.(*userError)
	if !ok {
		t.Fatalf("loadTrainFile: %v, want a userError", err)
	}
	if !strings.Contains(ue.Msg, "evaluate_evry") || !strings.Contains(ue.Msg, "unknown field") {
		t.Errorf("message %q does not name the unknown key", ue.Msg)
	}
	for _, k := range []string{"name", "description", "program", "rounds", "shards", "evaluate_every", "evaluate_shards", "model", "[inputs]", "[params]", "[policy]", "[requirements]"} {
		if !strings.Contains(ue.Hint, k) {
			t.Errorf("hint %q lacks %s", ue.Hint, k)
		}
	}
}

func TestTrainFileRequirements(t *testing.T) {
	tf, err := loadTrainFile(filepath.Join("..", "..", "examples", "fashion", "mlp-gpu.toml"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for k := range tf.Inputs {
		tf.Inputs[k] = filepath.Join(dir, k) // the data set and the PTX need not exist here
		if err := os.WriteFile(tf.Inputs[k], []byte(k), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "model.bin"), []byte("m"), 0o644); err != nil {
		t.Fatal(err)
	}
	extra := map[string]string{"model": filepath.Join(dir, "model.bin"), "update": filepath.Join(dir, "model.bin")}
	gpuOf := func(tf *trainFile, mode string) string {
		t.Helper()
		path := filepath.Join(dir, mode+".toml")
		if err := tf.manifest(path, mode, 1, extra); err != nil {
			t.Fatal(err)
		}
		m, err := job.LoadManifest(path)
		if err != nil {
			t.Fatalf("%s manifest: %v", mode, err)
		}
		if _, ok := m.Inputs["ptx"]; !ok && mode != "init" {
			t.Errorf("the %s job lacks the input ptx", mode)
		}
		return fmt.Sprint(m.Requirements.GPU)
	}
	got := map[string]string{}
	for _, mode := range []string{"grad", "apply", "eval"} {
		got[mode] = gpuOf(tf, mode)
	}
	none := fmt.Sprint(job.GPUNeed{})
	want := map[string]string{"grad": fmt.Sprint(job.GPUOptional), "apply": none, "eval": none}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("requirements.gpu per job (-want +got):\n%s", d)
	}
	tf.Requirements = nil
	if g := gpuOf(tf, "grad"); g != none {
		t.Errorf("without [requirements] the grad job asks for gpu %s", g)
	}
}

// A missing program's hint names the make target that builds a bundled
// example (make examples does not build the training examples), and how
// to build one's own program otherwise.
func TestTrainBuildHint(t *testing.T) {
	sep := string(filepath.Separator)
	for path, want := range map[string]string{
		filepath.Join(sep+"src", "idlepool", "examples", "fashion", "fashion.wasm"): "build it first: from the checkout, `make examples/fashion/fashion.wasm`",
		filepath.Join(sep+"home", "me", "mine", "prog.wasm"):                        "build it first (GOOS=wasip1 GOARCH=wasm go build, or examples/build-guest.sh for C and Rust)",
	} {
		if got := buildHint(path); got != want {
			t.Errorf("buildHint(%q) = %q, want %q", path, got, want)
		}
	}
}

// A value of the wrong type in a training file is named at its line and
// column, in the file's terms, not the decoder's Go types.
func TestTrainFileWrongType(t *testing.T) {
	path := filepath.Join(t.TempDir(), "train.toml")
	if err := os.WriteFile(path, []byte("name = \"x\"\nprogram = \"p.wasm\"\nshards = \"4\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := loadTrainFile(path)
	if want := path + ":3:10: shards: want an integer, got a TOML string"; err == nil || err.Error() != want {
		t.Errorf("loadTrainFile = %v, want %q", err, want)
	}
}
