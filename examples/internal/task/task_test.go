package task

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDecode(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Task
		wantErr string
	}{
		{
			name: "full",
			in: `{"job":"ab12","index":7,"seed":18446744073709551615,` +
				`"params":{"samples":10},"inputs":{"data":"/input/data"}}` + "\n",
			want: Task{
				Job: "ab12", Index: 7, Seed: math.MaxUint64,
				Params: []byte(`{"samples":10}`),
				Inputs: map[string]string{"data": "/input/data"},
			},
		},
		{name: "empty object", in: `{}`, want: Task{}},
		{name: "empty input", in: ``, wantErr: "decode task: EOF"},
		{name: "not an object", in: `[1]`, wantErr: "decode task"},
		{name: "negative seed", in: `{"seed":-1}`, wantErr: "decode task"},
		{name: "trailing object", in: `{} {}`, wantErr: "trailing data"},
		{name: "trailing garbage", in: `{} x`, wantErr: "trailing data"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Decode(strings.NewReader(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("task (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeParams(t *testing.T) {
	type params struct {
		N int     `json:"n"`
		T float64 `json:"T"`
	}
	tests := []struct {
		name    string
		params  string
		want    params
		wantErr string
	}{
		{name: "values", params: `{"n":3,"T":2.25,"other":"x"}`, want: params{N: 3, T: 2.25}},
		{name: "absent", params: ``, want: params{N: -1}},
		{name: "null", params: `null`, want: params{N: -1}},
		{name: "wrong type", params: `{"n":"3"}`, wantErr: "decode params"},
		{name: "fractional int", params: `{"n":2.5}`, wantErr: "decode params"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := params{N: -1}
			err := Task{Params: []byte(tc.params)}.DecodeParams(&got)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("params (-want +got):\n%s", diff)
			}
		})
	}
}

func TestInput(t *testing.T) {
	tk := Task{Inputs: map[string]string{"data": "/input/data", "empty": ""}}
	tests := []struct {
		name    string
		input   string
		want    string
		wantErr error
	}{
		{name: "present", input: "data", want: "/input/data"},
		{name: "absent", input: "chunk", wantErr: ErrNoInput},
		{name: "empty path", input: "empty", wantErr: ErrNoInput},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tk.Input(tc.input)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("path %q, want %q", got, tc.want)
			}
		})
	}
}

func TestRun(t *testing.T) {
	type out struct {
		B []int          `json:"b"`
		A map[string]int `json:"a"`
	}
	tests := []struct {
		name       string
		stdin      string
		compute    func(Task) (any, error)
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{
			name:  "result",
			stdin: `{"index":4,"params":{"x":1}}`,
			compute: func(t Task) (any, error) {
				return out{B: []int{t.Index}, A: map[string]int{"z": 1, "a": 2}}, nil
			},
			wantStdout: `{"b":[4],"a":{"a":2,"z":1}}` + "\n",
		},
		{
			name:       "bad task",
			stdin:      `{`,
			compute:    func(Task) (any, error) { panic("not reached") },
			wantCode:   1,
			wantStderr: "error: decode task: unexpected EOF\n",
		},
		{
			name:       "compute fails",
			stdin:      `{}`,
			compute:    func(Task) (any, error) { return nil, errors.New("row 3 column b: not a number") },
			wantCode:   1,
			wantStderr: "error: row 3 column b: not a number\n",
		},
		{
			name:  "data error",
			stdin: `{}`,
			compute: func(Task) (any, error) {
				return nil, fmt.Errorf("read data: %w", DataError(errors.New("line 3 column b: not a number")))
			},
			wantCode:   ExitData,
			wantStderr: "error: read data: line 3 column b: not a number\n",
		},
		{
			name:       "result not encodable",
			stdin:      `{}`,
			compute:    func(Task) (any, error) { return math.NaN(), nil },
			wantCode:   1,
			wantStderr: "error: encode result: json: unsupported value: NaN\n",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := Run(strings.NewReader(tc.stdin), &stdout, &stderr, tc.compute)
			if code != tc.wantCode {
				t.Errorf("exit code %d, want %d", code, tc.wantCode)
			}
			if diff := cmp.Diff(tc.wantStdout, stdout.String()); diff != "" {
				t.Errorf("stdout (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantStderr, stderr.String()); diff != "" {
				t.Errorf("stderr (-want +got):\n%s", diff)
			}
		})
	}
}

// FuzzDecode checks that Decode never panics and that whatever it accepts
// survives a round trip through Run's encoding.
func FuzzDecode(f *testing.F) {
	f.Add(`{"job":"ab","index":7,"seed":1234567890123,"params":{"samples":1000000},"inputs":{"data":"/input/data"}}`)
	f.Add(`{"params":null}`)
	f.Add(`{} {}`)
	f.Fuzz(func(t *testing.T, in string) {
		tk, err := Decode(strings.NewReader(in))
		if err != nil {
			return
		}
		var stdout bytes.Buffer
		if code := Run(strings.NewReader(in), &stdout, &bytes.Buffer{}, func(got Task) (any, error) {
			if diff := cmp.Diff(tk, got); diff != "" {
				t.Errorf("second decode differs (-first +second):\n%s", diff)
			}
			return got.Index, nil
		}); code != 0 {
			t.Errorf("Run failed on input Decode accepted: %q", in)
		}
	})
}
