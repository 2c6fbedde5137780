package worker

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// rawFrame prefixes body with its length.
func rawFrame(body string) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	return append(b, body...)
}

var (
	testSHA  = strings.Repeat("0123456789abcdef", 4)
	testSeed = strings.Repeat("00", 32)
	validRun = `{"v":1,"type":"run","id":7,"run":{"modulePath":"/m.wasm","moduleSHA256":"` + testSHA +
		`","seed":"` + testSeed + `","memoryLimitPages":4096,"maxStdoutBytes":16,"maxStderrBytes":16,"stdin":"e30="}}`
)

func TestFrameRoundTrip(t *testing.T) {
	frames := []*frame{
		{Version: protocolVersion, Type: frameHello, PID: 42},
		{Version: protocolVersion, Type: frameRun, ID: 1, Run: &runBody{
			ModulePath: "/m.wasm", ModuleSHA256: testSHA, InputDir: "/in", Stdin: []byte(`{"a":1}`),
			Seed: testSeed, MemoryLimitPages: 16, MaxStdoutBytes: 10, MaxStderrBytes: 10,
		}},
		{Version: protocolVersion, Type: frameStarted, ID: 1},
		{Version: protocolVersion, Type: frameResult, ID: 1, Result: &resultBody{Stdout: []byte("out\x00\xff"), Stderr: []byte("err")}},
		{Version: protocolVersion, Type: frameResult, ID: 2, Result: &resultBody{Failure: &Failure{Kind: FailureTrap, Message: "wasm error: unreachable"}}},
		{Version: protocolVersion, Type: frameResult, ID: 3, Result: &resultBody{Error: "input directory: no such file"}},
	}
	var buf bytes.Buffer
	for _, f := range frames {
		if err := writeFrame(&buf, f); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range frames {
		got, err := readFrame(&buf)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("round trip (-want +got):\n%s", diff)
		}
	}
	if _, err := readFrame(&buf); err != io.EOF {
		t.Errorf("after the last frame: %v, want io.EOF", err)
	}
}

func TestReadFrameRejects(t *testing.T) {
	tests := []struct {
		name  string
		input []byte
		want  string // substring of the error
	}{
		{"truncated header", []byte{0, 0}, "truncated header"},
		{"empty body", rawFrame(""), "empty body"},
		{"oversized", binary.BigEndian.AppendUint32(nil, maxFrameBytes+1), "exceeds maximum"},
		{"huge length", []byte{0xff, 0xff, 0xff, 0xff, '{'}, "exceeds maximum"},
		{"truncated body", rawFrame(validRun)[:20], "truncated body: 16 of"},
		{"not JSON", rawFrame("hello"), "invalid character"},
		{"JSON array", rawFrame("[1]"), "cannot unmarshal array"},
		{"null", rawFrame("null"), "unsupported protocol version 0"},
		{"no version", rawFrame(`{"type":"hello","pid":1}`), "unsupported protocol version 0"},
		{"newer version", rawFrame(`{"v":2,"type":"hello","pid":1,"extra":true}`), "unsupported protocol version 2"},
		{"unknown type", rawFrame(`{"v":1,"type":"shutdown"}`), `unknown frame type "shutdown"`},
		{"unknown field", rawFrame(`{"v":1,"type":"hello","pid":1,"color":"red"}`), `unknown field "color"`},
		{"trailing data", rawFrame(`{"v":1,"type":"hello","pid":1} {}`), "trailing data"},
		{"hello without pid", rawFrame(`{"v":1,"type":"hello"}`), "pid must be positive"},
		{"run without body", rawFrame(`{"v":1,"type":"run","id":1}`), "needs id and run"},
		{"run without id", rawFrame(strings.Replace(validRun, `"id":7,`, "", 1)), "needs id and run"},
		{"run with bad hash", rawFrame(strings.Replace(validRun, testSHA, "ABC", 1)), "moduleSHA256"},
		{"run with uppercase hash", rawFrame(strings.Replace(validRun, testSHA, strings.ToUpper(testSHA), 1)), "moduleSHA256"},
		{"run with short seed", rawFrame(strings.Replace(validRun, testSeed, "00", 1)), "seed"},
		{"run without memory", rawFrame(strings.Replace(validRun, `"memoryLimitPages":4096`, `"memoryLimitPages":0`, 1)), "memoryLimitPages 0"},
		{"run over 4 GiB", rawFrame(strings.Replace(validRun, `"memoryLimitPages":4096`, `"memoryLimitPages":65537`, 1)), "memoryLimitPages 65537"},
		{"run with negative stdout cap", rawFrame(strings.Replace(validRun, `"maxStdoutBytes":16`, `"maxStdoutBytes":-1`, 1)), "maxStdoutBytes -1"},
		{"run with bad base64", rawFrame(strings.Replace(validRun, `"e30="`, `"%%%"`, 1)), "illegal base64"},
		{"started with result", rawFrame(`{"v":1,"type":"started","id":1,"result":{}}`), "unexpected fields"},
		{"result without body", rawFrame(`{"v":1,"type":"result","id":1}`), "needs id and result"},
		{"result of unknown kind", rawFrame(`{"v":1,"type":"result","id":1,"result":{"failure":{"kind":"meltdown"}}}`), `unknown failure kind "meltdown"`},
		{"result with error and output", rawFrame(`{"v":1,"type":"result","id":1,"result":{"error":"x","stdout":"eA=="}}`), "error excludes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := readFrame(bytes.NewReader(tc.input))
			if err == nil {
				t.Fatalf("accepted %+v", f)
			}
			if !errors.Is(err, ErrBadFrame) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want ErrBadFrame containing %q", err, tc.want)
			}
		})
	}
	if f, err := readFrame(bytes.NewReader(rawFrame(validRun))); err != nil || f.Run == nil || string(f.Run.Stdin) != "{}" {
		t.Errorf("valid run frame: %+v, %v", f, err)
	}
	if _, err := readFrame(bytes.NewReader(nil)); err != io.EOF {
		t.Errorf("empty input: %v, want io.EOF", err)
	}
}

// FuzzDecodeFrame checks that any input either decodes to a frame that
// survives a round trip or is rejected with ErrBadFrame (or io.EOF when
// empty), without panicking or allocating by a lying length.
func FuzzDecodeFrame(f *testing.F) {
	f.Add(rawFrame(validRun))
	f.Add(rawFrame(`{"v":1,"type":"hello","pid":1}`))
	f.Add(rawFrame(`{"v":1,"type":"result","id":1,"result":{"failure":{"kind":"trap","message":"x"}}}`))
	f.Add(rawFrame(`{"v":1,"type":"result","id":1,"result":{"stdout":"e30=","work":18446744073709551615}}`))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := readFrame(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, ErrBadFrame) && err != io.EOF {
				t.Fatalf("error %v is neither ErrBadFrame nor io.EOF", err)
			}
			return
		}
		var buf bytes.Buffer
		if err := writeFrame(&buf, got); err != nil {
			t.Fatalf("re-encode %+v: %v", got, err)
		}
		again, err := readFrame(&buf)
		if err != nil {
			t.Fatalf("decode re-encoded %q: %v", buf.Bytes(), err)
		}
		if diff := cmp.Diff(got, again, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("round trip (-first +second):\n%s", diff)
		}
	})
}
