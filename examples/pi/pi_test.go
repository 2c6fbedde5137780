package main

import (
	"bytes"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"idlepool/examples/internal/task"
)

func TestCountInsideNearPi(t *testing.T) {
	const tasks, samples = 8, 250_000
	var inside, total int64
	for i := range uint64(tasks) {
		inside += countInside(1000+i, samples)
		total += samples
	}
	p := float64(inside) / float64(total)
	est := 4 * p
	se := 4 * math.Sqrt(p*(1-p)/float64(total))
	if d := math.Abs(est - math.Pi); d > 4*se {
		t.Errorf("pi estimate %.6f is %.2f standard errors (se %.2g) from pi", est, d/se, se)
	}
}

func TestCountInsideDeterministic(t *testing.T) {
	a, b := countInside(42, 10_000), countInside(42, 10_000)
	if a != b {
		t.Errorf("same seed gave %d and %d", a, b)
	}
	if c := countInside(43, 10_000); c == a {
		t.Logf("seeds 42 and 43 gave the same count %d (possible, unlikely)", c)
	}
}

func TestRun(t *testing.T) {
	tests := []struct {
		name     string
		stdin    string
		wantCode int
		wantOut  string
		wantErr  string
	}{
		{
			name:     "ok",
			stdin:    `{"job":"00","index":0,"seed":7,"params":{"samples":4}}`,
			wantCode: 0,
			wantOut:  `{"inside":` + strconv.FormatInt(countInside(7, 4), 10) + `,"samples":4}` + "\n",
		},
		{
			name:     "missing samples",
			stdin:    `{"job":"00","index":0,"seed":7,"params":{}}`,
			wantCode: 1,
			wantErr:  "params.samples must be a positive integer",
		},
		{
			name:     "not json",
			stdin:    `samples=4`,
			wantCode: 1,
			wantErr:  "decode task",
		},
		{
			name:     "two objects",
			stdin:    `{"seed":1,"params":{"samples":4}} {}`,
			wantCode: 1,
			wantErr:  "trailing data",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := task.Run(strings.NewReader(tc.stdin), &stdout, &stderr, compute)
			if code != tc.wantCode {
				t.Fatalf("exit code %d, want %d (stderr %q)", code, tc.wantCode, stderr.String())
			}
			if diff := cmp.Diff(tc.wantOut, stdout.String()); diff != "" {
				t.Errorf("stdout (-want +got):\n%s", diff)
			}
			if !strings.Contains(stderr.String(), tc.wantErr) {
				t.Errorf("stderr %q does not contain %q", stderr.String(), tc.wantErr)
			}
		})
	}
}
