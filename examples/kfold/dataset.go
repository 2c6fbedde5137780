package main

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// dataset is a labelled data set: X[i] holds the features of row i, Y[i]
// its class label.
type dataset struct {
	X [][]float64
	Y []int
}

// readDataset reads a CSV with a header line, numeric feature columns and
// an integer label in the last column. Every row must have as many fields
// as the header.
func readDataset(r io.Reader) (dataset, error) {
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err != nil {
		if err == io.EOF {
			return dataset{}, errors.New("empty file: no header line")
		}
		return dataset{}, err
	}
	header = slices.Clone(header) // the reader reuses its record
	if len(header) < 2 {
		return dataset{}, fmt.Errorf("header has %d columns; need at least one feature and a label", len(header))
	}
	nf := len(header) - 1
	var ds dataset
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return dataset{}, err
		}
		x := make([]float64, nf)
		for j := range nf {
			v, err := strconv.ParseFloat(strings.TrimSpace(rec[j]), 64)
			if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
				line, _ := cr.FieldPos(j)
				return dataset{}, fmt.Errorf("line %d column %s: not a number: %q", line, header[j], rec[j])
			}
			x[j] = v
		}
		y, err := strconv.Atoi(strings.TrimSpace(rec[nf]))
		if err != nil {
			line, _ := cr.FieldPos(nf)
			return dataset{}, fmt.Errorf("line %d column %s: not an integer label: %q", line, header[nf], rec[nf])
		}
		ds.X = append(ds.X, x)
		ds.Y = append(ds.Y, y)
	}
	if len(ds.Y) == 0 {
		return dataset{}, errors.New("no data rows")
	}
	return ds, nil
}
