// Command fashion is an idlepool training program: softmax (multinomial
// logistic) regression on Fashion-MNIST, trained round by round with
// `idlepool train` (docs/author.md, "Training"). One WebAssembly module
// plays four parts, chosen by params.mode:
//
//   - "init": the first model, all zeros.
//   - "grad": one shard of round params.round's batch. It returns the
//     shard's exact contribution as fixed-point integers, {"update":
//     [...]}, which the vector-sum rule adds exactly: the summed gradient
//     of the cross-entropy over the shard's examples, then the summed
//     loss and the number of examples.
//   - "apply": the optimizer (Adam, Kingma and Ba 2015) turns the merged
//     update and the old model into the new model: {"model": "...",
//     "loss": L}, L the round's training loss.
//   - "eval": one shard of the held-out set (task i of params.shards
//     takes examples [i·n/shards, (i+1)·n/shards)) under the model:
//     {"eval": [right, examples, loss]}, the examples classified right,
//     the examples, and their summed cross-entropy in fixed point at
//     2^-32, which the vector-sum rule adds exactly; no held-out set
//     gives [0, 0, 0].
//
// The model is the model file's bytes in base64 (RFC 4648, with
// padding) in a result, and the file is float64 little-endian: the weights W[j][k] (feature j,
// class k, row-major), the biases b[k], Adam's first and second moments of
// each of those, and the running powers β1^t and β2^t: 3·P+2 numbers, P =
// features·classes + classes.
//
// Exactness: each example's error p_k − y_k is rounded once to a multiple
// of 2^-30 and multiplied by the pixel's integer value 0..255, so the
// gradient is a sum of integers, the same for any cut into shards. The
// forward pass, exp and log run in one fixed order (package exact), so
// every device computes the same errors.
package main

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"

	"idlepool/examples/internal/exact"
	"idlepool/examples/internal/task"
)

// Fixed-point scales: an example's error is a multiple of 2^-gradBits,
// its loss of 2^-lossBits.
const (
	gradBits = 30
	lossBits = 32
	// maxLoss bounds one example's loss: beyond it the model has
	// diverged.
	maxLoss = 1 << 20
)

// params are what the training file's [params] and the driver hand every
// task.
type params struct {
	Mode     string  `json:"mode"`     // init, grad, apply or eval
	Round    int     `json:"round"`    // 1-based
	Shards   int     `json:"shards"`   // tasks of a grad or eval job
	Features int     `json:"features"` // pixels per image
	Classes  int     `json:"classes"`
	Batch    int     `json:"batch"` // examples per round
	LR       float64 `json:"lr"`
	// LREnd and DecayRounds make the learning rate fall linearly from
	// LR in round 1 to LREnd in round DecayRounds+1, and stay there;
	// DecayRounds 0 keeps LR.
	LREnd       float64 `json:"lr_end"`
	DecayRounds int     `json:"decay_rounds"`
	Beta1       float64 `json:"beta1"`
	Beta2       float64 `json:"beta2"`
	Eps         float64 `json:"eps"`
	// Hidden is the number of hidden units of the multilayer perceptron
	// (mlp.go); 0 is softmax regression.
	Hidden int `json:"hidden"`
	// Seed draws the perceptron's first weights: the same seed, the same
	// first model, whatever the other params.
	Seed uint64 `json:"seed"`
}

// maxHidden bounds params.hidden.
const maxHidden = 4096

func main() { os.Exit(task.Run(os.Stdin, os.Stdout, os.Stderr, compute)) }

func compute(t task.Task) (any, error) {
	p := params{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}
	if err := t.DecodeParams(&p); err != nil {
		return nil, err
	}
	if p.Features < 1 || p.Classes < 2 {
		return nil, fmt.Errorf("params: features must be >= 1 and classes >= 2, got %d and %d", p.Features, p.Classes)
	}
	if p.DecayRounds < 0 {
		return nil, fmt.Errorf("params: decay_rounds must be >= 0 (0: a constant lr), got %d", p.DecayRounds)
	}
	if p.Hidden < 0 || p.Hidden > maxHidden {
		return nil, fmt.Errorf("params: hidden must be 0 (softmax regression) .. %d, got %d", maxHidden, p.Hidden)
	}
	switch p.Mode {
	case "init":
		if p.Hidden > 0 {
			return applyResult{Model: mlpInit(p, p.Seed)}, nil
		}
		return applyResult{Model: make([]float64, 3*p.size()+2)}, nil
	case "grad":
		return grad(t, p)
	case "apply":
		return apply(t, p)
	case "eval":
		return evaluate(t, p)
	}
	return nil, fmt.Errorf("params.mode must be init, grad, apply or eval, got %q", p.Mode)
}

// size is P, the number of parameters.
func (p params) size() int {
	if p.Hidden > 0 {
		return p.Features*p.Hidden + p.Hidden + p.Hidden*p.Classes + p.Classes
	}
	return p.Features*p.Classes + p.Classes
}

// rate is round p.Round's learning rate: LR, falling linearly to LREnd
// over DecayRounds rounds. Only +, −, × and ÷, each correctly rounded:
// the same bits on every host.
func (p params) rate() float64 {
	if p.DecayRounds <= 0 {
		return p.LR
	}
	done := float64(min(p.Round-1, p.DecayRounds)) / float64(p.DecayRounds)
	return p.LR + float64((p.LREnd-p.LR)*done)
}

// pixelWeights is the number of parameters, from index 0, whose gradient
// is summed with the pixels as integers 0..255 (the first layer's
// weights).
func (p params) pixelWeights() int {
	if p.Hidden > 0 {
		return p.Features * p.Hidden
	}
	return p.Features * p.Classes
}

// gradResult is a grad task's result.
type gradResult struct {
	Update []int64 `json:"update"`
}

// applyResult is the apply step's result.
type applyResult struct {
	Model []float64
	Loss  float64
}

// evalResult is an eval task's result: the shard's examples classified
// right, its examples and their summed loss at 2^-lossBits.
type evalResult struct {
	Eval [3]int64 `json:"eval"`
}

// MarshalJSON writes the model as the base64 of its float64
// little-endian bytes: a third of the size of the numbers in decimal, and
// no parsing of 300,000 numbers.
func (r applyResult) MarshalJSON() ([]byte, error) {
	b := make([]byte, 8*len(r.Model))
	for i, f := range r.Model {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(f))
	}
	return json.Marshal(struct {
		Model string  `json:"model"`
		Loss  float64 `json:"loss"`
	}{Model: base64.StdEncoding.EncodeToString(b), Loss: r.Loss})
}

// loadModel reads the model input and checks its size.
func loadModel(t task.Task, p params) ([]float64, error) {
	path, err := t.Input("model")
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	n := 3*p.size() + 2
	if len(b) != 8*n {
		return nil, task.DataError(fmt.Errorf("model: %d bytes, want %d (3·%d parameters + 2, float64 little-endian, for %d features and %d classes)",
			len(b), 8*n, p.size(), p.Features, p.Classes))
	}
	m := make([]float64, n)
	for i := range m {
		m[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return m, nil
}

// dataset is an IDX image file and its label file, opened for reading
// rows (LeCun et al., the MNIST file format).
type dataset struct {
	images, labels *os.File
	n, features    int
}

// openData opens the inputs NAME_images and NAME_labels and checks them
// against the declared shape.
func openData(t task.Task, name string, p params) (*dataset, error) {
	ip, err := t.Input(name + "_images")
	if err != nil {
		return nil, err
	}
	lp, err := t.Input(name + "_labels")
	if err != nil {
		return nil, err
	}
	d := &dataset{}
	if d.images, err = os.Open(ip); err != nil {
		return nil, err
	}
	if d.labels, err = os.Open(lp); err != nil {
		return nil, err
	}
	var h [16]byte
	if _, err := io.ReadFull(d.images, h[:]); err != nil || binary.BigEndian.Uint32(h[:]) != 0x803 {
		return nil, task.DataError(fmt.Errorf("%s_images: not an IDX file of images (magic 0x00000803)", name))
	}
	d.n = int(binary.BigEndian.Uint32(h[4:]))
	rows, cols := int(binary.BigEndian.Uint32(h[8:])), int(binary.BigEndian.Uint32(h[12:]))
	d.features = rows * cols
	if d.features != p.Features {
		return nil, task.DataError(fmt.Errorf("%s_images: %d×%d = %d pixels per image, the training declares features = %d", name, rows, cols, d.features, p.Features))
	}
	if st, err := d.images.Stat(); err == nil && st.Size() != 16+int64(d.n)*int64(d.features) {
		return nil, task.DataError(fmt.Errorf("%s_images: %d bytes, want %d for %d images", name, st.Size(), 16+int64(d.n)*int64(d.features), d.n))
	}
	if _, err := io.ReadFull(d.labels, h[:8]); err != nil || binary.BigEndian.Uint32(h[:]) != 0x801 {
		return nil, task.DataError(fmt.Errorf("%s_labels: not an IDX file of labels (magic 0x00000801)", name))
	}
	if nl := int(binary.BigEndian.Uint32(h[4:])); nl != d.n {
		return nil, task.DataError(fmt.Errorf("%s_labels: %d labels for %d images", name, nl, d.n))
	}
	return d, nil
}

// read returns the pixels and labels of examples [lo, hi).
func (d *dataset) read(lo, hi int, classes int) ([]byte, []byte, error) {
	px := make([]byte, (hi-lo)*d.features)
	if _, err := d.images.ReadAt(px, 16+int64(lo)*int64(d.features)); err != nil {
		return nil, nil, fmt.Errorf("read images %d..%d: %w", lo, hi, err)
	}
	lb := make([]byte, hi-lo)
	if _, err := d.labels.ReadAt(lb, 8+int64(lo)); err != nil {
		return nil, nil, fmt.Errorf("read labels %d..%d: %w", lo, hi, err)
	}
	for i, l := range lb {
		if int(l) >= classes {
			return nil, nil, task.DataError(fmt.Errorf("label of example %d is %d, the training declares %d classes", lo+i, l, classes))
		}
	}
	return px, lb, nil
}

// logits computes z = b + Wᵀx for one image, x_j = pixel_j/255, adding the
// features in ascending order; a zero pixel adds nothing.
func logits(w []float64, p params, px []byte, z []float64) {
	c := p.Classes
	copy(z, w[p.Features*c:p.size()])
	for j, v := range px {
		if v == 0 {
			continue
		}
		x := float64(v) / 255
		row := w[j*c : j*c+c]
		for k := range z {
			z[k] = z[k] + float64(row[k]*x)
		}
	}
}

func grad(t task.Task, p params) (any, error) {
	w, err := loadModel(t, p)
	if err != nil {
		return nil, err
	}
	d, err := openData(t, "train", p)
	if err != nil {
		return nil, err
	}
	if p.Batch < 1 || p.Batch > d.n || p.Shards < 1 || p.Shards > p.Batch || p.Round < 1 {
		return nil, fmt.Errorf("params: want 1 <= batch <= %d examples, 1 <= shards <= batch and round >= 1, got batch %d, shards %d, round %d", d.n, p.Batch, p.Shards, p.Round)
	}
	// Round r takes batch (r-1) mod (n/batch); shard s its s-th slice.
	start := ((p.Round - 1) % (d.n / p.Batch)) * p.Batch
	lo := start + t.Index*p.Batch/p.Shards
	hi := start + (t.Index+1)*p.Batch/p.Shards
	px, lb, err := d.read(lo, hi, p.Classes)
	if err != nil {
		return nil, err
	}
	if p.Hidden > 0 {
		return mlpGrad(t, p, w, px, lb, lo)
	}
	c, f := p.Classes, p.Features
	u := exact.NewVec(p.size() + 2)
	z := make([]float64, c)
	dq := make([]int64, c)
	for e := range lb {
		img := px[e*f : e*f+f]
		logits(w, p, img, z)
		lq, err := crossEntropy(z, int(lb[e]), dq, p.Round, lo+e)
		if err != nil {
			return nil, err
		}
		for k := range dq {
			u.Add(f*c+k, dq[k])
		}
		for j, v := range img {
			if v == 0 {
				continue
			}
			for k := range dq {
				u.Add(j*c+k, int64(v)*dq[k])
			}
		}
		u.Add(p.size(), lq)
	}
	u.Add(p.size()+1, int64(len(lb)))
	if err := u.Err(); err != nil {
		return nil, err
	}
	return gradResult{Update: u.S}, nil
}

// crossEntropy turns the logits z of one example of class y into its
// loss, in fixed point at 2^-lossBits, and its errors p_k − y_k at
// 2^-gradBits into dq; it overwrites z. ex and round name the example in
// errors.
func crossEntropy(z []float64, y int, dq []int64, round, ex int) (int64, error) {
	s, loss := softmaxLoss(z, y)
	if !(loss < maxLoss) {
		return 0, fmt.Errorf("round %d: loss of example %d is %g: the model diverged (a smaller lr may help)", round, ex, loss)
	}
	lq, err := exact.Quantize(loss, lossBits)
	if err != nil {
		return 0, fmt.Errorf("round %d: loss of example %d: %w", round, ex, err)
	}
	for k := range z {
		pk := z[k] / s
		if k == y {
			pk -= 1
		}
		if dq[k], err = exact.Quantize(pk, gradBits); err != nil {
			return 0, fmt.Errorf("round %d: error of example %d: %w", round, ex, err)
		}
	}
	return lq, nil
}

// mergedUpdate is the round's merged result as the driver writes it.
type mergedUpdate struct {
	Update struct {
		Count int64   `json:"count"`
		Sum   []int64 `json:"sum"`
	} `json:"update"`
}

func apply(t task.Task, p params) (any, error) {
	model, err := loadModel(t, p)
	if err != nil {
		return nil, err
	}
	up, err := t.Input("update")
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(up)
	if err != nil {
		return nil, err
	}
	var mu mergedUpdate
	if err := json.Unmarshal(b, &mu); err != nil {
		return nil, task.DataError(fmt.Errorf("update: %w", err))
	}
	P := p.size()
	sum := mu.Update.Sum
	if len(sum) != P+2 || sum[P+1] < 1 {
		return nil, task.DataError(fmt.Errorf("update: %d numbers, want %d with a positive example count", len(sum), P+2))
	}
	n := float64(sum[P+1])
	w, m, v := model[:P], model[P:2*P], model[2*P:3*P]
	b1t := model[3*P] * p.Beta1
	b2t := model[3*P+1] * p.Beta2
	if model[3*P] == 0 { // the first step: β^1
		b1t, b2t = p.Beta1, p.Beta2
	}
	lr := p.rate()
	fw := p.pixelWeights()
	for i := range w {
		g := float64(sum[i]) * (1.0 / (1 << gradBits)) / n
		if i < fw {
			g /= 255 // the pixels were summed as integers 0..255
		}
		m[i] = float64(p.Beta1*m[i]) + float64((1-p.Beta1)*g)
		v[i] = float64(p.Beta2*v[i]) + float64(float64((1-p.Beta2)*g)*g)
		mh := m[i] / (1 - b1t)
		vh := v[i] / (1 - b2t)
		w[i] -= float64(lr*mh) / (math.Sqrt(vh) + p.Eps)
		if math.IsInf(w[i], 0) || math.IsNaN(w[i]) {
			return nil, fmt.Errorf("round %d: parameter %d became %g: the learning rate %g diverges", p.Round, i, w[i], lr)
		}
	}
	model[3*P], model[3*P+1] = b1t, b2t
	loss := float64(sum[P]) * (1.0 / (1 << lossBits)) / n
	return applyResult{Model: model, Loss: loss}, nil
}

// evaluate is an eval task: task t.Index of p.Shards takes its slice of
// the held-out set and counts the examples the model classifies right
// (the highest logit; ties go to the lower class) and sums their
// cross-entropy at 2^-lossBits. Counts and fixed-point sums add up the
// same for any cut into shards, so the merged figures do not depend on
// p.Shards. No held-out set (no test_images input) gives zeros.
func evaluate(t task.Task, p params) (any, error) {
	w, err := loadModel(t, p)
	if err != nil {
		return nil, err
	}
	d, err := openData(t, "test", p)
	if errors.Is(err, task.ErrNoInput) {
		return evalResult{}, nil
	}
	if err != nil {
		return nil, err
	}
	if p.Shards < 1 || t.Index >= p.Shards {
		return nil, fmt.Errorf("params: want shards >= 1 and a task index below it, got shards %d, index %d", p.Shards, t.Index)
	}
	lo, hi := t.Index*d.n/p.Shards, (t.Index+1)*d.n/p.Shards
	px, lb, err := d.read(lo, hi, p.Classes)
	if err != nil {
		return nil, err
	}
	z := make([]float64, p.Classes)
	var m *mlp
	if p.Hidden > 0 {
		m = newMLP(p, w)
	}
	u := exact.NewVec(3)
	for e, y := range lb {
		img := px[e*p.Features : (e+1)*p.Features]
		if m != nil {
			m.forward(img, z)
		} else {
			logits(w, p, img, z)
		}
		best := 0
		for k, v := range z {
			if v > z[best] {
				best = k
			}
		}
		if best == int(y) {
			u.Add(0, 1)
		}
		lq, err := heldOutLoss(z, int(y))
		if err != nil {
			return nil, fmt.Errorf("round %d: held-out example %d: %w", p.Round, lo+e, err)
		}
		u.Add(2, lq)
	}
	u.Add(1, int64(len(lb)))
	if err := u.Err(); err != nil {
		return nil, fmt.Errorf("round %d: held-out loss: %w (the model diverged; a smaller lr may help)", p.Round, err)
	}
	return evalResult{Eval: [3]int64(u.S)}, nil
}

// softmaxLoss turns the logits z of one example of class y into
// e^(z_k − max z), in z, their sum s and the example's cross-entropy,
// in one fixed order.
func softmaxLoss(z []float64, y int) (s, loss float64) {
	m := z[0]
	for _, v := range z[1:] {
		m = math.Max(m, v)
	}
	for k := range z {
		z[k] = exact.Exp(z[k] - m)
		s += z[k]
	}
	return s, exact.Log(s) - exact.Log(z[y])
}

// heldOutLoss is the cross-entropy of the logits z for class y, in
// fixed point at 2^-lossBits, the same figure a grad task sums; it
// overwrites z.
func heldOutLoss(z []float64, y int) (int64, error) {
	_, loss := softmaxLoss(z, y)
	if !(loss < maxLoss) {
		return 0, fmt.Errorf("loss %g: the model diverged (a smaller lr may help)", loss)
	}
	return exact.Quantize(loss, lossBits)
}
