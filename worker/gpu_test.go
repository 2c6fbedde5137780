package worker

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestGPUEnv(t *testing.T) {
	env := []string{"PATH=/bin", "CUDA_VISIBLE_DEVICES=0", "HOME=/h"}
	got := GPUEnv(env, []string{"GPU-aaaa", "MIG-bbbb"})
	want := []string{"PATH=/bin", "HOME=/h", "CUDA_VISIBLE_DEVICES=GPU-aaaa,MIG-bbbb"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GPUEnv (-want +got):\n%s", diff)
	}
	if env[1] != "CUDA_VISIBLE_DEVICES=0" {
		t.Error("GPUEnv modified its argument")
	}
	if got := GPUEnv(nil, nil); !cmp.Equal(got, []string{"CUDA_VISIBLE_DEVICES="}) {
		t.Errorf("GPUEnv(nil, nil) = %q", got)
	}
}

func TestGPUOthers(t *testing.T) {
	g := GPU{OtherProcesses: []GPUProcess{{PID: 1, UsedMemoryMiB: 100}, {PID: 2, UsedMemoryMiB: -1}, {PID: 3, UsedMemoryMiB: 50}},
		OurProcesses: []GPUProcess{{PID: 9, UsedMemoryMiB: 10}}}
	if got := g.OtherMemoryMiB(); got != 150 {
		t.Errorf("OtherMemoryMiB = %d, want 150", got)
	}
	if got := g.OtherPIDs(); !cmp.Equal(got, []int{1, 2, 3}) {
		t.Errorf("OtherPIDs = %v", got)
	}
	if got := g.OurPIDs(); !cmp.Equal(got, []int{9}) {
		t.Errorf("OurPIDs = %v", got)
	}
}
