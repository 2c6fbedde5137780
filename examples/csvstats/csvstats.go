// Command csvstats is an idlepool job program for batch analysis of a large
// CSV file split by the chunks rule: each task receives one chunk of whole
// CSV records (the rule cuts a .csv input between RFC 4180 records, never
// inside a quoted field) and the header record, and lists every numeric value of
// its chunk per column, so that the runner's stats and quantiles
// accumulators (field "columns.*") compute count, mean, standard deviation,
// extremes and quantiles of each column, independent of the order in which
// chunks arrive.
//
// Task params (from the chunks split rule with header = true): header (the
// header record without its line break), chunk_index, offset, length and
// sha256; input "chunk" is the chunk's data records. Result, with values in row order:
//
//	{"columns": {"id": [0, 1, 2], "price": [9.5, 3, 12.25]}}
//
// Empty cells are skipped. A cell that is not a finite decimal number fails
// the task with "row N column C: not a number", N counting the chunk's
// records from 1. The program is built for WASI (GOOS=wasip1 GOARCH=wasm) and
// runs natively too.
package main

import (
	"errors"
	"fmt"
	"os"

	"idlepool/examples/internal/task"
)

// params are the task parameters this program reads.
type params struct {
	Header     *string `json:"header"`      // the CSV header record, no line break
	ChunkIndex int     `json:"chunk_index"` // for messages
	Offset     int64   `json:"offset"`      // the chunk's byte offset, for messages
}

// result is the task result.
type result struct {
	// Columns maps each header column to its chunk's numeric values, in
	// row order; a column without values maps to an empty list.
	Columns map[string][]float64 `json:"columns"`
}

func main() {
	os.Exit(task.Run(os.Stdin, os.Stdout, os.Stderr, compute))
}

// compute runs one task.
func compute(t task.Task) (any, error) {
	var p params
	if err := t.DecodeParams(&p); err != nil {
		return nil, err
	}
	if p.Header == nil {
		return nil, errors.New("params.header is missing: the manifest's split must say header = true")
	}
	path, err := t.Input("chunk")
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open chunk: %w", err)
	}
	defer f.Close()
	cols, err := columnValues(*p.Header, f)
	if err != nil {
		return nil, task.DataError(fmt.Errorf("chunk %d at byte offset %d: %w", p.ChunkIndex, p.Offset, err))
	}
	return result{Columns: cols}, nil
}
