package worker

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestStderrBuffer(t *testing.T) {
	tests := []struct {
		name   string
		max    int
		writes []string
		want   string
	}{
		{"nothing", 16, nil, ""},
		{"fits", 16, []string{"hello ", "world"}, "hello world"},
		{"exactly full", 8, []string{"abcd", "efgh"}, "abcdefgh"},
		{"head, marker, tail", 100, []string{strings.Repeat("a", 40), strings.Repeat("b", 100), "the end"},
			strings.Repeat("a", 40) + strings.Repeat("b", 10) + "\n[... 75 bytes omitted ...]\n" + strings.Repeat("b", 15) + "the end"},
		{"many small writes", 100, strings.Split(strings.Repeat("x", 200)+"END", ""),
			strings.Repeat("x", 50) + "\n[... 132 bytes omitted ...]\n" + strings.Repeat("x", 18) + "END"},
		{"one write larger than the tail", 100, []string{strings.Repeat("c", 1000) + "END"},
			strings.Repeat("c", 50) + "\n[... 932 bytes omitted ...]\n" + strings.Repeat("c", 18) + "END"},
		{"cap too small for the marker", 10, []string{strings.Repeat("z", 100)}, strings.Repeat("z", 5)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := newStderrBuffer(tc.max)
			for _, w := range tc.writes {
				if n, err := b.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			got := string(b.bytes())
			if got != tc.want {
				t.Errorf("bytes() =\n%q\nwant\n%q", got, tc.want)
			}
			if len(got) > tc.max {
				t.Errorf("kept %d bytes, over the cap of %d", len(got), tc.max)
			}
		})
	}
}

func TestStderrBufferMarkers(t *testing.T) {
	tests := []struct {
		name      string
		stream    string
		panicLine string
		outOfMem  bool
	}{
		{"panic", "some log\npanic: boom\n\ngoroutine 1 [running]:\nmain.main()\n", "panic: boom", false},
		{"first panic wins", "panic: first\npanic: second\n", "panic: first", false},
		{"fatal error", "fatal error: all goroutines are asleep - deadlock!\n", "fatal error: all goroutines are asleep - deadlock!", false},
		{"out of memory", "runtime: out of memory: cannot allocate 1048576-byte block (66060288 in use)\nfatal error: out of memory\n", "fatal error: out of memory", true},
		{"no newline at end", "log\npanic: at the end", "panic: at the end", false},
		{"not at line start", "my panic: is not Go's\n", "", false},
		{"after a long log", strings.Repeat("y", 100000) + "\npanic: late\n", "panic: late", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Write byte by byte and all at once: matching must not
			// depend on where writes split the stream.
			for _, chunk := range []int{1, 7, len(tc.stream)} {
				b := newStderrBuffer(64)
				for s := tc.stream; len(s) > 0; {
					n := min(chunk, len(s))
					_, _ = b.Write([]byte(s[:n]))
					s = s[n:]
				}
				b.finish()
				if b.panicLine != tc.panicLine || b.outOfMem != tc.outOfMem {
					t.Errorf("chunks of %d: panicLine %q outOfMem %v, want %q %v", chunk, b.panicLine, b.outOfMem, tc.panicLine, tc.outOfMem)
				}
			}
		})
	}
}

func TestStdoutBuffer(t *testing.T) {
	b := &stdoutBuffer{max: 10}
	if _, err := b.Write([]byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	defer func() {
		r := recover()
		if err, ok := r.(error); !ok || !errors.Is(err, errOutputTooLarge) {
			t.Errorf("recovered %v, want errOutputTooLarge", r)
		}
		if !b.exceeded || !bytes.Equal(b.buf, []byte("0123456789")) {
			t.Errorf("after overflow: exceeded %v, buf %q", b.exceeded, b.buf)
		}
	}()
	_, _ = b.Write([]byte("x"))
	t.Error("Write past the limit returned")
}

func TestClassify(t *testing.T) {
	oom := newStderrBuffer(100)
	fmt.Fprint(oom, "fatal error: out of memory\n")
	oom.finish()
	if f := classify(nil, &stdoutBuffer{max: 1}, newStderrBuffer(1)); f != nil {
		t.Errorf("success classified as %v", f)
	}
	if f := classify(errors.New("wasm error: unreachable"), &stdoutBuffer{max: 1}, oom); f == nil || f.Kind != FailureOutOfMemory {
		t.Errorf("trap after an out-of-memory report classified as %v", f)
	}
}
