// Command gen writes the synthetic CSV data set of the csvstats example:
//
//	go run ./examples/csvstats/gen -rows 200000 -o examples/csvstats/data.csv
//
// The output is deterministic: the same -rows and -seed give the same bytes.
// See package idlepool/examples/internal/synthcsv for the columns.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"idlepool/examples/internal/synthcsv"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

// run parses args and writes the CSV to the -o file, or to stdout when -o
// is "-" or absent. Usage messages go to stderr.
func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rows := fs.Int("rows", 200000, "number of data rows")
	seed := fs.Uint64("seed", 1, "random seed")
	out := fs.String("o", "-", `output file, "-" for stdout`)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *rows < 0 {
		return fmt.Errorf("-rows must not be negative, got %d", *rows)
	}
	if *out == "-" {
		return synthcsv.Write(stdout, *rows, *seed)
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	if err := synthcsv.Write(f, *rows, *seed); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", *out, err)
	}
	return f.Close()
}
