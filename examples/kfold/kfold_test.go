package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"idlepool/examples/internal/task"
	"idlepool/job/fold"
)

// datasetsDir is the shared reference data, beside the checkout.
const datasetsDir = "../../../shared/datasets"

// foldRefs is one k's entry of kfold_refs.json.
type foldRefs struct {
	FoldSizes         []int `json:"fold_sizes"`
	GaussianNBCorrect []int `json:"gaussian_nb_correct"`
	KNN5Correct       []int `json:"knn5_correct"`
}

func loadRefs(t *testing.T) map[string]map[string]foldRefs {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(datasetsDir, "kfold_refs.json"))
	if os.IsNotExist(err) {
		t.Skipf("reference data %s/kfold_refs.json is absent; it lives in the shared directory beside the checkout", datasetsDir)
	}
	if err != nil {
		t.Fatal(err)
	}
	var refs map[string]map[string]foldRefs
	if err := json.Unmarshal(b, &refs); err != nil {
		t.Fatal(err)
	}
	return refs
}

func loadDataset(t *testing.T, name string) dataset {
	t.Helper()
	f, err := os.Open(filepath.Join(datasetsDir, name+".csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ds, err := readDataset(f)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// TestMatchesReferences checks every per-fold count against the
// independent scikit-learn 1.2.1 results.
func TestMatchesReferences(t *testing.T) {
	refs := loadRefs(t)
	tests := []struct {
		data string
		k    int
	}{
		{"iris", 5}, {"iris", 10}, {"wine", 5}, {"wine", 10},
	}
	for _, tc := range tests {
		name := tc.data + "/k" + strconv.Itoa(tc.k)
		t.Run(name, func(t *testing.T) {
			want, ok := refs[tc.data]["k"+strconv.Itoa(tc.k)]
			if !ok {
				t.Fatalf("kfold_refs.json has no entry %s", name)
			}
			ds := loadDataset(t, tc.data)
			folds, err := fold.Assign(len(ds.Y), tc.k, false, 0)
			if err != nil {
				t.Fatal(err)
			}
			var got foldRefs
			for f := range tc.k {
				r := evaluate(ds, folds, f)
				got.FoldSizes = append(got.FoldSizes, r.TestRows)
				got.GaussianNBCorrect = append(got.GaussianNBCorrect, r.GaussianNBCorrect)
				got.KNN5Correct = append(got.KNN5Correct, r.KNN5Correct)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("per-fold counts (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPairwiseSum(t *testing.T) {
	seq := func(n int) []float64 {
		xs := make([]float64, n)
		for i := range xs {
			// Magnitudes that make the grouping visible in the last bits.
			xs[i] = 1 / float64(3+7*i)
		}
		return xs
	}
	plain := func(xs []float64) float64 {
		var s float64
		for _, v := range xs {
			s += v
		}
		return s
	}
	tree8 := func(r []float64) float64 {
		return ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
	}
	x13 := seq(13)
	x20 := seq(20)
	x300 := seq(300)
	tests := []struct {
		name string
		xs   []float64
		want float64
	}{
		{"empty", nil, 0},
		{"four: plain", seq(4), plain(seq(4))},
		{"thirteen: tree of eight, then the rest", x13, tree8(x13[:8]) + x13[8] + x13[9] + x13[10] + x13[11] + x13[12]},
		{"twenty: eight interleaved sums", x20, func() float64 {
			r := make([]float64, 8)
			for k := range r {
				r[k] = x20[k] + x20[8+k]
			}
			return tree8(r) + x20[16] + x20[17] + x20[18] + x20[19]
		}()},
		{"three hundred: halves", x300, pairwiseSum(x300[:144]) + pairwiseSum(x300[144:])},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := pairwiseSum(tc.xs); got != tc.want {
				t.Errorf("pairwiseSum = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestKNNTies(t *testing.T) {
	tests := []struct {
		name  string
		train dataset
		x     []float64
		k     int
		want  int
	}{
		{
			name:  "distance tie goes to the lower row",
			train: dataset{X: [][]float64{{5}, {1}, {-1}}, Y: []int{0, 7, 2}},
			x:     []float64{0}, k: 1, want: 7,
		},
		{
			name:  "distance tie at the boundary keeps the lower rows",
			train: dataset{X: [][]float64{{0}, {1}, {-1}, {1}, {-1}}, Y: []int{4, 4, 9, 9, 9}},
			x:     []float64{0}, k: 3, want: 4,
		},
		{
			name:  "vote tie goes to the lowest label",
			train: dataset{X: [][]float64{{1}, {-1}, {2}, {-2}, {9}}, Y: []int{5, 3, 3, 5, 1}},
			x:     []float64{0}, k: 4, want: 3,
		},
		{
			name:  "majority wins over nearest",
			train: dataset{X: [][]float64{{0, 0}, {1, 1}, {1, -1}, {-1, 1}, {-1, -1}}, Y: []int{0, 1, 1, 1, 0}},
			x:     []float64{0, 0}, k: 5, want: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := knn(tc.train, tc.x, tc.k); got != tc.want {
				t.Errorf("knn = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestGaussianNB(t *testing.T) {
	tests := []struct {
		name  string
		train dataset
		x     []float64
		want  int
	}{
		{
			name:  "identical classes tie to the lowest label",
			train: dataset{X: [][]float64{{0}, {1}, {0}, {1}}, Y: []int{4, 4, 2, 2}},
			x:     []float64{0.5}, want: 2,
		},
		{
			name:  "nearest mean",
			train: dataset{X: [][]float64{{0}, {1}, {10}, {11}}, Y: []int{0, 0, 1, 1}},
			x:     []float64{9}, want: 1,
		},
		{
			name:  "prior breaks a likelihood tie",
			train: dataset{X: [][]float64{{0}, {2}, {0}, {2}, {0}, {2}}, Y: []int{1, 1, 3, 3, 3, 3}},
			x:     []float64{1}, want: 3,
		},
		{
			name:  "constant feature is smoothed, not divided by zero",
			train: dataset{X: [][]float64{{1, 0}, {1, 1}, {1, 5}, {1, 6}}, Y: []int{0, 0, 1, 1}},
			x:     []float64{1, 0.2}, want: 0,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := fitGaussianNB(tc.train).predict(tc.x); got != tc.want {
				t.Errorf("predict = %d, want %d", got, tc.want)
			}
		})
	}
}

// writeCSV writes content to a file in a fresh temporary directory and
// returns its path.
func writeCSV(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "data.csv")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestRun(t *testing.T) {
	// Two well separated classes: every row is classified correctly.
	var b strings.Builder
	b.WriteString("x,y,label\n")
	for i := range 20 {
		fmt.Fprintf(&b, "%d.%d,%d,%d\n", 10*(i%2), i, -i%3, i%2)
	}
	good := writeCSV(t, b.String())
	input := func(path, params string) string {
		return `{"job":"` + strings.Repeat("a", 64) + `","index":1,"seed":3,"params":` + params + `,"inputs":{"data":"` + path + `"}}`
	}

	t.Run("ok", func(t *testing.T) {
		var stdout, stderr bytes.Buffer
		code := task.Run(strings.NewReader(input(good, `{"k":4,"fold":1,"rows":20,"shuffle":false,"permutation_seed":0}`)), &stdout, &stderr, compute)
		if code != 0 {
			t.Fatalf("exit code %d, stderr %q", code, stderr.String())
		}
		want := `{"fold":1,"test_rows":5,"gaussian_nb_correct":5,"knn5_correct":5}` + "\n"
		if diff := cmp.Diff(want, stdout.String()); diff != "" {
			t.Errorf("stdout (-want +got):\n%s", diff)
		}
	})

	t.Run("shuffled folds partition the rows", func(t *testing.T) {
		total := 0
		for f := range 3 {
			var stdout, stderr bytes.Buffer
			params := fmt.Sprintf(`{"k":3,"fold":%d,"rows":20,"shuffle":true,"permutation_seed":18446744073709551557}`, f)
			if code := task.Run(strings.NewReader(input(good, params)), &stdout, &stderr, compute); code != 0 {
				t.Fatalf("fold %d: exit code %d, stderr %q", f, code, stderr.String())
			}
			var r result
			if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
				t.Fatal(err)
			}
			if r.Fold != f || r.GaussianNBCorrect != r.TestRows || r.KNN5Correct != r.TestRows {
				t.Errorf("fold %d: result %+v, want every test row correct", f, r)
			}
			total += r.TestRows
		}
		if total != 20 {
			t.Errorf("folds hold %d test rows in all, want 20", total)
		}
	})

	tests := []struct {
		name     string
		stdin    string
		wantErr  string
		wantCode int // 1, or task.ExitData when the data is at fault
	}{
		{"no fold", input(good, `{"k":4,"rows":20}`), "params.fold is missing", 1},
		{"fold too large", input(good, `{"k":4,"fold":4,"rows":20}`), "params.fold must be in [0, 4)", 1},
		{"k too small", input(good, `{"k":1,"fold":0,"rows":20}`), "k must be at least 2", 1},
		{"rows mismatch", input(good, `{"k":4,"fold":0,"rows":21}`), "params.rows is 21 but the data has 20 CSV records after the header", task.ExitData},
		{"no data input", `{"params":{"k":4,"fold":0,"rows":20},"inputs":{}}`, `no such input: "data"`, 1},
		{"missing file", input(filepath.Join(t.TempDir(), "nope.csv"), `{"k":2,"fold":0,"rows":2}`), "open data", 1},
		{"text feature", input(writeCSV(t, "a,label\n1,0\nx,1\n"), `{"k":2,"fold":0,"rows":2}`), `line 3 column a: not a number: "x"`, task.ExitData},
		{"NaN feature", input(writeCSV(t, "a,label\n1,0\nNaN,1\n"), `{"k":2,"fold":0,"rows":2}`), `line 3 column a: not a number: "NaN"`, task.ExitData},
		{"fractional label", input(writeCSV(t, "a,label\n1,0\n2,1.5\n"), `{"k":2,"fold":0,"rows":2}`), `line 3 column label: not an integer label`, task.ExitData},
		{"ragged row", input(writeCSV(t, "a,b,label\n1,2,0\n2,1\n"), `{"k":2,"fold":0,"rows":2}`), "wrong number of fields", task.ExitData},
		{"no label column", input(writeCSV(t, "label\n1\n"), `{"k":2,"fold":0,"rows":1}`), "need at least one feature and a label", task.ExitData},
		{"no rows", input(writeCSV(t, "a,label\n"), `{"k":2,"fold":0,"rows":0}`), "no data rows", task.ExitData},
		{"empty file", input(writeCSV(t, ""), `{"k":2,"fold":0,"rows":0}`), "empty file", task.ExitData},
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

// FuzzReadDataset checks that no input makes readDataset panic and that
// what it accepts is a rectangular data set.
func FuzzReadDataset(f *testing.F) {
	f.Add("a,b,label\n1,2,0\n3,4,1\n")
	f.Add("a,label\n1e3,-2\n")
	f.Add("a,label\n\"1\",0\n")
	f.Fuzz(func(t *testing.T, in string) {
		ds, err := readDataset(strings.NewReader(in))
		if err != nil {
			return
		}
		if len(ds.X) == 0 || len(ds.X) != len(ds.Y) {
			t.Fatalf("%d feature rows, %d labels", len(ds.X), len(ds.Y))
		}
		for i, x := range ds.X {
			if len(x) != len(ds.X[0]) {
				t.Fatalf("row %d has %d features, row 0 has %d", i, len(x), len(ds.X[0]))
			}
		}
	})
}
