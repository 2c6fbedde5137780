package job

import (
	"crypto/sha256"
	"encoding/csv"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// issueCSV is the smallest case of issue 9 item 1: a header and four
// records on five lines, one field holding a line break.
const issueCSV = "a,label\n1,0\n\"2\n\",1\n3,0\n4,1\n"

// csvRecords counts the records after the header that encoding/csv reads
// from data, as the example programs do.
func csvRecords(t *testing.T, data string) int {
	t.Helper()
	recs, err := csv.NewReader(strings.NewReader(data)).ReadAll()
	if err != nil {
		t.Fatalf("encoding/csv: %v", err)
	}
	return max(len(recs)-1, 0)
}

func TestSplitKfoldCountsCSVRecords(t *testing.T) {
	tests := []struct {
		name, data string
		want       int
	}{
		{"issue: a quoted line break", issueCSV, 4},
		{"empty", "", 0},
		{"header only", "a,b\n", 0},
		{"quoted line break in the header", "\"a\nA\",b\n1,2\n", 1},
		{"CRLF inside and after quotes", "a,b\r\n\"x\r\ny\",2\r\n3,4\r\n", 2},
		{"doubled quotes", "a,b\n\"say \"\"hi\"\"\",1\n\"\"\"\",2\n", 2},
		{"quoted comma", "a,b\n\"1,5\",2\n", 1},
		{"empty lines are not records", "\n\na,b\n\n1,2\n\r\n\n3,4\n\n\n", 2},
		{"no newline at the end", "a,b\n1,2\n3,\"4\n5\"", 2},
		{"byte order mark before a quoted header", "\uFEFF\"a\",\"b\"\n1,2\n", 1},
		{"one column, a blank cell", "a\n \n1\n", 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "d.csv")
			if err := os.WriteFile(path, []byte(tc.data), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := countRows(path, FormatCSV)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("countRows = %d, want %d", got, tc.want)
			}
			if !strings.HasPrefix(tc.data, "\uFEFF") {
				if n := csvRecords(t, tc.data); n != got {
					t.Errorf("countRows = %d, but encoding/csv reads %d records", got, n)
				}
			}
		})
	}
}

// TestSplitKfoldIssueCase plans the issue's smallest case and checks that
// params.rows is what a CSV reader finds, and that the fold sizes add up.
func TestSplitKfoldIssueCase(t *testing.T) {
	manifest := `name = "cv"
program = "prog.wasm"
[inputs]
data = "d.csv"
[split]
rule = "kfold"
k = 2
input = "data"
[[merge]]
rule = "sum"
field = "test_rows"
`
	j := plan(t, manifest, map[string]string{"prog.wasm": wasm, "d.csv": issueCSV})
	for f := range j.NumTasks() {
		if got := j.Task(f).Params["rows"]; got != int64(4) {
			t.Errorf("task %d: params.rows = %v, want 4 (records, not lines)", f, got)
		}
	}
	folds, err := j.FoldAssignment()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int{0, 1, 0, 1}, folds); diff != "" {
		t.Errorf("FoldAssignment (-want +got):\n%s", diff)
	}
	// format = "lines" keeps the line count, for line-oriented text.
	j = plan(t, strings.Replace(manifest, `input = "data"`, "input = \"data\"\nformat = \"lines\"", 1),
		map[string]string{"prog.wasm": wasm, "d.csv": issueCSV})
	if got := j.Task(0).Params["rows"]; got != int64(5) {
		t.Errorf("format = lines: params.rows = %v, want 5 (non-blank lines after the first)", got)
	}
}

// TestSplitCSVRefused checks that an input that is not RFC 4180 CSV is
// refused when the job is planned, naming the file and the line, for both
// rules that read rows.
func TestSplitCSVRefused(t *testing.T) {
	tests := []struct {
		name, data string
		want       []string
	}{
		{"unclosed quote", "a,label\n1,0\n\"2\n,1\n3,0\n", []string{"line 3:", "quoted field", "not closed"}},
		{"unclosed quote on the last line", "a,label\n1,0\n2,\"1\n", []string{"line 3:", "not closed"}},
		{"unclosed quote, more lines follow", "a,label\n1,0\n2,\"1\n3,0\n4,1\n", []string{"line 3:", "not closed"}},
		{"bare quote", "a,label\n1,0\n2\"x,1\n", []string{"line 3 column 2:", `quote the whole field`}},
		{"text after a closing quote", "a,label\n\"1\"x,0\n2,1\n3,0\n", []string{"line 2 column 3:", "after the closing quote"}},
		{"ragged record", "a,label\n1,0\n2,1,9\n3,0\n", []string{"line 3:", "3 fields", "first record has 2"}},
		{"white-space line", "a,label\n1,0\n  \n3,0\n", []string{"line 3:", "1 fields"}},
	}
	kfold := `name = "cv"
program = "prog.wasm"
[inputs]
data = "d.csv"
[split]
rule = "kfold"
k = 2
input = "data"
[[merge]]
rule = "sum"
field = "n"
`
	chunks := `name = "c"
program = "prog.wasm"
[inputs]
data = "d.csv"
[split]
rule = "chunks"
input = "data"
chunk_bytes = 1000
header = true
[[merge]]
rule = "sum"
field = "n"
`
	for _, tc := range tests {
		for rule, manifest := range map[string]string{"kfold": kfold, "chunks": chunks} {
			t.Run(rule+"/"+tc.name, func(t *testing.T) {
				dir, err := planErr(t, manifest, map[string]string{"prog.wasm": wasm, "d.csv": tc.data})
				if !errors.Is(err, ErrManifest) || !errors.Is(err, ErrInputData) {
					t.Errorf("error %v is not a ManifestError about the input data", err)
				}
				for _, w := range append(tc.want, filepath.Join(dir, "d.csv")+" line", "inputs.data", `split.format = "lines"`) {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not contain %q", err, w)
					}
				}
				// The same file cut as lines is accepted.
				plan(t, strings.Replace(manifest, `input = "data"`, "input = \"data\"\nformat = \"lines\"", 1),
					map[string]string{"prog.wasm": wasm, "d.csv": tc.data})
			})
		}
	}
}

// TestSplitChunksCSVRecords checks that chunks of a CSV input end on record
// boundaries: every chunk reads back as whole records with the header's
// fields, the chunks cover the file after the header, and each is as long
// as whole records allow.
func TestSplitChunksCSVRecords(t *testing.T) {
	var b strings.Builder
	b.WriteString("\"id\",\"note\nwith a line break\"\r\n")
	for i := range 300 {
		switch i % 4 {
		case 0:
			fmt.Fprintf(&b, "%d,\"line one\nline two %d\"\n", i, i)
		case 1:
			fmt.Fprintf(&b, "%d,\"quote \"\"%d\"\"\"\r\n", i, i)
		case 2:
			fmt.Fprintf(&b, "%d,plain\n\n", i)
		default:
			fmt.Fprintf(&b, "%d,\"a,b\r\nc\"\n", i)
		}
	}
	data := b.String()
	for _, size := range []int64{40, 64, 100, 1000} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "d.csv")
			if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
			ref, chunks, hdr, err := chunkFile(path, size, true, FormatCSV, DefaultMemoryMiB<<20)
			if err != nil {
				t.Fatal(err)
			}
			if want := "\"id\",\"note\nwith a line break\""; hdr != want {
				t.Errorf("header = %q, want %q", hdr, want)
			}
			if ref.Size != int64(len(data)) {
				t.Errorf("ref.Size = %d, want %d", ref.Size, len(data))
			}
			off := int64(strings.Index(data, "\r\n") + 2)
			records := 0
			for i, c := range chunks {
				if c.Offset != off || c.Length > size || c.Length < 1 {
					t.Fatalf("chunk %d = [%d, +%d), want offset %d and 1..%d bytes", i, c.Offset, c.Length, off, size)
				}
				piece := data[c.Offset : c.Offset+c.Length]
				cr := csv.NewReader(strings.NewReader(piece))
				cr.FieldsPerRecord = 2
				recs, err := cr.ReadAll()
				if err != nil {
					t.Fatalf("chunk %d %q does not read as whole records: %v", i, piece, err)
				}
				records += len(recs)
				if i < len(chunks)-1 {
					// Greedy: the next record would not have fitted.
					next := data[c.Offset+c.Length:]
					cr := csv.NewReader(strings.NewReader(next))
					if _, err := cr.Read(); err != nil {
						t.Fatal(err)
					}
					if c.Length+cr.InputOffset() <= size && !strings.HasPrefix(next, "\n") {
						t.Errorf("chunk %d (%d bytes) had room for the next record (%d bytes)", i, c.Length, cr.InputOffset())
					}
				}
				off += c.Length
			}
			if off != int64(len(data)) {
				t.Errorf("chunks end at %d, want the end of the file %d", off, len(data))
			}
			if records != 300 {
				t.Errorf("chunks hold %d records, want 300", records)
			}
		})
	}
}

// TestSplitFormatDefault checks which format a split gets when the
// manifest names none, and that the job ID records it exactly when it is
// not the rule's first meaning (kfold: CSV rows; chunks: lines).
func TestSplitFormatDefault(t *testing.T) {
	files := map[string]string{"prog.wasm": wasm, "d.csv": "a,b\n1,2\n3,4\n", "d.CSV": "a,b\n1,2\n3,4\n", "d.txt": "a,b\n1,2\n3,4\n"}
	tests := []struct {
		name, rule, file, format string
		want                     string
		inID                     bool
	}{
		{"kfold csv file", "kfold", "d.csv", "", FormatCSV, false},
		{"kfold txt file", "kfold", "d.txt", "", FormatCSV, false},
		{"kfold as lines", "kfold", "d.csv", "lines", FormatLines, true},
		{"chunks csv file", "chunks", "d.csv", "", FormatCSV, true},
		{"chunks CSV file", "chunks", "d.CSV", "", FormatCSV, true},
		{"chunks txt file", "chunks", "d.txt", "", FormatLines, false},
		{"chunks csv file as lines", "chunks", "d.csv", "lines", FormatLines, false},
		{"chunks txt file as csv", "chunks", "d.txt", "csv", FormatCSV, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opt := "k = 2"
			if tc.rule == "chunks" {
				opt = "chunk_bytes = 100"
			}
			if tc.format != "" {
				opt += fmt.Sprintf("\nformat = %q", tc.format)
			}
			manifest := fmt.Sprintf("name = \"f\"\nprogram = \"prog.wasm\"\n[inputs]\ndata = %q\n[split]\nrule = %q\ninput = \"data\"\n%s\n[[merge]]\nrule = \"sum\"\nfield = \"n\"\n",
				tc.file, tc.rule, opt)
			j := plan(t, manifest, files)
			if got := j.Manifest.Split.Format; got != tc.want {
				t.Errorf("format = %q, want %q", got, tc.want)
			}
			var doc struct {
				Split map[string]any `cbor:"split"`
			}
			if err := canonicalDecMode.Unmarshal(j.Canonical, &doc); err != nil {
				t.Fatal(err)
			}
			if got, ok := doc.Split["format"]; ok != tc.inID || ok && got != tc.want {
				t.Errorf("canonical split.format = %v (present %v), want %q present %v", got, ok, tc.want, tc.inID)
			}
			// A peer rebuilds the same job from blobs, whose names say
			// nothing about the format.
			blobs := t.TempDir()
			blob := func(d Digest) string {
				p := filepath.Join(blobs, d.String())
				for _, name := range []string{"prog.wasm", tc.file} {
					if Digest(sha256.Sum256([]byte(files[name]))) == d {
						if err := os.WriteFile(p, []byte(files[name]), 0o644); err != nil {
							t.Fatal(err)
						}
					}
				}
				return p
			}
			j2, err := FromCanonical(j.Canonical, blob)
			if err != nil {
				t.Fatalf("FromCanonical: %v", err)
			}
			if j2.ID != j.ID || j2.Manifest.Split.Format != tc.want {
				t.Errorf("rebuilt job: ID %s format %q, want %s %q", j2.ID, j2.Manifest.Split.Format, j.ID, tc.want)
			}
		})
	}
	for _, bad := range []string{`format = "tsv"`, `format = "CSV"`} {
		dir := t.TempDir()
		writeTree(t, dir, files)
		manifest := "name = \"f\"\nprogram = \"prog.wasm\"\n[inputs]\ndata = \"d.csv\"\n[split]\nrule = \"kfold\"\nk = 2\ninput = \"data\"\n" + bad + "\n[[merge]]\nrule = \"sum\"\nfield = \"n\"\n"
		_, err := ParseManifest("job.toml", dir, []byte(manifest))
		if err == nil || !strings.Contains(err.Error(), "split.format") || !strings.Contains(err.Error(), `want "csv"`) {
			t.Errorf("%s: error %v, want one about split.format", bad, err)
		}
	}
	_, err := ParseManifest("job.toml", t.TempDir(), []byte("name = \"f\"\nprogram = \"p.wasm\"\n[split]\nrule = \"range\"\ntasks = 2\nformat = \"csv\"\n[[merge]]\nrule = \"sum\"\nfield = \"n\"\n"))
	if err == nil || !strings.Contains(err.Error(), "split.format: applies only to the kfold and chunks rules") {
		t.Errorf("format on a range split: error %v", err)
	}
}

// TestSplitChunksLongRecord is the case of issue 26 item 13: with
// chunk_bytes = 6, a CSV record of 7 bytes gets a chunk of its own instead
// of stopping the job; every record is in exactly one chunk, in order; and
// the job, its chunks and its tasks are the same when planned again
// elsewhere or rebuilt from the job's encoding.
func TestSplitChunksLongRecord(t *testing.T) {
	const data = "id,v\n1,a\n22,bbb\n3,c\n4,d\n"
	// Records after the header: "1,a\n" (4 bytes), "22,bbb\n" (7), "3,c\n"
	// (4), "4,d\n" (4): the long one alone, and no two short ones fit in 6.
	const manifest = `name = "long"
program = "prog.wasm"
[inputs]
d = "d.csv"
[split]
rule = "chunks"
input = "d"
chunk_bytes = 6
header = true
[[merge]]
rule = "sum"
field = "n"
`
	files := map[string]string{"prog.wasm": wasm, "d.csv": data}
	j := plan(t, manifest, files)
	var got []string
	for i := range j.NumTasks() {
		task := j.Task(i)
		c := task.Chunk
		got = append(got, data[c.Offset:c.Offset+c.Length])
		if c.SHA256 != sha256.Sum256([]byte(got[i])) {
			t.Errorf("chunk %d: digest is not that of its bytes", i)
		}
		if task.Params["header"] != "id,v" || task.Params["length"] != c.Length {
			t.Errorf("task %d params = %v", i, task.Params)
		}
	}
	if diff := cmp.Diff([]string{"1,a\n", "22,bbb\n", "3,c\n", "4,d\n"}, got); diff != "" {
		t.Errorf("chunks (-want +got):\n%s", diff)
	}
	var records []string
	for _, piece := range got {
		recs, err := csv.NewReader(strings.NewReader(piece)).ReadAll()
		if err != nil {
			t.Fatalf("chunk %q does not read as whole records: %v", piece, err)
		}
		for _, r := range recs {
			records = append(records, strings.Join(r, ","))
		}
	}
	if diff := cmp.Diff([]string{"1,a", "22,bbb", "3,c", "4,d"}, records); diff != "" {
		t.Errorf("records of the chunks (-want +got):\n%s", diff)
	}

	again := plan(t, manifest, files)
	byDigest := map[Digest]string{j.Program.SHA256: j.Program.Path, j.Inputs["d"].SHA256: j.Inputs["d"].Path}
	rebuilt, err := FromCanonical(j.Canonical, func(d Digest) string { return byDigest[d] })
	if err != nil {
		t.Fatal(err)
	}
	for _, other := range []*Job{again, rebuilt} {
		if other.ID != j.ID {
			t.Errorf("ID %s, want %s", other.ID, j.ID)
		}
		if diff := cmp.Diff(j.Chunks(), other.Chunks()); diff != "" {
			t.Errorf("chunks differ (-first +other):\n%s", diff)
		}
		for i := range j.NumTasks() {
			if a, b := j.TaskJSON(j.Task(i)), other.TaskJSON(other.Task(i)); string(a) != string(b) {
				t.Errorf("task %d: %s, want %s", i, b, a)
			}
		}
	}
}
