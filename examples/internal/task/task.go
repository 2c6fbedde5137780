// Package task is the job-program side of the idlepool task ABI, shared by
// the example programs under examples/.
//
// A job program is a WASI command. It reads one JSON object, the task, from
// stdin, writes exactly one JSON object, the result, to stdout and exits 0.
// On bad input it writes a message to stderr and exits 1. The task looks
// like
//
//	{"index":7,"inputs":{"data":"/input/data"},"job":"<64 hex>",
//	 "params":{"samples":1000000},"seed":13587311887558109768,
//	 "seed_decimal":"13587311887558109768","seed_hex":"bc8fd42c4e57ea48"}
//
// Go decodes the seed number into a uint64 exactly, so Task reads only
// "seed"; seed_decimal and seed_hex carry the same value for readers that
// parse JSON numbers as doubles.
//
// A program keeps its computation in ordinary functions that tests call
// directly, and its main is a thin shell:
//
//	func main() { os.Exit(task.Run(os.Stdin, os.Stdout, os.Stderr, compute)) }
//
// The package uses only the standard library so that it compiles with
// GOOS=wasip1 GOARCH=wasm.
package task

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Task is one task as the runtime hands it to a job program.
type Task struct {
	// Job is the job ID: 64 lowercase hex digits.
	Job string `json:"job"`
	// Index is the task's 0-based index within the job.
	Index int `json:"index"`
	// Seed is the task's own random seed, derived from the job ID and Index.
	Seed uint64 `json:"seed"`
	// Params holds the manifest's [split.params] constants merged with the
	// split rule's per-task parameters, as a JSON object.
	Params json.RawMessage `json:"params"`
	// Inputs maps input names to read-only paths inside the sandbox.
	Inputs map[string]string `json:"inputs"`
}

// ErrNoInput is returned by [Task.Input] when the task names no such input.
var ErrNoInput = errors.New("task: no such input")

// ExitData is the exit status that says the task's input data is wrong,
// not the program: EX_DATAERR of BSD's sysexits.h. idlepool then tells the
// person to fix the data rather than the program.
const ExitData = 65

// dataError marks an error caused by the input data.
type dataError struct{ err error }

func (e dataError) Error() string { return e.err.Error() }
func (e dataError) Unwrap() error { return e.err }

// DataError marks err as caused by the task's input data (a cell that is
// not a number, a row with too few fields), so that [Run] exits with
// [ExitData]. It returns nil for nil.
func DataError(err error) error {
	if err == nil {
		return nil
	}
	return dataError{err}
}

// Decode reads exactly one JSON object from r. Anything but white space
// after the object is an error.
func Decode(r io.Reader) (Task, error) {
	dec := json.NewDecoder(r)
	var t Task
	if err := dec.Decode(&t); err != nil {
		return Task{}, fmt.Errorf("decode task: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Task{}, errors.New("decode task: trailing data after the task object")
	}
	return t, nil
}

// DecodeParams decodes the task's params object into v, a pointer to a
// struct. Parameters that v does not name are ignored; a missing or null
// params object leaves v untouched.
func (t Task) DecodeParams(v any) error {
	p := bytes.TrimSpace(t.Params)
	if len(p) == 0 || bytes.Equal(p, []byte("null")) {
		return nil
	}
	if err := json.Unmarshal(p, v); err != nil {
		return fmt.Errorf("decode params: %w", err)
	}
	return nil
}

// Input returns the sandbox path of the named input, or an error wrapping
// [ErrNoInput].
func (t Task) Input(name string) (string, error) {
	path, ok := t.Inputs[name]
	if !ok || path == "" {
		return "", fmt.Errorf("%w: %q", ErrNoInput, name)
	}
	return path, nil
}

// Run is a job program's whole life: it decodes the task from stdin, calls
// compute, and writes the result, JSON-encoded and followed by a newline, to
// stdout. It returns the process exit status: 0 on success, 1 when the task
// cannot be decoded, compute fails or the result cannot be encoded, in which
// case stderr receives one line saying why and stdout receives nothing;
// [ExitData] instead of 1 when compute's error is a [DataError].
//
// The result must encode deterministically: structs, slices, numbers and
// maps (encoding/json sorts map keys) are fine; non-finite floats are not
// representable in JSON and make Run fail.
func Run(stdin io.Reader, stdout, stderr io.Writer, compute func(Task) (any, error)) int {
	fail := func(err error) int {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return 1
	}
	t, err := Decode(stdin)
	if err != nil {
		return fail(err)
	}
	result, err := compute(t)
	if err != nil {
		if errors.As(err, new(dataError)) {
			fail(err)
			return ExitData
		}
		return fail(err)
	}
	out, err := json.Marshal(result)
	if err != nil {
		return fail(fmt.Errorf("encode result: %w", err))
	}
	if _, err := stdout.Write(append(out, '\n')); err != nil {
		return fail(fmt.Errorf("write result: %w", err))
	}
	return 0
}
