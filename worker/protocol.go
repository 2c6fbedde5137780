package worker

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// The wire protocol between a Pool and one worker process.
//
// Both directions carry frames on the child's stdin (pool to worker) and
// stdout (worker to pool). A frame is a 4-byte big-endian body length n,
// 1 <= n <= maxFrameBytes, followed by n bytes of body: one JSON object
// holding the protocol version "v" (protocolVersion), a "type" and the
// fields of that type. Byte strings are base64 (encoding/json's []byte),
// hashes and seeds lowercase hex. Unknown fields, unknown types, a missing
// or different version and trailing bytes after the object are errors: the
// two sides are always built from the same source, so there is nothing to
// be lenient about.
//
// The conversation:
//
//	worker -> pool  {"v":1,"type":"hello","pid":1234}            once, at start
//	pool -> worker  {"v":1,"type":"run","id":1,"run":{...}}      one task
//	worker -> pool  {"v":1,"type":"started","id":1}              module compiled, now running
//	worker -> pool  {"v":1,"type":"result","id":1,"result":{...}}
//
// then the next run. "started" is skipped when the task fails before its
// module runs (a bad module, a setup error). The pool counts a task's
// timeout from "started", so compiling a module never counts against a
// task. The pool ends a worker by closing its stdin (the worker's Serve
// returns) or by killing it.
const (
	protocolVersion = 1
	maxFrameBytes   = 128 << 20
	frameHeaderSize = 4
)

// frameType names the kind of a frame.
type frameType string

const (
	frameHello   frameType = "hello"
	frameRun     frameType = "run"
	frameStarted frameType = "started"
	frameResult  frameType = "result"
)

// frame is one protocol message; which pointer is set depends on Type.
type frame struct {
	Version int         `json:"v"`
	Type    frameType   `json:"type"`
	ID      uint64      `json:"id,omitempty"`
	PID     int         `json:"pid,omitempty"`
	Run     *runBody    `json:"run,omitempty"`
	Result  *resultBody `json:"result,omitempty"`
}

// runBody is a task as sent to the worker, with defaults already applied.
type runBody struct {
	ModulePath       string `json:"modulePath"`
	ModuleSHA256     string `json:"moduleSHA256"`
	InputDir         string `json:"inputDir,omitempty"`
	Stdin            []byte `json:"stdin,omitempty"`
	Seed             string `json:"seed"`
	MemoryLimitPages uint32 `json:"memoryLimitPages"`
	MaxStdoutBytes   int    `json:"maxStdoutBytes"`
	MaxStderrBytes   int    `json:"maxStderrBytes"`
	// GPUs are the task's GPUs (Request.GPUs); the worker process's
	// CUDA_VISIBLE_DEVICES names the same.
	GPUs              []string `json:"gpus,omitempty"`
	GPUMemoryLimitMiB int64    `json:"gpuMemoryLimitMiB,omitempty"`
}

// resultBody is a task's outcome as sent by the worker. Error is set instead
// of Failure when the worker could not set the task up (see ErrSetup).
type resultBody struct {
	Stdout  []byte    `json:"stdout,omitempty"`
	Stderr  []byte    `json:"stderr,omitempty"`
	Failure *Failure  `json:"failure,omitempty"`
	Error   string    `json:"error,omitempty"`
	GPU     *GPUStats `json:"gpu,omitempty"`
	// Work is the task's count of work (Result.Work).
	Work uint64 `json:"work,omitempty"`
}

// writeFrame encodes f and writes it to w as one frame. It refuses a frame
// that would exceed maxFrameBytes.
func writeFrame(w io.Writer, f *frame) error {
	body, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("encode %s frame: %w", f.Type, err)
	}
	if len(body) > maxFrameBytes {
		return fmt.Errorf("encode %s frame: %w: %d bytes exceeds maximum %d", f.Type, ErrBadFrame, len(body), maxFrameBytes)
	}
	buf := make([]byte, frameHeaderSize, frameHeaderSize+len(body))
	binary.BigEndian.PutUint32(buf, uint32(len(body)))
	buf = append(buf, body...)
	if _, err := w.Write(buf); err != nil {
		return fmt.Errorf("write %s frame: %w", f.Type, err)
	}
	return nil
}

// readFrame reads and checks one frame from r. At a clean end of input
// (no byte of a new frame) it returns io.EOF; every malformed frame gives an
// error wrapping ErrBadFrame. The body buffer grows only as bytes arrive, so
// a lying length costs no memory up front.
func readFrame(r io.Reader) (*frame, error) {
	var hdr [frameHeaderSize]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("%w: truncated header", ErrBadFrame)
		}
		return nil, err // io.EOF or a read error
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 {
		return nil, fmt.Errorf("%w: empty body", ErrBadFrame)
	}
	if n > maxFrameBytes {
		return nil, fmt.Errorf("%w: body of %d bytes exceeds maximum %d", ErrBadFrame, n, maxFrameBytes)
	}
	var body bytes.Buffer
	got, err := io.CopyN(&body, r, int64(n))
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: truncated body: %d of %d bytes", ErrBadFrame, got, n)
		}
		return nil, err
	}
	return decodeFrameBody(body.Bytes())
}

// decodeFrameBody parses and checks a frame body (without its header).
func decodeFrameBody(body []byte) (*frame, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var f frame
	if err := dec.Decode(&f); err != nil {
		// Report a version mismatch before complaining about fields a
		// newer version may have added.
		var v struct {
			Version *int `json:"v"`
		}
		if json.Unmarshal(body, &v) == nil && v.Version != nil && *v.Version != protocolVersion {
			return nil, fmt.Errorf("%w: unsupported protocol version %d (want %d)", ErrBadFrame, *v.Version, protocolVersion)
		}
		return nil, fmt.Errorf("%w: %w", ErrBadFrame, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: trailing data after JSON object", ErrBadFrame)
	}
	if err := f.check(); err != nil {
		return nil, fmt.Errorf("%w: %s frame: %w", ErrBadFrame, f.Type, err)
	}
	return &f, nil
}

// check enforces the protocol's rules on a decoded frame.
func (f *frame) check() error {
	if f.Version != protocolVersion {
		return fmt.Errorf("unsupported protocol version %d (want %d)", f.Version, protocolVersion)
	}
	switch f.Type {
	case frameHello:
		if f.PID <= 0 {
			return errors.New("pid must be positive")
		}
		if f.ID != 0 || f.Run != nil || f.Result != nil {
			return errors.New("unexpected fields")
		}
	case frameRun:
		if f.ID == 0 || f.Run == nil {
			return errors.New("needs id and run")
		}
		if f.PID != 0 || f.Result != nil {
			return errors.New("unexpected fields")
		}
		return f.Run.check()
	case frameStarted:
		if f.ID == 0 {
			return errors.New("needs id")
		}
		if f.PID != 0 || f.Run != nil || f.Result != nil {
			return errors.New("unexpected fields")
		}
	case frameResult:
		if f.ID == 0 || f.Result == nil {
			return errors.New("needs id and result")
		}
		if f.PID != 0 || f.Run != nil {
			return errors.New("unexpected fields")
		}
		return f.Result.check()
	default:
		return fmt.Errorf("unknown frame type %q", string(f.Type))
	}
	return nil
}

func (b *runBody) check() error {
	switch {
	case b.ModulePath == "":
		return errors.New("empty modulePath")
	case !isLowerHex(b.ModuleSHA256, 32):
		return errors.New("moduleSHA256 must be 64 lowercase hex digits")
	case !isLowerHex(b.Seed, 32):
		return errors.New("seed must be 64 lowercase hex digits")
	case b.MemoryLimitPages == 0 || b.MemoryLimitPages > MaxMemoryLimitMiB*pagesPerMiB:
		return fmt.Errorf("memoryLimitPages %d out of range 1..%d", b.MemoryLimitPages, MaxMemoryLimitMiB*pagesPerMiB)
	case b.MaxStdoutBytes <= 0 || b.MaxStdoutBytes > MaxStdoutLimitBytes:
		return fmt.Errorf("maxStdoutBytes %d out of range 1..%d", b.MaxStdoutBytes, MaxStdoutLimitBytes)
	case b.MaxStderrBytes <= 0 || b.MaxStderrBytes > MaxStderrLimitBytes:
		return fmt.Errorf("maxStderrBytes %d out of range 1..%d", b.MaxStderrBytes, MaxStderrLimitBytes)
	case len(b.Stdin) > MaxStdinBytes:
		return fmt.Errorf("stdin of %d bytes exceeds maximum %d", len(b.Stdin), MaxStdinBytes)
	case b.GPUMemoryLimitMiB < 0:
		return fmt.Errorf("gpuMemoryLimitMiB %d is negative", b.GPUMemoryLimitMiB)
	}
	if err := checkGPUs(b.GPUs); err != nil {
		return err
	}
	return nil
}

func (b *resultBody) check() error {
	switch {
	case b.Error != "" && (b.Failure != nil || b.Stdout != nil || b.Stderr != nil || b.GPU != nil):
		return errors.New("error excludes failure and output")
	case len(b.Stdout) > MaxStdoutLimitBytes:
		return fmt.Errorf("stdout of %d bytes exceeds maximum %d", len(b.Stdout), MaxStdoutLimitBytes)
	case len(b.Stderr) > MaxStderrLimitBytes:
		return fmt.Errorf("stderr of %d bytes exceeds maximum %d", len(b.Stderr), MaxStderrLimitBytes)
	case b.Failure != nil && !b.Failure.Kind.valid():
		return fmt.Errorf("unknown failure kind %q", string(b.Failure.Kind))
	}
	return nil
}

// pagesPerMiB is the number of 64 KiB WebAssembly pages in one MiB.
const pagesPerMiB = 16

// isLowerHex reports whether s is exactly n bytes written as 2n lowercase
// hex digits.
func isLowerHex(s string, n int) bool {
	if len(s) != 2*n {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
