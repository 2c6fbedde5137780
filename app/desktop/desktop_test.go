package desktop

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    Config
		wantErr string
	}{
		{"defaults", nil, Config{Workers: runtime.NumCPU()}, ""},
		{"all", []string{"--home", "/tmp/h", "--workers", "3", "-v"}, Config{Home: "/tmp/h", Workers: 3, Verbose: true}, ""},
		{"no workers", []string{"--workers", "0"}, Config{}, "--workers must be at least 1"},
		{"stray argument", []string{"join"}, Config{}, `unexpected argument "join"`},
		{"unknown flag", []string{"--pool", "x"}, Config{}, "flag provided but not defined"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseFlags(tc.args, io.Discard)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parseFlags(%q) error = %v, want one containing %q", tc.args, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("parseFlags (-want +got):\n%s", diff)
			}
		})
	}
	var out bytes.Buffer
	if _, err := parseFlags([]string{"--help"}, &out); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("--help: %v, want flag.ErrHelp", err)
	}
	if !strings.Contains(out.String(), "Usage:") {
		t.Errorf("--help printed %q", out.String())
	}
}

// TestWorkerEndsWithInput runs the worker mode on an input that ends at
// once, as a worker whose pool closed: it says hello and exits 0.
func TestWorkerEndsWithInput(t *testing.T) {
	var out, errOut bytes.Buffer
	code := workerMain(context.Background(), []string{"--cache", t.TempDir()}, strings.NewReader(""), &out, &errOut)
	if code != 0 {
		t.Fatalf("workerMain = %d, stderr %q", code, errOut.String())
	}
	if !strings.Contains(out.String(), `"type":"hello"`) {
		t.Errorf("worker wrote %q, want its hello", out.String())
	}
}

func TestProgramNames(t *testing.T) {
	names, err := programNames(context.Background())
	if err != nil {
		t.Skipf("no process list here: %v", err)
	}
	if !slices.IsSorted(names) || len(slices.Compact(slices.Clone(names))) != len(names) {
		t.Errorf("names not sorted and unique: %q", names)
	}
	for _, n := range names {
		if strings.Contains(n, "/") {
			t.Errorf("name %q is a path, want a base name", n)
		}
	}
	if !slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "desktop.test") }) {
		t.Errorf("this test's own program is not among %d names", len(names))
	}
}
