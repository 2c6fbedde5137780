package worker

import (
	"bytes"
	"testing"
)

// TestClassifyEnd checks that a task run by another host is classified
// as a worker process classifies its own: success keeps stdout, a Go
// panic and a runtime out-of-memory report on stderr, an exit status, a
// trap and a stdout over the limit each give their kind, and stderr is
// truncated to the limit.
func TestClassifyEnd(t *testing.T) {
	for _, tc := range []struct {
		name   string
		end    TaskEnd
		kind   FailureKind // "" for success
		stdout string
	}{
		{"success", TaskEnd{Exited: true, Stdout: []byte(`{"x":1}`), Work: 7}, "", `{"x":1}`},
		{"returned from _start", TaskEnd{Stdout: []byte(`{}`)}, "", `{}`},
		{"go panic", TaskEnd{Exited: true, ExitCode: 2, Stderr: []byte("panic: boom\n\ngoroutine 1 [running]:\n")}, FailureTrap, ""},
		{"out of memory", TaskEnd{Exited: true, ExitCode: 2, Stderr: []byte("fatal error: out of memory\n")}, FailureOutOfMemory, ""},
		{"exit status", TaskEnd{Exited: true, ExitCode: 3, Stdout: []byte("partial")}, FailureExitStatus, ""},
		{"trap", TaskEnd{Trap: "unreachable"}, FailureTrap, ""},
		{"stdout too large", TaskEnd{Exited: true, Exceeded: true, MaxStdoutBytes: 4}, FailureOutputTooLarge, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := ClassifyEnd(tc.end)
			switch {
			case tc.kind == "" && res.Failure != nil:
				t.Fatalf("ClassifyEnd: failure %v, want success", res.Failure)
			case tc.kind != "" && (res.Failure == nil || res.Failure.Kind != tc.kind):
				t.Fatalf("ClassifyEnd: failure %v, want kind %s", res.Failure, tc.kind)
			}
			if string(res.Stdout) != tc.stdout {
				t.Errorf("stdout %q, want %q", res.Stdout, tc.stdout)
			}
			if res.Work != tc.end.Work {
				t.Errorf("work %d, want %d", res.Work, tc.end.Work)
			}
		})
	}
	long := bytes.Repeat([]byte("x"), 10000)
	if res := ClassifyEnd(TaskEnd{Exited: true, Stderr: long, MaxStderrBytes: 1000}); len(res.Stderr) > 1000 {
		t.Errorf("stderr of %d bytes kept under a limit of 1000", len(res.Stderr))
	}
}

// TestMeterModuleExported checks that MeterModule is the worker's own
// metering: the same bytes as meterModule, and the same refusal.
func TestMeterModuleExported(t *testing.T) {
	bin := []byte("\x00asm\x01\x00\x00\x00")
	want, err := meterModule(bin)
	if err != nil {
		t.Fatal(err)
	}
	got, err := MeterModule(bin)
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("MeterModule = % x, %v; want % x", got, err, want)
	}
	if _, err := MeterModule([]byte("not wasm")); err == nil {
		t.Error("MeterModule accepted bytes that are not WebAssembly")
	}
}
