package main

// The perceptron's grad task on a GPU: the kernels of mlp.cu (the PTX is
// the task's input "ptx") compute the two products with the first
// layer's weights; everything else (the second layer, the softmax, the
// rounding to fixed point) stays on the CPU, in the CPU path's code, so
// that the result is the CPU path's bytes. Only the program built with
// the tag gpu (fashion-gpu.wasm, gpu_on.go) calls it: fashion.wasm does
// not import idlepool_cuda at all, and runs wherever WebAssembly does.

import (
	"encoding/binary"
	"errors"
	"math"

	"idlepool/examples/internal/gpukernel"
	"idlepool/examples/internal/task"
	"idlepool/job/cuda"
)

// gpuGrad is the GPU path of the perceptron's grad task: mlpGradGPU in
// the program built with the tag gpu, nil (the CPU path alone) in
// fashion.wasm.
var gpuGrad func(t task.Task, p params, w []float64, px, lb []byte, lo int) (any, error)

// Launch geometry: mlpBlockThreads threads per block; mlpChunk examples
// per launch of mlp_hidden and mlp_grad_w1 (about 10^8 multiply-adds, well
// under a millisecond on a current GPU), so that a paused task holds the
// GPU for one short launch at most.
const (
	mlpBlockThreads = 256
	mlpChunk        = 1024
)

// errRecompute says the GPU path found a sum that overflows 64 bits: the
// task fails, and the CPU path computes it again to fail with its own
// words (which sum overflowed first in its order).
var errRecompute = errors.New("a gradient sum overflows 64 bits")

// exampleError is an error of one example (a model that diverged): the
// task's answer, the same on the GPU and the CPU, which meet the examples
// in the same order.
type exampleError struct{ err error }

func (e exampleError) Error() string { return e.err.Error() }
func (e exampleError) Unwrap() error { return e.err }

// mlpGradGPU is mlpGrad on the task's GPU: it uploads the first layer's
// weights and the shard's images once, then for each chunk of examples
// launches mlp_hidden, finishes the examples on the CPU (mlpGradState)
// from the pre-activations it reads back, and launches mlp_grad_w1 with
// their hidden errors, which adds them to the first layer's sums on the
// device. It returns gpukernel.ErrNoGPU when the task has no GPU,
// task.ErrNoInput when it has no kernel, an exampleError for an example's
// error, errRecompute for an overflow, and the error of a GPU step
// otherwise.
func mlpGradGPU(t task.Task, p params, w []float64, px, lb []byte, lo int) (any, error) {
	mod, err := gpukernel.LoadModule(t, "ptx")
	if err != nil {
		return nil, err
	}
	hiddenK, err := mod.Function("mlp_hidden")
	if err != nil {
		return nil, err
	}
	gradK, err := mod.Function("mlp_grad_w1")
	if err != nil {
		return nil, err
	}
	f, h, n := p.Features, p.Hidden, len(lb)
	g := newMLPGrad(p, w)
	var bufs []*cuda.Buffer
	defer func() {
		for _, b := range bufs {
			_ = b.Free()
		}
	}()
	upload := func(p []byte) (*cuda.Buffer, error) {
		b, err := cuda.Alloc(int64(len(p)))
		if err != nil {
			return nil, err
		}
		bufs = append(bufs, b)
		return b, b.Write(0, p)
	}
	dW1, err := upload(float64Bytes(g.m.w1))
	if err != nil {
		return nil, err
	}
	dB1, err := upload(float64Bytes(g.m.b1))
	if err != nil {
		return nil, err
	}
	dPx, err := upload(px)
	if err != nil {
		return nil, err
	}
	chunk := min(mlpChunk, n)
	dA, err := upload(make([]byte, 8*chunk*h))
	if err != nil {
		return nil, err
	}
	dDh, err := upload(make([]byte, 8*chunk*h))
	if err != nil {
		return nil, err
	}
	dG, err := upload(make([]byte, 8*f*h))
	if err != nil {
		return nil, err
	}
	dOver, err := upload(make([]byte, 4))
	if err != nil {
		return nil, err
	}
	block := cuda.Dim3{X: mlpBlockThreads, Y: 1, Z: 1}
	grid := func(threads int) cuda.Dim3 {
		return cuda.Dim3{X: uint32((threads + mlpBlockThreads - 1) / mlpBlockThreads), Y: 1, Z: 1}
	}
	a := make([]byte, 8*chunk*h)
	dh := make([]byte, 8*chunk*h)
	loss := make([]int64, 0, chunk)
	for first := 0; first < n; first += chunk {
		count := min(chunk, n-first)
		err := hiddenK.Launch(grid(count*h), block, 0, cuda.BufferArg(dA), cuda.BufferArg(dW1), cuda.BufferArg(dB1),
			cuda.BufferArg(dPx), cuda.U32(uint32(f)), cuda.U32(uint32(h)), cuda.U32(uint32(first)), cuda.U32(uint32(count)))
		if err != nil {
			return nil, err
		}
		if err := cuda.Synchronize(); err != nil {
			return nil, err
		}
		if err := dA.Read(0, a[:8*count*h]); err != nil {
			return nil, err
		}
		loss = loss[:0]
		for e := range count {
			for j := range g.m.a {
				g.m.a[j] = math.Float64frombits(binary.LittleEndian.Uint64(a[8*(e*h+j):]))
			}
			d, lq, err := g.example(lb[first+e], lo+first+e)
			if err != nil {
				return nil, exampleError{err}
			}
			for j, v := range d {
				binary.LittleEndian.PutUint64(dh[8*(e*h+j):], uint64(v))
			}
			loss = append(loss, lq)
		}
		if err := dDh.Write(0, dh[:8*count*h]); err != nil {
			return nil, err
		}
		err = gradK.Launch(grid(f*h), block, 0, cuda.BufferArg(dG), cuda.BufferArg(dOver), cuda.BufferArg(dPx),
			cuda.BufferArg(dDh), cuda.U32(uint32(f)), cuda.U32(uint32(h)), cuda.U32(uint32(first)), cuda.U32(uint32(count)))
		if err != nil {
			return nil, err
		}
		if err := cuda.Synchronize(); err != nil {
			return nil, err
		}
		for _, lq := range loss {
			g.u.Add(p.size(), lq)
		}
	}
	over := make([]byte, 4)
	if err := dOver.Read(0, over); err != nil {
		return nil, err
	}
	if binary.LittleEndian.Uint32(over) != 0 {
		return nil, errRecompute
	}
	sums := make([]byte, 8*f*h)
	if err := dG.Read(0, sums); err != nil {
		return nil, err
	}
	for i := range f * h {
		g.u.Add(i, int64(binary.LittleEndian.Uint64(sums[8*i:])))
	}
	r, err := g.result(n)
	if err != nil {
		return nil, errRecompute
	}
	return r, nil
}

// float64Bytes returns x as float64 little-endian bytes, as the kernels
// read them.
func float64Bytes(x []float64) []byte {
	b := make([]byte, 8*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(v))
	}
	return b
}
