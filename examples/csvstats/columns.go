package main

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// columnValues parses header, a CSV header record, and the records of
// chunk (RFC 4180 CSV, every row with as many fields as the header), and
// returns each column's numeric values in row order. Cells that are empty
// or only white space are skipped; every other cell must be a finite
// decimal number (see parseDecimal). Every column of the header has an
// entry, possibly an empty, non-nil slice. Column names must be distinct
// and not empty.
func columnValues(header string, chunk io.Reader) (map[string][]float64, error) {
	// A UTF-8 byte order mark is not part of the first name; removed
	// before parsing, so that a quoted first name parses too.
	names, err := csv.NewReader(strings.NewReader(strings.TrimPrefix(header, "\uFEFF"))).Read()
	if err != nil {
		if err == io.EOF {
			return nil, errors.New("header line is empty")
		}
		return nil, fmt.Errorf("header line: %w", err)
	}
	cols := make(map[string][]float64, len(names))
	values := make([][]float64, len(names))
	for j, name := range names {
		name = strings.TrimSpace(name)
		if name == "" {
			return nil, fmt.Errorf("header column %d has no name", j+1)
		}
		if _, dup := cols[name]; dup {
			return nil, fmt.Errorf("header names column %q twice", name)
		}
		names[j] = name
		cols[name] = nil
	}

	cr := csv.NewReader(chunk)
	cr.FieldsPerRecord = len(names)
	cr.ReuseRecord = true
	for row := 1; ; row++ {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			if errors.Is(err, csv.ErrFieldCount) {
				return nil, fmt.Errorf("row %d: %d fields, but the header has %d", row, len(rec), len(names))
			}
			return nil, fmt.Errorf("row %d: %w", row, err)
		}
		for j, cell := range rec {
			cell = strings.TrimSpace(cell)
			if cell == "" {
				continue
			}
			v, err := parseDecimal(cell)
			if err != nil {
				return nil, fmt.Errorf("row %d column %s: not a number: %q", row, names[j], cell)
			}
			values[j] = append(values[j], v)
		}
	}
	for j, name := range names {
		if values[j] == nil {
			values[j] = []float64{}
		}
		cols[name] = values[j]
	}
	return cols, nil
}

// errNotDecimal reports a cell that is not a finite decimal number.
var errNotDecimal = errors.New("not a finite decimal number")

// parseDecimal parses a decimal number: an optional sign, digits with an
// optional decimal point (at least one digit), and an optional exponent.
// Unlike strconv.ParseFloat it rejects "NaN", "Inf", hexadecimal and
// underscores, and it rejects values too large for a float64, since JSON
// cannot carry non-finite numbers.
func parseDecimal(s string) (float64, error) {
	i := 0
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	digits := 0
	for ; i < len(s) && isDigit(s[i]); i++ {
		digits++
	}
	if i < len(s) && s[i] == '.' {
		for i++; i < len(s) && isDigit(s[i]); i++ {
			digits++
		}
	}
	if digits == 0 {
		return 0, errNotDecimal
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		start := i
		for ; i < len(s) && isDigit(s[i]); i++ {
		}
		if i == start {
			return 0, errNotDecimal
		}
	}
	if i != len(s) {
		return 0, errNotDecimal
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(v, 0) {
		return 0, errNotDecimal
	}
	return v, nil
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
