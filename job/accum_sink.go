package job

import (
	"io"
	"slices"
	"strconv"
)

// Ordered sinks: collect and concat.
//
// Results arrive in any order; rows must leave in task order. An
// orderedSink holds each row that arrives ahead of a gap until the gap
// fills (the missing task's result, or its Skip), then writes every row it
// can. It holds only the rows past the first gap, so its memory is bounded
// by how far ahead of the slowest task results arrive, never by the run.
//
// Rows are canonical JSON (object keys sorted, numbers exactly as the
// program wrote them, no HTML escaping), so the bytes written depend only
// on the results.
//
// An ordered sink has no fixed-size state to encode or merge: a Merger
// with one refuses MarshalBinary, UnmarshalBinary and Merge
// (ErrNotMergeable). Run collect and concat entries in their own Merger on
// the peer that writes the output (MergeSpec.Ordered tells them apart).

type orderedSink struct {
	w       io.Writer
	next    int64 // the lowest task index not yet written or skipped
	held    map[int64]heldRow
	rows    int64 // results added
	skipped int64 // tasks skipped
	refused int64 // results that could not make a row (EntryFailure)
}

type heldRow struct {
	data []byte
	skip bool
}

// has reports whether task i already has a result or skip.
func (s *orderedSink) has(i int64) bool {
	if i < s.next {
		return true
	}
	_, ok := s.held[i]
	return ok
}

func (s *orderedSink) put(i int64, data []byte, skip bool) {
	s.held[i] = heldRow{data: data, skip: skip}
	if skip {
		s.skipped++
	} else {
		s.rows++
	}
}

// refuse marks task i as done without a row: its result could not make
// one.
func (s *orderedSink) refuse(i int64) {
	s.held[i] = heldRow{skip: true}
	s.refused++
}

// drain writes the rows that no gap holds back.
func (s *orderedSink) drain() error {
	for {
		r, ok := s.held[s.next]
		if !ok {
			return nil
		}
		delete(s.held, s.next)
		s.next++
		if err := s.write(r); err != nil {
			return err
		}
	}
}

func (s *orderedSink) write(r heldRow) error {
	if r.skip || len(r.data) == 0 {
		return nil
	}
	_, err := s.w.Write(r.data)
	return err
}

// finish writes every held row below total in order, stepping over gaps,
// and reports the tasks below total that never came (their number and the
// first) and the rows at or beyond total, which it drops.
func (s *orderedSink) finish(total int64) (missing, first, beyond int64, err error) {
	idx := make([]int64, 0, len(s.held))
	for i := range s.held {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	first = -1
	for _, i := range idx {
		r := s.held[i]
		delete(s.held, i)
		if i >= total {
			beyond++
			continue
		}
		if i > s.next {
			missing += i - s.next
			if first < 0 {
				first = s.next
			}
		}
		s.next = i + 1
		if err := s.write(r); err != nil {
			return missing, first, beyond, err
		}
	}
	if s.next < total {
		missing += total - s.next
		if first < 0 {
			first = s.next
		}
		s.next = total
	}
	return missing, first, beyond, nil
}

// prepareRow builds the row of an ordered entry for task index into e.row.
//
// collect writes one JSON line per task: {"task": index, ...} followed by
// the columns named by fields (each keyed by its path), or the value at
// field (keyed by the path), or every member of the whole result. A whole
// result with its own "task" member makes no row: an entry-only
// ResultError. concat
// writes the value at field: a JSON string as its raw content with nothing
// added (no newline: the program decides where lines break), anything else
// as one canonical JSON line.
func (e *mergeEntry) prepareRow(obj map[string]any, index int64) *ResultError {
	if e.spec.Rule == RuleConcat {
		v, rerr := e.field.lookup(obj)
		if rerr != nil {
			return rerr
		}
		if s, ok := v.(string); ok {
			e.row = []byte(s)
			return nil
		}
		e.row = append(canonicalResultJSON(v), '\n')
		return nil
	}
	cols := obj
	switch {
	case len(e.fields) > 0:
		cols = make(map[string]any, len(e.fields))
		for _, f := range e.fields {
			v, rerr := f.lookup(obj)
			if rerr != nil {
				return rerr
			}
			cols[f.text] = v
		}
	case e.field.segs != nil:
		v, rerr := e.field.lookup(obj)
		if rerr != nil {
			return rerr
		}
		cols = map[string]any{e.field.text: v}
	default:
		if _, ok := obj["task"]; ok {
			// Only this entry's row is at stake: the others take the
			// result (see EntryFailure).
			rerr := resultFieldError("task", "the result has its own \"task\", which clashes with the task index collect adds to each row; "+
				"no row was written for this task: list the columns in fields = [...] or rename the program's \"task\"")
			rerr.entryOnly = true
			return rerr
		}
	}
	body := canonicalResultJSON(cols)
	row := make([]byte, 0, len(body)+32)
	row = append(row, `{"task":`...)
	row = strconv.AppendInt(row, index, 10)
	if len(body) > 2 {
		row = append(row, ',')
		row = append(row, body[1:]...)
	} else {
		row = append(row, '}')
	}
	e.row = append(row, '\n')
	return nil
}

// sinkResult is an ordered entry's value in Result.
func (s *orderedSink) result() any {
	if s.refused > 0 { // absent when none, as before refusals existed
		return ResultObject{{"rows", s.rows}, {"skipped", s.skipped}, {"refused", s.refused}}
	}
	return ResultObject{{"rows", s.rows}, {"skipped", s.skipped}}
}
