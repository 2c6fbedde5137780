package job

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// update rewrites the golden files under testdata/golden instead of
// comparing with them. It is shared by every golden test of package job.
var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// checkGolden compares got with testdata/golden/name, or writes got there
// when the test runs with -update.
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (go test ./job/ -update writes it): %v", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s differs (-want +got); a change here changes job IDs or seeds of existing jobs, "+
			"so regenerate with go test ./job/ -update only on purpose:\n%s", path, diff)
	}
}
