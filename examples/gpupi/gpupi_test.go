package main

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"idlepool/examples/internal/task"
	"idlepool/job/cuda"
)

// run runs one task through the program's shell, as the worker does, with
// launches of chunk samples, and returns its stdout.
func run(t *testing.T, stdin string, chunk uint64) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := task.Run(strings.NewReader(stdin), &stdout, &stderr, func(tk task.Task) (any, error) {
		return computeIn(tk, chunk)
	})
	if code != 0 {
		t.Fatalf("exit code %d, stderr %q", code, stderr.String())
	}
	return stdout.String()
}

func TestCPUPathNearPi(t *testing.T) {
	if cuda.Devices() != 0 {
		t.Fatal("a native build sees a GPU; this test is for the CPU path")
	}
	const tasks, samples = 8, 200_000
	var inside, total uint64
	for i := range uint64(tasks) {
		inside += countOnCPU(0x5eed0000+i*0x9e3779b97f4a7c15, samples, launchSamples)
		total += samples
	}
	p := float64(inside) / float64(total)
	est := 4 * p
	se := 4 * math.Sqrt(p*(1-p)/float64(total))
	if d := math.Abs(est - math.Pi); d > 4*se {
		t.Errorf("pi estimate %.6f is %.2f standard errors (se %.2g) from pi", est, d/se, se)
	}
}

// TestChunkingDoesNotChangeTheResult: a task's bytes are the same whatever
// the launch size, so a GPU that launches 2^26 samples at a time and a CPU
// that counts in other pieces agree byte for byte.
func TestChunkingDoesNotChangeTheResult(t *testing.T) {
	const stdin = `{"job":"00","index":3,"seed":12345678901234567890,"params":{"samples":100003}}`
	want := run(t, stdin, launchSamples)
	for _, chunk := range []uint64{1, 7, 4096, 65536, 100002, 100003, 1 << 40} {
		if chunk == 1 && testing.Short() {
			continue
		}
		t.Run(fmt.Sprint(chunk), func(t *testing.T) {
			if diff := cmp.Diff(want, run(t, stdin, chunk)); diff != "" {
				t.Errorf("result with launches of %d samples differs (-one launch +chunked):\n%s", chunk, diff)
			}
		})
	}
	// Pieces of a range add up to the range, wherever they are cut.
	whole := countInside(99, 1<<32-50, 100)
	if got := countInside(99, 1<<32-50, 50) + countInside(99, 1<<32, 50); got != whole {
		t.Errorf("count across the 2^32 boundary: %d in two pieces, %d in one", got, whole)
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
			name:     "ok without a GPU or the ptx input",
			stdin:    `{"job":"00","index":0,"seed":7,"params":{"samples":1000}}`,
			wantCode: 0,
			wantOut:  fmt.Sprintf(`{"inside":%d,"samples":1000}`, countInside(7, 0, 1000)) + "\n",
		},
		{
			name:     "missing samples",
			stdin:    `{"job":"00","index":0,"seed":7,"params":{}}`,
			wantCode: 1,
			wantErr:  "params.samples must be a positive integer",
		},
		{
			name:     "negative samples",
			stdin:    `{"job":"00","index":0,"seed":7,"params":{"samples":-5}}`,
			wantCode: 1,
			wantErr:  "params.samples must be a positive integer, got -5",
		},
		{
			name:     "not json",
			stdin:    `samples=4`,
			wantCode: 1,
			wantErr:  "decode task",
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

// TestKnownCount pins one task's count, so that a change to the generator
// or the hit test (which would break agreement with gpupi.cu and with
// results computed before) fails here.
func TestKnownCount(t *testing.T) {
	got := run(t, `{"seed":42,"params":{"samples":100000}}`, launchSamples)
	want := `{"inside":78625,"samples":100000}` + "\n" // the count of the C kernel's logic too (gpupi_cu_test.go)
	if got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}
