//go:build gpu

package main

// Built with the tag gpu (fashion-gpu.wasm, the Makefile): the
// perceptron's grad tasks use the task's GPU where it has one.
func init() { gpuGrad = mlpGradGPU }
