package synthcsv

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestWrite(t *testing.T) {
	tests := []struct {
		name      string
		rows      int
		wantLines int
	}{
		{"empty", 0, 1},
		{"one row", 1, 2},
		{"many rows", 1000, 1001},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var a, b bytes.Buffer
			if err := Write(&a, tc.rows, 7); err != nil {
				t.Fatal(err)
			}
			if err := Write(&b, tc.rows, 7); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(a.String(), b.String()); diff != "" {
				t.Fatalf("same seed, different output (-first +second):\n%s", diff)
			}
			lines := strings.Split(strings.TrimSuffix(a.String(), "\n"), "\n")
			if diff := cmp.Diff(tc.wantLines, len(lines)); diff != "" {
				t.Errorf("line count (-want +got):\n%s", diff)
			}
			if lines[0] != Header {
				t.Errorf("first line %q, want the header %q", lines[0], Header)
			}
			for i, l := range lines[1:] {
				if n := strings.Count(l, ","); n != 5 {
					t.Fatalf("line %d has %d commas, want 5: %q", i+2, n, l)
				}
			}
		})
	}
}

func TestWriteNegative(t *testing.T) {
	if err := Write(&bytes.Buffer{}, -1, 1); err == nil {
		t.Error("Write with -1 rows returned no error")
	}
}
