// Package synthcsv writes a synthetic, deterministic CSV data set for the
// csvstats example: any number of rows, the same bytes for the same seed on
// every platform.
//
// The columns are:
//
//	id       row number, 0-based
//	normal   standard normal, 4 decimals
//	uniform  uniform on [0, 100), 2 decimals (so 100.00 can occur)
//	lognorm  exp of a standard normal, 4 significant digits
//	count    Poisson-like small integer, mean about 3
//	sparse   normal with mean 10 and sd 2, 3 decimals, empty in about 1 row of 20
//
// It uses only the standard library so that it also builds for wasip1.
package synthcsv

import (
	"bufio"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
)

// Header is the header line, without the newline.
const Header = "id,normal,uniform,lognorm,count,sparse"

// pcgStream is the second PCG seed word; the first is the caller's seed.
const pcgStream = 0xda3e39cb94b95bdb

// Write writes the header line and rows data lines, each ending in "\n",
// drawn from a PCG generator (math/rand/v2) seeded with seed. rows must not
// be negative. Write returns the first error from w.
func Write(w io.Writer, rows int, seed uint64) error {
	if rows < 0 {
		return errors.New("synthcsv: negative row count")
	}
	rng := rand.New(rand.NewPCG(seed, pcgStream))
	bw := bufio.NewWriterSize(w, 1<<16)
	bw.WriteString(Header + "\n")
	var line []byte
	for i := range rows {
		line = strconv.AppendInt(line[:0], int64(i), 10)
		line = append(line, ',')
		line = strconv.AppendFloat(line, rng.NormFloat64(), 'f', 4, 64)
		line = append(line, ',')
		line = strconv.AppendFloat(line, 100*rng.Float64(), 'f', 2, 64)
		line = append(line, ',')
		line = strconv.AppendFloat(line, math.Exp(rng.NormFloat64()), 'g', 4, 64)
		line = append(line, ',')
		line = strconv.AppendInt(line, int64(poisson3(rng)), 10)
		line = append(line, ',')
		if rng.IntN(20) != 0 {
			line = strconv.AppendFloat(line, 10+2*rng.NormFloat64(), 'f', 3, 64)
		}
		line = append(line, '\n')
		if _, err := bw.Write(line); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// poisson3 draws from a Poisson distribution with mean 3 by Knuth's
// multiplication method (TAOCP vol. 2, 3.4.1).
func poisson3(rng *rand.Rand) int {
	limit := math.Exp(-3)
	k, p := 0, rng.Float64()
	for p > limit {
		k++
		p *= rng.Float64()
	}
	return k
}
