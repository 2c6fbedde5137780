package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"idlepool/examples/internal/synthcsv"
	"idlepool/examples/internal/task"
)

// splitChunks cuts data, the lines after the header, into line-aligned
// chunks of at most chunkBytes bytes, as the chunks split rule does; a
// line longer than chunkBytes makes a chunk of its own.
func splitChunks(data []byte, chunkBytes int) [][]byte {
	var chunks [][]byte
	for len(data) > 0 {
		end := 0
		for end < len(data) {
			nl := bytes.IndexByte(data[end:], '\n')
			next := len(data)
			if nl >= 0 {
				next = end + nl + 1
			}
			if end > 0 && next > chunkBytes {
				break
			}
			end = next
		}
		chunks = append(chunks, data[:end])
		data = data[end:]
	}
	return chunks
}

// readDirect reads a whole CSV in one pass with plain string splitting,
// independently of columnValues.
func readDirect(t *testing.T, csv string) map[string][]float64 {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(csv, "\n"), "\n")
	names := strings.Split(lines[0], ",")
	out := make(map[string][]float64)
	for _, name := range names {
		out[name] = []float64{}
	}
	for _, line := range lines[1:] {
		for j, cell := range strings.Split(line, ",") {
			if cell == "" {
				continue
			}
			v, err := strconv.ParseFloat(cell, 64)
			if err != nil {
				t.Fatal(err)
			}
			out[names[j]] = append(out[names[j]], v)
		}
	}
	return out
}

// TestChunksUnion runs the program on every chunk of a generated CSV, as
// separate tasks through the ABI, and checks that the values of all
// chunks together are exactly those of a direct read of the whole file.
func TestChunksUnion(t *testing.T) {
	tests := []struct {
		name       string
		rows       int
		chunkBytes int
		wantChunks int // at least
	}{
		{"one line per chunk", 50, 1, 50},
		{"small chunks", 3000, 1000, 100},
		{"64 KiB chunks", 3000, 64 << 10, 2},
		{"one chunk", 3000, 1 << 20, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := synthcsv.Write(&buf, tc.rows, 99); err != nil {
				t.Fatal(err)
			}
			want := readDirect(t, buf.String())
			if n := len(want["id"]); n != tc.rows {
				t.Fatalf("direct read found %d ids, want %d", n, tc.rows)
			}
			header, body, _ := strings.Cut(buf.String(), "\n")
			chunks := splitChunks([]byte(body), tc.chunkBytes)
			if len(chunks) < tc.wantChunks {
				t.Fatalf("%d chunks, want at least %d", len(chunks), tc.wantChunks)
			}
			dir := t.TempDir()
			got := make(map[string][]float64)
			var offset int
			for i, chunk := range chunks {
				path := filepath.Join(dir, "chunk"+strconv.Itoa(i))
				if err := os.WriteFile(path, chunk, 0o600); err != nil {
					t.Fatal(err)
				}
				res := runTask(t, header, path, i, offset)
				for name, vs := range res.Columns {
					got[name] = append(got[name], vs...)
				}
				offset += len(chunk)
			}
			// Chunks are taken in file order here, so the lists must
			// agree exactly; the accumulators see them as multisets.
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("values (-direct +chunked):\n%s", diff)
			}
		})
	}
}

func TestGeneratedSparse(t *testing.T) {
	var buf bytes.Buffer
	if err := synthcsv.Write(&buf, 3000, 99); err != nil {
		t.Fatal(err)
	}
	header, body, _ := strings.Cut(buf.String(), "\n")
	cols, err := columnValues(header, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(cols["sparse"]); n == 3000 || n < 2500 {
		t.Errorf("%d sparse values in 3000 rows; want some but not all cells empty", n)
	}
}

// runTask runs compute on one chunk through the task ABI and decodes the
// result.
func runTask(t *testing.T, header, path string, index, offset int) result {
	t.Helper()
	in, err := json.Marshal(map[string]any{
		"job":    strings.Repeat("0", 64),
		"index":  index,
		"seed":   uint64(index) * 7919,
		"params": map[string]any{"header": header, "chunk_index": index, "offset": offset},
		"inputs": map[string]string{"chunk": path},
	})
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := task.Run(bytes.NewReader(in), &stdout, &stderr, compute); code != 0 {
		t.Fatalf("chunk %d: exit code %d, stderr %q", index, code, stderr.String())
	}
	var res result
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("chunk %d: decode result: %v", index, err)
	}
	return res
}

func TestColumnValues(t *testing.T) {
	tests := []struct {
		name    string
		header  string
		chunk   string
		want    map[string][]float64
		wantErr string
	}{
		{
			name:   "values and empty cells",
			header: "a,b,c",
			chunk:  "1,2.5,\n-3, ,1e3\n\n+.5,7.,-0\r\n",
			want:   map[string][]float64{"a": {1, -3, 0.5}, "b": {2.5, 7}, "c": {1000, 0}},
		},
		{
			name:   "empty chunk",
			header: "x,y",
			chunk:  "",
			want:   map[string][]float64{"x": {}, "y": {}},
		},
		{
			name:   "quoted fields and byte order mark",
			header: "\uFEFFx,\"y\"",
			chunk:  "\"1\",2\n",
			want:   map[string][]float64{"x": {1}, "y": {2}},
		},
		{name: "text cell", header: "a,b", chunk: "1,2\n3,abc\n", wantErr: `row 2 column b: not a number: "abc"`},
		{name: "NaN", header: "a", chunk: "NaN\n", wantErr: "row 1 column a: not a number"},
		{name: "infinity", header: "a", chunk: "1\nInf\n", wantErr: "row 2 column a: not a number"},
		{name: "overflow", header: "a", chunk: "1e999\n", wantErr: "row 1 column a: not a number"},
		{name: "hexadecimal", header: "a", chunk: "0x10\n", wantErr: "row 1 column a: not a number"},
		{name: "underscore", header: "a", chunk: "1_000\n", wantErr: "row 1 column a: not a number"},
		{name: "lone exponent", header: "a", chunk: "1e\n", wantErr: "row 1 column a: not a number"},
		{name: "lone point", header: "a", chunk: ".\n", wantErr: "row 1 column a: not a number"},
		{name: "short row", header: "a,b", chunk: "1,2\n3\n", wantErr: "row 2: 1 fields, but the header has 2"},
		{name: "duplicate column", header: "a,a", chunk: "", wantErr: `header names column "a" twice`},
		{name: "unnamed column", header: "a,", chunk: "", wantErr: "header column 2 has no name"},
		{name: "empty header", header: "", chunk: "", wantErr: "header line is empty"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := columnValues(tc.header, strings.NewReader(tc.chunk))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("columns (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRunErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("1,x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		stdin    string
		wantErr  string
		wantCode int // 1, or task.ExitData when the data is at fault
	}{
		{"no header", `{"params":{},"inputs":{"chunk":"` + bad + `"}}`, "params.header is missing", 1},
		{"no chunk", `{"params":{"header":"a,b"},"inputs":{}}`, `no such input: "chunk"`, 1},
		{"missing file", `{"params":{"header":"a,b"},"inputs":{"chunk":"` + filepath.Join(dir, "nope") + `"}}`, "open chunk", 1},
		{"text cell", `{"params":{"header":"a,b","chunk_index":4,"offset":1024},"inputs":{"chunk":"` + bad + `"}}`,
			"chunk 4 at byte offset 1024: row 1 column b: not a number", task.ExitData},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := task.Run(strings.NewReader(tc.stdin), &stdout, &stderr, compute); code != tc.wantCode {
				t.Fatalf("exit code %d, want %d", code, tc.wantCode)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout %q, want nothing", stdout.String())
			}
			if !strings.Contains(stderr.String(), tc.wantErr) {
				t.Errorf("stderr %q does not contain %q", stderr.String(), tc.wantErr)
			}
		})
	}
}

func TestSplitChunks(t *testing.T) {
	data := []byte("aa\nbbbb\nc\ndddddddddd\ne")
	var got []string
	for _, c := range splitChunks(data, 8) {
		got = append(got, string(c))
	}
	want := []string{"aa\nbbbb\n", "c\n", "dddddddddd\n", "e"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("chunks (-want +got):\n%s", diff)
	}
}

// FuzzColumnValues checks that no chunk makes columnValues panic and that
// every value it returns is finite, so the result always encodes as JSON.
func FuzzColumnValues(f *testing.F) {
	f.Add("a,b", "1,2\n3,\n")
	f.Add("x", "1e308\n-0\n.5\n")
	f.Add("a,b", "\"1\n2\",3\n")
	f.Fuzz(func(t *testing.T, header, chunk string) {
		cols, err := columnValues(header, strings.NewReader(chunk))
		if err != nil {
			return
		}
		for name, vs := range cols {
			for _, v := range vs {
				if math.IsNaN(v) || math.IsInf(v, 0) {
					t.Fatalf("column %q holds %v", name, v)
				}
			}
		}
		if _, err := json.Marshal(result{Columns: cols}); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzParseDecimal checks parseDecimal against strconv.ParseFloat: what it
// accepts, ParseFloat parses to the same value.
func FuzzParseDecimal(f *testing.F) {
	for _, s := range []string{"1", "-2.5e-3", ".5", "7.", "NaN", "0x1p3", "1_0", "1e999", "+", "e5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := parseDecimal(s)
		if err != nil {
			return
		}
		w, err := strconv.ParseFloat(s, 64)
		if err != nil || v != w || math.IsInf(v, 0) || math.IsNaN(v) {
			t.Fatalf("parseDecimal(%q) = %v; ParseFloat = %v, %v", s, v, w, err)
		}
	})
}
