package agent

import (
	"testing"

	"idlepool/idle"
)

func TestGPURelease(t *testing.T) {
	held := []string{"GPU-a"}
	for _, tc := range []struct {
		name    string
		d       idle.Decision
		gpus    []string
		release bool
	}{
		{"computing on it", idle.Decision{State: idle.StateComputing, Cores: 1, GPUs: []string{"GPU-a", "GPU-b"}}, held, false},
		{"switched off, too hot or used by another process", idle.Decision{State: idle.StateComputing, Cores: 1, GPUs: []string{"GPU-b"}}, held, true},
		{"GPUs unknown", idle.Decision{State: idle.StateComputing, Cores: 1}, held, true},
		{"paused by the owner", idle.Decision{State: idle.StatePaused, Reason: "paused by you until 15:00", GPUsAllowed: held}, held, true},
		{"a game runs", idle.Decision{State: idle.StatePaused, Reason: "paused: Steam game is running", GPUsAllowed: held}, held, true},
		{"owner back: suspended, kept", idle.Decision{State: idle.StateWaiting, Reason: "waiting: you were active", GPUsAllowed: held}, held, false},
		{"owner back and GPU switched off", idle.Decision{State: idle.StateWaiting, Reason: "waiting: you were active"}, held, true},
		{"a CPU task", idle.Decision{State: idle.StatePaused}, nil, false},
	} {
		if got := gpuRelease(tc.d, tc.gpus) != ""; got != tc.release {
			t.Errorf("%s: release %v, want %v", tc.name, got, tc.release)
		}
	}
}
