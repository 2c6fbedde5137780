package main

// The multilayer perceptron: params.hidden > 0 gives one hidden layer of
// that many rectified linear units (ReLU) between the pixels and the
// softmax. The model's parameters, in this order:
//
//	W1[i][j]  pixel i to hidden unit j   features·hidden, row-major
//	b1[j]     hidden                     hidden
//	W2[j][k]  hidden unit j to class k   hidden·classes, row-major
//	b2[k]     classes                    classes
//
// then Adam's moments and powers as for softmax regression (3·P+2
// numbers in all).
//
// Exactness: the forward pass adds in one declared order (ascending
// pixel, then ascending hidden unit), every product rounded on its own,
// so every device computes the same activations. Each example's
// contribution is rounded once, on its own, to fixed point at 2^-gradBits:
// the output errors dz_k; the second layer's products h_j·dz_k; the
// hidden errors dh_j = [a_j > 0]·Σ_k W2[j][k]·dz_k (ascending k, from the
// rounded dz). The first layer's gradient is then the pixel's integer
// value times the integer dh_j, exact. So the round's update is a sum of
// integers, the same for any cut into shards.
//
// On a GPU (fashion-gpu.wasm, gpu.go), the kernels of mlp.cu compute the
// two products with W1, the pre-activations and the first layer's
// integer gradient, with the same bits as hidden and mlpGradCPU below:
// the same loops in the same order, one thread per output element.

import (
	"errors"
	"fmt"
	"math"
	"os"

	"idlepool/examples/internal/exact"
	"idlepool/examples/internal/gpukernel"
	"idlepool/examples/internal/splitmix"
	"idlepool/examples/internal/task"
)

// mlp is a view of the model's parameters and the scratch space of one
// example's forward pass. Not safe for concurrent use.
type mlp struct {
	f, h, c        int
	w1, b1, w2, b2 []float64
	a, hid         []float64 // pre-activations and activations of the hidden layer
}

// newMLP views w (at least size() numbers) as the network of p.
func newMLP(p params, w []float64) *mlp {
	f, h, c := p.Features, p.Hidden, p.Classes
	m := &mlp{f: f, h: h, c: c, a: make([]float64, h), hid: make([]float64, h)}
	o := 0
	m.w1, o = w[o:o+f*h], o+f*h
	m.b1, o = w[o:o+h], o+h
	m.w2, o = w[o:o+h*c], o+h*c
	m.b2 = w[o : o+c]
	return m
}

// forward computes the logits z of one image; the hidden layer stays in
// m.a and m.hid for the backward pass.
func (m *mlp) forward(px []byte, z []float64) {
	m.hidden(px)
	m.output(z)
}

// hidden computes the pre-activations m.a of one image: x_i =
// pixel_i/255, added in ascending order of pixels; a zero pixel adds
// nothing. mlp.cu's mlp_hidden computes the same bits on a GPU.
func (m *mlp) hidden(px []byte) {
	copy(m.a, m.b1)
	for i, v := range px {
		if v == 0 {
			continue
		}
		x := float64(v) / 255
		row := m.w1[i*m.h : i*m.h+m.h]
		for j := range m.a {
			m.a[j] = m.a[j] + float64(row[j]*x)
		}
	}
}

// output computes the activations m.hid from the pre-activations m.a and
// the logits z from those, adding in ascending order of hidden units; an
// inactive unit adds nothing.
func (m *mlp) output(z []float64) {
	copy(z, m.b2)
	for j, a := range m.a {
		if !(a > 0) {
			m.hid[j] = 0
			continue
		}
		m.hid[j] = a
		row := m.w2[j*m.c : j*m.c+m.c]
		for k := range z {
			z[k] = z[k] + float64(row[k]*a)
		}
	}
}

// mlpInit is the first model: the weights drawn uniformly from
// ±sqrt(6/(fan_in+fan_out)) (Glorot and Bengio 2010) by SplitMix64 from
// seed (params.seed), in the order of the parameters; biases, moments and powers zero.
func mlpInit(p params, seed uint64) []float64 {
	model := make([]float64, 3*p.size()+2)
	m := newMLP(p, model)
	r := splitmix.New(seed)
	fill := func(w []float64, fanIn, fanOut int) {
		// Square root is correctly rounded on every host (IEEE 754).
		limit := math.Sqrt(6 / float64(fanIn+fanOut))
		for i := range w {
			u := float64(r.Uint64()>>11) * 0x1p-53 // [0, 1), exact
			w[i] = float64((2*u - 1) * limit)
		}
	}
	fill(m.w1, p.Features, p.Hidden)
	fill(m.w2, p.Hidden, p.Classes)
	return model
}

// mlpGrad is a grad task of the perceptron over the examples px, lb (the
// first of them is example lo of the training set): on the task's GPU
// where it has one (gpu.go), on the CPU otherwise or should a GPU step
// fail, with the same result either way.
func mlpGrad(t task.Task, p params, w []float64, px, lb []byte, lo int) (any, error) {
	if gpuGrad == nil {
		return mlpGradCPU(p, w, px, lb, lo)
	}
	r, err := gpuGrad(t, p, w, px, lb, lo)
	var ee exampleError
	switch {
	case err == nil:
		return r, nil
	case errors.As(err, &ee):
		return nil, ee.err
	case !errors.Is(err, gpukernel.ErrNoGPU) && !errors.Is(err, task.ErrNoInput) && !errors.Is(err, errRecompute):
		// No GPU, or no kernel (a training file without the input
		// ptx), is the plan, not a failure.
		fmt.Fprintf(os.Stderr, "fashion: GPU path failed, computing on the CPU: %v\n", err)
	}
	return mlpGradCPU(p, w, px, lb, lo)
}

// mlpGradCPU is mlpGrad on the CPU.
func mlpGradCPU(p params, w []float64, px, lb []byte, lo int) (any, error) {
	f, h := p.Features, p.Hidden
	g := newMLPGrad(p, w)
	for e := range lb {
		img := px[e*f : e*f+f]
		g.m.hidden(img)
		dh, lq, err := g.example(lb[e], lo+e)
		if err != nil {
			return nil, err
		}
		for i, v := range img {
			if v == 0 {
				continue
			}
			for j, d := range dh {
				if d != 0 {
					g.u.Add(i*h+j, int64(v)*d)
				}
			}
		}
		g.u.Add(p.size(), lq)
	}
	return g.result(len(lb))
}

// mlpGradState is what a grad task of the perceptron keeps while it goes
// through its examples: the network, the sums and scratch space.
type mlpGradState struct {
	p  params
	m  *mlp
	u  *exact.Vec
	z  []float64
	dq []int64
	dz []float64
	dh []int64
}

func newMLPGrad(p params, w []float64) *mlpGradState {
	return &mlpGradState{p: p, m: newMLP(p, w), u: exact.NewVec(p.size() + 2),
		z: make([]float64, p.Classes), dq: make([]int64, p.Classes), dz: make([]float64, p.Classes), dh: make([]int64, p.Hidden)}
}

// example adds the contribution of example ex (label y) to every sum but
// the first layer's weights, from its pre-activations in g.m.a, and
// returns its hidden errors dh_j at 2^-gradBits (valid until the next
// call; the first layer's gradient is pixel_i·dh_j) and its loss at
// 2^-lossBits, which the caller adds after the first layer's products.
func (g *mlpGradState) example(y byte, ex int) ([]int64, int64, error) {
	p, m, u := g.p, g.m, g.u
	f, h, c := p.Features, p.Hidden, p.Classes
	ob1, ow2, ob2 := f*h, f*h+h, f*h+h+h*c
	m.output(g.z)
	lq, err := crossEntropy(g.z, int(y), g.dq, p.Round, ex)
	if err != nil {
		return nil, 0, err
	}
	for k, q := range g.dq {
		u.Add(ob2+k, q)
		g.dz[k] = float64(q) * (1.0 / (1 << gradBits)) // exact
	}
	for j, hj := range m.hid {
		g.dh[j] = 0
		if hj == 0 {
			continue
		}
		row := m.w2[j*c : j*c+c]
		s := 0.0
		for k, d := range g.dz {
			q, err := exact.Quantize(float64(hj*d), gradBits)
			if err != nil {
				return nil, 0, fmt.Errorf("round %d: hidden unit %d of example %d: %w (the model diverged; a smaller lr may help)", p.Round, j, ex, err)
			}
			u.Add(ow2+j*c+k, q)
			s = s + float64(row[k]*d)
		}
		if g.dh[j], err = exact.Quantize(s, gradBits); err != nil {
			return nil, 0, fmt.Errorf("round %d: hidden error %d of example %d: %w (the model diverged; a smaller lr may help)", p.Round, j, ex, err)
		}
		u.Add(ob1+j, g.dh[j])
	}
	return g.dh, lq, nil
}

// result is the task's result after n examples.
func (g *mlpGradState) result(n int) (any, error) {
	g.u.Add(g.p.size()+1, int64(n))
	if err := g.u.Err(); err != nil {
		return nil, fmt.Errorf("round %d: %w (the model diverged; a smaller lr may help)", g.p.Round, err)
	}
	return gradResult{Update: g.u.S}, nil
}
