package main

import (
	"bytes"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestReportStatesConditions checks that the table comes with what a
// reader needs to judge it: the load average at both ends of the rounds
// and how each column was built and measured.
func TestReportStatesConditions(t *testing.T) {
	if runtime.GOOS == "linux" {
		if _, err := strconv.ParseFloat(loadAverage(), 64); err != nil {
			t.Errorf("loadAverage() = %q on Linux, want a number: %v", loadAverage(), err)
		}
	}
	v := &variant{lang: "Go", kernel: kernels[0], units: 1e6, nativeOut: []byte("x"), wasmOut: []byte("x"),
		nativeCPU: []time.Duration{time.Millisecond}, wasmCPU: []time.Duration{2 * time.Millisecond}}
	out := captureStdout(t, func() {
		if err := report([]*variant{v}, "3.5", "4.25"); err != nil {
			t.Fatal(err)
		}
	})
	for _, want := range []string{"2.00x", "Load average 3.5 at the start of the rounds, 4.25 at the end", "not -march=native", "metered"} {
		if !strings.Contains(out, want) {
			t.Errorf("report does not say %q:\n%s", want, out)
		}
	}
}

func captureStdout(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	done := make(chan []byte)
	go func() { b, _ := io.ReadAll(r); done <- b }()
	defer func() { os.Stdout = old }()
	f()
	w.Close()
	os.Stdout = old
	return string(bytes.TrimSpace(<-done))
}
