package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"idlepool/examples/internal/task"
)

// TestDescend checks the regimes the example's README describes: momentum
// at a good learning rate reaches the minimum, a learning rate above the
// stability bound of heavy ball diverges, a small one is slow. (From a
// grid of 241 × 201 starts over the box, no run at alpha <= 0.001
// diverges and every run at alpha = 0.01 does, for each beta of the
// manifest.)
func TestDescend(t *testing.T) {
	tests := []struct {
		name         string
		alpha, beta  float64
		maxLoss      float64
		wantDiverged bool
	}{
		{"good rate and momentum", 1e-3, 0.9, 1e-15, false},
		{"good rate without momentum", 1e-3, 0, 1e-2, false},
		{"small rate", 1e-4, 0.9, 1e-2, false},
		{"rate past the bound", 1e-2, 0.9, 0, true},
		{"rate past the bound without momentum", 1e-2, 0, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// The corners of the box that starts are drawn from, and
			// its middle.
			for _, start := range [][2]float64{{-1.2, -0.5}, {-1.2, 1.5}, {1.2, -0.5}, {1.2, 1.5}, {0, 0.5}} {
				f, diverged := descend(start[0], start[1], tc.alpha, tc.beta, 5000)
				if diverged != tc.wantDiverged {
					t.Errorf("from %v: diverged = %v, want %v (f = %g)", start, diverged, tc.wantDiverged, f)
				}
				if !tc.wantDiverged && !(f <= tc.maxLoss) {
					t.Errorf("from %v: f = %g, want at most %g", start, f, tc.maxLoss)
				}
			}
		})
	}
}

func TestRun(t *testing.T) {
	tests := []struct {
		name     string
		params   string
		wantCode int
		wantErr  string
	}{
		{"ok", `{"alpha":0.001,"beta":0.6,"steps":100,"rep":2}`, 0, ""},
		{"diverges", `{"alpha":0.5,"beta":0,"steps":100,"rep":0}`, 0, ""},
		{"no alpha", `{"beta":0.6,"steps":100}`, 1, "params.alpha must be a learning rate in (0, 1]"},
		{"beta of 1", `{"alpha":0.001,"beta":1,"steps":100}`, 1, "params.beta must be a momentum in [0, 1)"},
		{"no steps", `{"alpha":0.001,"beta":0.5}`, 1, "params.steps must be in [1, 10000000]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := task.Run(strings.NewReader(`{"job":"00","index":0,"seed":7,"params":`+tc.params+`}`), &stdout, &stderr, compute)
			if code != tc.wantCode {
				t.Fatalf("exit code %d, want %d (stderr %q)", code, tc.wantCode, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.wantErr) {
				t.Errorf("stderr %q does not contain %q", stderr.String(), tc.wantErr)
			}
			if code != 0 {
				return
			}
			var r map[string]any
			if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
				t.Fatalf("stdout %q: %v", stdout.String(), err)
			}
			var p map[string]any
			if err := json.Unmarshal([]byte(tc.params), &p); err != nil {
				t.Fatal(err)
			}
			if r["alpha"] != p["alpha"] || r["beta"] != p["beta"] || r["rep"] != p["rep"] {
				t.Errorf("result %v does not echo alpha, beta and rep of %v", r, p)
			}
			if d := r["diverged"]; d != float64(0) && d != float64(1) {
				t.Errorf("diverged = %v, want 0 or 1", d)
			}
			if tc.name == "diverges" && r["diverged"] != float64(1) {
				t.Errorf("alpha = 0.5 did not diverge: %v", r)
			}
		})
	}
}
