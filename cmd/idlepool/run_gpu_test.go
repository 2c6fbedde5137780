package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/job"
	"idlepool/worker"
)

// gpuRecorder is a pool.Executor that keeps the GPUs of each request.
type gpuRecorder struct{ gpus [][]string }

func (r *gpuRecorder) Run(_ context.Context, req worker.Request) (worker.Result, error) {
	r.gpus = append(r.gpus, req.GPUs)
	return worker.Result{Stdout: []byte("{}")}, nil
}

func TestGPUExecutor(t *testing.T) {
	tests := []struct {
		name string
		gpus []string
		want [][]string
	}{
		{"each slot one GPU, in turn", []string{"GPU-a", "GPU-b"}, [][]string{{"GPU-a"}, {"GPU-b"}, {"GPU-a"}}},
		{"no GPU", nil, [][]string{nil, nil, nil}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := &gpuRecorder{}
			e := newGPUExecutor(rec, tc.gpus, 2)
			for range 3 {
				if _, err := e.Run(context.Background(), worker.Request{}); err != nil {
					t.Fatal(err)
				}
			}
			if d := cmp.Diff(tc.want, rec.gpus); d != "" {
				t.Errorf("GPUs per task (-want +got):\n%s", d)
			}
		})
	}
	if got := gpuLine([]string{"NVIDIA H200"}, job.GPUOptional, ""); !strings.Contains(got, "NVIDIA H200") || !strings.Contains(got, "--cpu-only") {
		t.Errorf("gpuLine = %q, want the GPU's name and how to leave it out", got)
	}
	if got := gpuLine(nil, job.GPUNone, "no NVIDIA driver"); got != "" {
		t.Errorf("gpuLine for a CPU job = %q, want nothing", got)
	}
	if got := gpuLine(nil, job.GPUOptional, "no NVIDIA driver"); !strings.Contains(got, "no GPU for this run (no NVIDIA driver)") || !strings.Contains(got, "on the CPU") {
		t.Errorf("gpuLine for an optional-GPU job = %q, want that it computes on the CPU and why", got)
	}
	if got := gpuLine(nil, job.GPURequired, "--cpu-only"); !strings.Contains(got, "(--cpu-only)") || !strings.Contains(got, "asks for a GPU (gpu = true)") {
		t.Errorf("gpuLine for a GPU job = %q, want that it asks for one and why there is none", got)
	}
}

// TestSoloGPUsCPUOnly: --cpu-only gives tasks no GPU.
func TestSoloGPUsCPUOnly(t *testing.T) {
	if uuids, names, why := soloGPUs(&globals{}, true); uuids != nil || names != nil || why != "--cpu-only" {
		t.Errorf("soloGPUs with --cpu-only = %v, %v, %q; want none, because of --cpu-only", uuids, names, why)
	}
}

// blockingExec holds each task until release is closed, reporting its GPUs.
type blockingExec struct {
	seen    chan []string
	release chan struct{}
}

func (b *blockingExec) Run(_ context.Context, req worker.Request) (worker.Result, error) {
	b.seen <- req.GPUs
	<-b.release
	return worker.Result{Stdout: []byte("{}")}, nil
}

// TestGPUExecutorSpreads: tasks running at once are on different GPUs.
func TestGPUExecutorSpreads(t *testing.T) {
	b := &blockingExec{seen: make(chan []string, 2), release: make(chan struct{})}
	e := newGPUExecutor(b, []string{"GPU-a", "GPU-b"}, 2)
	done := make(chan struct{}, 2)
	for range 2 {
		go func() {
			_, _ = e.Run(context.Background(), worker.Request{})
			done <- struct{}{}
		}()
	}
	got := map[string]bool{}
	for range 2 {
		select {
		case g := <-b.seen:
			got[strings.Join(g, ",")] = true
		case <-time.After(2 * time.Minute):
			t.Fatal("tasks did not start")
		}
	}
	close(b.release)
	<-done
	<-done
	if !got["GPU-a"] || !got["GPU-b"] {
		t.Errorf("two tasks at once ran on %v, want GPU-a and GPU-b", got)
	}
}
