package worker

import (
	"strings"
	"testing"
	"time"
)

// trapCases are the traps of testdata/vectors/traps.c: the stdin byte
// that chooses each and the profile's message for it.
var trapCases = []struct {
	stdin byte
	want  string
}{
	{'u', "wasm trap: " + TrapUnreachable},
	{'d', "wasm trap: " + TrapDivideByZero},
	{'r', "wasm trap: " + TrapDivideByZero},
	{'o', "wasm trap: " + TrapIntegerOverflow},
	{'c', "wasm trap: " + TrapIntegerOverflow},
	{'m', "wasm trap: " + TrapMemoryBounds},
	{'t', "wasm trap: " + TrapIndirectCall},
	{'s', "wasm trap: " + TrapIndirectCall},
	{'x', "wasm trap: " + TrapStackExhausted},
}

// TestTrapWords: each trap fails its task with the profile's words, not
// wazero's message and stack trace, and keeps those for people in Trace.
// (TestWasiJSNode and TestWasiJSBrowser run the same tasks in V8.)
func TestTrapWords(t *testing.T) {
	traps := buildTraps(t)
	h := newTestHost(t, true)
	h.interpreter = raceEnabled
	for _, tc := range trapCases {
		b, _, err := newRunBody(Request{ModulePath: traps.path, ModuleSHA256: traps.sha, Stdin: []byte{tc.stdin}, Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		res := runInHost(t, h, b)
		if res.Failure == nil || res.Failure.Kind != FailureTrap || res.Failure.Message != tc.want {
			t.Errorf("stdin %q: failure %+v, want a trap with message %q", tc.stdin, res.Failure, tc.want)
			continue
		}
		if res.Failure.Trace == "" || strings.HasPrefix(res.Failure.Trace, "wasm trap: ") {
			t.Errorf("stdin %q: trace %q, want wazero's own words", tc.stdin, res.Failure.Trace)
		}
	}
	b, _, err := newRunBody(Request{ModulePath: traps.path, ModuleSHA256: traps.sha, Stdin: []byte("n"), Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if res := runInHost(t, h, b); res.Failure != nil {
		t.Errorf("stdin \"n\" (no trap): failure %+v", res.Failure)
	}
}
