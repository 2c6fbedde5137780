package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"idlepool/examples/internal/synthcsv"
)

func TestRun(t *testing.T) {
	var want bytes.Buffer
	if err := synthcsv.Write(&want, 3, 5); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		args    []string
		want    string
		wantErr string
	}{
		{name: "stdout", args: []string{"-rows", "3", "-seed", "5"}, want: want.String()},
		{name: "dash", args: []string{"-rows", "3", "-seed", "5", "-o", "-"}, want: want.String()},
		{name: "negative rows", args: []string{"-rows", "-1"}, wantErr: "-rows must not be negative"},
		{name: "extra argument", args: []string{"out.csv"}, wantErr: `unexpected argument "out.csv"`},
		{name: "unknown flag", args: []string{"-bogus"}, wantErr: "flag provided but not defined"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout bytes.Buffer
			err := run(tc.args, &stdout, &bytes.Buffer{})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, stdout.String()); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRunFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data.csv")
	if err := run([]string{"-rows", "10", "-o", path}, &bytes.Buffer{}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if err := synthcsv.Write(&want, 10, 1); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want.String(), string(got)); diff != "" {
		t.Errorf("file (-want +got):\n%s", diff)
	}
}
