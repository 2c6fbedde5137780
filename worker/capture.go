package worker

import (
	"bytes"
	"fmt"
)

// stdoutBuffer captures a guest's stdout up to max bytes. A write that would
// pass the limit panics with errOutputTooLarge; wazero turns the panic into
// the error of the running call, which stops the guest even when it ignores
// write errors, as a flooding program would. Not safe for concurrent use (a
// guest is single-threaded).
type stdoutBuffer struct {
	buf      []byte
	max      int
	exceeded bool
}

func (b *stdoutBuffer) Write(p []byte) (int, error) {
	if b.exceeded || len(p) > b.max-len(b.buf) {
		b.exceeded = true
		panic(errOutputTooLarge)
	}
	b.buf = append(b.buf, p...)
	return len(p), nil
}

// stderrBuffer keeps a bounded log of a guest's stderr: the first half of
// its capacity and a tail of the rest. When bytes were dropped, bytes()
// joins head and tail with a line "[... N bytes omitted ...]", trimming the
// tail so that the total never exceeds max. Writes never fail.
//
// It also watches the stream for the reports of the Go runtime, line by
// line, however long the stream: the first "panic: " or "fatal error: "
// line and an "out of memory" report. These survive truncation.
type stderrBuffer struct {
	max     int
	headMax int
	tailMax int
	head    []byte // the first headMax bytes
	tail    []byte // the last tailMax bytes, compacted when twice that
	total   int64  // bytes written

	line      []byte // current line, first maxWatchedLine bytes
	lineLen   int    // full length of the current line
	panicLine string // first line starting with "panic: " or "fatal error: "
	outOfMem  bool   // the Go runtime reported running out of memory
}

// maxWatchedLine bounds how much of each stderr line is kept for matching.
const maxWatchedLine = 512

func newStderrBuffer(max int) *stderrBuffer {
	return &stderrBuffer{max: max, headMax: max / 2, tailMax: max - max/2}
}

func (b *stderrBuffer) Write(p []byte) (int, error) {
	b.watch(p)
	b.total += int64(len(p))
	rest := p
	if n := min(len(rest), b.headMax-len(b.head)); n > 0 {
		b.head = append(b.head, rest[:n]...)
		rest = rest[n:]
	}
	switch {
	case len(rest) == 0:
	case len(rest) >= b.tailMax:
		b.tail = append(b.tail[:0], rest[len(rest)-b.tailMax:]...)
	default:
		b.tail = append(b.tail, rest...)
		if len(b.tail) > 2*b.tailMax {
			b.tail = append(b.tail[:0], b.tail[len(b.tail)-b.tailMax:]...)
		}
	}
	return len(p), nil
}

// watch scans p for complete lines and matches the runtime's reports.
func (b *stderrBuffer) watch(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		if room := maxWatchedLine - len(b.line); room > 0 {
			b.line = append(b.line, chunk[:min(room, len(chunk))]...)
		}
		b.lineLen += len(chunk)
		if i < 0 {
			return
		}
		b.endLine()
		p = p[i+1:]
	}
}

// endLine matches the current line and starts a new one.
func (b *stderrBuffer) endLine() {
	line := b.line
	if b.lineLen > 0 {
		switch {
		case bytes.HasPrefix(line, []byte("fatal error: out of memory")),
			bytes.HasPrefix(line, []byte("runtime: out of memory")):
			b.outOfMem = true
		}
		if b.panicLine == "" && (bytes.HasPrefix(line, []byte("panic: ")) || bytes.HasPrefix(line, []byte("fatal error: "))) {
			b.panicLine = string(line)
		}
	}
	b.line = b.line[:0]
	b.lineLen = 0
}

// bytes returns the kept log, at most max bytes.
func (b *stderrBuffer) bytes() []byte {
	if b.total == 0 {
		return nil
	}
	tail := b.tail[max(0, len(b.tail)-b.tailMax):]
	if int64(len(b.head)+len(tail)) == b.total {
		return append(append([]byte(nil), b.head...), tail...)
	}
	for {
		omitted := b.total - int64(len(b.head)) - int64(len(tail))
		marker := fmt.Sprintf("\n[... %d bytes omitted ...]\n", omitted)
		over := len(b.head) + len(marker) + len(tail) - b.max
		switch {
		case over <= 0:
			out := make([]byte, 0, len(b.head)+len(marker)+len(tail))
			out = append(out, b.head...)
			out = append(out, marker...)
			return append(out, tail...)
		case len(tail) == 0:
			// Too small a cap for the marker: keep the head alone.
			return append([]byte(nil), b.head[:min(len(b.head), b.max)]...)
		default:
			tail = tail[min(over, len(tail)):]
		}
	}
}

// finish matches a last line that has no newline.
func (b *stderrBuffer) finish() {
	if b.lineLen > 0 {
		b.endLine()
	}
}
