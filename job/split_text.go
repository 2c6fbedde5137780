package job

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/csv"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
)

// Formats of a split input (split.format): how the kfold and chunks rules
// find the rows of the file they cut.
const (
	// FormatCSV reads the input as CSV records (RFC 4180): a record ends
	// at a line break outside double quotes, so a quoted field may hold
	// commas, line breaks and doubled quotes (""). Every record has as many
	// fields as the first; empty lines are not records. This is what
	// Go's encoding/csv, Python's csv module and spreadsheets read.
	FormatCSV = "csv"
	// FormatLines reads the input as plain text, one row per physical
	// line: for logs, JSON Lines and other line-oriented text.
	FormatLines = "lines"
)

// baseFormat is the format a rule's input had before split.format existed:
// kfold always meant the rows of a CSV file, chunks cut at line ends. The
// canonical encoding names the format only when it differs, so the IDs of
// jobs written before keep their meaning.
func (s SplitSpec) baseFormat() string {
	if s.Rule == "kfold" {
		return FormatCSV
	}
	return FormatLines
}

// maxRecordBytes bounds one row of a kfold input (CSV record or line), so
// that a file with an unclosed quote near its start is refused without
// reading all of it into memory.
const maxRecordBytes = 16 << 20

// errRecordTooLong stops a scan at a row longer than its limit.
var errRecordTooLong = errors.New("record too long")

// rowTooLongError is a row of a split input longer than a scan allows.
// Its message says so in general terms; chunkFile says it in the terms of
// a chunks split (the task's memory limit).
type rowTooLongError struct {
	line   int   // 1-based line of the row's first byte
	offset int64 // byte offset of the row's first byte
	size   int64 // the row's length in bytes; 0 when the scan stopped before its end
	limit  int64 // the most bytes a row may have
	csv    bool  // a CSV record, not a line
}

func (e *rowTooLongError) Error() string {
	switch {
	case e.csv && e.size > 0:
		return fmt.Sprintf("line %d: a record of %d bytes, longer than %d, the most a row may have", e.line, e.size, e.limit)
	case e.csv:
		return fmt.Sprintf("line %d: a record longer than %d bytes, the most a row may have (is a quote left open?)%s", e.line, e.limit, orLines)
	case e.size > 0:
		return fmt.Sprintf("line %d (at byte %d) is %d bytes, longer than %d, the most a row may have", e.line, e.offset, e.size, e.limit)
	}
	return fmt.Sprintf("line %d (at byte %d) is longer than %d bytes, the most a row may have", e.line, e.offset, e.limit)
}

// orLines ends messages about CSV input that cannot be cut.
const orLines = `; or set split.format = "lines" to cut plain text at line ends`

// textUnit is one piece of a split input: a row (a CSV record or a line,
// with its line break) or, in CSV files, an empty line between records.
type textUnit struct {
	raw    []byte // the bytes, line break included; valid until the next unit
	line   int    // 1-based line of its first byte
	offset int64  // byte offset of its first byte
	row    bool   // a row, not an empty line
}

// scanText calls fn with every unit of the file at path in order, in the
// given format; the units lie back to back and cover the file. A row
// longer than limit bytes stops the scan with an error naming its line. In
// CSV format a file that is not RFC 4180 CSV (an unclosed or stray quote, a
// record with another number of fields than the first) is an error naming
// the line. If sum is not nil, every byte of the file is written to it.
func scanText(path, format string, limit int64, sum hash.Hash, fn func(u textUnit) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var r io.Reader = f
	if sum != nil {
		r = io.TeeReader(f, sum)
	}
	br := bufio.NewReaderSize(r, 1<<20)
	if format == FormatCSV {
		err = scanCSV(br, limit, fn)
	} else {
		err = scanLines(br, limit, fn)
	}
	if err != nil {
		return fmt.Errorf("%s %w", path, err)
	}
	return nil
}

// scanLines splits br into lines, each a row.
func scanLines(br *bufio.Reader, limit int64, fn func(u textUnit) error) error {
	var off int64
	var buf []byte
	for line := 1; ; line++ {
		b, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			buf = append(buf[:0], b...)
			for err == bufio.ErrBufferFull {
				if int64(len(buf)) > limit {
					return &rowTooLongError{line: line, offset: off, limit: limit}
				}
				b, err = br.ReadSlice('\n')
				buf = append(buf, b...)
			}
			b = buf
		}
		if err != nil && err != io.EOF {
			return fmt.Errorf("read: %w", err)
		}
		if len(b) > 0 {
			if int64(len(b)) > limit {
				return &rowTooLongError{line: line, offset: off, size: int64(len(b)), limit: limit}
			}
			if err := fn(textUnit{raw: b, line: line, offset: off, row: true}); err != nil {
				return err
			}
			off += int64(len(b))
		}
		if err == io.EOF {
			return nil
		}
	}
}

// keepReader hands bytes to encoding/csv and keeps the ones not yet given
// out as units, so that each record's raw bytes can be cut off after the
// reader has parsed it.
type keepReader struct {
	r     io.Reader
	buf   []byte // bytes read from r, from the start of the next unit
	limit int64  // most bytes held; more stops the reader
}

func (k *keepReader) Read(p []byte) (int, error) {
	if int64(len(k.buf)) > k.limit {
		return 0, errRecordTooLong
	}
	n, err := k.r.Read(p)
	k.buf = append(k.buf, p[:n]...)
	return n, err
}

// scanCSV splits br into RFC 4180 records (with encoding/csv, so that the
// split agrees with the example programs) and the empty lines between them.
func scanCSV(br *bufio.Reader, limit int64, fn func(u textUnit) error) error {
	k := &keepReader{r: br, limit: limit + 64<<10} // encoding/csv reads ahead a little
	var base int64                                 // the file offset of k.buf[0]
	if b, _ := br.Peek(3); bytes.Equal(b, []byte("\uFEFF")) {
		// A UTF-8 byte order mark is not data: it stays in the first
		// record's bytes, but the parser does not see it.
		k.buf = append(k.buf, b...)
		_, _ = br.Discard(3)
	}
	bom := int64(len(k.buf))
	cr := csv.NewReader(k)
	cr.ReuseRecord = true
	line, fields := 1, -1
	// emit hands out the next n bytes of k.buf: empty lines, then (row)
	// the record.
	emit := func(n int64, row bool) error {
		raw := k.buf[:n]
		for len(raw) > 0 && (raw[0] == '\n' || raw[0] == '\r' && len(raw) > 1 && raw[1] == '\n') {
			nl := bytes.IndexByte(raw, '\n') + 1
			if err := fn(textUnit{raw: raw[:nl], line: line, offset: base}); err != nil {
				return err
			}
			line++
			base += int64(nl)
			raw = raw[nl:]
		}
		if len(raw) > 0 {
			if int64(len(raw)) > limit {
				return &rowTooLongError{line: line, offset: base, size: int64(len(raw)), limit: limit, csv: true}
			}
			if err := fn(textUnit{raw: raw, line: line, offset: base, row: row}); err != nil {
				return err
			}
			line += bytes.Count(raw, []byte{'\n'})
			base += int64(len(raw))
		}
		k.buf = k.buf[n:]
		return nil
	}
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			return emit(int64(len(k.buf)), false) // empty lines at the end
		}
		if err != nil {
			return csvError(err, k.buf, line, base, fields, rec, limit)
		}
		if fields < 0 {
			fields = len(rec)
		}
		if err := emit(cr.InputOffset()+bom-base, true); err != nil {
			return err
		}
	}
}

// csvError explains why a CSV file cannot be cut into records.
func csvError(err error, held []byte, line int, offset int64, fields int, rec []string, limit int64) error {
	if errors.Is(err, errRecordTooLong) {
		// held starts at offset, with any empty lines before the record.
		for len(held) > 0 && (held[0] == '\n' || held[0] == '\r' && len(held) > 1 && held[1] == '\n') {
			nl := bytes.IndexByte(held, '\n') + 1
			held, offset, line = held[nl:], offset+int64(nl), line+1
		}
		return &rowTooLongError{line: line, offset: offset, limit: limit, csv: true}
	}
	var pe *csv.ParseError
	if !errors.As(err, &pe) {
		return fmt.Errorf("read: %w", err)
	}
	switch {
	case errors.Is(pe.Err, csv.ErrFieldCount):
		return fmt.Errorf("line %d: a record of %d fields, but the first record has %d: every record of a CSV file has the same number of fields (RFC 4180)%s",
			pe.StartLine, len(rec), fields, orLines)
	case errors.Is(pe.Err, csv.ErrBareQuote):
		return fmt.Errorf("line %d column %d: a \" inside a field that does not start with one: quote the whole field and double the quote (\"a\"\"b\")%s",
			pe.Line, pe.Column, orLines)
	case errors.Is(pe.Err, csv.ErrQuote):
		if open := unclosedQuote(held, line); open > 0 {
			return fmt.Errorf("line %d: a quoted field opened here is not closed before the end of the file: close it, and double a quote inside it (\"\")%s",
				open, orLines)
		}
		return fmt.Errorf("line %d column %d: text after the closing quote of a quoted field, or a quote inside it that is not doubled (\"\")%s",
			pe.Line, pe.Column, orLines)
	}
	return fmt.Errorf("line %d: %w", pe.Line, pe.Err)
}

// unclosedQuote reads b, the bytes of a CSV file from line on, and returns
// the line of a quoted field that is still open at the end of b, or 0 when
// every quoted field is closed.
func unclosedQuote(b []byte, line int) int {
	b = bytes.TrimPrefix(b, []byte("\uFEFF"))
	quoted, fieldStart, open := false, true, 0
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case quoted && c == '"' && i+1 < len(b) && b[i+1] == '"':
			i++ // a doubled quote
		case quoted && c == '"':
			quoted = false
		case !quoted && c == '"' && fieldStart:
			quoted, open = true, line
		}
		if c == '\n' {
			line++
		}
		fieldStart = !quoted && (c == ',' || c == '\n')
	}
	if quoted {
		return open
	}
	return 0
}

// failData is the ManifestError for a split input whose content cannot be
// cut (ErrInputData), or for a file that cannot be read.
func (m *Manifest) failData(field string, err error) error {
	e := &ManifestError{File: m.Path, Field: field, Msg: err.Error()}
	var pe *os.PathError
	if !errors.As(err, &pe) {
		e.Err = ErrInputData
	}
	return e
}

// countRows counts the data rows of a kfold input: in CSV format the
// records after the first (the header), in lines format the non-blank
// lines after the first non-blank one. Errors name the file and line.
func countRows(path, format string) (int, error) {
	rows := -1 // the header
	err := scanText(path, format, maxRecordBytes, nil, func(u textUnit) error {
		if u.row && (format == FormatCSV || len(bytes.TrimSpace(u.raw)) > 0) {
			rows++
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return max(rows, 0), nil
}

// chunkFile hashes the file at path and cuts it into chunks that end at
// row boundaries (after a CSV record or a line, in the given format) or at
// the end of the file. size is a target, not a bound on rows: each chunk
// holds as many whole rows as fit in size bytes, and a row longer than
// size gets a chunk of its own (as readers that split CSV by size do). A
// row is refused only when it is longer than both size and memBytes, the
// task's memory limit: no task could hold it. Empty lines between CSV
// records belong to the chunk they fall in. With header, the first row is
// kept out of the chunks and returned without its line break; it may be
// as long as max(size, maxRecordBytes), since every task receives it in
// its params.
//
// For a file whose rows are all at most size bytes the cut is the one it
// always was: a row starts a new chunk exactly when it does not fit in the
// current one.
func chunkFile(path string, size int64, header bool, format string, memBytes int64) (InputRef, []Chunk, string, error) {
	ref := InputRef{Path: path}
	whole := sha256.New()
	var (
		chunks []Chunk
		hdr    string
		cur    Chunk
		ch     = sha256.New()
		first  = true
	)
	flush := func() {
		if cur.Length == 0 {
			return
		}
		ch.Sum(cur.SHA256[:0])
		chunks = append(chunks, cur)
		ch.Reset()
		cur = Chunk{Offset: cur.Offset + cur.Length}
	}
	rowLimit, headerLimit, scanLimit := max(size, memBytes), max(size, maxRecordBytes), max(size, memBytes)
	if header {
		scanLimit = max(rowLimit, headerLimit)
	}
	// The scan's own limit bounds memory: one row at a time is held.
	err := scanText(path, format, scanLimit, whole, func(u textUnit) error {
		ref.Size = u.offset + int64(len(u.raw))
		n := int64(len(u.raw))
		if first && header && (u.row || format == FormatLines) {
			first = false
			if n > headerLimit {
				return fmt.Errorf("line %d: the header row is %d bytes, longer than %d, the most a header may have: every task receives it in its params",
					u.line, n, headerLimit)
			}
			hdr = string(bytes.TrimRight(u.raw, "\r\n"))
			cur.Offset = u.offset + n
			return nil
		}
		if first && header {
			cur.Offset = u.offset + n // an empty line before a CSV header
			return nil
		}
		first = false
		if n > rowLimit {
			return &rowTooLongError{line: u.line, offset: u.offset, size: n, limit: rowLimit, csv: format == FormatCSV}
		}
		if cur.Length+n > size {
			flush()
		}
		ch.Write(u.raw)
		cur.Length += n
		if cur.Length > size {
			flush() // a row longer than size: nothing joins it
		}
		return nil
	})
	var long *rowTooLongError
	if errors.As(err, &long) && !(first && header) {
		return InputRef{}, nil, "", fmt.Errorf("%s %w", path, long.memoryError(size, memBytes))
	}
	if err != nil {
		return InputRef{}, nil, "", err
	}
	flush()
	whole.Sum(ref.SHA256[:0])
	return ref, chunks, hdr, nil
}

// memoryError says that a row of a chunks split is too long for any task:
// longer than split.chunk_bytes (size) and than the task's memory limit
// (memBytes).
func (e *rowTooLongError) memoryError(size, memBytes int64) error {
	what := "line"
	if e.csv {
		what = "record"
	}
	is := fmt.Sprintf("is %.1f MiB (%d bytes)", float64(e.size)/(1<<20), e.size)
	if e.size == 0 {
		is = fmt.Sprintf("is longer than %d bytes", e.limit)
	}
	than := fmt.Sprintf("the task's memory limit of %d MiB", memBytes>>20)
	if size > memBytes {
		than = fmt.Sprintf("split.chunk_bytes = %d and %s", size, than)
	}
	hint := fmt.Sprintf("raise [policy] memory_mib (at most %d)", MaxMemoryMiB)
	if e.csv && e.size == 0 {
		hint = "is a quote left open? " + hint
	}
	return fmt.Errorf("line %d: the %s at byte %d %s, more than %s, so no task could hold it: %s", e.line, what, e.offset, is, than, hint)
}
