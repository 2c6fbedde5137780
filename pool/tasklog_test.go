package pool

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

// logLines returns n lines "step i of n", each ending in a line break.
func logLines(from, n int) string {
	var b strings.Builder
	for i := from; i < from+n; i++ {
		fmt.Fprintf(&b, "step %d of %d\n", i, from+n-1)
	}
	return b.String()
}

// goPanicReport is the Go runtime's report of a panic, as a wasip1
// program writes it.
const goPanicReport = `panic: gave up

goroutine 1 [running]:
main.inner(...)
	/src/chatty/main.go:33
main.outer(0x0)
	/src/chatty/main.go:30 +0x2
main.main()
	/src/chatty/main.go:25 +0x1c
`

func TestFailureReason(t *testing.T) {
	const head = "worker: task failed: exit status 3"
	tests := []struct {
		name    string
		stderr  string
		goPanic bool
		want    string
	}{
		{"no log", "", false, head},
		{"blank log", "\n  \n", false, head},
		{"short log", "reading input\nno rows\n", false, head + "\nprogram log:\nreading input\nno rows"},
		{"thirty lines", logLines(1, 30), false,
			head + "\nprogram log:\n… 10 earlier lines cut\n" + strings.TrimSuffix(logLines(11, 20), "\n")},
		{"one line too many", logLines(1, 21), false,
			head + "\nprogram log:\n… 1 earlier line cut\n" + strings.TrimSuffix(logLines(2, 20), "\n")},
		{"panic after thirty lines", logLines(1, 30) + goPanicReport, true,
			head + "\nprogram log:\n… 10 earlier lines cut\n" + logLines(11, 20) + strings.TrimSuffix(goPanicReport, "\n")},
		{"panic report only", goPanicReport, true, head + "\nprogram log:\n" + strings.TrimSuffix(goPanicReport, "\n")},
		{"panic words in an exit's log are lines like others", logLines(1, 20) + goPanicReport, false,
			head + "\nprogram log:\n… 9 earlier lines cut\n" + logLines(10, 11) + strings.TrimSuffix(goPanicReport, "\n")},
		{"a recovered panic panicking again", "working\npanic: first [recovered]\n\tpanic: second\n\ngoroutine 1 [running]:\nmain.main()\n\t/m.go:3 +0x1\n", true,
			head + "\nprogram log:\nworking\npanic: first [recovered]\n\tpanic: second\n\ngoroutine 1 [running]:\nmain.main()\n\t/m.go:3 +0x1"},
		{"fatal error", "fatal error: all goroutines are asleep - deadlock!\n\ngoroutine 1 [chan receive]:\nmain.main()\n\t/m.go:5 +0x3\n", true,
			head + "\nprogram log:\nfatal error: all goroutines are asleep - deadlock!\n\ngoroutine 1 [chan receive]:\nmain.main()\n\t/m.go:5 +0x3"},
		{"lines after the report are left out", "panic: x\n\ngoroutine 1 [running]:\nmain.main()\n\ngoroutine 2 [sleep]:\nmain.f()\n", true,
			head + "\nprogram log:\npanic: x\n\ngoroutine 1 [running]:\nmain.main()"},
		{"middle omitted by the worker", logLines(1, 5) + "\n[... 70000 bytes omitted ...]\n" + logLines(100, 20), false,
			head + "\nprogram log:\n… 6 earlier lines cut, and 70000 bytes before some of them\n" + strings.TrimSuffix(logLines(100, 20), "\n")},
		{"invalid UTF-8 and carriage returns", "caf\xe9\r\nend\r\n", false, head + "\nprogram log:\ncaf\uFFFD\nend"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := failureReason(head, []byte(tc.stderr), tc.goPanic)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("failureReason (-want +got):\n%s", diff)
			}
		})
	}
}

// A reason never passes MaxReasonBytes, whatever the program logged, and
// keeps the panic and where it happened.
func TestFailureReasonBounded(t *testing.T) {
	long := strings.Repeat("x", 5000)
	var deep strings.Builder
	deep.WriteString("panic: deep\n\ngoroutine 1 [running]:\n")
	for i := range 100 {
		fmt.Fprintf(&deep, "main.recurse(0x%x)\n\t/src/deep/main.go:%d +0x%x\n", i, 10+i, i)
	}
	deep.WriteString("...additional frames elided...\n")
	tests := []struct {
		name, head, stderr string
		goPanic            bool
		contains           []string
	}{
		{"long lines", "worker: task failed: exit status 1", strings.Repeat(long+"\n", 30), false, []string{"… 17 earlier lines cut", strings.Repeat("x", maxLogLineBytes-3) + "…"}},
		{"deep stack", "worker: task failed: trap: panic: deep", logLines(1, 30) + deep.String(), true,
			[]string{"panic: deep\n\ngoroutine 1 [running]:\nmain.recurse(0x0)\n\t/src/deep/main.go:10 +0x0\n", "more lines of the report cut", "step 30 of 30\npanic: deep"}},
		{"long head", "worker: task failed: trap: " + long, logLines(1, 30), false, []string{"…\nprogram log:\n"}},
		{"long panic line", "worker: task failed: trap: panic: " + long, "panic: " + long + "\n\ngoroutine 1 [running]:\nmain.main()\n", true, []string{"goroutine 1 [running]:\nmain.main()"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := failureReason(tc.head, []byte(tc.stderr), tc.goPanic)
			if len(got) > MaxReasonBytes {
				t.Errorf("reason of %d bytes, want at most %d", len(got), MaxReasonBytes)
			}
			if !utf8.ValidString(got) {
				t.Errorf("reason is not valid UTF-8")
			}
			for _, s := range tc.contains {
				if !strings.Contains(got, s) {
					t.Errorf("reason lacks %q:\n%s", s, got)
				}
			}
		})
	}
}

func TestReasonSummary(t *testing.T) {
	for in, want := range map[string]string{
		"worker: task failed: exit status 3":                     "worker: task failed: exit status 3",
		"worker: task failed: exit status 3\nprogram log:\nboom": "worker: task failed: exit status 3",
		"": "",
	} {
		if got := ReasonSummary(in); got != want {
			t.Errorf("ReasonSummary(%q) = %q, want %q", in, got, want)
		}
	}
}
